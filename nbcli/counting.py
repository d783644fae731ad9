"""Counting token unigrams in a corpus, in parallel, bit-exactly.

The work is cut into tasks (byte ranges of plain files, line-aligned blocks of compressed files and
stdin). Each task returns an int64 count vector; integer sums do not depend on order, so the result
is identical for any number of workers, local or on a Dask cluster.

Speed comes from the tokenizer family's segmenter (`nbcli.tokenizers.segment`), the only thing
counting knows of a tokenizer besides whole-document encoding: each distinct chunk of a Zipfian
corpus is encoded once per worker and its ids multiplied by its frequency. Tokenizers for which no
rule is provably exact are counted by encoding whole documents.
"""

from __future__ import annotations

import itertools
import json
import os
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from nbcli.atomic import write_all_atomic

from nbcli.corpus import (
    ByteRange, CorpusSource, discover_inputs, line_number_at, plan_ranges, read_range_blocks,
    read_stream_blocks,
)
from nbcli.counts import UnigramCounts, counts_file_bytes, counts_tsv, summarize_counts
from nbcli.errors import ConfigError, CorpusError, Interrupted
from nbcli.jsonsafe import jsonl_field
from nbcli.provenance import tool_version, utc_now
from nbcli.tokenizers import Tokenizer, tokenizer_from_bytes
from nbcli.tokenizers.segment import dirty_lines, without_ranges

CACHE_LIMIT = 1 << 20  # distinct chunks kept per worker: when full, the less used half is dropped
ENCODE_BATCH = 4096
# Masks of the low k bytes of a uint64; chunk keys are bytes (little-endian) | length << 56.
_SHORT_MASKS = np.array([(1 << (8 * k)) - 1 for k in range(8)], dtype=np.uint64)


@dataclass(frozen=True)
class CountOptions:
    """How documents are read and counted. `eos=None` means the tokenizer's default
    (`Tokenizer.eos_default`: on for causal templates, off for `[CLS] ... [SEP]` encoders)."""

    format: Literal["text", "jsonl"] = "text"
    field: str = "text"
    eos: bool | None = None
    bos: bool = False
    strict: bool = False
    skip_bad_lines: bool = False
    chunked: bool = True  # False forces whole-document encoding (a reference for exactness checks)

    def __post_init__(self) -> None:
        if self.format not in ("text", "jsonl"):
            raise ConfigError(f"--format must be text or jsonl, got {self.format!r}")


@dataclass
class TaskResult:
    """Counts and bookkeeping for one task (or a sum of tasks)."""

    counts: np.ndarray
    documents: int = 0
    bytes_read: int = 0
    bad_utf8_lines: int = 0
    skipped_lines: int = 0

    def add(self, other: TaskResult) -> TaskResult:
        self.counts += other.counts
        self.documents += other.documents
        self.bytes_read += other.bytes_read
        self.bad_utf8_lines += other.bad_utf8_lines
        self.skipped_lines += other.skipped_lines
        return self


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

    @property
    def total_tokens(self) -> int:
        return int(self.counts.sum())


# ---------------------------------------------------------------------------------------------
# Work inside one process


@dataclass
class _Task:
    path: str
    range: ByteRange | None = None  # read by the worker
    data: bytes | None = None  # already read (compressed file or stdin block)
    # A task with neither range nor data only reports progress.
    first_line: int | None = None
    offset: int = 0
    progress_bytes: int = 0


def document_markers(tokenizer: Tokenizer, options: CountOptions) -> tuple[int | None, int | None]:
    """(EOS id, BOS id) added once per document, or None where not added.

    EOS defaults to on when the tokenizer has one and its template is causal (the model predicts
    it), off for `[CLS] ... [SEP]` encoders (never predicted); BOS to off (given, never predicted).
    """
    add_eos = (tokenizer.eos_id is not None and tokenizer.eos_default) if options.eos is None else options.eos
    if add_eos and tokenizer.eos_id is None:
        raise ConfigError(f"--eos: tokenizer {tokenizer.name} has no EOS token")
    if options.bos and tokenizer.bos_id is None:
        raise ConfigError(f"--bos: tokenizer {tokenizer.name} has no BOS token")
    return (tokenizer.eos_id if add_eos else None), (tokenizer.bos_id if options.bos else None)


