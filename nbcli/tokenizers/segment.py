"""The Segmenter protocol: how counting cuts documents into chunks that encode independently.

A segmenter belongs to one tokenizer family. `split(documents)` returns chunks such that the token ids
of every document, in order, equal the concatenation of `encode(chunks)` over that document's chunks.
A Zipfian corpus then needs one encode per *distinct* chunk (`nbcli.counting` keeps the table), and
counts stay bit-exact. Each family's class states in its docstring why its cuts are exact; the tests
beside it (tests/tokenizers/) check it against the tokenizer library on adversarial text.

Two mechanisms cover every family:

* `PatternSegmenter`: chunks are the matches of one regular expression over each document, encoded
  as they are (the tokenizer's pre-tokens never cross a cut, and nothing in the tokenizer depends on
  what lies before a cut).
* `SpaceRunSegmenter`: for tokenizers whose words are a run of spaces followed by the word (a
  space-run BPE, where pieces like ``▁▁▁`` exist): cut before each run of spaces.
"""

from __future__ import annotations

import functools
import itertools
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

EncodeFn = Callable[[list[str]], list[list[int]]]
# (starts, ends, variant): byte spans of a block's chunk parts, and which parts are encoded by the
# segmenter's second encoding (see `Segmenter.encode`).
Spans = tuple[np.ndarray, np.ndarray, np.ndarray]

# Unicode White_Space (what the `\s` of the tokenizers library's regexes matches), without the
# characters Python's str.isspace adds (U+001C..U+001F), so a cut is never placed where the
# tokenizer sees no whitespace.
WS = "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
# BertNormalizer(clean_text) deletes control characters (category Cc other than \t \n \r), so
# the text on both sides of them joins up: they must not cut.
WS_NOT_CONTROL = "\t\n\r \xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
# SentencePiece escapes ' ' to U+2581 and treats a literal U+2581 in the text the same way.
SPACES = " \u2581"


def flat_ids(encoded: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    """The ids of `encoded` in one int32 array (fromiter into int32 is ~2x faster than int64) and
    each text's number of ids."""
    lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded))
    tokens = np.fromiter(itertools.chain.from_iterable(encoded), dtype=np.int32, count=int(lengths.sum()))
    return tokens, lengths


class Segmenter(Protocol):
    """One tokenizer family's chunk rule (see the module docstring)."""

    name: str  # short label: counting reports the method as "chunked (<name>)"
    reason: str  # why the rule applies to this tokenizer (the summary's method_reason)

    def split(self, documents: list[str]) -> list[str]:
        """The chunks of `documents`, document after document."""
        ...

    def encode(self, chunks: list[str], variant: np.ndarray | None = None) -> list[list[int]]:
        """Token ids of each chunk; where `variant[i]` holds, chunk i is encoded the second way
        (only segmenters whose `spans` returns variants use it)."""
        ...

    # Bytes a line must not hold for `spans` (CR always; non-ASCII whitespace and the like per
    # family); None when the segmenter has no byte rule. Such lines take the str path (`split`).
    line_bail: tuple[bytes, ...] | None

    def spans(self, data: bytes) -> Spans:
        """Vectorised `split` of a block of clean lines (valid UTF-8, one document per line, no
        `line_bail` sequence): the byte spans of its chunks."""
        ...

    def prepare(self) -> None:
        """Build what `spans` and `encode` would build on first use (cut tables, a second
        encoder), so that forked workers inherit it instead of each building it."""
        ...


# Non-ASCII White_Space characters in UTF-8: a line holding one takes the str path.
NON_ASCII_WS = tuple(chr(code).encode("utf-8") for code in (0x85, 0xA0, 0x1680, *range(0x2000, 0x200B),
                                                            0x2028, 0x2029, 0x202F, 0x205F, 0x3000))
LITERAL_METASPACE = ("\u2581".encode("utf-8"),)


# ASCII classes for cuts inside a chunk (`ByteRule.class_cuts`); 0 is every other byte.
LETTER, DIGIT, PUNCT = 1, 2, 3
APOSTROPHE = 0x27


@dataclass(frozen=True)
class ByteRule:
    """A pattern's chunks of a text block, found on the bytes (`line_spans`): the ASCII bytes that
    form whitespace runs, those a cut may start at, whether a trailing run stays with the chunk
    before it, and the bytes whose presence sends a line to the str path.

    `class_cuts` are (left, right) pairs of ASCII classes (`byte_classes(b, apostrophe_is_punct)`)
    between which the family's pre-tokenizer always ends a pre-token: a chunk is cut there too, and
    each part encodes alone (the family's segmenter states why)."""

    run: bytes
    cut: bytes
    keep_trailing: bool
    bail: tuple[bytes, ...]
    class_cuts: tuple[tuple[int, int], ...] = ()
    apostrophe_is_punct: bool = False

    @functools.cached_property
    def pair_codes(self) -> np.ndarray:
        """A [16] table, True at 4 * left + right for the class pairs of `class_cuts`."""
        pairs = np.zeros(16, dtype=bool)
        for left, right in self.class_cuts:
            pairs[4 * left + right] = True
        return pairs


