"""The papers' pure tensor functions (nbcli.ops) against independent numpy computations on random
inputs of every float dtype."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from nbcli import array_ops, ops
from nbcli.errors import ConfigError, CountsError

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64]
# relative tolerance of one rounding to each dtype, with headroom for the fp32 compute
RTOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2, torch.float64: 1e-10}
FAST = settings(max_examples=25, deadline=None)


def matrix_from(seed: int, rows: int, cols: int, dtype: torch.dtype, scale: float = 1.0) -> torch.Tensor:
    rng = np.random.default_rng(seed)
    return torch.from_numpy(rng.normal(0.3, scale, size=(rows, cols))).to(dtype)


def np64(x: torch.Tensor) -> np.ndarray:
    return x.to(torch.float64).numpy()


def assert_close_in(dtype: torch.dtype, got: torch.Tensor, expected: np.ndarray) -> None:
    """`got` (in `dtype`) equals numpy's float64 answer rounded to `dtype`, up to one rounding."""
    assert got.dtype == dtype
    reference = torch.from_numpy(expected).to(dtype).to(torch.float64).numpy()
    scale = max(np.abs(expected).max(), 1e-30)
    np.testing.assert_allclose(np64(got), reference, rtol=RTOL[dtype], atol=RTOL[dtype] * scale)


shapes = st.tuples(st.integers(2, 30), st.integers(2, 12))


@FAST
@given(st.lists(st.integers(0, 1000), min_size=1, max_size=50), st.integers(0, 20),
       st.sampled_from([0.5, 1.0, 2.0]))
def test_unigram_log_prior_matches_hand_formula(counts: list[int], pad: int, k: float) -> None:
    vocab = len(counts) + pad
    got = ops.unigram_log_prior(np.array(counts), vocab, k)
    c = np.array(counts + [0] * pad, dtype=np.float64)
    expected = np.log((c + k) / (c.sum() + k * vocab))
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-6, atol=1e-6)
    assert got.dtype == torch.float32 and got.shape == (vocab,)
    if pad:
        floor = math.log(k / (sum(counts) + k * vocab))
        np.testing.assert_allclose(got.numpy()[len(counts):], floor, rtol=1e-6)


def test_unigram_log_prior_rejects_longer_counts() -> None:
    with pytest.raises(CountsError, match="another tokenizer"):
        ops.unigram_log_prior(np.ones(11, dtype=np.int64), 10)


def distributions(seed: int, rows: int, width: int, zeros: int) -> np.ndarray:
    """`rows` random distributions over `width` outcomes (float64), the first `zeros` outcomes of
    each row at probability 0, the rest from a Dirichlet with small and large entries."""
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.full(width, 0.3), size=rows)
    p[:, :zeros] = 0.0
    return p / p.sum(-1, keepdims=True)


