"""The chunk table: the token ids of each distinct part a worker has encoded (`ChunkTable`).

Bounded: at most `limit` rows and about `ids_limit` token ids; when either is reached, the most
used rows stay, at most half of each (`purge`). Short parts are keyed in sorted numpy arrays
(`SortedKeys`), longer ones in a dict of their bytes; the row arrays are reserved once in anonymous
memory maps whose pages count only once written.
"""

from __future__ import annotations

import itertools
import mmap
from typing import Any

import numpy as np

from nbcli.counting.tally import weighted_bincount
from nbcli.tokenizers.segment import flat_ids


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

    def __init__(self, limit: int, ids_limit: int | None = None) -> None:
        self.limit = limit
        self.ids_limit = 16 * limit if ids_limit is None else ids_limit  # token ids kept, at most
        self.index: dict[Any, int] = {}  # str chunks and the bytes of parts over 15 bytes
        self.short = SortedKeys(np.uint64)
        self.mid = SortedKeys("S16")
        self.size = 0  # rows in use
        # Sized for a full table up front, in pages the system zero-fills on first write (RSS grows with
        # use): growing by doubling would copy, holding old and new arrays at once, at every doubling.
        self.ids = _lazy_zeros(4 * limit + 1, np.int32)  # more only for parts of > 4 tokens on average
        # int32 positions: ids stay below ids_limit plus one call's parts of <= CACHED_PART_CHARS.
        self.starts = _lazy_zeros(limit + 1, np.int32)
        self.lengths = _lazy_zeros(limit + 1, np.int32)
        self.hits = _lazy_zeros(limit + 1, np.int64)  # occurrences counted through each row
        # Per-row certificate numbers of unigram chunks (`nbcli.tokenizers.certificate`): margin over the
        # second-best segmentation (0 where none was given: never certified), |exact best score|,
        # normalised characters.
        self.margin = _lazy_zeros(limit + 1, np.float64)
        self.best = _lazy_zeros(limit + 1, np.float64)
        self.chars = _lazy_zeros(limit + 1, np.int32)
        self.used = 0
        self.add([""], [[]])
        self.margin[0] = np.inf  # the empty chunk: nothing to segment

    def full(self) -> bool:
        """Whether the next rows need a purge first: `limit` rows, or `ids_limit` ids, in use."""
        return self.size >= self.limit or self.used >= self.ids_limit

    def _sorted_index(self, keys: np.ndarray) -> SortedKeys:
        return self.short if keys.dtype == np.uint64 else self.mid

    def rows(self, keys: list[Any] | np.ndarray) -> np.ndarray:
        """Row of each chunk key, -1 where not in the table."""
        if isinstance(keys, np.ndarray):
            return self._sorted_index(keys).lookup(keys)
        return np.fromiter(map(self.index.get, keys, itertools.repeat(-1)), dtype=np.int64, count=len(keys))

    def add(self, keys: list[Any] | np.ndarray, encoded: list[list[int]],
            certificate: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None) -> None:
        """New rows for chunk keys not in the table, with their token ids (and, for unigram chunks,
        their certificate numbers: margin, |best score|, characters)."""
        n = len(keys)
        tokens, lengths = flat_ids(encoded)
        total = tokens.shape[0]
        first = self.size
        assert first + n <= self.starts.shape[0], "rows beyond the table's limit"  # callers purge first
        assert self.used + total < 2**31, "ids beyond int32 positions"
        if self.used + total > self.ids.shape[0]:
            self.ids = _grown(self.ids, self.used, max(self.used + total, 2 * self.ids.shape[0]))
        self.ids[self.used:self.used + total] = tokens
        self.starts[first:first + n] = self.used + np.cumsum(lengths) - lengths
        self.lengths[first:first + n] = lengths
        for column, values in zip((self.margin, self.best, self.chars), certificate or (0, 0, 0)):
            column[first:first + n] = values
        self.used += total
        self.size += n
        if isinstance(keys, np.ndarray):
            self._sorted_index(keys).add(keys, np.arange(first, first + n))
        else:
            self.index.update(zip(keys, range(first, first + n)))

    def replace(self, rows: np.ndarray, encoded: list[list[int]],
                certificate: tuple[np.ndarray, np.ndarray, np.ndarray]) -> None:
        """Give existing rows (distinct) new token ids and certificate numbers; the ids go after the
        others (the old ones stay unused until the next purge compacts the array)."""
        tokens, lengths = flat_ids(encoded)
        total = tokens.shape[0]
        assert self.used + total < 2**31, "ids beyond int32 positions"
        if self.used + total > self.ids.shape[0]:
            self.ids = _grown(self.ids, self.used, max(self.used + total, 2 * self.ids.shape[0]))
        self.ids[self.used:self.used + total] = tokens
        self.starts[rows] = self.used + np.cumsum(lengths) - lengths
        self.lengths[rows] = lengths
        for column, values in zip((self.margin, self.best, self.chars), certificate):
            column[rows] = values
        self.used += total

    def purge(self) -> None:
        """Keep the most used rows (row 0 always), at most half of `limit` and of `ids_limit`,
        renumbered, so memory stays bounded however long the corpus: the frequent chunks of a
        Zipfian corpus stay, rare ones go."""
        n = self.size
        if n <= 1:
            return
        hits = self.hits[:n].copy()
        hits[0] = np.iinfo(np.int64).max
        ranked = np.argsort(-hits, kind="stable")[:max(1, self.limit // 2)]
        ids_kept = np.cumsum(self.lengths[ranked])  # and at most half the ids budget
        ranked = ranked[:max(1, int(np.searchsorted(ids_kept, self.ids_limit // 2, side="right")))]
        keep = np.zeros(n, dtype=bool)
        keep[ranked] = True
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
        for column in (self.margin, self.best, self.chars):
            column[:rows.shape[0]] = column[rows]
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
        return weighted_bincount(self.ids[gather], lengths, freqs, size)
