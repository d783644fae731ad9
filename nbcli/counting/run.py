"""Counting a corpus in parallel: tasks, worker processes (forked or spawned), a Dask cluster.

The work is cut into tasks (byte ranges of plain files, line-aligned blocks of compressed files and
stdin, row groups of parquet and record batches of Arrow files, batches of the documents of TSV/CSV
files read here by `nbcli.corpus.records`), each counted by a `BlockCounter` in a worker. Each task returns an int64 count vector;
integer sums do not depend on order, so the result is identical for any number of workers, local
or on a Dask cluster.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from nbcli.corpus import (
    CorpusSource, RowUnit, discover_inputs, load_columnar_reader, plan_columnar, plan_ranges, read_stream_blocks,
    read_unit,
)
from nbcli.corpus.records import document_batches
from nbcli.counting.blocks import (
    BlockCounter, CountOptions, Task, TaskResult, counting_method, counting_segmenter, document_markers,
)
from nbcli.counting.long_lines import count_range
from nbcli.errors import ConfigError, CorpusError, Interrupted
from nbcli.tokenizers import Tokenizer, tokenizer_from_bytes

@dataclass
class CountResult:
    """The outcome of `count_corpus`."""

    counts: np.ndarray
    documents: int
    bytes_read: int
    bad_utf8_lines: int
    skipped_lines: int
    sources: list[CorpusSource]
    seconds: float
    method: str
    eos: bool
    bos: bool
    workers: int
    options: dict[str, object] = field(default_factory=dict)
    skipped_nulls: int = 0  # null documents of parquet/Arrow columns, skipped
    method_reason: str = ""  # why `method` (the chunk rule's proof, or why documents are encoded whole)

    @property
    def total_tokens(self) -> int:
        return int(self.counts.sum())



# Worker processes hold one BlockCounter each, built once by the pool initialiser (or, under Dask,
# on first use), keyed by the tokenizer's hash and the options.
_PROCESS_COUNTERS: dict[tuple[str, CountOptions], BlockCounter] = {}


def _process_counter(tokenizer_bytes: bytes, tokenizer_name: str, sha: str, options: CountOptions) -> BlockCounter:
    key = (sha, options)
    counter = _PROCESS_COUNTERS.get(key)
    if counter is None:
        counter = BlockCounter(tokenizer_from_bytes(tokenizer_bytes, tokenizer_name), options)
        _PROCESS_COUNTERS[key] = counter
    return counter


def _init_worker(tokenizer_bytes: bytes, tokenizer_name: str, sha: str, options: CountOptions) -> None:
    """A spawned worker: load the tokenizer from its bytes."""
    _quiet_worker()
    _process_counter(tokenizer_bytes, tokenizer_name, sha, options)


def _init_forked_worker(tokenizer: Tokenizer, options: CountOptions) -> None:
    """A forked worker: the parent's tokenizer is already in memory (nothing to load or parse)."""
    _quiet_worker()
    _PROCESS_COUNTERS[(tokenizer.sha256, options)] = BlockCounter(tokenizer, options)


def _quiet_worker() -> None:
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and stops us
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # one thread per worker


def _worker_ready() -> None:
    """A no-op task: submitting it starts every worker."""


def run_task(counter: BlockCounter, task: Task) -> TaskResult:
    """Count one task with `counter`: a byte range (long lines in pieces: `count_range`), a block of
    lines (text or JSONL: `task.jsonl`), a unit of rows, or a batch of documents already read."""
    result = TaskResult(np.zeros(counter.tokenizer.vocab_size, dtype=np.int64))
    if task.range is not None:
        count_range(counter, task.range, result, task.jsonl)
    elif task.data is not None:
        result.add(counter.count_block(task.path, task.data, task.first_line, task.offset, jsonl=task.jsonl))
    elif task.rows is not None:
        for batch in read_unit(task.rows):
            result.add(counter.count_documents(batch))
    elif task.batch is not None:
        result.add(counter.count_documents(task.batch))
    return result


def _run_in_worker(task: Task, sha: str, options: CountOptions) -> TaskResult:
    return run_task(_PROCESS_COUNTERS[(sha, options)], task)


def _run_on_dask(task: Task, tokenizer_bytes: bytes, name: str, sha: str, options: CountOptions) -> TaskResult:
    return run_task(_process_counter(tokenizer_bytes, name, sha, options), task)


def _add_results(a: TaskResult, b: TaskResult) -> TaskResult:
    """A new sum (inputs are left alone: Dask may hold them elsewhere)."""
    return TaskResult(a.counts + b.counts, a.documents + b.documents, a.bytes_read + b.bytes_read,
                      a.bad_utf8_lines + b.bad_utf8_lines, a.skipped_lines + b.skipped_lines,
                      a.skipped_nulls + b.skipped_nulls)


# ---------------------------------------------------------------------------------------------
# Planning and scheduling


