from __future__ import annotations

import math
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nbcli.lm.diversity import distinct_n, diversity_report, ngram_diversity, ngrams, word_tokenize


def test_distinct_n_and_d_equal_a_hand_count() -> None:
    texts = [["the", "cat", "sat", "on", "the", "mat"], ["the", "cat", "ran"]]
    # unigrams: 9 in all; unique {the, cat, sat, on, mat, ran} = 6
    assert distinct_n(texts, 1) == pytest.approx(6 / 9)
    # bigrams: (the cat)(cat sat)(sat on)(on the)(the mat) + (the cat)(cat ran) = 7; unique 6
    assert distinct_n(texts, 2) == pytest.approx(6 / 7)
    # trigrams: 4 + 1 = 5, all unique; 4-grams: 3 + 0 = 3, all unique (none across texts)
    assert distinct_n(texts, 3) == pytest.approx(1.0)
    assert distinct_n(texts, 4) == pytest.approx(1.0)
    d = (6 / 9 + 6 / 7 + 1 + 1) / 4
    assert ngram_diversity(texts) == pytest.approx(d)
    report = diversity_report(texts)
    assert report["diversity"] == pytest.approx(d) and report["distinct_2"] == pytest.approx(6 / 7)


def test_ngrams_never_cross_texts_and_short_texts_give_nan() -> None:
    assert ngrams(["a", "b"], 3) == []
    assert math.isnan(distinct_n([["a"], ["b"]], 2))
    assert distinct_n([["a", "b"], ["b", "a"]], 2) == 1.0  # no ("b", "b") across the boundary


@given(st.lists(st.lists(st.sampled_from("abcde"), max_size=12), min_size=1, max_size=6),
       st.integers(1, 4))
def test_distinct_n_matches_counter(texts: list[list[str]], n: int) -> None:
    grams = Counter(tuple(t[i:i + n]) for t in texts for i in range(len(t) - n + 1))
    total = sum(grams.values())
    got = distinct_n(texts, n)
    if total == 0:
        assert math.isnan(got)
    else:
        assert got == pytest.approx(len(grams) / total) and 0 < got <= 1


def test_word_tokenize_is_nltks_word_tokenizer_per_sentence() -> None:
    from nltk.tokenize.destructive import NLTKWordTokenizer

    one = 'He said "hello" (twice), didn\'t he? It costs $3.50...'
    assert word_tokenize(one) == [
        "He", "said", "``", "hello", "''", "(", "twice", ")", ",", "did", "n't", "he", "?",
        "It", "costs", "$", "3.50", "..."]
    text = "The model predicts words. Frequent ones come first! Does it?"
    expected = [w for s in ("The model predicts words.", "Frequent ones come first!", "Does it?")
                for w in NLTKWordTokenizer().tokenize(s)]
    assert word_tokenize(text) == expected
    assert "." in word_tokenize(text)[:5]  # a sentence-final period is its own word