class _Counter:
    """Per-process counting state: the tokenizer and the cache of encoded chunks."""

    def __init__(self, tokenizer: Tokenizer, options: CountOptions) -> None:
        self.tokenizer = tokenizer
        self.options = options
        self.segmenter = tokenizer.segmenter if options.chunked else None
        self.table = _ChunkTable(CACHE_LIMIT)
        self.eos_id, self.bos_id = document_markers(tokenizer, options)

    # -- tasks -------------------------------------------------------------------------------
    def run(self, task: _Task) -> TaskResult:
        result = TaskResult(np.zeros(self.tokenizer.vocab_size, dtype=np.int64))
        if task.range is not None:
            for offset, data in read_range_blocks(task.range):
                result.add(self.count_block(task.path, data, None, offset))
        elif task.data is not None:
            result.add(self.count_block(task.path, task.data, task.first_line, task.offset))
        return result

    def _line_no(self, path: str, first_line: int | None, offset: int, index: int) -> int:
        if first_line is None:
            first_line = line_number_at(path, offset)
        return first_line + index

    # -- one block of whole lines ------------------------------------------------------------
    def count_block(self, path: str, data: bytes, first_line: int | None, offset: int) -> TaskResult:
        """Count a block of whole lines (`offset`: its file offset; `first_line`: its first line's
        number, None to find it on demand). Text lines the segmenter's byte rule covers are counted
        on the bytes; the others (invalid UTF-8, CR, bytes the rule cannot cut) one by one as str."""
        counts = np.zeros(self.tokenizer.vocab_size, dtype=np.int64)
        result = TaskResult(counts, bytes_read=len(data))
        bail = self.segmenter.line_bail if self.segmenter is not None and self.options.format == "text" else None
        if bail is None or not data:
            documents = self._text_documents(path, data, first_line, offset, result)
        else:
            dirty = dirty_lines(data, bail)
            clean = without_ranges(data, dirty)
            if clean:
                assert self.segmenter is not None
                result.documents += self._count_spans(clean, self.segmenter.spans(clean), counts)
            documents = []
            lines_before = previous = 0
            for start, end in dirty:
                if first_line is not None:
                    lines_before += data.count(b"\n", previous, start)
                    previous = start
                documents += self._text_documents(
                    path, data[start:end], None if first_line is None else first_line + lines_before,
                    offset + start, result)
        result.documents += len(documents)
        self._count_documents(documents, counts)
        if self.eos_id is not None:
            counts[self.eos_id] += result.documents
        if self.bos_id is not None:
            counts[self.bos_id] += result.documents
        return result

    def _text_documents(self, path: str, data: bytes, first_line: int | None, offset: int,
                        result: TaskResult) -> list[str]:
        """The non-empty documents of whole lines `data` as str (CRLF or LF ends a line); invalid
        UTF-8 is replaced and counted in `result` (an error with --strict)."""
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            for index, raw in enumerate(data.split(b"\n")):
                try:
                    raw.decode("utf-8")
                except UnicodeDecodeError as err:
                    if self.options.strict:
                        line = self._line_no(path, first_line, offset, index)
                        raise CorpusError(
                            f"{path}:{line}: invalid UTF-8 at byte {err.start} of the line (--strict)"
                        ) from None
                    result.bad_utf8_lines += 1
            text = data.decode("utf-8", errors="replace")
        lines = text.replace("\r\n", "\n").split("\n")
        if lines and lines[-1] == "":
            lines.pop()  # the block ends with a newline
        if self.options.format == "jsonl":
            lines = self._jsonl_documents(path, lines, first_line, offset, result)
        return [line for line in lines if line]  # empty lines are not documents

    def _jsonl_documents(
        self, path: str, lines: list[str], first_line: int | None, offset: int, result: TaskResult
    ) -> list[str]:
        docs: list[str] = []
        name = self.options.field
        for index, line in enumerate(lines):
            if not line.strip():
                continue
            text, problem = jsonl_field(line, name)
            if text is not None:
                docs.append(text)
            if problem is not None:
                if not self.options.skip_bad_lines:
                    line_no = self._line_no(path, first_line, offset, index)
                    raise CorpusError(f"{path}:{line_no}: {problem} (--skip-bad-lines to skip such lines)")
                result.skipped_lines += 1
        return docs

    def _count_documents(self, documents: list[str], counts: np.ndarray) -> None:
        """Add the token counts of `documents` to `counts`."""
        if not documents:
            return
        if self.segmenter is None:
            for start in range(0, len(documents), ENCODE_BATCH):
                encoded = self.tokenizer.encode_batch(documents[start:start + ENCODE_BATCH])
                lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded))
                flat = np.fromiter(itertools.chain.from_iterable(encoded), dtype=np.int64, count=int(lengths.sum()))
                counts += np.bincount(flat, minlength=counts.shape[0])
            return
        # A per-block Counter is small and cache-friendly: the table is probed once per distinct chunk.
        block = Counter(self.segmenter.split(documents))
        keys = list(block)
        self._add_rows(keys, np.fromiter(block.values(), dtype=np.int64, count=len(keys)), counts,
                       lambda missing: ([keys[i] for i in missing], None))

    def _count_spans(self, data: bytes, spans: Any, counts: np.ndarray) -> int:
        """Count the chunk parts `spans` (starts, ends, variant) of a clean UTF-8 text block with
        numpy; return its documents (non-empty lines).

        Parts of up to 7 bytes (most of English) are keyed by one exact uint64
        (bytes | length << 56 | variant << 63), of 8-15 bytes by two, and grouped by sorting;
        longer ones by their bytes (b'\\xff' + bytes for the variant) with a Counter.
        """
        b = np.frombuffer(data, dtype=np.uint8)
        n = b.shape[0]
        newline = b == 10
        lines = int(np.count_nonzero(newline)) + int(b[-1] != 10)
        empty = int(newline[0]) + int(np.count_nonzero(newline[1:] & newline[:-1]))
        starts, ends, continued = spans
        lengths = ends - starts
        padded = np.zeros(n + 16, dtype=np.uint8)
        padded[:n] = b
        words = np.ndarray((n + 8,), dtype="<u8", buffer=padded, strides=(1,))  # 8 bytes at each offset
        size = lengths.astype(np.uint64)
        flag = continued.astype(np.uint64) << np.uint64(63)
        top = np.uint64(56)

        def texts_at(occurrences: np.ndarray) -> Callable[[np.ndarray], tuple[list[str], np.ndarray]]:
            return lambda missing: (_decode_chunks(
                [data[s:e] for s, e in zip(starts[occurrences[missing]].tolist(), ends[occurrences[missing]].tolist())]),
                continued[occurrences[missing]])

        short = np.flatnonzero(lengths <= 7)
        keys = (words[starts[short]] & _SHORT_MASKS[size[short]]) | (size[short] << top) | flag[short]
        distinct, freqs = np.unique(keys, return_counts=True)  # no return_index: it forces a slower sort
        self._add_rows(distinct.tolist(), freqs, counts, lambda missing: _short_key_texts(distinct[missing]))

        mid = np.flatnonzero((lengths > 7) & (lengths <= 15))
        if mid.size:
            low = words[starts[mid]]
            high = ((words[starts[mid] + 8] & _SHORT_MASKS[size[mid] - np.uint64(8)]) | (size[mid] << top)
                    | flag[mid])
            order = np.lexsort((low, high))
            low, high = low[order], high[order]
            head = np.ones(order.shape[0], dtype=bool)
            head[1:] = (low[1:] != low[:-1]) | (high[1:] != high[:-1])
            heads = np.flatnonzero(head)
            freqs = np.diff(np.append(heads, order.shape[0]))
            keys2 = [(h << 64) | lo for h, lo in zip(high[heads].tolist(), low[heads].tolist())]
            self._add_rows(keys2, freqs, counts, texts_at(mid[order[heads]]))

        long = np.flatnonzero(lengths > 15)
        if long.size:
            markers = [_CONTINUED if c else b"" for c in continued[long].tolist()]
            block = Counter([m + data[s:e] for m, s, e in zip(markers, starts[long].tolist(), ends[long].tolist())])
            names = list(block)
            self._add_rows(names, np.fromiter(block.values(), dtype=np.int64, count=len(names)), counts,
                           lambda missing: _long_key_texts([names[i] for i in missing]))
        return lines - empty  # documents: non-empty lines

    def _add_rows(self, keys: list[Any], freqs: np.ndarray, counts: np.ndarray,
                  texts_of: Callable[[np.ndarray], tuple[list[str], np.ndarray | None]]) -> None:
        """Add freqs[i] x (tokens of chunk keys[i]) to counts; encode (once) chunks not in the table.

        Keys are distinct within a call: str chunks, or (bytes path) int keys of parts of up to
        15 bytes and the bytes of longer ones; `texts_of(indices)` gives those chunks' text and
        which of them continue a chunk (encoded without the dummy prefix; None: none do).
        """
        table = self.table
        if len(table.index) >= table.limit:
            table.purge()
        rows = table.rows(keys)
        missing = np.flatnonzero(rows < 0)
        if missing.size:
            new = [keys[i] for i in missing]
            texts, continued = texts_of(missing)
            kept = min(len(new), max(0, table.limit - len(table.index)))
            first = len(table.index)
            for start in range(0, kept, ENCODE_BATCH):
                stop = min(start + ENCODE_BATCH, kept)
                table.add(new[start:stop], self._encode(texts[start:stop], continued, start))
            for start in range(kept, len(new), ENCODE_BATCH):  # table full: count without keeping
                stop = min(start + ENCODE_BATCH, len(new))
                counts += _weighted_token_counts(self._encode(texts[start:stop], continued, start),
                                                 freqs[missing[start:stop]], counts.shape[0])
            rows[missing[:kept]] = np.arange(first, first + kept)
            if kept < len(new):
                keep = rows >= 0
                rows, freqs = rows[keep], freqs[keep]
        if rows.size:
            counts += table.token_counts(rows, freqs, counts.shape[0])
            table.hits[rows] += freqs  # rows are distinct within a call

    def _encode(self, texts: list[str], variant: np.ndarray | None, offset: int) -> list[list[int]]:
        """Ids of chunks (a batch starting at `offset` of `variant`), by the segmenter."""
        assert self.segmenter is not None
        return self.segmenter.encode(texts, None if variant is None else variant[offset:offset + len(texts)])


