"""Counting one block of lines in one process, bit-exactly (`BlockCounter`).

Lines the tokenizer family's segmenter (`nbcli.tokenizers.segment`) can cut on their bytes are cut
into parts with numpy, keyed, grouped and looked up in a `ChunkTable` of parts already encoded; the
rest go through the segmenter's str rule, or are encoded whole where the family has no rule. Each
distinct part of a Zipfian corpus is encoded once per worker and its ids multiplied by its frequency.
"""

from __future__ import annotations

import itertools
import mmap
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from nbcli.corpus import ByteRange, line_number_at, read_range_blocks
from nbcli.counting.tally import exact_bincount, token_counts, weighted_token_counts
from nbcli.errors import ConfigError, CorpusError
from nbcli.jsonsafe import jsonl_field
from nbcli.tokenizers import Tokenizer
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
class Task:
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


class BlockCounter:
    """Per-process counting state: the tokenizer and the cache of encoded chunks."""

    def __init__(self, tokenizer: Tokenizer, options: CountOptions) -> None:
        self.tokenizer = tokenizer
        self.options = options
        self.segmenter = tokenizer.segmenter if options.chunked else None
        self.table = ChunkTable(CACHE_LIMIT)
        self.eos_id, self.bos_id = document_markers(tokenizer, options)

    # -- tasks -------------------------------------------------------------------------------
    def run(self, task: Task) -> TaskResult:
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
        lines = (text.replace("\r\n", "\n") if "\r" in text else text).split("\n")
        if lines and lines[-1] == "":
            lines.pop()  # the block ends with a newline
        if self.options.format == "jsonl":
            lines = self._jsonl_documents(path, lines, first_line, offset, result)
        return list(filter(None, lines))  # empty lines are not documents

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
                counts += token_counts(self.tokenizer.encode_batch(documents[start:start + ENCODE_BATCH]),
                                       counts.shape[0])
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
        (bytes | length << 56 | variant << 63), of 8-15 bytes by two (as one 16-byte string), and
        grouped by sorting; longer ones by their bytes (b'\\xff' + bytes for the variant) with a Counter.
        """
        b = np.frombuffer(data, dtype=np.uint8)
        n = b.shape[0]
        newline = b == 10
        lines = int(np.count_nonzero(newline)) + int(b[-1] != 10)
        empty = int(newline[0]) + int(np.count_nonzero(newline[1:] & newline[:-1]))
        del newline
        starts, ends, continued = spans
        lengths = ends - starts
        padded = np.zeros(n + 16, dtype=np.uint8)
        padded[:n] = b
        words = np.ndarray((n + 8,), dtype="<u8", buffer=padded, strides=(1,))  # 8 bytes at each offset

        def tagged(which: np.ndarray, offset: int) -> np.ndarray:
            """The uint64 of parts `which` from byte `offset` on (up to their end, at most 8 bytes),
            tagged with length << 56 and continued << 63; built in place (dense blocks hold ~300 k
            parts, and every full-length temporary costs 2.4 MB)."""
            size = lengths[which]
            key = words[starts[which] + offset]
            key &= _SHORT_MASKS[size - offset]
            key |= size.astype(np.uint64) << np.uint64(56)
            key |= continued[which].astype(np.uint64) << np.uint64(63)
            return key

        def texts_at(occurrences: np.ndarray) -> Callable[[np.ndarray], tuple[list[str], np.ndarray]]:
            return lambda missing: (_decode_chunks(
                [data[s:e] for s, e in zip(starts[occurrences[missing]].tolist(), ends[occurrences[missing]].tolist())]),
                continued[occurrences[missing]])

        keys = tagged(np.flatnonzero(lengths <= 7), 0)
        distinct, freqs = np.unique(keys, return_counts=True)  # no return_index: it forces a slower sort
        del keys
        self._add_rows(distinct, freqs, counts, lambda missing: _short_key_texts(distinct[missing]))

        mid = np.flatnonzero((lengths > 7) & (lengths <= 15))
        if mid.size:
            low = words[starts[mid]]
            high = tagged(mid, 8)
            order = np.lexsort((low, high))
            low, high = low[order], high[order]
            head = np.ones(order.shape[0], dtype=bool)
            head[1:] = (low[1:] != low[:-1]) | (high[1:] != high[:-1])
            heads = np.flatnonzero(head)
            freqs = np.diff(np.append(heads, order.shape[0]))
            pairs = np.empty((heads.shape[0], 2), dtype=np.uint64)
            pairs[:, 0], pairs[:, 1] = high[heads], low[heads]
            self._add_rows(pairs.view("S16").ravel(), freqs, counts, texts_at(mid[order[heads]]))

        long = np.flatnonzero(lengths > 15)
        if long.size:
            markers = [_CONTINUED if c else b"" for c in continued[long].tolist()]
            block = Counter([m + data[s:e] for m, s, e in zip(markers, starts[long].tolist(), ends[long].tolist())])
            names = list(block)
            self._add_rows(names, np.fromiter(block.values(), dtype=np.int64, count=len(names)), counts,
                           lambda missing: _long_key_texts([names[i] for i in missing]))
        return lines - empty  # documents: non-empty lines

    def _add_rows(self, keys: list[Any] | np.ndarray, freqs: np.ndarray, counts: np.ndarray,
                  texts_of: Callable[[np.ndarray], tuple[list[str], np.ndarray | None]]) -> None:
        """Add freqs[i] x (tokens of chunk keys[i]) to counts; encode (once) chunks not in the table.

        Keys are distinct within a call: a list of str chunks or of the bytes of parts over 15
        bytes, or (bytes path) a uint64 or 'S16' array of the keys of shorter parts;
        `texts_of(indices)` gives those chunks' text and which of them continue a chunk (encoded
        without the dummy prefix; None: none do).
        """
        table = self.table
        if table.size >= table.limit:
            table.purge()
        rows = table.rows(keys)
        missing = np.flatnonzero(rows < 0)
        if missing.size:
            new = keys[missing] if isinstance(keys, np.ndarray) else [keys[i] for i in missing]
            texts, continued = texts_of(missing)
            kept = min(len(new), max(0, table.limit - table.size))
            first = table.size
            for start in range(0, kept, ENCODE_BATCH):
                stop = min(start + ENCODE_BATCH, kept)
                table.add(new[start:stop], self._encode(texts[start:stop], continued, start))
            for start in range(kept, len(new), ENCODE_BATCH):  # table full: count without keeping
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


def _lazy_zeros(size: int, dtype: Any) -> np.ndarray:
    """A zero array in an anonymous memory map: its pages are zero-filled by the system on first
    write, so an array sized for the worst case costs RSS only for what is written (np.zeros may
    take, and clear, memory the allocator already holds)."""
    buffer = mmap.mmap(-1, max(1, size * np.dtype(dtype).itemsize))
    return np.frombuffer(buffer, dtype=dtype, count=size)


def _grown(array: np.ndarray, used: int, size: int) -> np.ndarray:
    """A larger copy of `array` keeping its first `used` entries."""
    bigger = np.zeros(size, dtype=array.dtype)
    bigger[:used] = array[:used]
    return bigger


class SortedKeys:
    """Fixed-width chunk keys (uint64, or 16-byte strings 'S16') -> table rows, held as a sorted key
    array and a row array: 12-20 bytes a key where a dict of Python ints takes ~150, and one
    vectorised binary search per block instead of a dict probe per key."""

    def __init__(self, dtype: Any) -> None:
        self.keys = np.empty(0, dtype=dtype)
        self.rows = np.empty(0, dtype=np.int32)

    def __len__(self) -> int:
        return self.keys.shape[0]

    def lookup(self, keys: np.ndarray) -> np.ndarray:
        """Row of each key, -1 where absent."""
        if not len(self):
            return np.full(keys.shape[0], -1, dtype=np.int64)
        at = np.minimum(np.searchsorted(self.keys, keys), len(self) - 1)
        return np.where(self.keys[at] == keys, self.rows[at], -1).astype(np.int64)

    def add(self, keys: np.ndarray, rows: np.ndarray) -> None:
        """Insert keys (distinct, none present) with their rows, keeping the keys sorted."""
        order = np.argsort(keys, kind="stable")
        keys = keys[order]
        at = np.searchsorted(self.keys, keys)
        self.keys = np.insert(self.keys, at, keys)
        self.rows = np.insert(self.rows, at, rows[order].astype(np.int32))

    def renumber(self, new_row: np.ndarray) -> None:
        """Give each key the row new_row[its row]; drop keys whose new row is -1."""
        rows = new_row[self.rows]
        kept = rows >= 0
        self.keys, self.rows = self.keys[kept], rows[kept].astype(np.int32)


class ChunkTable:
    """Distinct chunks seen by one process, each encoded once: chunk -> row, row -> its token ids.

    Keys of parts up to 15 bytes live in two `SortedKeys` (uint64 and 16-byte keys), str chunks and
    longer parts' bytes in a dict. Token ids are stored back to back in one array (row r is
    ids[starts[r]:starts[r] + lengths[r]]), so a block's counts are a gather and a bincount instead
    of a Python loop over chunks. Row 0 is the empty chunk (no tokens), so callers need not filter
    empty strings.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.index: dict[Any, int] = {}  # str chunks and the bytes of parts over 15 bytes
        self.short = SortedKeys(np.uint64)
        self.mid = SortedKeys("S16")
        self.size = 0  # rows in use
        # Sized for a full table up front, in pages the system zero-fills on first write (RSS grows with
        # use): growing by doubling would copy, holding old and new arrays at once, at every doubling.
        self.ids = _lazy_zeros(4 * limit + 1, np.int32)  # more only for parts of > 4 tokens on average
        self.starts = _lazy_zeros(limit + 1, np.int64)
        self.lengths = _lazy_zeros(limit + 1, np.int64)
        self.hits = _lazy_zeros(limit + 1, np.int64)  # occurrences counted through each row
        self.used = 0
        self.add([""], [[]])

    def _sorted_index(self, keys: np.ndarray) -> SortedKeys:
        return self.short if keys.dtype == np.uint64 else self.mid

    def rows(self, keys: list[Any] | np.ndarray) -> np.ndarray:
        """Row of each chunk key, -1 where not in the table."""
        if isinstance(keys, np.ndarray):
            return self._sorted_index(keys).lookup(keys)
        return np.fromiter(map(self.index.get, keys, itertools.repeat(-1)), dtype=np.int64, count=len(keys))

    def add(self, keys: list[Any] | np.ndarray, encoded: list[list[int]]) -> None:
        """New rows for chunk keys not in the table, with their token ids."""
        n = len(keys)
        lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=n)
        total = int(lengths.sum())
        first = self.size
        assert first + n <= self.starts.shape[0], "rows beyond the table's limit"  # callers purge first
        if self.used + total > self.ids.shape[0]:
            self.ids = _grown(self.ids, self.used, max(self.used + total, 2 * self.ids.shape[0]))
        self.ids[self.used:self.used + total] = np.fromiter(
            itertools.chain.from_iterable(encoded), dtype=np.int32, count=total)
        self.starts[first:first + n] = self.used + np.cumsum(lengths) - lengths
        self.lengths[first:first + n] = lengths
        self.used += total
        self.size += n
        if isinstance(keys, np.ndarray):
            self._sorted_index(keys).add(keys, np.arange(first, first + n))
        else:
            self.index.update(zip(keys, range(first, first + n)))

    def purge(self) -> None:
        """Keep the most used half of the rows (row 0 always), renumbered, so memory stays bounded
        however long the corpus: the frequent chunks of a Zipfian corpus stay, rare ones go."""
        n = self.size
        if n <= 1:
            return
        hits = self.hits[:n].copy()
        hits[0] = np.iinfo(np.int64).max
        keep = np.zeros(n, dtype=bool)
        keep[np.argsort(-hits, kind="stable")[:max(1, self.limit // 2)]] = True
        new_row = np.where(keep, np.cumsum(keep) - 1, -1)
        listed, kept_flags = new_row.tolist(), keep.tolist()
        self.index = {key: listed[row] for key, row in self.index.items() if kept_flags[row]}
        self.short.renumber(new_row)
        self.mid.renumber(new_row)
        rows = np.flatnonzero(keep)
        gather, lengths = self._id_positions(rows)
        self.ids[:gather.shape[0]] = self.ids[gather]
        self.used = gather.shape[0]
        self.size = rows.shape[0]
        self.starts[:rows.shape[0]] = np.cumsum(lengths) - lengths
        self.lengths[:rows.shape[0]] = lengths
        self.hits[:rows.shape[0]] = self.hits[rows] // 2  # older counts weigh less
        self.hits[0] = 0

    def _id_positions(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(positions in `ids` of rows' token ids, back to back in row order; each row's length)."""
        lengths = self.lengths[rows]
        ends = np.cumsum(lengths)
        total = int(ends[-1]) if ends.size else 0
        return np.arange(total) + np.repeat(self.starts[rows] - (ends - lengths), lengths), lengths

    def token_counts(self, rows: np.ndarray, freqs: np.ndarray, size: int) -> np.ndarray:
        """Sum over i of freqs[i] x (one count per token id of row rows[i]), as int64 [size]."""
        gather, lengths = self._id_positions(rows)
        return exact_bincount(self.ids[gather], np.repeat(freqs.astype(np.float64), lengths), size)


