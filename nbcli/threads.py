"""The CPU threads a command computes on: `--threads N` of every command that computes (nb train,
translate, predict, generate, analogy, embedding-stats, attention-maps, patch-checkpoint,
transplant-embeddings, probe-bias), one definition.

`cpu_threads(N)` sets torch's intra-op threads and every native thread pool loaded (numpy's BLAS /
LAPACK, OpenMP; threadpoolctl: the maintained way to set a loaded library's threads at run time, where
environment variables work only before it is loaded) for the block and restores them afterwards; nb
reproduce / sweep run each job inside it. The default (None) leaves both as
the libraries start: every core the process may use. When runs share a machine, give each
`--threads 1` (or cores / runs): two runs that each spin a thread per core on two cores fight over
them (BENCHMARKS.md, issue 43's side-by-side timing). Imports nothing heavy until it sets a count.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator

from nbcli.errors import ConfigError

MAX_THREADS = 4096
THREADS_HELP = ("CPU threads of the computation: torch's intra-op threads and numpy's BLAS/LAPACK pool "
                "[default: every core this process may use]; when runs share a machine give each --threads 1 "
                "(or cores / runs).")


def available_cores() -> int:
    """The cores this process may run on (its CPU affinity), what the libraries use by default."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def check_threads(threads: int | None) -> int:
    """`--threads N` (1 <= N <= MAX_THREADS), or every core this process may use for None."""
    if threads is None:
        return available_cores()
    if isinstance(threads, bool) or not isinstance(threads, int) or not 1 <= threads <= MAX_THREADS:
        raise ConfigError(f"--threads {threads!r}: expected an integer from 1 to {MAX_THREADS}")
    return threads


@contextlib.contextmanager
def cpu_threads(threads: int | None) -> Iterator[None]:
    """At most `threads` threads for torch and for every native pool (threadpoolctl: BLAS / LAPACK,
    OpenMP) while the block runs, restored afterwards; None leaves them as they are (nothing imported).
    torch's own count is set only when torch is already imported: this never imports it (a torch
    imported inside the block keeps its default, bar the OpenMP pool threadpoolctl saw)."""
    if threads is None:
        yield
        return
    check_threads(threads)
    from threadpoolctl import threadpool_limits

    torch = sys.modules.get("torch")  # torch's threads only where torch is loaded (numpy's computations never load it)
    saved = None if torch is None else torch.get_num_threads()
    if torch is not None:
        torch.set_num_threads(threads)
    try:
        with threadpool_limits(limits=threads):
            yield
    finally:
        if saved is not None:
            torch.set_num_threads(saved)