_CONTINUED = b"\xff"  # never in UTF-8: marks the long keys of continuing parts


def _short_key_texts(keys: np.ndarray) -> tuple[list[str], np.ndarray]:
    """The parts of <= 7 bytes that uint64 keys (bytes | length << 56 | continued << 63) stand for,
    and which of them continue a chunk."""
    raw = keys.astype("<u8").tobytes()
    sizes = ((keys >> np.uint64(56)) & np.uint64(0x7F)).tolist()
    return (_decode_chunks([raw[8 * i:8 * i + size] for i, size in enumerate(sizes)]),
            (keys >> np.uint64(63)).astype(bool))


def _long_key_texts(names: list[bytes]) -> tuple[list[str], np.ndarray]:
    """The parts of > 15 bytes that long keys stand for, and which of them continue a chunk."""
    continued = np.fromiter((name[:1] == _CONTINUED for name in names), dtype=bool, count=len(names))
    return _decode_chunks([name[1:] if c else name for name, c in zip(names, continued.tolist())]), continued


def _decode_chunks(chunks: list[bytes]) -> list[str]:
    """Decode many UTF-8 chunks (none holds a newline) in one call."""
    return b"\n".join(chunks).decode("utf-8").split("\n")


def _exact_bincount(tokens: np.ndarray, weights: np.ndarray, size: int) -> np.ndarray:
    """Integer weighted bincount. Float64 sums are exact here: every partial sum is an integer
    below the block's token count, far below 2**53."""
    return np.bincount(tokens, weights=weights, minlength=size).astype(np.int64)