def _tasks(sources: list[CorpusSource], workers: int, units: dict[str, list[RowUnit]],
           options: CountOptions) -> Iterator[Task]:
    for source in sources:
        jsonl = source.format == "jsonl"
        if source.columnar:
            for unit in units[source.path]:
                yield Task(path=source.path, rows=unit, progress_bytes=unit.progress_bytes)
        elif source.format in ("tsv", "csv"):  # fields by the header: read here, documents to the workers
            for batch in document_batches(source, options.field, strict=options.strict,
                                          skip_bad_lines=options.skip_bad_lines):
                yield Task(path=source.path, batch=batch)
            yield Task(path=source.path, progress_bytes=source.size)
        elif source.splittable:
            for rng in plan_ranges(source, workers):
                yield Task(path=source.path, range=rng, progress_bytes=rng.end - rng.start, jsonl=jsonl)
        else:
            for first_line, offset, data in read_stream_blocks(source):
                # stdin progress counts bytes read; a compressed file's counts its size once done
                shown = len(data) if source.path == "-" else 0
                yield Task(path=source.path, data=data, first_line=first_line, offset=offset,
                           progress_bytes=shown, jsonl=jsonl)
            if source.compression is not None:
                # Progress of a compressed file is its size on disk, reported when it is done.
                yield Task(path=source.path, data=None, progress_bytes=source.size)


def default_workers() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


ProgressCallback = Callable[[int, int | None], None]


def count_corpus(
    inputs: list[str],
    tokenizer: Tokenizer,
    options: CountOptions = CountOptions(),
    *,
    workers: int | None = None,
    dask_address: str | None = None,
    progress: ProgressCallback | None = None,
) -> CountResult:
    """Count token unigrams in `inputs` (paths, directories, globs, '-', URLs; text, JSONL, TSV,
    CSV, parquet, Arrow and `datasets` folders, mixed; each file in its format by name,
    `options.format` overriding the names of files that are not parquet or Arrow).

    `progress(advance_bytes, total_bytes)` is called as work completes (total is None when the
    size is unknown, i.e. stdin). Raises CorpusError for an empty corpus.
    """
    document_markers(tokenizer, options)  # fail before any work if --eos/--bos cannot be honoured
    sources = discover_inputs(inputs, options.format)
    n_workers = default_workers() if not workers else workers
    if n_workers < 1:
        raise ConfigError(f"--workers must be >= 1, got {n_workers}")
    total_bytes = None if any(s.path == "-" for s in sources) else sum(s.size for s in sources)
    report = progress or (lambda advance, total: None)
    started = time.perf_counter()
    # Workers start before the first progress report: the progress display's thread starts there,
    # and forked workers must not inherit a thread (see `_start_pool`).
    if any(s.columnar for s in sources):
        load_columnar_reader()  # imported once here, before forking, not once per worker (~0.3 s)
    pool = _start_pool(tokenizer, options, n_workers) if n_workers > 1 and not dask_address else None
    try:  # after forking: pyarrow may start threads (footers and schemas are read here, before any work)
        units = plan_columnar(sources, options.field, None if dask_address else n_workers)
    except BaseException:
        if pool is not None:
            _abandon_pool(pool)
        raise
    report(0, total_bytes)
    total = TaskResult(np.zeros(tokenizer.vocab_size, dtype=np.int64))

    def on_done(task: Task, result: TaskResult) -> None:
        total.add(result)
        report(task.progress_bytes, total_bytes)

    tasks = _tasks(sources, n_workers, units, options)
    if dask_address:
        _schedule_dask(tasks, tokenizer, options, dask_address, on_done, total)
    elif pool is None:
        counter = BlockCounter(tokenizer, options)
        for task in tasks:
            on_done(task, run_task(counter, task))
    else:
        _schedule_pool(pool, tasks, tokenizer, options, n_workers, on_done)
    seconds = time.perf_counter() - started
    if total.documents == 0:
        names = ", ".join(s.path for s in sources[:3]) + (" ..." if len(sources) > 3 else "")
        raise CorpusError(f"{names}: empty corpus (no non-empty documents); nothing written")
    eos_id, bos_id = document_markers(tokenizer, options)
    method, method_reason = counting_method(tokenizer, options)
    chunked = method != "whole documents"
    # `chunked` records the method used; `chunk_cache` what was asked (off: --no-chunk-cache).
    recorded = {**asdict(options), "chunked": chunked, "chunk_cache": options.chunked}
    return CountResult(
        counts=total.counts, documents=total.documents, bytes_read=total.bytes_read,
        bad_utf8_lines=total.bad_utf8_lines, skipped_lines=total.skipped_lines, skipped_nulls=total.skipped_nulls,
        sources=sources,
        seconds=seconds, method=method, method_reason=method_reason, eos=eos_id is not None,
        bos=bos_id is not None, workers=n_workers,
        options={**recorded, "workers": n_workers, "dask": dask_address},
    )


def release_free_heap() -> bool:
    """Give the memory the C allocator holds freed back to the system (glibc's `malloc_trim`; False
    where there is none). glibc keeps freed heap: parsing the Qwen2-form tokenizer.json leaves ~160 MB
    of it in a 280 MB process, and forked workers would each count it in their RSS."""
    import ctypes

    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return False
    trim(0)
    return True


