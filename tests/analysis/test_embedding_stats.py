"""Paper 002 tables 2, 6, 8 (nbcli.analysis.embedding_stats) against numpy on random matrices."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from nbcli.analysis.embedding_stats import INITIALISATIONS, embedding_row, initialisations
from nbcli.errors import ConfigError


def numpy_row(x: np.ndarray) -> dict[str, float]:
    return {"min": x.min(), "max": x.max(), "mean": x.mean(), "std": x.std(ddof=1)}


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(2, 50), st.integers(1, 12), st.sampled_from([1e-3, 1.0, 300.0]))
def test_row_matches_numpy_and_scales_by_sqrt_d(seed: int, n: int, d: int, scale: float) -> None:
    x = np.random.default_rng(seed).normal(0.2, scale, size=(n, d))
    row = embedding_row("m", torch.from_numpy(x))
    for key, value in numpy_row(x).items():
        assert row[key] == pytest.approx(value, rel=1e-9, abs=1e-12 * scale)
        assert row["scaled"][key] == pytest.approx(value * math.sqrt(d), rel=1e-9, abs=1e-12 * scale)
    assert row["shape"] == [n, d]


def test_initialisations_against_numpy_formulas() -> None:
    rng = np.random.default_rng(0)
    source = rng.normal(0.5, 3.0, size=(200, 16))
    got = dict(initialisations(torch.from_numpy(source), seed=3))
    assert list(got) == list(INITIALISATIONS)
    bound = math.sqrt(6 / 216)
    xavier = got["xavier"].double().numpy()
    assert np.abs(xavier).max() <= bound and xavier.std() == pytest.approx(math.sqrt(2 / 216), rel=0.05)
    sigma_x = math.sqrt(2 / 216)
    eq1 = (source - source.mean()) * sigma_x / source.std(ddof=1)  # paper 002 eq. 1
    np.testing.assert_allclose(got["pretrained-xavier"].numpy(), eq1, rtol=1e-10, atol=1e-12)
    eq4 = (xavier - xavier.mean()) * source.std(ddof=1) / xavier.std(ddof=1) + source.mean()  # eq. 4
    np.testing.assert_allclose(got["xavier-pretrained"].double().numpy(), eq4, rtol=1e-5, atol=1e-5)
    shuffled = got["pretrained-shuffled"].numpy()
    assert sorted(map(tuple, shuffled)) == sorted(map(tuple, source))  # rows permuted
    for key, value in numpy_row(source).items():  # "Pre-trained_Shuffled had identical distribution"
        assert embedding_row("s", got["pretrained-shuffled"])[key] == pytest.approx(value, rel=1e-12)


def test_bad_inputs() -> None:
    with pytest.raises(ConfigError, match="unknown initialisation 'glove'"):
        initialisations(torch.zeros(3, 2), which=("glove",))
    with pytest.raises(ConfigError, match="non-empty"):
        embedding_row("e", torch.zeros(0, 4))
    with pytest.raises(ConfigError, match="NaN"):
        embedding_row("e", torch.tensor([[1.0, float("nan")]]))
