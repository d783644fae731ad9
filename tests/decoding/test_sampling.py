from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from nbcli.errors import ConfigError, CountsError
from nbcli.decoding.sampling import (
    Decoding, logit_adjust, parse_decoding, sample_rows, top_k_filter, top_p_filter,
)
from nbcli.ops import unigram_log_prior

logit_rows = st.lists(st.lists(st.floats(-20, 20, allow_nan=False, width=32), min_size=2, max_size=30),
                      min_size=1, max_size=4).filter(lambda rows: len({len(r) for r in rows}) == 1)


@given(logit_rows, st.integers(1, 40), st.lists(st.floats(0, 1, exclude_max=True), min_size=4, max_size=4))
def test_top_k_never_samples_outside_the_k_largest(rows: list[list[float]], k: int, us: list[float]) -> None:
    logits = torch.tensor(rows)
    chosen = sample_rows(top_k_filter(logits, k), torch.tensor(us[:len(rows)]))
    for row, token in zip(logits, chosen):
        kth = torch.sort(row, descending=True).values[min(k, row.numel()) - 1]
        assert row[token] >= kth


@given(logit_rows, st.floats(0.01, 1.0), st.lists(st.floats(0, 1, exclude_max=True), min_size=4, max_size=4))
def test_top_p_never_samples_outside_the_nucleus(rows: list[list[float]], p: float, us: list[float]) -> None:
    logits = torch.tensor(rows)
    chosen = sample_rows(top_p_filter(logits, p), torch.tensor(us[:len(rows)]))
    for row, token in zip(logits, chosen):
        probs = torch.softmax(row.double(), -1)
        # the tokens strictly more probable than the chosen one hold less than p of the mass
        ahead = float(probs[probs > probs[token]].sum())
        assert ahead < p + 1e-6


def test_top_p_keeps_the_smallest_set_reaching_p() -> None:
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    kept = torch.isfinite(top_p_filter(logits, 0.8))[0].tolist()
    assert kept == [True, True, False, False]
    assert torch.isfinite(top_p_filter(logits, 0.81))[0].tolist() == [True, True, True, False]
    assert torch.isfinite(top_p_filter(logits, 0.01))[0].tolist() == [True, False, False, False]


def test_sampling_follows_the_distribution_and_seed() -> None:
    logits = torch.log(torch.tensor([[0.2, 0.5, 0.3]]))
    assert sample_rows(logits, torch.tensor([0.1])).item() == 0
    assert sample_rows(logits, torch.tensor([0.69])).item() == 1
    assert sample_rows(logits, torch.tensor([0.71])).item() == 2
    g = torch.Generator().manual_seed(0)
    draws = sample_rows(logits.expand(20000, 3), torch.rand(20000, generator=g))
    freq = torch.bincount(draws, minlength=3).double() / 20000
    assert torch.allclose(freq, torch.tensor([0.2, 0.5, 0.3], dtype=torch.float64), atol=0.02)


def test_logit_adjustment_uses_the_one_smoothing_formula() -> None:
    from nbcli.counts import log_unigram

    prior = unigram_log_prior([3, 0, 1], 4, k=1.0)
    assert torch.allclose(prior.double(), torch.from_numpy(log_unigram([3, 0, 1, 0], 1.0)))
    logits = torch.zeros(1, 4)
    assert torch.allclose(logit_adjust(logits, prior, 0.5), -0.5 * prior)
    with pytest.raises(CountsError):
        unigram_log_prior([1, 2, 3], 2)


def test_parse_decoding() -> None:
    assert parse_decoding("top-p:0.9") == Decoding("top-p", 0.9)
    assert parse_decoding("top-k:50") == Decoding("top-k", 50.0)
    assert parse_decoding("sample").kind == "sample" and parse_decoding("greedy").stochastic is False
    assert parse_decoding("sample:0.7").temperature == 0.7
    assert parse_decoding("top-k:50").spec == "top-k:50"
    for bad in ("top-p:0", "top-p:1.5", "top-k:0", "top-k:x", "beam:4", "sample:-1", "greedy:1", "top-p"):
        with pytest.raises(ConfigError, match="--decoding"):
            parse_decoding(bad)
    assert math.isinf(top_k_filter(torch.tensor([[1.0, 2.0, 3.0]]), 1)[0, 0].item())
