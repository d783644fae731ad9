"""nbcli.probes: every statistic against an independent computation on random inputs."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch
from hypothesis import given, strategies as st
from hypothesis.extra.numpy import arrays
from scipy import stats
from scipy.special import logsumexp, rel_entr, softmax

from nbcli import probes
from nbcli.analysis.bins import frequency_bins
from nbcli.counts import log_unigram


def brute_mean_cosine(w: np.ndarray) -> float:
    w = np.asarray(w, dtype=np.float64)
    norms = np.linalg.norm(w, axis=1)
    w = w[norms > 0] / norms[norms > 0, None]
    return float((w @ w.T).mean())


def zipf_counts(rng: np.random.Generator, v: int) -> np.ndarray:
    return rng.zipf(1.3, size=v).clip(max=10**7).astype(np.int64)


# --------------------------------------------------------------------------- correlation


@given(arrays(np.int64, st.integers(0, 60), elements=st.integers(-4, 4)))
def test_average_ranks_match_scipy(values: np.ndarray) -> None:
    np.testing.assert_array_equal(probes.average_ranks(values), stats.rankdata(values, method="average"))


@given(st.integers(3, 200), st.integers(0, 10**6))
def test_spearman_matches_scipy_with_ties(n: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 5, n)  # many ties
    y = rng.normal(size=n).round(1) + 0.3 * x
    with warnings.catch_warnings():  # a constant x (small n) is a case under test: scipy gives nan
        warnings.simplefilter("ignore", stats.ConstantInputWarning)
        expected = stats.spearmanr(x, y).statistic
    got = probes.spearman(x, y)
    if np.isnan(expected):
        assert math.isnan(got)
    else:
        assert got == pytest.approx(expected, abs=1e-12)


def test_pearson_matches_scipy_and_constant_is_nan() -> None:
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=500), rng.normal(size=500)
    assert probes.pearson(x, y) == pytest.approx(stats.pearsonr(x, y).statistic, abs=1e-12)
    assert math.isnan(probes.pearson(np.ones(10), y[:10]))
    assert math.isnan(probes.spearman(np.ones(10), y[:10]))


def test_frequency_correlation_uses_only_seen_tokens() -> None:
    rng = np.random.default_rng(1)
    counts = zipf_counts(rng, 3000)
    counts[rng.choice(3000, 700, replace=False)] = 0
    scores = rng.normal(size=3000)
    got = probes.frequency_correlation(scores, counts)
    seen = counts > 0
    assert got.tokens == int(seen.sum())
    assert got.spearman == pytest.approx(stats.spearmanr(scores[seen], counts[seen]).statistic, abs=1e-12)
    assert got.pearson_log == pytest.approx(stats.pearsonr(scores[seen], np.log(counts[seen])).statistic, abs=1e-12)


def planted_embeddings(counts: np.ndarray, d: int, noise: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """W whose projection on b is a monotone function of the count plus noise."""
    b = rng.normal(size=d)
    b_unit = b / np.linalg.norm(b)
    w = rng.normal(size=(counts.size, d))
    w -= np.outer(w @ b_unit, b_unit)  # nothing along b but the planted signal
    signal = np.log1p(counts) + noise * rng.normal(size=counts.size)
    w += np.outer(signal / np.linalg.norm(b), b_unit)
    return w.astype(np.float32), b.astype(np.float32)


def test_planted_frequency_direction_gives_rho_near_one_and_shuffled_near_zero() -> None:
    rng = np.random.default_rng(2)
    counts = zipf_counts(rng, 5000)
    w, b = planted_embeddings(counts, 64, noise=0.05, rng=rng)
    planted = probes.frequency_correlation(probes.row_projections(w, b), counts)
    assert planted.spearman > 0.95
    assert planted.pearson_log > 0.95
    shuffled = probes.frequency_correlation(probes.row_projections(w[rng.permutation(len(w))], b), counts)
    assert abs(shuffled.spearman) < 0.06
    assert abs(shuffled.pearson_log) < 0.06


def test_row_projections_in_blocks_equal_matrix_product() -> None:
    rng = np.random.default_rng(3)
    w = rng.normal(size=(1001, 17)).astype(np.float32)
    b = rng.normal(size=17).astype(np.float32)
    np.testing.assert_allclose(probes.row_projections(w, b, block_rows=64), w.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)


# --------------------------------------------------------------------------- isotropy


@pytest.mark.parametrize("block_rows", [1, 7, None])
def test_mean_cosine_equals_brute_force_matrix(block_rows: int | None) -> None:
    rng = np.random.default_rng(4)
    w = (rng.normal(size=(300, 24)) + 0.7).astype(np.float32)  # a common offset: anisotropic
    w[5] = 0.0  # a zero row has no cosine and is left out
    got = probes.mean_pairwise_cosine(w, block_rows=block_rows)
    assert got == pytest.approx(brute_mean_cosine(w), rel=1e-5)
    assert got > 0.2


@given(st.integers(2, 60), st.integers(2, 12), st.integers(0, 10**6))
def test_mean_cosine_property(n: int, d: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    w = rng.normal(size=(n, d)).astype(np.float32) + rng.normal(size=d).astype(np.float32)
    assert probes.mean_pairwise_cosine(w, block_rows=5) == pytest.approx(brute_mean_cosine(w), rel=1e-4, abs=1e-6)


def test_mean_cosine_without_direction_equals_projected_brute_force() -> None:
    rng = np.random.default_rng(5)
    b = rng.normal(size=32)
    w = rng.normal(size=(400, 32)) + 1.5 * b / np.linalg.norm(b)  # anisotropy along b
    projected = w - np.outer(w @ b, b) / (b @ b)
    got = probes.mean_pairwise_cosine(w.astype(np.float32), remove=b, block_rows=50)
    assert got == pytest.approx(brute_mean_cosine(projected), rel=1e-5)
    assert got < probes.mean_pairwise_cosine(w.astype(np.float32)) / 5  # the direction was the anisotropy


def test_remove_direction_of_zero_vector_is_an_error() -> None:
    with pytest.raises(ValueError, match="zero"):
        probes.mean_pairwise_cosine(np.ones((3, 2), dtype=np.float32), remove=np.zeros(2))


def test_sampled_cosines_are_the_upper_triangle() -> None:
    rng = np.random.default_rng(6)
    w = rng.normal(size=(40, 8)).astype(np.float32)
    got = probes.sample_pairwise_cosines(w, sample=40)
    u = w / np.linalg.norm(w, axis=1, keepdims=True)
    expected = (u @ u.T)[np.triu_indices(40, k=1)]
    np.testing.assert_allclose(np.sort(got), np.sort(expected), atol=1e-6)


def brute_partition_ratio(w: np.ndarray) -> float:
    w = np.asarray(w, dtype=np.float64)
    _, vecs = np.linalg.eigh(w.T @ w)
    candidates = np.concatenate([vecs, -vecs], axis=1)
    z = np.exp(w @ candidates).sum(axis=0)
    return float(z.min() / z.max())


@pytest.mark.parametrize("block_rows", [3, None])
def test_partition_isotropy_equals_direct_sum_of_exponentials(block_rows: int | None) -> None:
    rng = np.random.default_rng(7)
    w = (rng.normal(size=(500, 16)) * 0.5 + 0.2).astype(np.float32)
    got = probes.partition_isotropy(w, block_rows=block_rows)
    assert got.ratio == pytest.approx(brute_partition_ratio(w), rel=1e-4)
    assert got.directions == 32
    assert 0 < got.ratio < 1


def test_partition_isotropy_near_one_for_isotropic_and_small_for_shifted() -> None:
    rng = np.random.default_rng(8)
    w = rng.normal(size=(20000, 8)).astype(np.float32) * 0.1
    assert probes.partition_isotropy(w).ratio > 0.97
    assert probes.partition_isotropy(w + 3.0).ratio < 1e-3


def test_partition_isotropy_does_not_overflow_on_large_logits() -> None:
    rng = np.random.default_rng(9)
    w = (rng.normal(size=(200, 4)) * 300).astype(np.float32)  # exp(<c, w>) overflows float64
    got = probes.partition_isotropy(w, block_rows=16)
    assert math.isfinite(got.log_z_max) and 0 <= got.ratio <= 1
    _, vecs = np.linalg.eigh(w.astype(np.float64).T @ w)
    log_z = logsumexp(w.astype(np.float64) @ np.concatenate([vecs, -vecs], axis=1), axis=0)
    assert got.log_z_max == pytest.approx(log_z.max(), rel=1e-5)
    assert got.log_z_min == pytest.approx(log_z.min(), rel=1e-5)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_torch_rows_work(dtype: torch.dtype) -> None:
    rng = np.random.default_rng(10)
    w = torch.from_numpy(rng.normal(size=(300, 16)).astype(np.float32) + 0.3).to(dtype)
    exact = w.float().numpy()
    b = rng.normal(size=16).astype(np.float32)
    assert probes.mean_pairwise_cosine(w, block_rows=32) == pytest.approx(brute_mean_cosine(exact), rel=1e-5)
    np.testing.assert_allclose(probes.row_projections(w, b), exact @ b, rtol=1e-5, atol=1e-5)
    assert probes.partition_isotropy(w).ratio == pytest.approx(brute_partition_ratio(exact), rel=1e-4)


# --------------------------------------------------------------------------- output bias


def test_kl_both_ways_match_direct_computation() -> None:
    rng = np.random.default_rng(11)
    counts = zipf_counts(rng, 1000)
    counts[:50] = 0
    bias = rng.normal(size=1000) * 2
    log_u = log_unigram(counts, 1.0)
    got = probes.bias_vs_unigram(bias, log_u)
    u = (counts + 1.0) / (counts.sum() + 1000.0)
    q = softmax(bias)
    assert got.kl_unigram_to_bias == pytest.approx(rel_entr(u, q).sum(), rel=1e-10)
    assert got.kl_bias_to_unigram == pytest.approx(rel_entr(q, u).sum(), rel=1e-10)
    assert got.norm == pytest.approx(math.sqrt((bias**2).sum()))
    assert got.kl_unigram_to_bias > 0 and got.kl_bias_to_unigram > 0


def test_kl_is_zero_for_a_log_unigram_bias_and_shift_invariant() -> None:
    counts = np.array([0, 3, 9, 1, 200])
    log_u = log_unigram(counts, 1.0)
    got = probes.bias_vs_unigram(log_u + 7.5, log_u)  # softmax ignores a constant shift
    assert got.kl_unigram_to_bias == pytest.approx(0, abs=1e-12)
    assert got.kl_bias_to_unigram == pytest.approx(0, abs=1e-12)


# --------------------------------------------------------------------------- binned table


def test_frequency_bins_match_numpy_histogram_grouping() -> None:
    rng = np.random.default_rng(12)
    counts = zipf_counts(rng, 4000)
    counts[:100] = 0
    scores = rng.normal(size=4000)
    table = frequency_bins(scores, counts, bins=7)
    seen = counts > 0
    x = np.log10(counts[seen])
    n, edges = np.histogram(x, bins=7)
    assert [b.tokens for b in table] == n.tolist()
    np.testing.assert_allclose([b.log10_lo for b in table], edges[:-1])
    index = np.clip(np.digitize(x, edges[1:-1]), 0, 6)
    for i, row in enumerate(table):
        members = scores[seen][index == i]
        if members.size:
            assert row.mean == pytest.approx(members.mean())
            assert row.std == pytest.approx(members.std())
        else:
            assert math.isnan(row.mean) and math.isnan(row.std)


def test_frequency_bins_single_count_and_no_seen_tokens() -> None:
    table = frequency_bins(np.array([1.0, 3.0]), np.array([5, 5]), bins=3)
    assert [b.tokens for b in table] == [2, 0, 0]
    assert table[0].mean == 2.0 and table[0].std == 1.0
    assert frequency_bins(np.ones(3), np.zeros(3, dtype=int), bins=3) == []


def test_rows_parallel_to_the_removed_direction_are_left_out() -> None:
    rng = np.random.default_rng(13)
    b = rng.normal(size=16)
    w = rng.normal(size=(50, 16)) + b
    w[[3, 17]] = [2.5 * b, -0.5 * b]  # nothing left after removing b
    projected = w - np.outer(w @ b, b) / (b @ b)
    keep = np.ones(50, dtype=bool)
    keep[[3, 17]] = False
    got = probes.mean_pairwise_cosine(w.astype(np.float32), remove=b, block_rows=8)
    assert got == pytest.approx(brute_mean_cosine(projected[keep]), rel=1e-5)


def test_cosine_sample_draws_pairs_with_and_without_the_bias_direction() -> None:
    rng = np.random.default_rng(0)
    direction = rng.normal(size=16)
    rows = rng.normal(size=(50, 16)) + 5 * direction  # every row leans along one shared direction
    sample = probes.cosine_sample(rows, sample=30)
    assert sample.rows == 30 and sample.before.shape == (30 * 29 // 2,) and sample.after is None
    both = probes.cosine_sample(rows, remove=direction, sample=1000)
    assert both.rows == 50 and both.after is not None and both.after.shape == both.before.shape
    assert float(both.before.mean()) > 0.5 > abs(float(both.after.mean()))