def _weighted_token_counts(encoded: list[list[int]], freqs: np.ndarray, size: int) -> np.ndarray:
    """Sum over i of freqs[i] x (one count per token id in encoded[i]), as int64 [size]."""
    lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded))
    tokens = np.fromiter(itertools.chain.from_iterable(encoded), dtype=np.int64, count=int(lengths.sum()))
    return _exact_bincount(tokens, np.repeat(freqs.astype(np.float64), lengths), size)


def _grown(array: np.ndarray, used: int, size: int) -> np.ndarray:
    """A larger copy of `array` keeping its first `used` entries."""
    bigger = np.zeros(size, dtype=array.dtype)
    bigger[:used] = array[:used]
    return bigger


class _ChunkTable:
    """Distinct chunks seen by one process, each encoded once: chunk -> row, row -> its token ids.

    Token ids are stored back to back in one array (row r is ids[starts[r]:starts[r] + lengths[r]]),
    so a block's counts are a gather and a bincount instead of a Python loop over chunks.
    Row 0 is the empty chunk (no tokens), so callers need not filter empty strings.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.index: dict[Any, int] = {}  # str, int or bytes chunk keys (see _Counter._add_rows)
        self.ids = np.zeros(1 << 16, dtype=np.int32)
        self.starts = np.zeros(1 << 12, dtype=np.int64)
        self.lengths = np.zeros(1 << 12, dtype=np.int64)
        self.hits = np.zeros(1 << 12, dtype=np.int64)  # occurrences counted through each row
        self.used = 0
        self.add([""], [[]])

    def rows(self, keys: list[Any]) -> np.ndarray:
        """Row of each chunk key, -1 where not in the table."""
        return np.fromiter(map(self.index.get, keys, itertools.repeat(-1)), dtype=np.int64, count=len(keys))

    def add(self, keys: list[Any], encoded: list[list[int]]) -> None:
        """New rows for chunk keys not in the table, with their token ids."""
        n = len(keys)
        lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=n)
        total = int(lengths.sum())
        first = len(self.index)
        if first + n > self.starts.shape[0]:
            grown = max(first + n, 2 * self.starts.shape[0])
            self.starts = _grown(self.starts, first, grown)
            self.lengths = _grown(self.lengths, first, grown)
            self.hits = _grown(self.hits, first, grown)
        if self.used + total > self.ids.shape[0]:
            self.ids = _grown(self.ids, self.used, max(self.used + total, 2 * self.ids.shape[0]))
        self.ids[self.used:self.used + total] = np.fromiter(
            itertools.chain.from_iterable(encoded), dtype=np.int32, count=total)
        self.starts[first:first + n] = self.used + np.cumsum(lengths) - lengths
        self.lengths[first:first + n] = lengths
        self.used += total
        self.index.update(zip(keys, range(first, first + n)))

    def purge(self) -> None:
        """Keep the most used half of the rows (row 0 always), renumbered, so memory stays bounded
        however long the corpus: the frequent chunks of a Zipfian corpus stay, rare ones go."""
        n = len(self.index)
        if n <= 1:
            return
        hits = self.hits[:n].copy()
        hits[0] = np.iinfo(np.int64).max
        keep = np.zeros(n, dtype=bool)
        keep[np.argsort(-hits, kind="stable")[:max(1, self.limit // 2)]] = True
        new_row = (np.cumsum(keep) - 1).tolist()
        kept_flags = keep.tolist()
        self.index = {key: new_row[row] for key, row in self.index.items() if kept_flags[row]}
        rows = np.flatnonzero(keep)
        lengths = self.lengths[rows]
        ends = np.cumsum(lengths)
        gather = np.arange(int(ends[-1]) if ends.size else 0) + np.repeat(self.starts[rows] - (ends - lengths), lengths)
        self.ids[:gather.shape[0]] = self.ids[gather]
        self.used = gather.shape[0]
        self.starts[:rows.shape[0]] = ends - lengths
        self.lengths[:rows.shape[0]] = lengths
        self.hits[:rows.shape[0]] = self.hits[rows] // 2  # older counts weigh less
        self.hits[0] = 0

    def token_counts(self, rows: np.ndarray, freqs: np.ndarray, size: int) -> np.ndarray:
        """Sum over i of freqs[i] x (one count per token id of row rows[i]), as int64 [size]."""
        lengths = self.lengths[rows]
        ends = np.cumsum(lengths)
        gather = np.arange(int(ends[-1]) if ends.size else 0) + np.repeat(self.starts[rows] - (ends - lengths), lengths)
        return _exact_bincount(self.ids[gather], np.repeat(freqs.astype(np.float64), lengths), size)


# Worker processes hold one _Counter each, built once by the pool initialiser (or, under Dask,
# on first use), keyed by the tokenizer's hash and the options.
_PROCESS_COUNTERS: dict[tuple[str, CountOptions], _Counter] = {}


def _process_counter(tokenizer_bytes: bytes, tokenizer_name: str, sha: str, options: CountOptions) -> _Counter:
    key = (sha, options)
    counter = _PROCESS_COUNTERS.get(key)
    if counter is None:
        counter = _Counter(tokenizer_from_bytes(tokenizer_bytes, tokenizer_name), options)
        _PROCESS_COUNTERS[key] = counter
    return counter


def _init_worker(tokenizer_bytes: bytes, tokenizer_name: str, sha: str, options: CountOptions) -> None:
    """A spawned worker: load the tokenizer from its bytes."""
    _quiet_worker()
    _process_counter(tokenizer_bytes, tokenizer_name, sha, options)


def _init_forked_worker(tokenizer: Tokenizer, options: CountOptions) -> None:
    """A forked worker: the parent's tokenizer is already in memory (nothing to load or parse)."""
    _quiet_worker()
    _PROCESS_COUNTERS[(tokenizer.sha256, options)] = _Counter(tokenizer, options)