def byte_in(b: np.ndarray, members: bytes) -> np.ndarray:
    """b[i] in `members`, by comparisons (a few times faster than a 256-entry table lookup)."""
    out = np.zeros(b.shape[0], dtype=bool)
    for value in sorted(set(members)):
        out |= b == value
    return out


def ascii_letters(b: np.ndarray) -> np.ndarray:
    """b[i] is an ASCII letter (A-Z, a-z)."""
    folded = b | np.uint8(0x20)
    return (folded >= ord("a")) & (folded <= ord("z"))


def byte_classes(b: np.ndarray, apostrophe_is_punct: bool) -> np.ndarray:
    """Class of each byte as uint8, by comparisons: LETTER (A-Z a-z), DIGIT (0-9), PUNCT (printable
    ASCII punctuation and symbols, the apostrophe only if `apostrophe_is_punct`), 0 (whitespace,
    control and non-ASCII bytes)."""
    letter = ascii_letters(b)
    digit = (b >= ord("0")) & (b <= ord("9"))
    punct = (b >= 0x21) & (b <= 0x7E) & ~letter & ~digit
    if not apostrophe_is_punct:
        punct &= b != APOSTROPHE
    as_byte = np.uint8
    return (letter.view(as_byte) * as_byte(LETTER) + digit.view(as_byte) * as_byte(DIGIT)
            + punct.view(as_byte) * as_byte(PUNCT))


def line_spans(data: bytes, rule: ByteRule) -> Spans:
    """Chunks of the lines of a clean UTF-8 block (no CR) as byte spans, and which ones start a line.

    A chunk starts at each non-empty line's start and at each whitespace run (bytes `rule.run`, at
    least one) that follows a non-whitespace byte and starts with a byte of `rule.cut` (with
    `keep_trailing`, not at a run that ends its line); it ends at the next start or line end. This
    is `split` of the family's pattern on ASCII text: multi-byte UTF-8 characters never contain
    ASCII bytes, and lines with non-ASCII whitespace (or other `rule.bail` bytes) never get here.
    Chunks are then cut between the ASCII classes of `rule.class_cuts`.
    """
    b = np.frombuffer(data, dtype=np.uint8)
    n = b.shape[0]
    newline = b == 10
    run = byte_in(b, rule.run)
    after_solid = np.zeros(n, dtype=bool)  # the byte before is neither whitespace nor a newline
    after_solid[1:] = ~(run[:-1] | newline[:-1])
    cut = (run if rule.cut == rule.run else byte_in(b, rule.cut)) & after_solid
    if rule.keep_trailing:  # runs k start at first[k] and end at last[k]; a cut never starts a trailing one
        first = np.flatnonzero(run & ~np.append(False, run[:-1]))
        last = np.flatnonzero(run & ~np.append(run[1:], False))
        line_end = np.append(newline, True)  # the byte after a run's last byte ends the line
        cut[first[line_end[last + 1]]] = False
    line_start = np.empty(n, dtype=bool)
    line_start[0] = True
    line_start[1:] = newline[:-1]
    line_start &= ~newline
    start = cut | line_start
    if rule.class_cuts:
        kind = byte_classes(b, rule.apostrophe_is_punct)
        start[1:] |= rule.pair_codes.take(kind[:-1] * np.uint8(4) + kind[1:])
    bounds = np.flatnonzero(start | newline)
    starts_at = np.flatnonzero(start[bounds])
    starts = bounds[starts_at]
    ends = np.append(bounds, n)[starts_at + 1]
    return starts, ends, line_start[starts]


