"""Frequency-weighted isotropy and Zipfian whitening (nbcli.probes, nbcli.analysis.zipfian) against
dense numpy / scipy computations on random inputs."""

from __future__ import annotations

import math

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats
from scipy.linalg import sqrtm
from scipy.special import logsumexp

from nbcli import ops, probes
from nbcli.analysis.zipfian import zipfian_section, zipfian_whitened

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


@FAST
@given(st.integers(0, 2**32 - 1), st.integers(5, 60), st.integers(2, 8), st.integers(1, 9))
def test_weighted_mean_cosine_matches_dense(seed: int, v: int, d: int, block_rows: int) -> None:
    w, _, p = random_case(seed, v, d)
    got = probes.mean_pairwise_cosine(w, block_rows=block_rows, weights=p)
    assert math.isclose(got, dense_mean_cosine(w, p), rel_tol=1e-4, abs_tol=1e-5)
    uniform = probes.mean_pairwise_cosine(w, block_rows=block_rows, weights=np.full(v, 3.0))
    assert math.isclose(uniform, probes.mean_pairwise_cosine(w), rel_tol=1e-5, abs_tol=1e-6)


@FAST
@given(st.integers(0, 2**32 - 1), st.integers(5, 60), st.integers(2, 8), st.integers(1, 9))
def test_weighted_partition_ratio_matches_dense(seed: int, v: int, d: int, block_rows: int) -> None:
    w, _, p = random_case(seed, v, d)
    w = w / np.abs(w).max()  # keep Z's exponents moderate so float32 logits stay accurate
    flat, zipf = probes.partition_isotropies_from_gram(w, probes.gram_matrix(w), [None, p], block_rows)
    assert math.isclose(flat.ratio, dense_partition_ratio(w, None), rel_tol=1e-4)
    assert math.isclose(zipf.ratio, dense_partition_ratio(w, p), rel_tol=1e-4)
    assert math.isclose(probes.partition_isotropy(w, weights=p).ratio, zipf.ratio, rel_tol=1e-6)


@FAST
@given(st.integers(0, 2**32 - 1), st.integers(12, 60), st.integers(2, 6))
def test_whitened_rows_view_equals_ops_zipfian_whiten(seed: int, v: int, d: int) -> None:
    w, _, p = random_case(seed, v, d)
    view = zipfian_whitened(w, p)
    dense = dense_whiten(w, p)
    if np.linalg.cond(dense.T @ dense) > 1e6:
        return
    np.testing.assert_allclose(view[0:v], ops.zipfian_whiten(torch.from_numpy(w), p).numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(view[3:7], dense[3:7], rtol=2e-4, atol=2e-4 * max(1, np.abs(dense).max()))


def test_zipfian_section_matches_dense_computation() -> None:
    w, counts, _ = random_case(7, 300, 6)
    b_ln = np.random.default_rng(1).normal(size=6).astype(np.float32)
    section, arrays = zipfian_section(w, counts, b_ln, smoothing_k=0.5)
    c = counts.astype(np.float64)
    p = (c + 0.5) / (c.sum() + 0.5 * c.size)
    white = dense_whiten(w, p)
    u = b_ln.astype(np.float64) / np.linalg.norm(b_ln)
    assert section["present"] and section["direction"] == "b_LN" and section["weighting"] == "unigram add-k:0.5"
    for key, matrix in (("raw", w.astype(np.float64)), ("whitened", white)):
        got = section[key]
        assert math.isclose(got["mean_cosine_uniform"], dense_mean_cosine(matrix, np.ones(300)), rel_tol=1e-4, abs_tol=1e-6)
        assert math.isclose(got["mean_cosine_unigram"], dense_mean_cosine(matrix, p), rel_tol=1e-4, abs_tol=1e-6)
        assert math.isclose(got["partition_ratio_uniform"], dense_partition_ratio(matrix, None), rel_tol=1e-3)
        assert math.isclose(got["partition_ratio_unigram"], dense_partition_ratio(matrix, p), rel_tol=1e-3)
    fd = section["frequency_direction"]

    def share(m: np.ndarray) -> float:
        return float(p @ ((m @ u) ** 2 / (m * m).sum(axis=1)))

    before, after = share(w.astype(np.float64)), share(white)
    assert math.isclose(fd["share_before"], before, rel_tol=1e-4)
    assert math.isclose(fd["share_after"], after, rel_tol=1e-3)
    assert math.isclose(fd["removed"], 1 - after / before, rel_tol=1e-3, abs_tol=1e-4)
    seen = counts > 0
    assert math.isclose(fd["spearman_before"], stats.spearmanr(w[seen] @ u, counts[seen]).statistic, abs_tol=1e-6)
    assert math.isclose(fd["spearman_after"], stats.spearmanr(white[seen] @ u, counts[seen]).statistic, abs_tol=1e-6)
    np.testing.assert_allclose(arrays["after"], white @ u, rtol=1e-3, atol=1e-4)


def test_zipfian_section_without_b_ln_uses_the_weighted_mean_and_a_singular_case_is_a_note() -> None:
    w, counts, _ = random_case(2, 80, 4)
    section, _ = zipfian_section(w, counts, np.zeros(4, dtype=np.float32))
    assert section["direction"] == "unigram-weighted mean"
    # after whitening the weighted mean is 0, so its direction carries (almost) no weighted share
    assert section["frequency_direction"]["share_after"] < section["frequency_direction"]["share_before"]
    flat = np.repeat(w[:, :1], 4, axis=1)  # rank 1: Sigma is singular
    singular, arrays = zipfian_section(flat, counts, None)
    assert not singular["present"] and "singular" in singular["note"] and arrays == {}