def _quiet_worker() -> None:
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and stops us
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # one thread per worker


def _worker_ready() -> None:
    """A no-op task: submitting it starts every worker."""


def _run_in_worker(task: _Task, sha: str, options: CountOptions) -> TaskResult:
    return _PROCESS_COUNTERS[(sha, options)].run(task)


def _run_on_dask(task: _Task, tokenizer_bytes: bytes, name: str, sha: str, options: CountOptions) -> TaskResult:
    return _process_counter(tokenizer_bytes, name, sha, options).run(task)


def _add_results(a: TaskResult, b: TaskResult) -> TaskResult:
    """A new sum (inputs are left alone: Dask may hold them elsewhere)."""
    return TaskResult(a.counts + b.counts, a.documents + b.documents, a.bytes_read + b.bytes_read,
                      a.bad_utf8_lines + b.bad_utf8_lines, a.skipped_lines + b.skipped_lines)


# ---------------------------------------------------------------------------------------------
# Planning and scheduling


def _tasks(sources: list[CorpusSource], workers: int) -> Iterator[_Task]:
    for source in sources:
        if source.splittable:
            for rng in plan_ranges(source, workers):
                yield _Task(path=source.path, range=rng, progress_bytes=rng.end - rng.start)
        else:
            for first_line, offset, data in read_stream_blocks(source):
                # stdin progress counts bytes read; a compressed file's counts its size once done
                shown = len(data) if source.path == "-" else 0
                yield _Task(path=source.path, data=data, first_line=first_line, offset=offset,
                            progress_bytes=shown)
            if source.compression is not None:
                # Progress of a compressed file is its size on disk, reported when it is done.
                yield _Task(path=source.path, data=None, progress_bytes=source.size)


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
    """Count token unigrams in `inputs` (paths, directories, globs, '-').

    `progress(advance_bytes, total_bytes)` is called as work completes (total is None when the
    size is unknown, i.e. stdin). Raises CorpusError for an empty corpus.
    """
    document_markers(tokenizer, options)  # fail before any work if --eos/--bos cannot be honoured
    sources = discover_inputs(inputs)
    n_workers = default_workers() if not workers else workers
    if n_workers < 1:
        raise ConfigError(f"--workers must be >= 1, got {n_workers}")
    total_bytes = None if any(s.path == "-" for s in sources) else sum(s.size for s in sources)
    report = progress or (lambda advance, total: None)
    started = time.perf_counter()
    # Workers start before the first progress report: the progress display's thread starts there,
    # and forked workers must not inherit a thread (see `_start_pool`).
    pool = _start_pool(tokenizer, options, n_workers) if n_workers > 1 and not dask_address else None
    report(0, total_bytes)
    total = TaskResult(np.zeros(tokenizer.vocab_size, dtype=np.int64))

    def on_done(task: _Task, result: TaskResult) -> None:
        total.add(result)
        report(task.progress_bytes, total_bytes)

    tasks = _tasks(sources, n_workers)
    if dask_address:
        _schedule_dask(tasks, tokenizer, options, dask_address, on_done, total)
    elif pool is None:
        counter = _Counter(tokenizer, options)
        for task in tasks:
            on_done(task, counter.run(task))
    else:
        _schedule_pool(pool, tasks, tokenizer, options, n_workers, on_done)
    seconds = time.perf_counter() - started
    if total.documents == 0:
        names = ", ".join(s.path for s in sources[:3]) + (" ..." if len(sources) > 3 else "")
        raise CorpusError(f"{names}: empty corpus (no non-empty documents); nothing written")
    eos_id, bos_id = document_markers(tokenizer, options)
    chunked = options.chunked and tokenizer.chunk_rule is not None
    method = f"chunked ({tokenizer.chunk_rule})" if chunked else "whole documents"
    # `chunked` records the method used; `chunk_cache` what was asked (off: --no-chunk-cache).
    recorded = {**asdict(options), "chunked": chunked, "chunk_cache": options.chunked}
    return CountResult(
        counts=total.counts, documents=total.documents, bytes_read=total.bytes_read,
        bad_utf8_lines=total.bad_utf8_lines, skipped_lines=total.skipped_lines, sources=sources,
        seconds=seconds, method=method, eos=eos_id is not None,
        bos=bos_id is not None, workers=n_workers,
        options={**recorded, "workers": n_workers, "dask": dask_address},
    )


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
        if tokenizer.segmenter is not None:
            tokenizer.segmenter.prepare()  # built once here, not once per worker
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
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    return pool