class PatternSegmenter:
    """Chunks are the matches of `pattern` in each document, each encoded as it is.

    Subclasses state which pattern is exact for their family, and why. `byte_rule`, where given,
    finds the same chunks on the bytes of plain text blocks (`line_spans`).
    """

    name = "pattern"

    def __init__(self, pattern: Any, encode: EncodeFn, reason: str, byte_rule: ByteRule | None = None) -> None:
        self.pattern = pattern
        self._encode = encode
        self.reason = reason
        self.byte_rule = byte_rule
        self.line_bail = None if byte_rule is None else with_cr(byte_rule.bail)

    def split(self, documents: list[str]) -> list[str]:
        return list(itertools.chain.from_iterable(map(self.pattern.findall, documents)))

    def encode(self, chunks: list[str], variant: np.ndarray | None = None) -> list[list[int]]:
        return self._encode(chunks)

    def spans(self, data: bytes) -> Spans:
        assert self.byte_rule is not None, "spans() needs a byte rule (line_bail is None)"
        return line_spans(data, self.byte_rule)

    def prepare(self) -> None:
        if self.byte_rule is not None:
            self.byte_rule.pair_codes  # noqa: B018 - a cached property


class SpaceRunSegmenter(PatternSegmenter):
    """Cut before each run of spaces (`SPACES`); the run belongs to the chunk of the word after it.

    With ``drop_first_space`` (a tokenizer that prepends one space-symbol to the text, like
    SentencePiece's dummy prefix or a `Prepend("▁")` normaliser): every document is read as " " + text,
    so every chunk starts with a space, and each chunk is encoded without its first space, which the
    prepended symbol restores. A trailing run of spaces stays in the last chunk (alone it would lose
    its one space to the dropped first character and encode to nothing). Without it, chunks are
    encoded as they are (a tokenizer that prepends nothing to text already starting with a space).
    """

    name = "space-runs"

    def __init__(self, encode: EncodeFn, reason: str, *, drop_first_space: bool, bytes_ok: bool = True) -> None:
        s = SPACES
        pattern = re.compile(f"[{s}]+[^{s}]+(?:[{s}]+\\Z)?|[{s}]+\\Z" if drop_first_space
                             else f"[{s}]*[^{s}]+|[{s}]+")
        rule = ByteRule(b" ", b" ", drop_first_space, LITERAL_METASPACE) if bytes_ok else None
        super().__init__(pattern, encode, reason, rule)
        self.drop_first_space = drop_first_space

    def split(self, documents: list[str]) -> list[str]:
        if not self.drop_first_space:
            return super().split(documents)
        find = self.pattern.findall
        return list(itertools.chain.from_iterable(find(" " + d) for d in documents))

    def encode(self, chunks: list[str], variant: np.ndarray | None = None) -> list[list[int]]:
        """With drop_first_space, `split`'s chunks lose their first space; on the byte path a
        line's first chunk (variant True) has none to lose and is encoded as it is."""
        if self.drop_first_space:
            if variant is None:
                chunks = [c[1:] for c in chunks]
            else:
                chunks = [c if first else c[1:] for c, first in zip(chunks, variant.tolist())]
        return self._encode(chunks)


def with_cr(bail: tuple[bytes, ...] | None) -> tuple[bytes, ...]:
    """`bail` extended with CR (the str path reads CRLF as a line end, the byte path would not)."""
    return (b"\r", *(bail or ()))


def find_all(data: bytes, needles: tuple[bytes, ...]) -> list[int]:
    """Sorted start positions of every occurrence of the (non-empty) `needles` in `data`, with numpy:
    one comparison pass per distinct first byte, then the candidates narrowed byte by byte along the
    needles' common prefixes, a branch dropped as soon as no candidate is left (so hundreds of added
    tokens cost little). A regex alternation scans a 4 MiB block in ~45 ms, this in a few."""
    b = np.frombuffer(data, dtype=np.uint8)
    n = b.shape[0]
    found: list[np.ndarray] = []
    by_first: dict[int, list[bytes]] = {}
    for needle in needles:
        by_first.setdefault(needle[0], []).append(needle)
    stack = [(np.flatnonzero(b == first), group, 1) for first, group in by_first.items()]
    while stack:
        at, group, depth = stack.pop()  # `at`: where every needle of `group` matches its first `depth` bytes
        if at.size == 0:
            continue
        by_next: dict[int, list[bytes]] = {}
        for needle in group:
            if len(needle) == depth:
                found.append(at)
            else:
                by_next.setdefault(needle[depth], []).append(needle)
        if by_next:
            inside = at[at + depth < n]
            following = b[inside + depth]
            stack.extend((inside[following == value], sub, depth + 1) for value, sub in by_next.items())
    return np.unique(np.concatenate(found)).tolist() if found else []


