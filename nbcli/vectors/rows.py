"""What the format parsers (`text_format`, `binary_format`) fill: the kept rows (`KeptRows`: the
duplicate check, the growing float32 array, the finite check) and the words decoded by the reader's
`unicode_errors` rule (`WordDecoder`). See `nbcli.vectors.reader` for the rules themselves."""

from __future__ import annotations

from array import array
from collections.abc import Callable
from typing import Literal

import numpy as np

from nbcli.errors import InputError

Duplicates = Literal["error", "keep-first"]


class KeptRows:
    """The kept rows: words, their index (the duplicate check), where each was read (a line or
    record number, formatted by `describe` only for an error message) and a float32 array that grows."""

    def __init__(self, dim: int, capacity: int, duplicates: Duplicates, describe: Callable[[int], str]) -> None:
        self.dim, self.duplicates, self.describe = dim, duplicates, describe
        self.words: list[str] = []
        self.index: dict[str, int] = {}
        self.at = array("q")
        self.array = np.empty((max(capacity, 1), dim), dtype=np.float32)
        self.skipped = 0

    def add(self, word: str, row: np.ndarray | list[float], at: int) -> None:
        first = self.index.get(word)
        if first is not None:
            if self.duplicates == "error":
                raise InputError(f"{self.describe(at)}: duplicate word {word!r} (first at "
                                 f"{self.describe(self.at[first])}); duplicates='keep-first' (--duplicates "
                                 "keep-first) keeps the first row")
            self.skipped += 1
            return
        n = len(self.words)
        if n == self.array.shape[0]:
            grown = np.empty((2 * n, self.dim), dtype=np.float32)
            grown[:n] = self.array
            self.array = grown
        self.array[n] = row
        self.index[word] = n
        self.words.append(word)
        self.at.append(at)

    def matrix(self) -> np.ndarray:
        """The kept rows, checked finite (the first NaN or infinity is an error naming its row)."""
        n = len(self.words)
        out = self.array[:n] if self.array.shape[0] == n else np.ascontiguousarray(self.array[:n])
        for start in range(0, n, 1 << 16):
            finite = np.isfinite(out[start:start + (1 << 16)]).all(axis=1)
            if not finite.all():
                i = start + int(np.argmin(finite))
                raise InputError(f"{self.describe(self.at[i])}: NaN or infinite value in the vector of {self.words[i]!r}")
        return out


class WordDecoder:
    """Words decoded from UTF-8 by the `unicode_errors` rule (`nbcli.vectors.reader`): "strict" counts
    the words that are not UTF-8 (the first one's place kept) and `check` refuses the file once it is
    read; the other rules decode them and count them in `escaped`."""

    def __init__(self, errors: str) -> None:
        self.errors = errors
        self.escaped = 0
        self.refused = 0
        self.first: tuple[str, int] | None = None

    def decode(self, raw: bytes, where: Callable[[], str]) -> str | None:
        """The word, or None for a word "strict" refuses (counted; the read goes on to count them all)."""
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as err:
            if self.errors == "strict":
                self.refused += 1
                if self.first is None:
                    self.first = (where(), err.start)
                return None
            self.escaped += 1
            return raw.decode("utf-8", self.errors)   # "ignore" may leave "" (a word of bad bytes alone), as gensim

    def check(self, path: str) -> None:
        if self.first is not None:
            where, byte = self.first
            raise InputError(f"{where}: invalid UTF-8 in the word at byte {byte}; {self.refused:,} word(s) of {path} "
                             "are not UTF-8: read them with unicode_errors 'replace', 'ignore' or 'backslashreplace' "
                             "(--unicode-errors), as gensim's load_word2vec_format(unicode_errors=) does")
