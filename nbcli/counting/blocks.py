"""Counting one block of lines in one process, bit-exactly (`BlockCounter`).

Lines the tokenizer family's segmenter (`nbcli.tokenizers.segment`) can cut on their bytes are cut
into parts with numpy, keyed, grouped and looked up in a `ChunkTable` of parts already encoded; the
rest go through the segmenter's str rule, or are encoded whole where the family has no rule. Each
distinct part of a Zipfian corpus is encoded once per worker and its ids multiplied by its frequency.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from nbcli.corpus import TEXT_FORMATS, ByteRange, DocumentBatch, RowUnit, decode_lines, invalid_utf8, line_number_at
from nbcli.corpus.records import BAD_LINE_HINT, jsonl_document
from nbcli.tokenizers.certificate import certified_lines
from nbcli.counting.keys import (
    keyed_parts, line_slices, long_key_texts, merge_keyed, mid_key_texts, part_keys, short_key_texts,
)
from nbcli.counting.table import ChunkTable
from nbcli.counting.tally import token_counts, weighted_token_counts
from nbcli.errors import ConfigError, CorpusError
from nbcli.tokenizers import Tokenizer
from nbcli.tokenizers.segment import dirty_lines, without_ranges

CACHE_LIMIT = 1 << 20  # distinct chunks kept per worker (and 16x as many ids); when full, the most used stay
CACHED_PART_CHARS = 256  # longer parts are kept in the table only when repeated within a block
SLICE_BYTES = 64 << 10  # a block's clean lines are keyed this much at a time (bounded temporaries)
CERTIFIED_SLICE_BYTES = 1 << 20  # the same for certified segmenters, which keep every part's key
ENCODE_BATCH = 4096
CERTIFY_BATCH = 1 << 14  # new chunks certified at a time (each call has a fixed numpy cost)
CERTIFY_AT_SIGHTING = 2  # a unigram chunk is certified when seen this many times (see _certified_rows)


@dataclass(frozen=True)
class CountOptions:
    """How documents are read and counted. `format`: how files that are not parquet or Arrow are read
    (None: by their names, `nbcli.corpus.corpus_format`). `eos=None` means the tokenizer's default
    (`Tokenizer.eos_default`: on for causal templates, off for `[CLS] ... [SEP]` encoders)."""

    format: str | None = None
    field: str = "text"
    eos: bool | None = None
    bos: bool = False
    strict: bool = False
    skip_bad_lines: bool = False
    chunked: bool = True  # False forces whole-document encoding (a reference for exactness checks)
    # SentencePiece unigram models: count from cached chunks under the per-line certificate
    # (`nbcli.tokenizers.certificate`) instead of encoding whole documents. Exact either way; off by
    # default because it pays only on large corpora: slower than whole documents on 60 MB of real
    # text, faster on 1.1 GB of generated text (docs/design/counting.md).
    unigram_certificate: bool = False

    def __post_init__(self) -> None:
        if self.format is not None and self.format not in TEXT_FORMATS:
            raise ConfigError(f"--format must be one of {', '.join(TEXT_FORMATS)}, got {self.format!r}")


@dataclass
class TaskResult:
    """Counts and bookkeeping for one task (or a sum of tasks)."""

    counts: np.ndarray
    documents: int = 0
    bytes_read: int = 0
    bad_utf8_lines: int = 0
    skipped_lines: int = 0
    skipped_nulls: int = 0  # null documents of parquet/Arrow columns

    def add(self, other: TaskResult) -> TaskResult:
        self.counts += other.counts
        self.documents += other.documents
        self.bytes_read += other.bytes_read
        self.bad_utf8_lines += other.bad_utf8_lines
        self.skipped_lines += other.skipped_lines
        self.skipped_nulls += other.skipped_nulls
        return self


@dataclass
class Task:
    path: str
    range: ByteRange | None = None  # read by the worker
    data: bytes | None = None  # already read (compressed file or stdin block)
    rows: RowUnit | None = None  # rows of a parquet/Arrow file, read by the worker as documents
    batch: DocumentBatch | None = None  # documents already read (TSV/CSV)
    # A task with none of range, data, rows, batch only reports progress.
    first_line: int | None = None
    offset: int = 0
    progress_bytes: int = 0
    jsonl: bool = False  # the lines of range or data are JSONL records

    @property
    def progress_only(self) -> bool:
        return self.range is None and self.data is None and self.rows is None and self.batch is None


UNIGRAM_WHOLE_REASON = ("unigram model: whole documents, at the tokenizer's own speed (--unigram-certificate "
                        "counts from cached chunks under a per-line certificate instead: exact, and faster "
                        "only on large corpora)")


def counting_segmenter(tokenizer: Tokenizer, options: CountOptions) -> Any:
    """The segmenter counting uses: the tokenizer's chunk rule, or None (whole documents) under
    --no-chunk-cache, and for a unigram model's certified rule unless `unigram_certificate`."""
    segmenter = tokenizer.segmenter if options.chunked else None
    if segmenter is not None and callable(getattr(segmenter, "certify", None)) and not options.unigram_certificate:
        return None
    return segmenter