def _schedule_pool(
    pool: Any, tasks: Iterator[_Task], tokenizer: Tokenizer, options: CountOptions, n_workers: int,
    on_done: Callable[[_Task, TaskResult], None],
) -> None:
    from concurrent.futures import FIRST_COMPLETED, Future, wait

    pending: dict[Future[TaskResult], _Task] = {}
    try:
        for task in tasks:
            if task.range is None and task.data is None:
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
        for process in list(getattr(pool, "_processes", {}).values()):
            process.terminate()
        pool.shutdown(wait=False, cancel_futures=True)
        raise Interrupted("interrupted; no output written") from None
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)


def _schedule_dask(
    tasks: Iterator[_Task], tokenizer: Tokenizer, options: CountOptions, address: str,
    on_done: Callable[[_Task, TaskResult], None], total: TaskResult,
) -> None:
    """Run the same tasks on a Dask cluster; partial sums are tree-reduced on the workers."""
    try:
        from distributed import Client, as_completed
    except ImportError:
        raise ConfigError("--dask needs the 'distributed' package: pip install 'nbcli[dask]'") from None
    try:
        client = Client(address, timeout=30)
    except OSError as err:
        raise ConfigError(f"--dask {address}: cannot reach the scheduler ({err})") from None
    try:
        blob = client.scatter(tokenizer.serialized(), broadcast=True)
        leaves = {}
        for task in tasks:
            if task.range is None and task.data is None:
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



