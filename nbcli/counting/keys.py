"""Keys of the parts of clean text lines, found and grouped with numpy (pure functions).

A block's clean lines (valid UTF-8, no byte that sends a line to the str path) are cut into parts by
the segmenter's byte rule (`Segmenter.spans`); each part is keyed exactly by its bytes and whether it
continues a chunk, and equal keys are grouped with their frequencies, so that the chunk table is
probed once per distinct part. Parts of up to 7 bytes (most of English) are one uint64
(bytes | length << 56 | continued << 63), of 8-15 bytes a (high, low) pair of uint64 (the high word
holds bytes 8.., the length and the flag; the low word bytes 0-7), longer ones their bytes
(b'\xff' + bytes for a continuing part). Every key gives back its text (`*_key_texts`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

# Masks of the low k bytes of a uint64; chunk keys are bytes (little-endian) | length << 56.
_SHORT_MASKS = np.array([(1 << (8 * k)) - 1 for k in range(8)], dtype=np.uint64)
_CONTINUED = b"\xff"  # never in UTF-8: marks the long keys of continuing parts


def line_slices(data: bytes, size: int) -> list[tuple[int, int]]:
    """(start, end) of consecutive slices of `data` that end at a newline (or at the end), each of
    at most `size` bytes unless one line is longer."""
    bounds: list[tuple[int, int]] = []
    start, n = 0, len(data)
    while start < n:
        if n - start <= size:
            bounds.append((start, n))
            break
        cut = data.rfind(b"\n", start, start + size)
        if cut < 0:  # one line longer than a slice: it is a slice
            cut = data.find(b"\n", start + size)
        end = n if cut < 0 else cut + 1
        bounds.append((start, end))
        start = end
    return bounds


@dataclass
class PartKeys:
    """The distinct parts of a block of clean lines, keyed (see `part_keys`)."""

    documents: int  # non-empty lines
    short: tuple[np.ndarray, np.ndarray]  # (sorted distinct uint64 keys, their frequencies)
    mid: tuple[np.ndarray, np.ndarray]  # ([k, 2] uint64 (high, low) keys sorted, their frequencies)
    long: list[bytes]  # every occurrence of a longer part (b'\xff' + bytes for a continuing part)


def _byte_words(b: np.ndarray) -> np.ndarray:
    """A uint64 view of 8 bytes at each offset of `b` (zero-padded past its end)."""
    padded = np.zeros(b.shape[0] + 16, dtype=np.uint8)
    padded[:b.shape[0]] = b
    return np.ndarray((b.shape[0] + 8,), dtype="<u8", buffer=padded, strides=(1,))


def _tagged(words: np.ndarray, starts: np.ndarray, lengths: np.ndarray, continued: np.ndarray,
            which: np.ndarray, offset: int) -> np.ndarray:
    """The uint64 of parts `which` from byte `offset` on (up to their end, at most 8 bytes), tagged
    with length << 56 and continued << 63; built in place."""
    size = lengths[which]
    key = words[starts[which] + offset]
    key &= _SHORT_MASKS[size - offset]
    key |= size.astype(np.uint64) << np.uint64(56)
    key |= continued[which].astype(np.uint64) << np.uint64(63)
    return key


def part_keys(data: bytes, spans: Any) -> PartKeys:
    """Key and group the parts `spans` (starts, ends, continued) of clean UTF-8 lines `data`."""
    b = np.frombuffer(data, dtype=np.uint8)
    newline = b == 10
    lines = int(np.count_nonzero(newline)) + int(b[-1] != 10)
    empty = int(newline[0]) + int(np.count_nonzero(newline[1:] & newline[:-1]))
    del newline
    starts, ends, continued = spans
    lengths = ends - starts
    words = _byte_words(b)
    keys = _tagged(words, starts, lengths, continued, np.flatnonzero(lengths <= 7), 0)
    short = np.unique(keys, return_counts=True)  # no return_index: it forces a slower sort
    del keys
    mid_parts = np.flatnonzero((lengths > 7) & (lengths <= 15))
    mid = grouped_pairs(_tagged(words, starts, lengths, continued, mid_parts, 8), words[starts[mid_parts]])
    del mid_parts
    long = np.flatnonzero(lengths > 15)
    markers = [_CONTINUED if c else b"" for c in continued[long].tolist()]
    long_keys = [m + data[s:e] for m, s, e in zip(markers, starts[long].tolist(), ends[long].tolist())]
    return PartKeys(lines - empty, short, mid, long_keys)


@dataclass
class KeyedGroup:
    """One kind of keys (short, mid or long) of `keyed_parts`: the distinct keys, the parts holding
    this kind, and each such part's index into `keys`."""

    keys: Any  # sorted uint64, [k, 2] uint64 pairs, or a list of bytes
    parts: np.ndarray
    inverse: np.ndarray


