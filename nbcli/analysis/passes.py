"""Passes over the rows of a [V, d] matrix in blocks: the I/O and threads around `nbcli.probes`'s and
`nbcli.analysis.geometry`'s statistics, which stay single-threaded arithmetic.

A pass reads W once, block by block (float32, a few blocks in memory at a time: memory stays bounded
by blocks and d x d matrices, never V x V or a second V x d). On one thread each statistic's
`update(start, block)` sees the blocks in order. With `workers` > 1 (`nb probe-bias --threads N` on the
CPU), statistics that split their update into `partial` (the block's arithmetic, no shared state: safe
on any thread) and `merge` (adding it in) have the blocks after the first read and computed on `workers`
threads, each BLAS call on one thread (`nbcli.threads.cpu_threads(1)`), and merged on the calling
thread in block order: every sum is taken in the same order whatever the thread count, so a run is
reproducible, and the elementwise work (exponentials, norms, conversions), which numpy runs on one
thread, is spread over the cores too.
Statistics that take a reference from the first block (`RowMoments`' shift) have `prepare(block)`,
called with it before any block is computed; then every block, the first included, goes to the workers.
"""

from __future__ import annotations

from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np

from nbcli.threads import cpu_threads

#: Floats per row block (32 MiB of float32): big enough for BLAS, small next to any embedding.
BLOCK_FLOATS = 1 << 23
#: With several workers, blocks per worker at least (so the work left at the end is small pieces).
BLOCKS_PER_WORKER = 8
#: ... but no block under this many floats (BLAS products stay efficient).
MIN_BLOCK_FLOATS = 1 << 20
#: A block in flight holds up to two d x d float64 partial sums (`RowMoments`' Gram matrix and weighted
#: scatter): at most this many bytes of them at once, whatever the thread count (d = 4,096: 8 blocks).
PARTIAL_BYTES = 2 << 30


class Rows(Protocol):
    """A [V, d] matrix readable by row slices (numpy array, torch tensor, lazy checkpoint tensor)."""

    @property
    def shape(self) -> Any: ...

    def __getitem__(self, key: slice) -> Any: ...


class RowStatistic(Protocol):
    """A statistic accumulated over row blocks in one pass (several can share a pass). On several
    workers it also has `partial(start, block) -> part` (no shared state) and `merge(start, part)`, and
    `update(start, block)` is `merge(start, partial(start, block))`; one that takes a reference from the
    first block has `prepare(block)`, called with it first."""

    def update(self, start: int, block: np.ndarray) -> None: ...


def float32_block(block: Any) -> np.ndarray:
    """A block as a C-contiguous float32 numpy array (torch tensors of any dtype included)."""
    if hasattr(block, "detach"):  # torch.Tensor: bf16 has no numpy dtype, so convert in torch
        block = block.detach().to(device="cpu").float().numpy()
    return np.ascontiguousarray(block, dtype=np.float32)


def block_rows_for(width: int, rows: int | None = None, workers: int = 1) -> int:
    """Rows per block so a float32 block holds about BLOCK_FLOATS values; with several workers, small
    enough for BLOCKS_PER_WORKER blocks each (not under MIN_BLOCK_FLOATS values)."""
    step = max(1, BLOCK_FLOATS // max(1, width))
    if workers > 1 and rows is not None:
        step = min(step, max(-(-rows // (workers * BLOCKS_PER_WORKER)), MIN_BLOCK_FLOATS // max(1, width), 1))
    return step


def _partials(rows: Rows, statistics: list[Any], start: int, stop: int, errors: dict[str, str]) -> list[Any]:
    with np.errstate(**errors):  # numpy's error state is per thread: the caller's
        block = float32_block(rows[start:stop])
        return [statistic.partial(start, block) for statistic in statistics]


def blocks_in_flight(width: int, workers: int) -> int:
    """How many blocks a pass on `workers` threads holds at once: one ahead of each worker, within
    PARTIAL_BYTES of d x d float64 partial sums (two a block), at least 2."""
    per_block = max(1, 2 * width * width * 8)
    return max(2, min(workers + 1, PARTIAL_BYTES // per_block))


def run_pass(rows: Rows, statistics: list[RowStatistic], block_rows: int | None = None, workers: int = 1) -> None:
    """Read `rows` once, block by block, feeding every statistic (see the module doc for `workers`)."""
    n, d = (int(s) for s in rows.shape)
    in_flight = blocks_in_flight(d, workers)
    workers = min(workers, in_flight - 1) if workers > 1 else workers
    parallel = workers > 1 and all(hasattr(s, "partial") and hasattr(s, "merge") for s in statistics)
    step = block_rows or block_rows_for(d, n, workers if parallel else 1)
    ranges = [(start, min(n, start + step)) for start in range(0, n, step)]
    if not parallel or len(ranges) < 3:
        for start, stop in ranges:
            block = float32_block(rows[start:stop])
            for statistic in statistics:
                statistic.update(start, block)
        return
    rest = deque(ranges)
    preparing = [s for s in statistics if hasattr(s, "prepare")]
    if preparing:  # the first block read twice (once here): cheap next to computing it on one thread alone
        start, stop = ranges[0]
        block = float32_block(rows[start:stop])
        for statistic in preparing:
            statistic.prepare(block)
        del block
    errors = {key: value for key, value in np.geterr().items()}
    pending: deque[tuple[int, Future[list[Any]]]] = deque()
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="nb-pass")
    try:
        with cpu_threads(1):  # one thread per BLAS call (and torch op) while the workers share the cores
            while rest or pending:
                while rest and len(pending) < in_flight:  # a block ahead of each worker, no more
                    first, last = rest.popleft()
                    pending.append((first, pool.submit(_partials, rows, statistics, first, last, errors)))
                first, future = pending.popleft()
                for statistic, part in zip(statistics, future.result()):
                    statistic.merge(first, part)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def concurrently(calls: Sequence[Callable[[], Any]], workers: int) -> list[Any]:
    """Independent calls (the eigendecompositions between the passes) side by side on `workers` threads,
    each BLAS / LAPACK call on one thread (at d = 768 LAPACK's dsyevd gains little from a second
    thread; two at once use both cores); in order on the calling thread for workers <= 1. The
    results in call order; the first call's error is raised."""
    if workers <= 1 or len(calls) < 2:
        return [call() for call in calls]
    with cpu_threads(1), ThreadPoolExecutor(max_workers=min(workers, len(calls)), thread_name_prefix="nb-eig") as pool:
        futures = [pool.submit(call) for call in calls]
        return [future.result() for future in futures]