# ---------------------------------------------------------------------------------------------
# From a count to its file and its report


def build_counts_file(result: CountResult, tokenizer: Tokenizer, smoothing_k: float) -> UnigramCounts:
    """Attach provenance metadata (tokenizer hash, inputs, options, version, time) to the counts."""
    metadata = {
        "nb.version": tool_version(),
        "nb.created": utc_now(),
        "nb.tokenizer": tokenizer.name,
        "nb.tokenizer_sha256": tokenizer.sha256,
        "nb.vocab_size": str(tokenizer.vocab_size),
        "nb.total_tokens": str(result.total_tokens),
        "nb.documents": str(result.documents),
        "nb.bytes_read": str(result.bytes_read),
        "nb.inputs": json.dumps([{"file": s.path, "bytes": s.size} for s in result.sources]),
        "nb.options": json.dumps({**result.options, "eos": result.eos, "bos": result.bos,
                                  "smoothing": f"add-k:{smoothing_k:g}"}),
        "nb.method": result.method,
        "nb.tokenizer_adjustments": json.dumps(list(tokenizer.adjustments)),
        "nb.bad_utf8_lines": str(result.bad_utf8_lines),
        "nb.skipped_lines": str(result.skipped_lines),
    }
    return UnigramCounts(counts=result.counts, metadata=metadata)


