"""Part keys (nbcli.counting.keys): slicing, keying and merging against plain Python."""

from __future__ import annotations

from collections import Counter

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from nbcli.counting.keys import (
    line_slices, long_key_texts, merge_keyed, mid_key_texts, part_keys, short_key_texts,
)

line_text = st.text(st.sampled_from(list("ab z0.") + ["é", "日", "\U0001f642"]), max_size=40)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=30).map(lambda b: b.replace(b"\n", b"")), max_size=12),
       st.booleans(), st.integers(1, 64))
def test_line_slices_tile_the_block_at_line_ends(lines: list[bytes], last_newline: bool, size: int) -> None:
    data = b"\n".join(lines) + (b"\n" if last_newline and lines else b"")
    slices = line_slices(data, size)
    assert b"".join(data[a:b] for a, b in slices) == data
    assert all(a < b for a, b in slices) and all(b == a2 for (_, b), (a2, _) in zip(slices, slices[1:]))
    for a, b in slices:
        assert b == len(data) or data[b - 1:b] == b"\n"
        assert b - a <= size or b"\n" not in data[a:b - 1]  # over size only for one long line


def _spans(lines: list[str], cuts: list[int]) -> tuple[bytes, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """A block of `lines` and parts cut at character positions drawn from `cuts` (never across a line)."""
    data, starts, ends, flags = b"", [], [], []
    for n, line in enumerate(lines):
        raw = line.encode()
        bounds = sorted({0, len(line), *[c % (len(line) + 1) for c in cuts[n::len(lines)]]})
        byte_at = [len(line[:i].encode()) for i in bounds]
        for k, (a, b) in enumerate(zip(byte_at, byte_at[1:])):
            starts.append(len(data) + a)
            ends.append(len(data) + b)
            flags.append(k > 0)
        data += raw + b"\n"
    return data, (np.array(starts, dtype=np.int64), np.array(ends, dtype=np.int64), np.array(flags, dtype=bool))


@settings(max_examples=200, deadline=None)
@given(st.lists(line_text, min_size=1, max_size=10), st.lists(st.integers(0, 40), max_size=30))
def test_part_keys_give_back_every_part_and_its_frequency(lines: list[str], cuts: list[int]) -> None:
    """Grouped keys, read back with the *_key_texts helpers, are the Counter of (part, continued)."""
    data, spans = _spans(lines, cuts)
    starts, ends, flags = spans
    expected = Counter((data[s:e].decode(), bool(f)) for s, e, f in zip(starts, ends, flags))
    keys = part_keys(data, spans)
    got: Counter[tuple[str, bool]] = Counter()
    texts, continued = short_key_texts(keys.short[0])
    got.update({(t, bool(c)): int(f) for t, c, f in zip(texts, continued, keys.short[1])})
    texts, continued = mid_key_texts(keys.mid[0])
    got.update({(t, bool(c)): int(f) for t, c, f in zip(texts, continued, keys.mid[1])})
    got.update(Counter((t, bool(c)) for t, c in zip(*long_key_texts(keys.long))))
    assert got == expected
    assert keys.documents == sum(1 for line in lines if line)
    assert np.all(np.diff(keys.short[0].astype(np.float64)) >= 0)  # sorted, distinct keys
    assert len(set(keys.short[0].tolist())) == keys.short[0].shape[0]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.dictionaries(st.tuples(st.integers(0, 5), st.integers(0, 5)), st.integers(1, 9), min_size=1),
                min_size=1, max_size=5),
       st.booleans())
def test_merge_keyed_sums_frequencies(groups: list[dict[tuple[int, int], int]], as_pairs: bool) -> None:
    """Merging per-slice (distinct keys, frequencies) equals summing Counters; keys come out sorted."""
    expected: Counter[tuple[int, int]] = Counter()
    for group in groups:
        expected.update(group)
    if as_pairs:
        arrays = [(np.array(sorted(g), dtype=np.uint64).reshape(-1, 2),
                   np.array([g[k] for k in sorted(g)], dtype=np.int64)) for g in groups]
        keys, freqs = merge_keyed(arrays)
        got = {tuple(int(x) for x in row): int(f) for row, f in zip(keys, freqs)}
        assert [tuple(r) for r in keys.tolist()] == sorted(got)
    else:
        arrays = [(np.array(sorted(6 * a + b for a, b in g), dtype=np.uint64),
                   np.array([g[k] for k in sorted(g, key=lambda k: 6 * k[0] + k[1])], dtype=np.int64))
                  for g in groups]
        keys, freqs = merge_keyed(arrays)
        got = {divmod(int(k), 6): int(f) for k, f in zip(keys, freqs)}
        assert keys.tolist() == sorted(keys.tolist())
    assert got == dict(expected) and len(got) == len(keys)