@FAST
@given(st.integers(0, 10_000), st.integers(1, 6), st.integers(2, 300), st.integers(0, 1))
def test_kl_divergence_matches_scipy(seed: int, rows: int, width: int, zeros: int) -> None:
    """KL(p || q) per row against scipy.stats.entropy(p, q) (an independent implementation), for
    numpy and torch inputs in both forms: one p per q (rows of terms), and one p against many q's
    (its entropy term once); zero-probability outcomes of p count 0."""
    from scipy.stats import entropy

    p = distributions(seed, rows, width, zeros * (width // 3))
    q = distributions(seed + 1, rows, width, 0)
    expected = entropy(p, q, axis=-1)
    with np.errstate(divide="ignore"):
        log_p, log_q = np.log(p), np.log(q)
    np.testing.assert_allclose(array_ops.kl_divergence(log_p=log_p, log_q=log_q), expected, rtol=1e-9, atol=1e-12)
    got = array_ops.kl_divergence(log_p=torch.from_numpy(log_p), log_q=torch.from_numpy(log_q))
    assert got.dtype == torch.float64
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-9, atol=1e-12)
    one_p = entropy(np.broadcast_to(p[0], q.shape), q, axis=-1)              # p[0] against every q
    np.testing.assert_allclose(array_ops.kl_divergence(log_p=log_p[0], log_q=log_q), one_p, rtol=1e-9, atol=1e-12)
    many = array_ops.kl_divergence(log_p=torch.from_numpy(log_p[0]).float(), log_q=torch.from_numpy(log_q).float())
    np.testing.assert_allclose(many.double().numpy(), one_p, rtol=1e-4, atol=1e-4)
    assert many.dtype == torch.float32


def test_kl_divergence_reads_which_side_is_p() -> None:
    """The direction matters (KL is not symmetric) and the call names it: KL(p || q) with p = (1, 1e-300)
    is log(1 / q_0) to rounding; the other way round, q's second outcome is almost impossible under p,
    and the divergence is large."""
    log_p = np.log(np.array([1.0, 1e-300]))
    log_q = np.log(np.array([0.25, 0.75]))
    assert array_ops.kl_divergence(log_p=log_p, log_q=log_q) == pytest.approx(math.log(4))
    assert array_ops.kl_divergence(log_p=log_q, log_q=log_p) > 100
    with pytest.raises(TypeError):
        array_ops.kl_divergence(log_p, log_q)  # type: ignore[misc]


def test_kl_divergence_gradient_is_softmax_minus_p() -> None:
    """d KL(omega || softmax(z)) / dz = softmax(z) - omega (the unigram regulariser's gradient,
    paper 000 app. B.3), for the one-p-against-many form a training loss takes."""
    z = torch.randn(3, 5, 7, dtype=torch.float64, requires_grad=True)
    omega = torch.softmax(torch.randn(7, dtype=torch.float64), -1)
    kl = array_ops.kl_divergence(log_p=omega.log(), log_q=torch.log_softmax(z, -1))
    (grad,) = torch.autograd.grad(kl.sum(), z)
    torch.testing.assert_close(grad, torch.softmax(z, -1) - omega)


@FAST
@given(st.integers(0, 10_000), shapes, st.sampled_from(DTYPES), st.sampled_from(["fro", "spectral"]))
def test_rescale_w_matches_numpy_norms(seed: int, shape: tuple[int, int], dtype: torch.dtype, norm: str) -> None:
    w = matrix_from(seed, *shape, dtype)
    bias = matrix_from(seed + 1, 1, shape[0], dtype, scale=5.0)[0]
    got = ops.rescale_w(w, bias, norm)  # type: ignore[arg-type]
    w64, b64 = np64(w), np64(bias)
    ord_ = "fro" if norm == "fro" else 2
    expected = w64 * (np.linalg.norm(b64) / np.linalg.norm(w64, ord_))
    assert_close_in(dtype, got, expected)
    assert ops.matrix_norm(w, norm) == pytest.approx(np.linalg.norm(w64, ord_), rel=1e-9)  # type: ignore[arg-type]


@FAST
@given(st.integers(0, 10_000), shapes, st.sampled_from(DTYPES), st.floats(-1, 1), st.floats(0.01, 3))
def test_standardise_matches_paper_002_eq1_and_eq4(seed: int, shape: tuple[int, int], dtype: torch.dtype,
                                                     mean: float, std: float) -> None:
    x = matrix_from(seed, *shape, dtype, scale=4.0)
    x64 = np64(x)
    if x64.std() == 0:
        return
    explicit = ops.standardise_embeddings(x, mean, std)
    assert_close_in(dtype, explicit, (x64 - x64.mean()) * std / x64.std(ddof=1) + mean)
    xavier = ops.standardise_embeddings(x)  # eq. 1 with sigma_x = sqrt(2/(N+D))
    sigma = math.sqrt(2 / (shape[0] + shape[1]))
    assert_close_in(dtype, xavier, (x64 - x64.mean()) * sigma / x64.std(ddof=1))


def test_xavier_std_is_the_uniform_xavier_std() -> None:
    n, d = 300, 100
    bound = math.sqrt(6 / (n + d))
    samples = np.random.default_rng(0).uniform(-bound, bound, size=(200, n * d // 200))
    assert ops.xavier_std(n, d) == pytest.approx(samples.std(), rel=5e-3)


@FAST
@given(st.integers(0, 10_000), shapes, st.sampled_from(DTYPES), st.integers(0, 2**31 - 1))
def test_shuffles_are_seeded_permutations(seed: int, shape: tuple[int, int], dtype: torch.dtype, s: int) -> None:
    x = matrix_from(seed, *shape, dtype)
    rows = ops.shuffle_embeddings(x, s, "rows")
    assert torch.equal(rows, ops.shuffle_embeddings(x, s, "rows"))
    assert sorted(map(tuple, np64(rows).tolist())) == sorted(map(tuple, np64(x).tolist()))
    both = ops.shuffle_embeddings(x, s, "rows-columns")
    assert sorted(np64(both).ravel().tolist()) == sorted(np64(x).ravel().tolist())
    # column permutation keeps each row's multiset: rows-columns rows are permuted rows of x
    assert sorted(tuple(sorted(r)) for r in np64(both).tolist()) == sorted(tuple(sorted(r)) for r in np64(x).tolist())
    elements = ops.shuffle_embeddings(x, s, "elements")
    assert sorted(np64(elements).ravel().tolist()) == sorted(np64(x).ravel().tolist())
    assert rows.dtype == both.dtype == elements.dtype == dtype


def test_shuffle_seeds_differ_and_mode_checked() -> None:
    x = torch.arange(200.0).reshape(50, 4)
    assert not torch.equal(ops.shuffle_embeddings(x, 1), ops.shuffle_embeddings(x, 2))
    with pytest.raises(ConfigError):
        ops.shuffle_embeddings(x, 1, "columns")  # type: ignore[arg-type]


@FAST
@given(st.integers(0, 10_000), st.integers(1, 40), st.sampled_from(DTYPES), st.floats(-2, 2))
def test_scale_ln_bias(seed: int, d: int, dtype: torch.dtype, lam: float) -> None:
    b = matrix_from(seed, 1, d, dtype)[0]
    assert_close_in(dtype, ops.scale_ln_bias(b, lam), np64(b) * lam)


@pytest.mark.parametrize("lam", [math.nan, math.inf, -math.inf])
def test_scale_ln_bias_refuses_nonfinite(lam: float) -> None:
    with pytest.raises(ConfigError, match="finite"):
        ops.scale_ln_bias(torch.ones(3), lam)


@FAST
@given(st.integers(0, 10_000), shapes, st.sampled_from(DTYPES))
def test_remove_direction_matches_numpy(seed: int, shape: tuple[int, int], dtype: torch.dtype) -> None:
    w = matrix_from(seed, *shape, dtype)
    b = matrix_from(seed + 7, 1, shape[1], torch.float64)[0]
    got = array_ops.remove_direction(w, b)
    w64, u = np64(w), np64(b) / np.linalg.norm(np64(b))
    expected = w64 - np.outer(w64 @ u, u)
    assert_close_in(dtype, got, expected)
    if dtype in (torch.float32, torch.float64):
        assert np.abs(np64(got) @ u).max() < 1e-4 * max(1.0, np.abs(w64).max())


@FAST
@given(st.integers(0, 10_000), shapes, st.sampled_from([np.float32, np.float64]))
def test_remove_direction_on_numpy_equals_torch(seed: int, shape: tuple[int, int], dtype: type) -> None:
    """The same formula on numpy arrays (nb probe-bias's sample of cosines, without torch)."""
    w = np.random.default_rng(seed).normal(0.3, 1.0, size=shape).astype(dtype)
    b = np.random.default_rng(seed + 7).normal(size=shape[1])
    got = array_ops.remove_direction(w, b)
    assert isinstance(got, np.ndarray) and got.dtype == dtype
    np.testing.assert_allclose(got, array_ops.remove_direction(torch.from_numpy(w), torch.from_numpy(b)).numpy(),
                               rtol=1e-5, atol=1e-5 * max(1.0, float(np.abs(w).max())))
    with pytest.raises(ConfigError, match="floating-point"):
        array_ops.remove_direction(w.astype(np.int64), b)


def test_remove_zero_direction_is_an_error() -> None:
    with pytest.raises(ConfigError, match="norm 0"):
        array_ops.remove_direction(torch.ones(3, 2), torch.zeros(2))


def test_inputs_are_not_modified() -> None:
    w = torch.randn(6, 3)
    copy = w.clone()
    ops.rescale_w(w, torch.ones(6))
    ops.standardise_embeddings(w)
    array_ops.remove_direction(w, torch.ones(3))
    ops.shuffle_embeddings(w, 0)
    assert torch.equal(w, copy)


# ---------------------------------------------------------------------------------------------
# Zipfian whitening (Yokoi et al. 2024), against a dense numpy / scipy reference


def _dense_whitening(x: np.ndarray, p: np.ndarray) -> np.ndarray:
    """The formula written out densely: mu, Sigma, scipy's principal square root, a solve."""
    from scipy.linalg import sqrtm

    mu = (p[:, None] * x).sum(axis=0)
    centred = x - mu
    sigma = centred.T @ np.diag(p) @ centred
    root = np.real(sqrtm(sigma))
    return np.linalg.solve(root, centred.T).T


@FAST
@given(st.integers(0, 2**32 - 1), st.tuples(st.integers(8, 40), st.integers(1, 6)),
       st.sampled_from([0.0, 0.5, 1.0]), st.sampled_from([torch.float32, torch.float64]))
def test_zipfian_whiten_matches_dense_reference(seed: int, shape: tuple[int, int], k: float,
                                                dtype: torch.dtype) -> None:
    rows, cols = shape
    rng = np.random.default_rng(seed)
    x = matrix_from(seed, rows, cols, dtype) @ torch.from_numpy(rng.normal(size=(cols, cols))).to(dtype)
    counts = rng.zipf(1.5, size=rows).clip(max=10**6) * rng.integers(0, 2, size=rows)
    counts[:cols + 1] += 1  # enough weighted rows for a full-rank covariance
    p = array_ops.unigram_weights(counts, rows, k)
    np.testing.assert_allclose(p.sum(), 1.0, rtol=1e-12)
    mu, sigma = ops.weighted_moments(x, p)
    if np.linalg.cond(sigma.numpy()) > 1e8:
        return  # ill-conditioned draw: the reference itself is inaccurate
    got = ops.zipfian_whiten(x, p)
    assert got.dtype == dtype and got.shape == x.shape
    expected = _dense_whitening(np64(x), p)
    tol = 1e-8 if dtype == torch.float64 else 2e-4
    np.testing.assert_allclose(np64(got), expected, rtol=tol, atol=tol * max(1.0, np.abs(expected).max()))
    # the defining properties: weighted mean 0, weighted covariance I
    w = np64(got)
    np.testing.assert_allclose(p @ w, 0.0, atol=tol * 10)
    np.testing.assert_allclose(w.T @ (w * p[:, None]), np.eye(cols), atol=tol * 10)


def test_weighted_moments_by_row_blocks_match_dense(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ops, "_ROW_BLOCK", 7)
    rng = np.random.default_rng(3)
    x = rng.normal(size=(50, 4)).astype(np.float32)
    p = rng.random(50)
    p /= p.sum()
    mu, sigma = ops.weighted_moments(x, p)  # a numpy array works as the row source too
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(mu.numpy(), p @ x64, rtol=1e-12)
    np.testing.assert_allclose(sigma.numpy(), np.cov(x64.T, aweights=p, bias=True), rtol=1e-10, atol=1e-14)


def test_zipfian_whiten_rejects_bad_weights_and_singular_covariance() -> None:
    x = torch.randn(10, 3)
    with pytest.raises(ConfigError, match="weights have 9"):
        ops.zipfian_whiten(x, np.full(9, 1 / 9))
    with pytest.raises(ConfigError, match="finite, >= 0"):
        ops.zipfian_whiten(x, np.r_[np.full(9, 0.2), -0.8])
    with pytest.raises(ConfigError, match="singular"):  # only two tokens carry weight: rank 1 < 3
        ops.zipfian_whiten(x, np.r_[0.5, 0.5, np.zeros(8)])
    with pytest.raises(ConfigError, match="singular"):
        ops.zipfian_whiten(torch.cat([x[:, :2], x[:, :1]], dim=1), np.full(10, 0.1))
    with pytest.raises(ConfigError, match="floating-point"):
        ops.zipfian_whiten(torch.ones(10, 3, dtype=torch.int64), np.full(10, 0.1))


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 40), st.integers(1, 9), st.sampled_from([0.0, 1.0, 1e4]),
       st.sampled_from([1e-3, 1.0]))
def test_tensor_summary_and_embedding_stats_stay_exact_under_a_large_offset(
        seed: int, n: int, d: int, offset: float, spread: float) -> None:
    """The std of values far from zero relative to their spread (an embedding with a common offset)
    matches numpy's two-pass std: sum(x^2)/n - mean^2 would cancel to noise there."""
    x = offset + spread * np.random.default_rng(seed).standard_normal((n, d))
    summary = ops.tensor_summary(torch.from_numpy(x))
    assert summary["mean"] == pytest.approx(x.mean(), rel=1e-12, abs=1e-12)
    assert summary["std"] == pytest.approx(x.std(ddof=1) if x.size > 1 else 0.0, rel=1e-7, abs=1e-12)
    assert summary["norm"] == pytest.approx(np.linalg.norm(x), rel=1e-12)
    assert (summary["min"], summary["max"]) == (x.min(), x.max())
    if x.size > 1:
        mean, std = ops.embedding_stats(torch.from_numpy(x))
        assert (mean, std) == (pytest.approx(x.mean(), rel=1e-12, abs=1e-12), pytest.approx(x.std(ddof=1), rel=1e-7))


def test_moments_merge_across_row_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Blocks of 3 rows merged (Chan et al.'s update) give what one block gives."""
    x = 1e4 + np.random.default_rng(7).standard_normal((50, 4)) * 1e-2
    whole = ops.tensor_summary(torch.from_numpy(x))
    monkeypatch.setattr(ops, "_ROW_BLOCK", 3)
    blocked = ops.tensor_summary(torch.from_numpy(x))
    for key in ("mean", "std", "norm", "min", "max"):
        assert blocked[key] == pytest.approx(whole[key], rel=1e-9)
    assert blocked["std"] == pytest.approx(x.std(ddof=1), rel=1e-7)
