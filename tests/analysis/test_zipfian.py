"""Frequency-weighted isotropy, Zipfian whitening and Yokoi et al.'s symmetry scores
(nbcli.analysis.zipfian, nbcli.analysis.geometry) against dense numpy / scipy computations, a
transcription of the authors' code, and nb's previous one-measure-per-pass implementation, on random
inputs."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats
from scipy.linalg import sqrtm
from scipy.special import logsumexp

from nbcli import array_ops, ops, probes
from nbcli.analysis import zipfian
from nbcli.analysis.probe_precision import tolerance_of
from nbcli.errors import ConfigError
from nbcli.reports.probe_bias import ProbeInputs, build_report

FAST = settings(max_examples=20, deadline=None)


def random_case(seed: int, v: int, d: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    w = (rng.normal(0.2, 1.0, size=(v, d)) @ rng.normal(size=(d, d))).astype(np.float32)
    counts = rng.zipf(1.4, size=v).clip(max=10**5)
    counts[rng.choice(v, v // 5, replace=False)] = 0
    p = rng.random(v)
    return w, counts, p / p.sum()


def dense_mean_cosine(w: np.ndarray, p: np.ndarray) -> float:
    x = w.astype(np.float64)
    u = x / np.linalg.norm(x, axis=1, keepdims=True)
    return float(p @ (u @ u.T) @ p / p.sum() ** 2)


def dense_partition_ratio(w: np.ndarray, p: np.ndarray | None) -> float:
    x = w.astype(np.float64)
    _, vectors = np.linalg.eigh(x.T @ x)
    c = np.concatenate([vectors, -vectors], axis=1)
    log_z = logsumexp(x @ c, axis=0, b=None if p is None else p[:, None])
    return math.exp(log_z.min() - log_z.max())


def dense_whiten(w: np.ndarray, p: np.ndarray) -> np.ndarray:
    x = w.astype(np.float64)
    mu = p @ x
    sigma = (x - mu).T @ np.diag(p) @ (x - mu)
    return np.linalg.solve(np.real(sqrtm(sigma)), (x - mu).T).T


def dense_symmetry(w: np.ndarray, p: np.ndarray) -> tuple[float, float]:
    """Yokoi et al.'s scores from their definitions, in numpy: 1 - ||E_p w|| / E_p ||w|| and the
    entropy of the p-weighted covariance spectrum over log d."""
    x = w.astype(np.float64)
    q = p / p.sum()
    mu = q @ x
    lam = np.clip(np.linalg.eigvalsh((x - mu).T @ ((x - mu) * q[:, None])), 0, None)
    share = lam[lam > 0] / lam.sum()
    return 1 - np.linalg.norm(mu) / (q @ np.linalg.norm(x, axis=1)), float(-(share * np.log(share)).sum() / np.log(x.shape[1]))


def authors_scores(W: torch.Tensor, p: torch.Tensor | None) -> tuple[float, float]:
    """A transcription of calc_zipfian_isotropy_score / calc_uniform_isotropy_score (Yokoi et al.,
    src/calc_isotropy_score.py of their repository), float64."""
    if p is None:
        mu = torch.mean(W, dim=0)
        l_ = torch.mean(torch.linalg.norm(W, dim=1))
        Wp = W - mu
    else:
        mu = p @ W
        l_ = p @ torch.linalg.norm(W, dim=1)
        Wp = (W - mu) * torch.sqrt(p[:, None])
    sym1 = torch.linalg.norm(mu) / l_
    S = torch.linalg.svd(Wp, full_matrices=False)[1]
    lambda_ = S ** 2
    d = torch.tensor(W.shape[1], dtype=W.dtype)
    sym2 = (lambda_ / lambda_.sum()) @ torch.log(lambda_ / lambda_.sum()) / (-torch.log(d))
    return float(1 - sym1), float(sym2)


def zipf_report(w: np.ndarray, counts: np.ndarray, b_ln: np.ndarray | None, k: float = 0.0,
                partition: bool = True) -> dict[str, Any]:
    inputs = ProbeInputs(counts=counts, output_weight=w, final_ln_bias=b_ln)
    report = build_report(inputs, zipfian_k=k, partition=partition, device="cpu")
    return {**report["zipfian"], "_isotropy": report["isotropy"], "_arrays": report["_arrays"].get("zipfian")}


# ---------------------------------------------------------------------------------------------
# Yokoi et al.'s scores


@FAST
@given(st.integers(0, 2**32 - 1), st.integers(5, 60), st.integers(2, 8), st.booleans())
def test_symmetry_scores_match_numpy_and_the_authors_code(seed: int, v: int, d: int, uniform: bool) -> None:
    w, _, p = random_case(seed, v, d)
    q = np.full(v, 1.0 / v) if uniform else p
    got = zipfian.symmetry_scores(torch.from_numpy(w), None if uniform else torch.from_numpy(p))
    want = dense_symmetry(w, q)
    authors = authors_scores(torch.from_numpy(w).double(), None if uniform else torch.from_numpy(p))
    for g, n, a in zip(got, want, authors):
        assert g == pytest.approx(n, rel=1e-9, abs=1e-12)
        if math.isnan(a):  # their code: 0 * log 0 for an exactly zero eigenvalue (here 0 log 0 = 0)
            assert v <= d  # centred rows of rank < d
        else:
            assert g == pytest.approx(a, rel=1e-7, abs=1e-9)
        assert 0.0 <= g <= 1.0 + 1e-12


def test_symmetry_scores_are_one_for_symmetric_rows_and_low_for_a_shifted_line() -> None:
    d = 6
    cross = np.concatenate([np.eye(d), -np.eye(d)]).astype(np.float32)  # centred and isotropic
    assert zipfian.symmetry_scores(torch.from_numpy(cross)) == pytest.approx((1.0, 1.0))
    line = np.outer(np.arange(1, 9), np.ones(d)).astype(np.float32)  # one direction, far from 0
    sym1, sym2 = zipfian.symmetry_scores(torch.from_numpy(line))
    assert sym1 == pytest.approx(0.0, abs=1e-12) and sym2 == pytest.approx(0.0, abs=1e-12)
    assert math.isnan(zipfian.second_moment_symmetry(torch.zeros(4)))
    assert math.isnan(zipfian.first_moment_symmetry(torch.zeros(3), 0.0))


def test_zipfian_weights_option() -> None:
    assert zipfian.parse_zipfian_weights("raw") == 0.0
    assert zipfian.parse_zipfian_weights("add-k:0.5") == 0.5
    assert zipfian.weighting_label(0.0) == "raw" and zipfian.weighting_label(1.0) == "add-k:1"
    for bad in ("raw:1", "add-k:-1", "k:1", "add-k:x"):
        with pytest.raises(ConfigError, match="--zipfian-weights"):
            zipfian.parse_zipfian_weights(bad)
    counts = np.array([3, 0, 1, 0])
    weights, note = zipfian.zipfian_weights(counts, 6, 0.0)
    assert note is None and weights is not None
    np.testing.assert_allclose(weights, [0.75, 0, 0.25, 0, 0, 0])  # raw: unseen and padding rows weigh 0
    assert zipfian.zipfian_weights(np.zeros(4, dtype=np.int64), 4, 0.0)[0] is None


# ---------------------------------------------------------------------------------------------
# The section against dense computations


def test_weighted_partition_ratio_matches_dense() -> None:
    w, _, p = random_case(3, 50, 5)
    w = w / np.abs(w).max()  # keep Z's exponents moderate so float32 logits stay accurate
    flat, zipf = probes.partition_isotropies_from_gram(w, probes.gram_matrix(w), [None, p], 7)
    assert math.isclose(flat.ratio, dense_partition_ratio(w, None), rel_tol=1e-4)
    assert math.isclose(zipf.ratio, dense_partition_ratio(w, p), rel_tol=1e-4)
    assert math.isclose(probes.partition_isotropy(w, weights=p).ratio, zipf.ratio, rel_tol=1e-6)


@FAST
@given(st.integers(0, 2**32 - 1), st.integers(30, 120), st.integers(2, 6), st.sampled_from([0.0, 0.5]))
def test_zipfian_section_matches_dense_computation(seed: int, v: int, d: int, k: float) -> None:
    w, counts, _ = random_case(seed, v, d)
    w = w / np.abs(w).max()
    b_ln = np.random.default_rng(seed + 1).normal(size=d).astype(np.float32)
    c = counts.astype(np.float64)
    p = (c + k) / (c.sum() + k * c.size)
    if (p > 0).sum() <= 2 * d or np.linalg.cond((w * p[:, None]).T @ w) > 1e5:
        return  # too few weighted rows for a well-conditioned Sigma
    section = zipf_report(w, counts, b_ln, k)
    white = dense_whiten(w, p)
    u = b_ln.astype(np.float64) / np.linalg.norm(b_ln)
    assert section["present"] and section["direction"] == "b_LN" and section["weighting"] == zipfian.weighting_label(k)
    for key, matrix in (("raw", w.astype(np.float64)), ("whitened", white)):
        got = section[key]
        assert math.isclose(got["mean_cosine_uniform"], dense_mean_cosine(matrix, np.ones(v)), rel_tol=1e-4, abs_tol=1e-6)
        assert math.isclose(got["mean_cosine_unigram"], dense_mean_cosine(matrix, p), rel_tol=1e-4, abs_tol=1e-6)
        assert math.isclose(got["partition_ratio_uniform"], dense_partition_ratio(matrix, None), rel_tol=1e-3)
        assert math.isclose(got["partition_ratio_unigram"], dense_partition_ratio(matrix, p), rel_tol=1e-3)
        for weighting, q in (("uniform", np.full(v, 1.0 / v)), ("unigram", p)):
            sym1, sym2 = dense_symmetry(matrix, q)
            kind, tol = tolerance_of(f"zipfian.{key}.sym1_{weighting}")  # the documented tolerance (issue 44)
            assert got[f"sym1_{weighting}"] == pytest.approx(sym1, **{kind: tol}), (key, weighting)
            # float32 Gram products (issue 44): the documented tolerance against float64
            kind, tol = tolerance_of(f"zipfian.{key}.sym2_{weighting}")
            assert got[f"sym2_{weighting}"] == pytest.approx(sym2, **{kind: tol}), (key, weighting)
    assert section["whitened"]["sym1_unigram"] == pytest.approx(1.0, abs=1e-5)  # whitening centres and
    assert section["whitened"]["sym2_unigram"] == pytest.approx(1.0, abs=1e-9)  # makes Sigma = I
    fd = section["frequency_direction"]

    def share(m: np.ndarray) -> float:
        return float(p @ ((m @ u) ** 2 / (m * m).sum(axis=1)))

    before, after = share(w.astype(np.float64)), share(white)
    assert math.isclose(fd["share_before"], before, rel_tol=1e-4)
    assert math.isclose(fd["share_after"], after, rel_tol=1e-3, abs_tol=1e-7)
    seen = counts > 0
    assert math.isclose(fd["spearman_before"], stats.spearmanr(w[seen] @ u, counts[seen]).statistic, abs_tol=1e-6)
    assert math.isclose(fd["spearman_after"], stats.spearmanr(white[seen] @ u, counts[seen]).statistic, abs_tol=1e-4)
    np.testing.assert_allclose(section["_arrays"]["after"], white @ u, rtol=1e-3, atol=1e-4)
    assert section["_isotropy"]["partition_ratio"] == section["raw"]["partition_ratio_uniform"]


def _previous_section(w: np.ndarray, counts: np.ndarray, b_ln: np.ndarray, k: float) -> dict[str, Any]:
    """nb's previous implementation, one measure per pass: the whitened matrix (ops.zipfian_whiten),
    then mean cosines and partition ratios of W and of it by the probes functions."""
    p = array_ops.unigram_weights(counts, w.shape[0], k)
    white = ops.zipfian_whiten(torch.from_numpy(w), p).numpy()
    out: dict[str, Any] = {}
    for key, m in (("raw", w), ("whitened", white)):
        flat, zipf = probes.partition_isotropies_from_gram(m, probes.gram_matrix(m), [None, p])
        out[key] = {"mean_cosine_uniform": probes.mean_pairwise_cosine(m),
                    "mean_cosine_unigram": probes.mean_pairwise_cosine(m, weights=p),
                    "partition_ratio_uniform": flat.ratio, "partition_ratio_unigram": zipf.ratio}
    unit = b_ln / np.linalg.norm(b_ln)
    before, after = (probes.row_projections(m, unit) for m in (w, white))
    out["spearman"] = (probes.frequency_correlation(before, counts).spearman,
                       probes.frequency_correlation(after, counts).spearman)
    return out


@pytest.mark.parametrize("k", [1.0, 0.0])
def test_two_pass_section_equals_the_previous_one_measure_per_pass(k: float) -> None:
    w, counts, _ = random_case(11, 400, 8)
    w = w / np.abs(w).max()
    b_ln = np.random.default_rng(5).normal(size=8).astype(np.float32)
    new, old = zipf_report(w, counts, b_ln, k), _previous_section(w, counts, b_ln, k)
    for key in ("raw", "whitened"):
        for name, value in old[key].items():
            assert new[key][name] == pytest.approx(value, rel=1e-4, abs=1e-7), (key, name)
    fd = new["frequency_direction"]
    assert (fd["spearman_before"], fd["spearman_after"]) == pytest.approx(old["spearman"], abs=1e-6)


def test_without_partition_the_other_measures_are_unchanged() -> None:
    w, counts, _ = random_case(4, 200, 5)
    b_ln = np.ones(5, dtype=np.float32)
    full, quick = zipf_report(w, counts, b_ln), zipf_report(w, counts, b_ln, partition=False)
    assert quick["raw"]["partition_ratio_unigram"] is None and quick["whitened"]["partition_ratio_uniform"] is None
    for key in ("raw", "whitened"):
        for name in ("mean_cosine_unigram", "sym1_unigram", "sym2_uniform"):
            assert quick[key][name] == pytest.approx(full[key][name], rel=1e-5, abs=1e-8)
    assert quick["frequency_direction"]["share_after"] == pytest.approx(full["frequency_direction"]["share_after"],
                                                                       rel=1e-5, abs=1e-9)


def test_without_b_ln_the_weighted_mean_is_the_direction_and_singular_cases_are_notes() -> None:
    w, counts, _ = random_case(2, 80, 4)
    section = zipf_report(w, counts, np.zeros(4, dtype=np.float32), k=1.0)
    assert section["direction"] == "unigram-weighted mean"
    # after whitening the weighted mean is 0, so its direction carries (almost) no weighted share
    assert section["frequency_direction"]["share_after"] < section["frequency_direction"]["share_before"]
    flat = np.repeat(w[:, :1], 4, axis=1)  # rank 1: Sigma is singular
    singular = zipf_report(flat, counts, None)
    assert not singular["present"] and "singular" in singular["note"] and singular["_arrays"] is None
    few = np.zeros(80, dtype=np.int64)
    few[:2] = 5  # raw weights on 2 tokens in 4 dimensions: singular too
    assert "singular" in zipf_report(w, few, None)["note"]
    none = zipf_report(w, np.zeros(80, dtype=np.int64), None)  # raw weights of no token at all
    assert not none["present"] and "all zero" in none["note"] and none["weighting"] == "raw"
