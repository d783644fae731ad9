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

import itertools
from collections.abc import Callable
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

    def spans(self, data: bytes) -> Spans | None:
        """Optional vectorised `split` of a block of clean UTF-8 text documents (one per line, no
        CR): the byte spans of its chunks. None when the segmenter has no byte rule."""
        ...


class PatternSegmenter:
    """Chunks are the matches of `pattern` in each document, each encoded as it is.

    Subclasses state which pattern is exact for their family, and why.
    """

    name = "pattern"

    def __init__(self, pattern: Any, encode: EncodeFn, reason: str) -> None:
        self.pattern = pattern
        self._encode = encode
        self.reason = reason

    def split(self, documents: list[str]) -> list[str]:
        return list(itertools.chain.from_iterable(map(self.pattern.findall, documents)))

    def encode(self, chunks: list[str], variant: np.ndarray | None = None) -> list[list[int]]:
        return self._encode(chunks)

    def spans(self, data: bytes) -> Spans | None:
        return None


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

    def __init__(self, encode: EncodeFn, reason: str, *, drop_first_space: bool) -> None:
        import re

        s = SPACES
        pattern = re.compile(f"[{s}]+[^{s}]+(?:[{s}]+\\Z)?|[{s}]+\\Z" if drop_first_space
                             else f"[{s}]*[^{s}]+|[{s}]+")
        super().__init__(pattern, encode, reason)
        self.drop_first_space = drop_first_space

    def split(self, documents: list[str]) -> list[str]:
        if not self.drop_first_space:
            return super().split(documents)
        find = self.pattern.findall
        return list(itertools.chain.from_iterable(find(" " + d) for d in documents))

    def encode(self, chunks: list[str], variant: np.ndarray | None = None) -> list[list[int]]:
        if self.drop_first_space:
            chunks = [c[1:] for c in chunks]
        return self._encode(chunks)
