"""The byte path's line routing (`nbcli.tokenizers.segment.dirty_lines`) against a per-line check."""

from __future__ import annotations

import re

from hypothesis import given, settings, strategies as st

from nbcli.tokenizers.segment import dirty_lines, find_all, with_cr, without_ranges

BAIL = with_cr(("\u00a0".encode(),))
pieces = st.sampled_from([b"a", b" ", b"\n", b"\r", b"\xff", b"\xc3", b"\xc3\xa9", "\u00a0".encode(), b"\xa0", b"xyz"])


def _is_dirty(line: bytes) -> bool:
    try:
        line.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return any(needle in line for needle in BAIL)


@settings(max_examples=300, deadline=None)
@given(parts=st.lists(pieces, max_size=40))
def test_dirty_lines_are_exactly_the_lines_the_bytes_cannot_take(parts: list[bytes]) -> None:
    data = b"".join(parts)
    lines = re.findall(rb"[^\n]*\n|[^\n]+\Z", data)  # each line with its newline
    assert b"".join(lines) == data
    spans, start = [], 0
    for line in lines:
        spans.append((start, start + len(line), _is_dirty(line.rstrip(b"\n"))))
        start += len(line)
    ranges = dirty_lines(data, BAIL)
    # Each range is a run of whole dirty lines; together they hold every dirty line and nothing else.
    inside = [(s, e) for s, e, dirty in spans if any(a <= s and e <= b for a, b in ranges)]
    assert inside == [(s, e) for s, e, dirty in spans if dirty]
    assert sum(b - a for a, b in ranges) == sum(e - s for s, e, dirty in spans if dirty)
    assert all(a[1] < b[0] for a, b in zip(ranges, ranges[1:]))  # adjacent dirty lines form one range
    assert without_ranges(data, ranges) == b"".join(line for line, (_, _, dirty) in zip(lines, spans) if not dirty)


@settings(max_examples=200, deadline=None)
@given(pieces=st.lists(st.text(alphabet=st.sampled_from(list("ab.,\x00é日 ▁\x7f")), max_size=6), max_size=12))
def test_ascii_pairs_absent_matches_a_loop(pieces: list[str]) -> None:
    import numpy as np

    from nbcli.tokenizers.segment import ascii_pairs_absent

    expected = np.ones((128, 128), dtype=bool)
    for piece in pieces:
        for a, b in zip(piece, piece[1:]):
            if a < "\x80" and b < "\x80" and "\x00" not in (a, b):
                expected[ord(a), ord(b)] = False
    np.testing.assert_array_equal(ascii_pairs_absent(pieces), expected)


@settings(max_examples=300, deadline=None)
@given(parts=st.lists(pieces, max_size=40),
       needles=st.lists(st.sampled_from([b"a", b"\r", b"\xc3", b"\xc3\xa9", b"xy", b"yz", b"\xa0a", b"aa"]), max_size=4))
def test_find_all_matches_a_regex(parts: list[bytes], needles: list[bytes]) -> None:
    data = b"".join(parts)
    expected = sorted({m.start() for needle in needles for m in re.finditer(b"(?=" + re.escape(needle) + b")", data)})
    assert find_all(data, tuple(needles)) == expected


def test_byte_classes_match_str_predicates() -> None:
    """Every byte's class against Python's own character predicates."""
    import numpy as np

    from nbcli.tokenizers.segment import DIGIT, LETTER, PUNCT, byte_classes

    every = np.arange(256, dtype=np.uint8)
    for apostrophe in (False, True):
        expected = [0 if not 0x21 <= code < 0x7F else LETTER if chr(code).isalpha() else
                    DIGIT if chr(code).isdigit() else 0 if code == 0x27 and not apostrophe else PUNCT
                    for code in range(256)]
        assert byte_classes(every, apostrophe).tolist() == expected