def _start_pool(tokenizer: Tokenizer, options: CountOptions, n_workers: int) -> Any:
    """A process pool with every worker started and holding the tokenizer.

    On Linux workers are forked: they share the parent's loaded tokenizer (a 151k-entry
    tokenizer.json takes ~1 s to load, per process when spawned). The caller forks before starting
    any thread of its own (nb's progress display starts after), and the tokenizer was used without
    its thread pool (`load_hf` probes with a single encode), so no lock can be held in a child.
    Elsewhere (no fork, or fork unsafe as on macOS) workers are spawned and load the tokenizer.
    """
    import multiprocessing
    import sys
    from concurrent.futures import ProcessPoolExecutor

    if sys.platform == "linux":
        segmenter = counting_segmenter(tokenizer, options)
        if segmenter is not None:
            segmenter.prepare()  # built once here, not once per worker
        release_free_heap()  # what loading freed, before each worker would carry it
        context = multiprocessing.get_context("fork")
        init: Callable[..., None] = _init_forked_worker
        init_args: tuple[Any, ...] = (tokenizer, options)
    else:
        context = multiprocessing.get_context("spawn")
        init, init_args = _init_worker, (tokenizer.serialized(), str(tokenizer.path), tokenizer.sha256, options)
    pool = ProcessPoolExecutor(n_workers, mp_context=context, initializer=init, initargs=init_args)
    try:
        pool.submit(_worker_ready).result()
    except BaseException:
        _abandon_pool(pool)
        raise
    return pool


def _schedule_pool(
    pool: Any, tasks: Iterator[Task], tokenizer: Tokenizer, options: CountOptions, n_workers: int,
    on_done: Callable[[Task, TaskResult], None],
) -> None:
    from concurrent.futures import FIRST_COMPLETED, Future, wait

    pending: dict[Future[TaskResult], Task] = {}
    try:
        for task in tasks:
            if task.progress_only:
                on_done(task, TaskResult(np.zeros(tokenizer.vocab_size, dtype=np.int64)))
                continue
            while len(pending) >= 2 * n_workers:  # bounded memory: few blocks in flight
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for future in done:
                    on_done(pending.pop(future), future.result())
            pending[pool.submit(_run_in_worker, task, tokenizer.sha256, options)] = task
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                on_done(pending.pop(future), future.result())
    except KeyboardInterrupt:
        _abandon_pool(pool)
        raise Interrupted("interrupted; no output written") from None
    except BaseException:
        _abandon_pool(pool)
        raise
    pool.shutdown(wait=True)


def _abandon_pool(pool: Any) -> None:
    """Stop a pool's workers (their results are not wanted), then let its manager thread finish.

    That thread closes the pool's wake-up pipe as it exits; Python 3.11's exit handler writes to the
    same pipe, and when the two overlap (a loaded machine, an interrupt) it printed a traceback for
    "Bad file descriptor" after nb's own one-line message (1 in 20-40 interrupts under load, none in
    50 with the join). Joining first keeps them apart.
    """
    for process in list((getattr(pool, "_processes", None) or {}).values()):
        process.terminate()
    manager = getattr(pool, "_executor_manager_thread", None)  # shutdown() forgets it
    pool.shutdown(wait=False, cancel_futures=True)
    if manager is not None:
        manager.join(timeout=10)


def _schedule_dask(
    tasks: Iterator[Task], tokenizer: Tokenizer, options: CountOptions, address: str,
    on_done: Callable[[Task, TaskResult], None], total: TaskResult,
) -> None:
    """Run the same tasks on a Dask cluster; partial sums are tree-reduced on the workers."""
    from nbcli.cluster import connect

    client = connect(address)
    from distributed import as_completed

    try:
        blob = client.scatter(tokenizer.serialized(), broadcast=True)
        leaves = {}
        for task in tasks:
            if task.progress_only:
                on_done(task, TaskResult(np.zeros_like(total.counts)))
                continue
            future = client.submit(_run_on_dask, task, blob, str(tokenizer.path), tokenizer.sha256,
                                   options, pure=False)
            leaves[future] = task
        level = list(leaves)
        while len(level) > 1:  # tree reduction: log2(n) rounds of pairwise sums on the cluster
            level = [client.submit(_add_results, level[i], level[i + 1]) if i + 1 < len(level)
                     else level[i] for i in range(0, len(level), 2)]
        for future in as_completed(list(leaves)):
            future.result()  # raises a worker's CorpusError here
            task = leaves[future]
            on_done(task, TaskResult(np.zeros_like(total.counts)))
        if level:
            reduced: TaskResult = level[0].result()
            total.add(reduced)
    finally:
        client.close()


def throughput(result: CountResult) -> tuple[float, float]:
    """(MB/s, tokens/s) of a count (MB = 10^6 bytes of decompressed text)."""
    seconds = max(result.seconds, 1e-9)
    return result.bytes_read / 1e6 / seconds, result.total_tokens / seconds