def write_count_outputs(counts: UnigramCounts, output: Path, tsv: Path | None, tokenizer: Tokenizer,
                        smoothing_k: float) -> None:
    """Write the counts file (and the TSV) as one commit: both files or neither (nbcli.atomic.OutputSet)."""
    outputs = {output: counts_file_bytes(counts)}
    if tsv is not None:
        outputs[tsv] = counts_tsv(counts.counts, tokenizer.pieces(), smoothing_k).encode("utf-8")
    write_all_atomic(outputs)


def count_report(result: CountResult, tokenizer: Tokenizer, output: Path, tsv: Path | None) -> dict[str, Any]:
    """The summary printed by `nb count-unigrams` (and its --json form)."""
    summary = summarize_counts(result.counts)
    mb_per_s, tokens_per_s = throughput(result)
    return {
        "output": str(output),
        "tsv": str(tsv) if tsv else None,
        "tokenizer": tokenizer.name,
        "tokenizer_sha256": tokenizer.sha256,
        "vocab_size": tokenizer.vocab_size,
        "tokens": summary.total_tokens,
        "documents": result.documents,
        "bytes_read": result.bytes_read,
        "inputs": len(result.sources),
        "distinct_types": summary.distinct_types,
        "vocab_coverage": summary.coverage,
        "entropy_nats": summary.entropy_nats,
        "entropy_bits": summary.entropy_bits,
        "top": [{"id": i, "piece": tokenizer.piece(i), "count": c, "share": c / max(1, summary.total_tokens)}
                for i, c in summary.top],
        "eos": result.eos,
        "eos_token": _marker(tokenizer, tokenizer.eos_id),
        "eos_reason": ("--eos/--no-eos" if result.options.get("eos") is not None
                       else tokenizer.eos_default_reason),
        "bos": result.bos,
        "bos_token": _marker(tokenizer, tokenizer.bos_id),
        "tokenizer_adjustments": list(tokenizer.adjustments),
        "method": result.method,
        "method_reason": tokenizer.method_reason if result.options.get("chunk_cache", True) else "--no-chunk-cache",
        "workers": result.workers,
        "seconds": result.seconds,
        "mb_per_s": mb_per_s,
        "tokens_per_s": tokens_per_s,
        "bad_utf8_lines": result.bad_utf8_lines,
        "skipped_lines": result.skipped_lines,
    }


def _marker(tokenizer: Tokenizer, token_id: int | None) -> dict[str, Any] | None:
    """{"piece", "id"} of a document marker, None when the tokenizer has none."""
    return None if token_id is None else {"piece": tokenizer.piece(token_id), "id": token_id}
