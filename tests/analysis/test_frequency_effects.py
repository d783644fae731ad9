"""Paper 003 fig. 1 and paper 000 fig. 4 (nbcli.analysis.frequency_effects) against plain numpy."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import sem as scipy_sem
from scipy.stats import spearmanr

from nbcli.analysis import frequency_effects as fx
from nbcli.analysis.frequency_effects import TokenStats
from nbcli.errors import ConfigError


def _reference_bins(x: np.ndarray, y: np.ndarray, bins: int) -> list[tuple[int, float, float]]:
    """Loop-by-loop equal-width binning: (n, mean, sem) per bin, the last bin closed; sem by scipy
    (ddof 1), NaN for a bin of one point."""
    keep = np.isfinite(x) & np.isfinite(y)
    x, y = x[keep], y[keep]
    lo, hi = x.min(), x.max()
    width = (hi - lo) / bins
    members: list[list[float]] = [[] for _ in range(bins)]
    for xi, yi in zip(x, y):
        b = bins - 1 if hi == lo else min(int((xi - lo) / width), bins - 1)
        # floating edges: put a point exactly on an edge where linspace puts it
        edges = np.linspace(lo, hi, bins + 1)
        while b + 1 < bins and xi >= edges[b + 1]:
            b += 1
        while b > 0 and xi < edges[b]:
            b -= 1
        members[0 if hi == lo else b].append(yi)
    return [(len(m), float(np.mean(m)) if m else math.nan,
             float(scipy_sem(m)) if len(m) > 1 else math.nan) for m in members]


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 80), st.integers(1, 12), st.integers(0, 2**32 - 1))
def test_equal_width_bins_match_a_loop(n: int, bins: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = np.round(rng.normal(size=n), 1)  # ties and points on edges
    y = rng.normal(size=n)
    x[rng.random(n) < 0.1] = np.nan
    got = fx.equal_width_bins(x, y, bins)
    if not np.isfinite(x).any():
        assert got == []
        return
    want = _reference_bins(x, y, bins)
    assert sum(b["tokens"] for b in got) == int(np.isfinite(x).sum())
    for g, (count, mean, sem) in zip(got, want):
        assert g["tokens"] == count
        if count > 1:
            assert g["mean"] == pytest.approx(mean, abs=1e-12) and g["sem"] == pytest.approx(sem, abs=1e-12)
        elif count == 1:  # one value: a mean, no standard error (not 0)
            assert g["mean"] == pytest.approx(mean, abs=1e-12) and g["sem"] is None
        else:
            assert g["mean"] is None and g["sem"] is None


def _stats(rng: np.random.Generator, V: int, N: int) -> tuple[TokenStats, np.ndarray, np.ndarray]:
    logits = rng.normal(size=(N, V)) * 2
    logp = logits - np.log(np.exp(logits).sum(1, keepdims=True))
    targets = rng.integers(0, V, N)
    count = np.bincount(targets, minlength=V)
    picked = logp[np.arange(N), targets]
    stats = TokenStats(N, np.exp(logp).sum(0), logp.sum(0), count, np.bincount(targets, np.exp(picked), V),
                       np.bincount(targets, picked, V))
    return stats, logp, targets


@given(st.integers(0, 2**32 - 1), st.sampled_from(fx.POSITIONS), st.sampled_from(fx.SPACES))
@settings(max_examples=40, deadline=None)
def test_per_token_probability_is_the_stated_average(seed: int, positions: str, space: str) -> None:
    rng = np.random.default_rng(seed)
    V, N = 7, 15
    stats, logp, targets = _stats(rng, V, N)
    got = fx.per_token_probability(stats, positions, space)  # type: ignore[arg-type]
    for i in range(V):
        rows = np.arange(N) if positions == "all" else np.flatnonzero(targets == i)
        if rows.size == 0:
            assert math.isnan(got[i])
            continue
        values = logp[rows, i]
        want = np.exp(values).mean() if space == "prob" else math.exp(values.mean())
        assert got[i] == pytest.approx(want, rel=1e-12)


def test_bias_effect_matches_numpy() -> None:
    rng = np.random.default_rng(3)
    V = 300
    counts = rng.zipf(1.6, V).astype(np.int64) * (rng.random(V) > 0.1)
    pw, po = rng.dirichlet(np.ones(V)), rng.dirichlet(np.ones(V))
    got = fx.bias_effect(pw, po, counts, bins=6)
    keep = counts > 0
    x = np.log10(counts[keep])
    edges = np.linspace(x.min(), x.max(), 7)
    index = np.clip(np.searchsorted(edges, x, side="right") - 1, 0, 5)
    for b, row in enumerate(got["bins"]):
        members = index == b
        assert row["tokens"] == int(members.sum())
        if not members.any():
            continue
        assert row["log10_p_with"] == pytest.approx(np.log10(pw[keep][members]).mean())
        assert row["log10_p_without_std"] == pytest.approx(np.log10(po[keep][members]).std())
        # footnote 4: the std of the probabilities themselves (population std), beside the geometric mean
        assert row["p_with_std"] == pytest.approx(pw[keep][members].std(), rel=1e-9, abs=1e-300)
        assert row["p_without_std"] == pytest.approx(np.std(po[keep][members]), rel=1e-9, abs=1e-300)
        assert row["log10_change"] == pytest.approx((np.log10(po[keep]) - np.log10(pw[keep]))[members].mean())
        assert row["log10_unigram"] == pytest.approx(np.log10(counts[keep] / counts.sum())[members].mean())
    assert got["tokens"] == int(keep.sum())
    assert got["log10_uniform"] == pytest.approx(-math.log10(V))
    rho = spearmanr(np.log10(po[keep] / pw[keep]), counts[keep]).statistic
    assert got["spearman_change_vs_count"] == pytest.approx(rho)


def test_by_frequency_matches_numpy_and_keeps_the_same_tokens_without_the_bias() -> None:
    rng = np.random.default_rng(4)
    V = 200
    x = np.log(rng.dirichlet(np.ones(V)))
    y = np.where(rng.random(V) < 0.3, np.nan, rng.normal(-5, 2, V))
    y_wo = rng.normal(-6, 2, V)
    got = fx.by_frequency(y, x, bins=5, mean_log_prob_without=y_wo)
    seen = np.isfinite(y)
    edges = np.linspace(x[seen].min(), x[seen].max(), 6)
    index = np.clip(np.searchsorted(edges, x[seen], side="right") - 1, 0, 4)
    for b, row in enumerate(got["bins"]):
        m = index == b
        assert row["tokens"] == int(m.sum())
        if m.any():
            assert row["mean_log_prob"] == pytest.approx(y[seen][m].mean())
            want = scipy_sem(y[seen][m]) if m.sum() > 1 else None
            assert row["sem"] == (None if want is None else pytest.approx(want))
            assert row["mean_log_prob_without_bias"] == pytest.approx(y_wo[seen][m].mean())
    assert got["tokens"] == int(seen.sum())


def test_bad_choices_are_config_errors() -> None:
    stats, _, _ = _stats(np.random.default_rng(0), 3, 4)
    with pytest.raises(ConfigError):
        fx.per_token_probability(stats, "some", "prob")  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        fx.equal_width_bins(np.ones(3), np.ones(3), 0)


def test_a_one_token_bin_has_no_standard_error_and_its_point_has_no_bar(tmp_path: Path) -> None:
    """Paper 000 fig. 4's bars are standard errors: one token gives a mean but no error bar (null in
    JSON, not 0); the figure draws its point without a bar."""
    pytest.importorskip("matplotlib")
    from nbcli import plots

    x = np.array([0.0, 0.1, 0.2, 5.0])  # the last bin holds one token
    y = np.array([-3.0, -2.0, -4.0, -1.0])
    got = fx.by_frequency(y, x, bins=2)
    assert got["bins"][0]["sem"] == pytest.approx(scipy_sem(y[:3]))
    assert got["bins"][1]["tokens"] == 1 and got["bins"][1]["sem"] is None
    figures = []
    real_save = plots.save_figure
    path = tmp_path / "fig4.png"
    try:
        plots.save_figure = lambda fig, p, meta, outputs, *rest: (figures.append(fig), real_save(fig, p, meta, outputs, *rest))
        plots.plot_by_frequency(path, [("run", got)], title="t", metadata={"nb.version": "test"})
    finally:
        plots.save_figure = real_save
    assert path.stat().st_size > 0
    from matplotlib.collections import LineCollection

    bars = [c for c in figures[0].axes[0].collections if isinstance(c, LineCollection)]
    segments = [seg for c in bars for seg in c.get_segments() if len(seg) and np.all(np.isfinite(seg))]
    assert len(segments) == 1  # the three-token bin's bar only
    assert segments[0][:, 1] == pytest.approx([got["bins"][0]["mean_log_prob"] - got["bins"][0]["sem"],
                                               got["bins"][0]["mean_log_prob"] + got["bins"][0]["sem"]])