def counting_method(tokenizer: Tokenizer, options: CountOptions) -> tuple[str, str]:
    """(method, why) as the summary and the counts file record them."""
    segmenter = counting_segmenter(tokenizer, options)
    if segmenter is not None:
        return f"chunked ({segmenter.name})", tokenizer.method_reason
    if not options.chunked:
        return "whole documents", "--no-chunk-cache"
    if tokenizer.segmenter is not None:  # a certified rule not asked for
        return "whole documents", UNIGRAM_WHOLE_REASON
    return "whole documents", tokenizer.method_reason


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


def clean_slices(data: bytes, bail: tuple[bytes, ...], size: int, dirty: list[tuple[int, int]]) -> Iterator[bytes]:
    """The clean lines of `data` (valid UTF-8, no `bail` byte), slice by slice of at most `size`
    bytes of whole lines (`line_slices`); the byte ranges of the other lines are appended to
    `dirty`. Empty slices are skipped."""
    for lo, hi in line_slices(data, size):
        piece = data[lo:hi] if hi - lo < len(data) else data
        piece_dirty = dirty_lines(piece, bail)
        dirty += [(lo + start, lo + end) for start, end in piece_dirty]
        clean = without_ranges(piece, piece_dirty)
        if clean:
            yield clean


class BlockCounter:
    """Per-process counting state: the tokenizer and the cache of encoded chunks."""

    def __init__(self, tokenizer: Tokenizer, options: CountOptions) -> None:
        self.tokenizer = tokenizer
        self.options = options
        self.segmenter = counting_segmenter(tokenizer, options)
        # A segmenter with a per-line certificate (SentencePiece unigram): a line is counted from its
        # chunks only where `certify`'s numbers prove it (`nbcli.tokenizers.certificate`), else whole.
        self.certified = callable(getattr(self.segmenter, "certify", None))
        self.table = ChunkTable(CACHE_LIMIT)
        self.eos_id, self.bos_id = document_markers(tokenizer, options)

    def _line_no(self, path: str, first_line: int | None, offset: int, index: int) -> int:
        if first_line is None:
            first_line = line_number_at(path, offset)
        return first_line + index

    # -- one block of whole lines ------------------------------------------------------------
    def count_documents(self, batch: DocumentBatch) -> TaskResult:
        """Count a batch of documents (rows of a column): those without line breaks as text lines
        (the byte path, as fast as a text file), the others whole as JSONL documents are; one
        EOS/BOS per document either way."""
        result = self.count_block(batch.path, batch.lines, batch.first_row, 0, jsonl=False)
        if batch.documents:
            counts = np.zeros(self.tokenizer.vocab_size, dtype=np.int64)
            self._count_documents(batch.documents, counts)
            for marker in (self.eos_id, self.bos_id):
                if marker is not None:
                    counts[marker] += len(batch.documents)
            result.add(TaskResult(counts, documents=len(batch.documents)))
        result.bytes_read = batch.text_bytes
        result.skipped_nulls = batch.nulls
        result.bad_utf8_lines += batch.bad_utf8_lines
        result.skipped_lines += batch.skipped_lines
        return result

    def count_block(self, path: str, data: bytes, first_line: int | None, offset: int,
                    jsonl: bool | None = None) -> TaskResult:
        """Count a block of whole lines (`offset`: its file offset; `first_line`: its first line's
        number, None to find it on demand; `jsonl`: lines are JSON objects, by default as --format
        says). Text lines the segmenter's byte rule covers are counted on the bytes; the others
        (invalid UTF-8, CR, bytes the rule cannot cut) one by one as str."""
        jsonl = self.options.format == "jsonl" if jsonl is None else jsonl
        counts = np.zeros(self.tokenizer.vocab_size, dtype=np.int64)
        result = TaskResult(counts, bytes_read=len(data))
        bail = self.segmenter.line_bail if self.segmenter is not None and not jsonl else None
        if bail is None or not data:
            documents = self._text_documents(path, data, first_line, offset, result, jsonl)
        else:
            count_clean = self._count_certified_lines if self.certified else self._count_clean_lines
            dirty = count_clean(data, bail, counts, result)
            documents = []
            lines_before = previous = 0
            for start, end in dirty:
                if first_line is not None:
                    lines_before += data.count(b"\n", previous, start)
                    previous = start
                documents += self._text_documents(
                    path, data[start:end], None if first_line is None else first_line + lines_before,
                    offset + start, result, jsonl)
        result.documents += len(documents)
        self._count_documents(documents, counts)
        if self.eos_id is not None:
            counts[self.eos_id] += result.documents
        if self.bos_id is not None:
            counts[self.bos_id] += result.documents
        return result

    def _count_clean_lines(self, data: bytes, bail: tuple[bytes, ...], counts: np.ndarray,
                           result: TaskResult) -> list[tuple[int, int]]:
        """Count the lines of `data` the segmenter's byte rule covers, on their bytes with numpy;
        return the byte ranges of the other lines (invalid UTF-8, `bail` bytes).

        The block is checked, cut and keyed in slices of at most SLICE_BYTES of whole lines
        (`line_slices`, `part_keys`), so that the byte-length temporaries of a dense block (~20 MB
        for 1 MiB of code in one piece) stay small and alike from block to block (the allocator
        then reuses its memory instead of growing); the slices' distinct keys are merged and
        looked up in the table once."""
        assert self.segmenter is not None
        dirty: list[tuple[int, int]] = []
        short: list[tuple[np.ndarray, np.ndarray]] = []
        mid: list[tuple[np.ndarray, np.ndarray]] = []
        long: Counter[bytes] = Counter()
        for clean in clean_slices(data, bail, SLICE_BYTES, dirty):
            keys = part_keys(clean, self.segmenter.spans(clean))
            result.documents += keys.documents
            short.append(keys.short)
            if keys.mid[0].size:
                mid.append(keys.mid)
            long.update(keys.long)
        if short:
            distinct, freqs = merge_keyed(short)
            self.add_rows(distinct, freqs, counts, lambda missing: short_key_texts(distinct[missing]))
        if mid:
            pairs, pair_freqs = merge_keyed(mid)
            self.add_rows(pairs.view("S16").ravel(), pair_freqs, counts,
                          lambda missing: mid_key_texts(pairs[missing]))
        if long:
            names = list(long)
            self.add_rows(names, np.fromiter(long.values(), dtype=np.int64, count=len(names)), counts,
                          lambda missing: long_key_texts([names[i] for i in missing]))
        return dirty

    def _count_certified_lines(self, data: bytes, bail: tuple[bytes, ...], counts: np.ndarray,
                               result: TaskResult) -> list[tuple[int, int]]:
        """`_count_clean_lines` for a certified segmenter: line by line, each clean line counted from
        its chunks' cached ids where `certified_lines` proves them the line's own, else encoded whole.
        Returns the byte ranges of the other lines."""
        dirty: list[tuple[int, int]] = []
        for clean in clean_slices(data, bail, CERTIFIED_SLICE_BYTES, dirty):
            self._count_lines_certified(clean, counts, result)
        return dirty

    def _count_lines_certified(self, clean: bytes, counts: np.ndarray, result: TaskResult) -> None:
        """Count clean lines (see `_count_certified_lines`)."""
        segmenter, table, size = self.segmenter, self.table, counts.shape[0]
        assert segmenter is not None
        b = np.frombuffer(clean, dtype=np.uint8)
        newlines = np.flatnonzero(b == 10)
        lines = newlines.shape[0] + int(b[-1] != 10)
        result.documents += lines - int(b[0] == 10) - int(np.count_nonzero(np.diff(newlines) == 1))
        spans = segmenter.spans(clean)
        n_parts = spans[0].shape[0]
        if not n_parts:
            return
        if table.full():
            table.purge()  # before any lookup: rows found below stay valid for this call
        rows = np.full(n_parts, -1, dtype=np.int64)
        short, mid, long = keyed_parts(clean, spans)
        for group, keys, texts_of in (
                (short, short.keys, lambda missing: short_key_texts(short.keys[missing])),
                (mid, mid.keys.view("S16").ravel(), lambda missing: mid_key_texts(mid.keys[missing])),
                (long, long.keys, lambda missing: long_key_texts([long.keys[i] for i in missing.tolist()]))):
            if group.parts.size:
                freqs = np.bincount(group.inverse, minlength=len(keys))
                rows[group.parts] = self._certified_rows(keys, freqs, texts_of)[group.inverse]
        line_of = np.searchsorted(newlines, spans[0])  # parts are in byte order
        heads = np.flatnonzero(np.append(True, line_of[1:] != line_of[:-1]))
        known = rows >= 0
        at = np.where(known, rows, 0)
        ok = certified_lines(np.where(known, table.margin[at], -np.inf), table.best[at], table.chars[at],
                             heads, segmenter.score_bound)
        seen, seen_freqs = np.unique(rows[known], return_counts=True)
        table.hits[seen] += seen_freqs
        used = rows[np.repeat(ok, np.diff(np.append(heads, n_parts)))]
        if used.size:
            used_rows, freqs = np.unique(used, return_counts=True)
            counts += table.token_counts(used_rows, freqs, size)
        whole = line_of[heads[~ok]].tolist()
        if whole:
            line_starts, line_ends = np.append(0, newlines + 1), np.append(newlines, b.shape[0])
            texts = b"\n".join([clean[line_starts[i]:line_ends[i]] for i in whole]).decode("utf-8").split("\n")
            self._count_documents(texts, counts)  # whole, as for every str document of a certified rule

    def _certified_rows(self, keys: list[Any] | np.ndarray, freqs: np.ndarray,
                        texts_of: Callable[[np.ndarray], tuple[list[str], np.ndarray | None]]) -> np.ndarray:
        """Rows of distinct part keys (seen `freqs` times in this call); -1 where not kept (over
        CACHED_PART_CHARS, or the table full): their lines are encoded whole.

        A chunk is certified (encoded alone, its margin found: `certify`) once it has been seen
        CERTIFY_AT_SIGHTING times; until then its row is pending (margin NaN, never certified), so
        that chunks seen once (half the distinct chunks of a Zipfian corpus) cost a key, not a lattice."""
        table, segmenter = self.table, self.segmenter
        rows = table.rows(keys)
        missing = np.flatnonzero(rows < 0)
        if missing.size:
            texts, _ = texts_of(missing)
            short = np.fromiter(map(len, texts), dtype=np.int64, count=len(texts)) <= CACHED_PART_CHARS
            missing = missing[short][:max(0, table.limit - table.size)]
            first, n = table.size, missing.shape[0]
            new = keys[missing] if isinstance(keys, np.ndarray) else [keys[i] for i in missing.tolist()]
            table.add(new, [[]] * n, (np.full(n, np.nan), np.zeros(n), np.zeros(n, dtype=np.int32)))
            rows[missing] = np.arange(first, first + n)
        known = np.flatnonzero(rows >= 0)
        pending = known[np.isnan(table.margin[rows[known]])]
        if CERTIFY_AT_SIGHTING > 1:
            seen_before = table.hits[rows[pending]] + freqs[pending]  # hits: occurrences of earlier calls
            pending = pending[seen_before >= CERTIFY_AT_SIGHTING]
        for start in range(0, pending.shape[0], CERTIFY_BATCH):
            batch = pending[start:start + CERTIFY_BATCH]
            encoded, *certificate = segmenter.certify(texts_of(batch)[0])  # type: ignore[union-attr]
            table.replace(rows[batch], encoded, tuple(certificate))  # type: ignore[arg-type]
        return rows

    def _text_documents(self, path: str, data: bytes, first_line: int | None, offset: int,
                        result: TaskResult, jsonl: bool) -> list[str]:
        """The non-empty documents of whole lines `data` as str (the line rule, `decode_lines`: CRLF or
        LF ends a line); invalid UTF-8 is replaced and counted in `result` (an error with --strict)."""
        lines, bad = decode_lines(data)
        if bad:
            if self.options.strict:
                index, byte = bad[0]
                raise invalid_utf8(path, self._line_no(path, first_line, offset, index), byte)
            result.bad_utf8_lines += len(bad)
        if jsonl:
            lines = self._jsonl_documents(path, lines, first_line, offset, result)
        return list(filter(None, lines))  # empty lines are not documents

    def _jsonl_documents(
        self, path: str, lines: list[str], first_line: int | None, offset: int, result: TaskResult
    ) -> list[str]:
        docs: list[str] = []
        name = self.options.field
        for index, line in enumerate(lines):
            text, problem = jsonl_document(line, name)
            if text is not None:
                docs.append(text)
            if problem is not None:
                if not self.options.skip_bad_lines:
                    line_no = self._line_no(path, first_line, offset, index)
                    raise CorpusError(f"{path}:{line_no}: {problem}{BAD_LINE_HINT}")
                result.skipped_lines += 1
        return docs

    def _count_documents(self, documents: list[str], counts: np.ndarray) -> None:
        """Add the token counts of `documents` to `counts`."""
        if not documents:
            return
        if self.segmenter is None or self.certified:  # certified segmenters: str documents go whole
            for start in range(0, len(documents), ENCODE_BATCH):
                counts += token_counts(self.tokenizer.encode_batch(documents[start:start + ENCODE_BATCH]),
                                       counts.shape[0])
            return
        # A per-block Counter is small and cache-friendly: the table is probed once per distinct chunk.
        block = Counter(self.segmenter.split(documents))
        keys = list(block)
        self.add_rows(keys, np.fromiter(block.values(), dtype=np.int64, count=len(keys)), counts,
                      lambda missing: ([keys[i] for i in missing], None))

    def add_rows(self, keys: list[Any] | np.ndarray, freqs: np.ndarray, counts: np.ndarray,
                 texts_of: Callable[[np.ndarray], tuple[list[str], np.ndarray | None]]) -> None:
        """Add freqs[i] x (tokens of chunk keys[i]) to counts; encode (once) chunks not in the table.

        Keys are distinct within a call: a list of str chunks or of the bytes of parts over 15
        bytes, or (bytes path) a uint64 or 'S16' array of the keys of shorter parts;
        `texts_of(indices)` gives those chunks' text and which of them continue a chunk (encoded
        without the dummy prefix; None: none do).
        """
        table = self.table
        if table.full():
            table.purge()
        rows = table.rows(keys)
        missing = np.flatnonzero(rows < 0)
        if missing.size:
            texts, continued = texts_of(missing)
            # Parts longer than CACHED_PART_CHARS (a DNA line, a base64 blob, a run of letters) are
            # rarely seen twice and hold many ids: kept only when repeated within the block, else
            # counted and dropped (the table's ids_limit bounds what is kept).
            sizes = np.fromiter(map(len, texts), dtype=np.int64, count=len(texts))
            uncached = (sizes > CACHED_PART_CHARS) & (freqs[missing] < 2)
            cacheable = len(texts) - int(np.count_nonzero(uncached))
            if cacheable < len(texts):
                order = np.argsort(uncached, kind="stable")  # cacheable ones first
                missing, texts = missing[order], [texts[i] for i in order.tolist()]
                continued = None if continued is None else continued[order]
            new = keys[missing] if isinstance(keys, np.ndarray) else [keys[i] for i in missing]
            kept = min(cacheable, max(0, table.limit - table.size))
            first = table.size
            for start in range(0, kept, ENCODE_BATCH):
                stop = min(start + ENCODE_BATCH, kept)
                table.add(new[start:stop], self._encode(texts[start:stop], continued, start))
            for start in range(kept, len(new), ENCODE_BATCH):  # too long, or table full: count, not kept
                stop = min(start + ENCODE_BATCH, len(new))
                counts += weighted_token_counts(self._encode(texts[start:stop], continued, start),
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
