"""Translation metrics: sacreBLEU's corpus BLEU and chrF, called right, against BLEU (Papineni et al.
2002) and chrF (Popović 2015, sacreBLEU's effective-order form) computed here by hand on random
sentences whose 13a tokenisation is the identity (lower-case words, single spaces)."""

from __future__ import annotations

import math
import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nbcli.analysis.translation import BLEU_TOKENIZERS, score_translations
from nbcli.errors import InputError

WORDS = ["the", "cat", "sat", "on", "a", "mat", "dog", "ran", "home", "quickly", "big", "red"]


def _ngrams(items: list[str] | str, n: int) -> Counter:
    return Counter(tuple(items[i:i + n]) for i in range(len(items) - n + 1))


def bleu_by_hand(hyps: list[str], refs: list[str]) -> float:
    """Corpus BLEU-4: clipped n-gram matches and totals summed over the corpus, geometric mean of
    the four precisions, brevity penalty exp(1 - r/c) when c < r. (No precision is 0 here.)"""
    matches, totals, c, r = [0] * 4, [0] * 4, 0, 0
    for h, ref in zip(hyps, refs):
        hw, rw = h.split(), ref.split()
        c, r = c + len(hw), r + len(rw)
        for n in range(1, 5):
            hn, rn = _ngrams(hw, n), _ngrams(rw, n)
            matches[n - 1] += sum(min(k, rn[g]) for g, k in hn.items())
            totals[n - 1] += max(len(hw) - n + 1, 0)
    log_p = sum(math.log(m / t) for m, t in zip(matches, totals)) / 4
    bp = 1.0 if c >= r else math.exp(1 - r / c)
    return 100 * bp * math.exp(log_p)


def chrf_by_hand(hyps: list[str], refs: list[str], order: int = 6, beta: float = 2.0) -> float:
    """Corpus chrF2: character n-grams (n = 1..6) of each sentence with its whitespace removed,
    clipped matches summed over the corpus; precision and recall averaged over the orders with
    n-grams on both sides; F_beta of the averages."""
    stats = [[0, 0, 0] for _ in range(order)]
    for h, ref in zip(hyps, refs):
        hc, rc = "".join(h.split()), "".join(ref.split())
        for n in range(1, order + 1):
            hn, rn = _ngrams(hc, n), _ngrams(rc, n)
            stats[n - 1][0] += sum(hn.values())
            stats[n - 1][1] += sum(rn.values())
            stats[n - 1][2] += sum(min(k, rn[g]) for g, k in hn.items())
    orders = [(m / nh, m / nr) for nh, nr, m in stats if nh > 0 and nr > 0]
    p = sum(x for x, _ in orders) / len(orders)
    r = sum(y for _, y in orders) / len(orders)
    return 100 * (1 + beta ** 2) * p * r / (beta ** 2 * p + r) if p + r else 0.0


def random_corpus(seed: int, n: int) -> tuple[list[str], list[str]]:
    """References of 5-12 words; each hypothesis keeps the reference's first four words (so every
    n-gram order has a match) and then drops, replaces or keeps each word at random."""
    rng = random.Random(seed)
    hyps, refs = [], []
    for _ in range(n):
        ref = [rng.choice(WORDS) for _ in range(rng.randint(5, 12))]
        hyp = ref[:4] + [w if rng.random() < 0.6 else rng.choice(WORDS) for w in ref[4:] if rng.random() < 0.85]
        hyp += [rng.choice(WORDS) for _ in range(rng.randint(0, 2))]
        hyps.append(" ".join(hyp))
        refs.append(" ".join(ref))
    return hyps, refs


@settings(max_examples=30, deadline=None)
@given(st.integers(min_value=0, max_value=10_000), st.integers(min_value=1, max_value=25))
def test_bleu_and_chrf_equal_the_hand_computation(seed: int, n: int) -> None:
    hyps, refs = random_corpus(seed, n)
    result = score_translations(hyps, refs)
    assert result["sentences"] == n
    assert result["bleu"] == pytest.approx(bleu_by_hand(hyps, refs), rel=1e-9, abs=1e-9)
    assert result["chrf"] == pytest.approx(chrf_by_hand(hyps, refs), rel=1e-9, abs=1e-9)
    details = result["bleu_details"]
    assert details["hyp_len"] == sum(len(h.split()) for h in hyps)
    assert details["ref_len"] == sum(len(r.split()) for r in refs)


def test_signatures_record_the_settings() -> None:
    import sacrebleu

    result = score_translations(["the cat sat on the mat"], ["the cat sat on the mat"])
    assert result["bleu"] == pytest.approx(100.0) and result["chrf"] == pytest.approx(100.0)
    assert result["bleu_signature"] == f"nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:{sacrebleu.__version__}"
    assert result["chrf_signature"].startswith("nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|")
    other = score_translations(["The Cat"], ["the cat"], tokenize="intl", lowercase=True)
    assert "tok:intl" in other["bleu_signature"] and "case:lc" in other["bleu_signature"]
    assert "13a" in BLEU_TOKENIZERS


def test_bad_input_is_one_error() -> None:
    with pytest.raises(InputError, match="2 hypotheses for 1 references"):
        score_translations(["a", "b"], ["a"])
    with pytest.raises(InputError, match="no sentences"):
        score_translations([], [])
    with pytest.raises(InputError, match="tokenizer 'spm'"):
        score_translations(["a"], ["a"], tokenize="spm")
    empty = score_translations(["", "the cat"], ["a dog", "the cat"])  # an empty hypothesis is a hypothesis
    assert empty["sentences"] == 2 and 0 <= empty["bleu"] < 100