def keyed_parts(data: bytes, spans: Any) -> tuple[KeyedGroup, KeyedGroup, KeyedGroup]:
    """`part_keys` keeping each part's key (for counting line by line): the short, mid and long
    groups, each with the parts it holds and their distinct keys."""
    b = np.frombuffer(data, dtype=np.uint8)
    starts, ends, continued = spans
    lengths = ends - starts
    words = _byte_words(b)
    short_parts = np.flatnonzero(lengths <= 7)
    short, short_inverse = np.unique(_tagged(words, starts, lengths, continued, short_parts, 0),
                                     return_inverse=True)
    mid_parts = np.flatnonzero((lengths > 7) & (lengths <= 15))
    high = _tagged(words, starts, lengths, continued, mid_parts, 8)
    low = words[starts[mid_parts]]
    order = np.lexsort((low, high))
    head = np.ones(order.shape[0], dtype=bool)
    head[1:] = (high[order][1:] != high[order][:-1]) | (low[order][1:] != low[order][:-1])
    mid = np.empty((int(head.sum()), 2), dtype=np.uint64)
    mid[:, 0], mid[:, 1] = high[order][head], low[order][head]
    mid_inverse = np.empty(order.shape[0], dtype=np.int64)
    mid_inverse[order] = np.cumsum(head) - 1
    long_parts = np.flatnonzero(lengths > 15)
    markers = [_CONTINUED if c else b"" for c in continued[long_parts].tolist()]
    index: dict[bytes, int] = {}
    long_inverse = np.fromiter((index.setdefault(m + data[s:e], len(index)) for m, s, e in
                                zip(markers, starts[long_parts].tolist(), ends[long_parts].tolist())),
                               dtype=np.int64, count=long_parts.shape[0])
    return (KeyedGroup(short, short_parts, short_inverse.ravel()), KeyedGroup(mid, mid_parts, mid_inverse),
            KeyedGroup(list(index), long_parts, long_inverse))


def grouped_pairs(high: np.ndarray, low: np.ndarray,
                  freqs: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Distinct (high, low) uint64 pairs as a sorted [k, 2] array, and how often each occurs
    (weighted by `freqs` when given)."""
    order = np.lexsort((low, high))
    high, low = high[order], low[order]
    head = np.ones(order.shape[0], dtype=bool)
    head[1:] = (high[1:] != high[:-1]) | (low[1:] != low[:-1])
    heads = np.flatnonzero(head)
    pairs = np.empty((heads.shape[0], 2), dtype=np.uint64)
    pairs[:, 0], pairs[:, 1] = high[heads], low[heads]
    if freqs is None:
        return pairs, np.diff(np.append(heads, order.shape[0]))
    return pairs, np.add.reduceat(freqs[order], heads)


def merge_keyed(groups: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """Merge (distinct keys, frequencies) of several slices into one: uint64 keys or [k, 2] pairs."""
    if len(groups) == 1:
        return groups[0]
    keys = np.concatenate([k for k, _ in groups])
    freqs = np.concatenate([f for _, f in groups])
    if keys.ndim == 2:
        return grouped_pairs(keys[:, 0], keys[:, 1], freqs)
    order = np.argsort(keys, kind="stable")
    ordered = keys[order]
    head = np.ones(order.shape[0], dtype=bool)
    head[1:] = ordered[1:] != ordered[:-1]
    heads = np.flatnonzero(head)
    return ordered[heads], np.add.reduceat(freqs[order], heads)


def mid_key_texts(pairs: np.ndarray) -> tuple[list[str], np.ndarray]:
    """The parts of 8-15 bytes that [k, 2] (high, low) keys stand for, and which continue a chunk."""
    high, low = pairs[:, 0], pairs[:, 1]
    high_bytes, low_bytes = high.astype("<u8").tobytes(), low.astype("<u8").tobytes()
    sizes = ((high >> np.uint64(56)) & np.uint64(0x7F)).tolist()
    return (_decode_chunks([low_bytes[8 * i:8 * i + 8] + high_bytes[8 * i:8 * i + size - 8]
                            for i, size in enumerate(sizes)]),
            (high >> np.uint64(63)).astype(bool))


def short_key_texts(keys: np.ndarray) -> tuple[list[str], np.ndarray]:
    """The parts of <= 7 bytes that uint64 keys (bytes | length << 56 | continued << 63) stand for,
    and which of them continue a chunk."""
    raw = keys.astype("<u8").tobytes()
    sizes = ((keys >> np.uint64(56)) & np.uint64(0x7F)).tolist()
    return (_decode_chunks([raw[8 * i:8 * i + size] for i, size in enumerate(sizes)]),
            (keys >> np.uint64(63)).astype(bool))


def long_key_texts(names: list[bytes]) -> tuple[list[str], np.ndarray]:
    """The parts of > 15 bytes that long keys stand for, and which of them continue a chunk."""
    continued = np.fromiter((name[:1] == _CONTINUED for name in names), dtype=bool, count=len(names))
    return _decode_chunks([name[1:] if c else name for name, c in zip(names, continued.tolist())]), continued


def _decode_chunks(chunks: list[bytes]) -> list[str]:
    """Decode many UTF-8 chunks (none holds a newline) in one call."""
    return b"\n".join(chunks).decode("utf-8").split("\n")
