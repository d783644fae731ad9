"""Lexical diversity of generated text: Distinct-n and n-gram diversity D (paper 003 sec. 3.3, eqs. 5-6).

Pure functions over word lists. Words are what paper 003 app. B counts: NLTK's word tokenizer
(`nltk.word_tokenize` = Punkt sentence splitting, then the Treebank-style `NLTKWordTokenizer` on each
sentence). nb needs no downloaded NLTK data: `word_tokenize` here uses an *untrained* Punkt splitter
(`PunktSentenceTokenizer()`, default parameters, no abbreviation list) where `nltk.word_tokenize`
loads the pretrained English Punkt tables. The two differ only where the English tables know an
abbreviation ("Mr. Smith": the untrained splitter ends a sentence after "Mr." and the word
tokenizer then splits its period); every other word boundary is NLTK's own code.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import lru_cache
from typing import Any

from nbcli.errors import ConfigError

ORDERS = (1, 2, 3, 4)


@lru_cache(maxsize=1)
def _nltk() -> tuple[Any, Any]:
    try:
        from nltk.tokenize.destructive import NLTKWordTokenizer
        from nltk.tokenize.punkt import PunktSentenceTokenizer
    except ImportError:
        raise ConfigError("counting words as paper 003 does needs NLTK (no data download): "
                          "pip install 'nbcli[lm]'") from None
    return PunktSentenceTokenizer(), NLTKWordTokenizer()


def word_tokenize(text: str) -> list[str]:
    """Words of `text` as NLTK's `word_tokenize` splits them (paper 003 app. B), without NLTK data."""
    sentences, words = _nltk()
    return [w for sentence in sentences.tokenize(text) for w in words.tokenize(sentence)]


def ngrams(words: Sequence[str], n: int) -> list[tuple[str, ...]]:
    """The n-grams of one text (none cross a text boundary)."""
    if n < 1:
        raise ConfigError(f"n-gram order must be >= 1, got {n}")
    return [tuple(words[i:i + n]) for i in range(len(words) - n + 1)]


def distinct_n(texts: Iterable[Sequence[str]], n: int) -> float:
    """Paper 003 eq. 5: D_n = #unique n-grams in texts / #n-grams in texts, pooled over all texts.
    NaN when the texts have no n-gram of order n (every text shorter than n words)."""
    unique: set[tuple[str, ...]] = set()
    total = 0
    for words in texts:
        grams = ngrams(words, n)
        unique.update(grams)
        total += len(grams)
    return len(unique) / total if total else float("nan")


def ngram_diversity(texts: Iterable[Sequence[str]], orders: Sequence[int] = ORDERS) -> float:
    """Paper 003 eq. 6 (Meister et al. 2022): D = (1/4) sum_{n=1..4} D_n."""
    pooled = [list(words) for words in texts]
    return sum(distinct_n(pooled, n) for n in orders) / len(orders)


def diversity_report(texts: Iterable[Sequence[str]]) -> dict[str, float]:
    """D_1..D_4 and D of one set of word lists (the diversity columns of paper 003 table 2)."""
    pooled = [list(words) for words in texts]
    out = {f"distinct_{n}": distinct_n(pooled, n) for n in ORDERS}
    out["diversity"] = ngram_diversity(pooled)
    return out