def dirty_lines(data: bytes, bail: tuple[bytes, ...]) -> list[tuple[int, int]]:
    """Byte ranges [start, end) of the lines of `data` that the byte path cannot count: lines
    holding invalid UTF-8 or one of the `bail` sequences. Adjacent lines form one range; a range
    ends after its last line's newline (or at the end of `data`)."""
    marks = find_all(data, bail)
    try:
        if not data.isascii():  # isascii allocates nothing; decode makes the whole str
            data.decode("utf-8")
    except UnicodeDecodeError:
        start = 0
        for line in data.split(b"\n"):
            try:
                line.decode("utf-8")
            except UnicodeDecodeError:
                marks.append(start)
            start += len(line) + 1
        marks.sort()
    ranges: list[tuple[int, int]] = []
    for mark in marks:
        if ranges and mark < ranges[-1][1]:
            continue  # in a line already taken
        start = data.rfind(b"\n", 0, mark) + 1
        end = data.find(b"\n", mark) + 1 or len(data)
        if ranges and ranges[-1][1] == start:
            ranges[-1] = (ranges[-1][0], end)
        else:
            ranges.append((start, end))
    return ranges


def without_ranges(data: bytes, ranges: list[tuple[int, int]]) -> bytes:
    """`data` without the byte ranges `ranges` (sorted, disjoint)."""
    if not ranges:
        return data
    gaps = zip([0] + [end for _, end in ranges], [start for start, _ in ranges] + [len(data)])
    return b"".join(data[a:b] for a, b in gaps)


def ascii_pairs_absent(pieces: list[str]) -> np.ndarray:
    """[128, 128] bool, True at (a, b) when no piece holds the ASCII characters a, b side by side.

    Vectorised over the pieces joined by NUL bytes: in UTF-8 two adjacent ASCII bytes are two adjacent
    ASCII characters, and pairs with the NUL separator are never cut pairs (not printable)."""
    blob = np.frombuffer("\0".join(pieces).encode("utf-8"), dtype=np.uint8)
    left, right = blob[:-1], blob[1:]
    held = (left < 0x80) & (right < 0x80) & (left != 0) & (right != 0)
    absent = np.ones((128, 128), dtype=bool)
    absent[left[held], right[held]] = False
    return absent


def pair_table(cuts: Any) -> Any:
    """A [128, 128] table of ASCII pairs a chunk may be cut between, as a flat [65536] table indexed
    by (byte a) << 8 | (byte b); False if none."""
    if cuts is None:
        return False
    table = np.zeros((256, 256), dtype=bool)
    table[:128, :128] = cuts
    table[:0x21, :] = table[:, :0x21] = False  # never at spaces, newlines or control bytes
    table[0x7F, :] = table[:, 0x7F] = False
    return table.reshape(-1)


def cut_parts(b: np.ndarray, starts: np.ndarray, ends: np.ndarray, cut_pairs: np.ndarray) -> Spans:
    """Cut chunks [starts, ends) of bytes `b` wherever `cut_pairs[b[i-1] << 8 | b[i]]` holds.

    Returns the parts' starts, ends and whether each continues a chunk. Cut pairs are printable
    ASCII, never b' ' or b'\\n', so every cut lies strictly inside a chunk. Pairs of two letters are
    not looked up: nearly every letter pair sits inside some piece (on raw English text 1.4 % of the
    cuts are letter|letter), and leaving them out spares a table lookup at most bytes; a cut not made
    only leaves a part longer, never a count different.
    """
    printable = (b >= 0x21) & (b <= 0x7E)
    letter = ascii_letters(b)
    candidates = np.flatnonzero(printable[:-1] & printable[1:] & ~(letter[:-1] & letter[1:]))
    codes = (b[candidates].astype(np.uint16) << 8) | b[candidates + 1]
    cut_at = candidates[cut_pairs.take(codes)] + 1
    if cut_at.size == 0:
        return starts, ends, np.zeros(starts.shape[0], dtype=bool)
    is_cut = np.zeros(b.shape[0] + 1, dtype=bool)
    is_cut[cut_at] = True
    begins = is_cut.copy()
    begins[starts] = True
    part_starts = np.flatnonzero(begins)
    continued = is_cut[part_starts]  # a cut, not a chunk's start (cuts lie strictly inside chunks)
    is_cut[ends] = True  # now every part's end
    return part_starts, np.flatnonzero(is_cut), continued


def encode_two_ways(chunks: list[str], variant: np.ndarray, first: EncodeFn, second: EncodeFn) -> list[list[int]]:
    """Ids of `chunks`, by `second` where `variant` holds and by `first` elsewhere, in order."""
    if not variant.any():
        return first(chunks)
    encoded: list[list[int]] = [[] for _ in chunks]
    for group, encode in ((np.flatnonzero(~variant), first), (np.flatnonzero(variant), second)):
        indices = group.tolist()
        for i, ids in zip(indices, encode([chunks[i] for i in indices])):
            encoded[i] = ids
    return encoded
