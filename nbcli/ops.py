"""The papers' operations on weights as pure functions: a tensor in, a tensor out.

The file to read beside nanoGPT's model.py: every formula nb applies to a checkpoint (`nb
patch-checkpoint`), to a model in memory (`nb eval`, `nb generate`) or at initialisation (`nb train`)
is one function here, named after what it computes. They never modify their argument; a result has
the input's dtype and is computed in float32 (float64 for float64 input); statistics (norms, means,
standard deviations) are accumulated in float64 over row blocks, so no full-size copy is made.

    unigram_log_prior(counts, V, k)        paper 000 sec. 3      b = log p(y), add-k smoothed, padded to V
    kl_divergence(log_p=, log_q=)          paper 000 fig. 1      KL(p || q) = sum_i p_i (log p_i - log q_i)
    matrix_norm(w, norm)                   paper 000 sec. 4.1    ||W||_F or ||W||_2 (largest singular value)
    rescale_to_norm(w, target, norm)       paper 000 sec. 4.1    W * target / ||W||
    rescale_w(w, b, norm)                  paper 000 sec. 4.1    ||W|| = ||b||_2
    embedding_stats(x)                     paper 002 eq. 1       (mean, sample std) over all entries
    xavier_std(n, d)                       paper 002 sec. 3.1    sqrt(2 / (N + D))
    xavier_uniform(n, d, seed)             paper 002 sec. 3.1    U(-sqrt(6 / (N + D)), +sqrt(6 / (N + D)))
    standardise_embeddings(x, mean, std)   paper 002 eq. 1, 4    (x - mean(X)) * sigma_t / sigma(X) + mean_t
    shuffle_embeddings(x, seed, mode)      paper 002 sec. 3.4    Pre-trained_Shuffled
    scale_ln_bias(b, lam)                  paper 003 sec. 3.3    b_LN <- lam * b_LN
    remove_direction(w, u)                 paper 003 sec. 3.2    w_i <- w_i - <w_i, u> u, u = b_LN / ||b_LN||
    unigram_weights(counts, V, k)          Yokoi et al. 2024     p(w), add-k smoothed, padded to V, float64
    weighted_moments(x, p)                 Yokoi et al. 2024     mu = sum p v, Sigma = sum p (v - mu)(v - mu)^T
    inverse_sqrt(sigma)                    Yokoi et al. 2024     Sigma^(-1/2), symmetric (ZCA)
    zipfian_whiten(x, p)                   Yokoi et al. 2024     v' = Sigma^(-1/2) (v - mu)
    tensor_summary(x)                      norm, mean, std, min, max (what patch-checkpoint reports)
    sinusoidal_positions(positions, d)     paper 002 eq. 2     P[i, 2k] = sin(i / 10000^(2k/D)), P[i, 2k+1] = cos(...)

kl_divergence, remove_direction and unigram_weights live in `nbcli.array_ops` (with the inverse root
from an eigendecomposition): they take numpy arrays as well as tensors and need no torch, so `nb
probe-bias` runs them without importing it. The smoothing formula itself is
`nbcli.counts.log_unigram` (one place); `nbcli.surgery` composes
these functions into a plan over a checkpoint's tensors and writes the result.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch

from nbcli.counts import log_unigram, pad_counts
from nbcli.errors import ConfigError
from nbcli.array_ops import inverse_sqrt_from_eigh

Norm = Literal["fro", "spectral"]
#: what --rescale-w takes: a Norm, or "none" (W as it is: what turns off a preset's or recipe arm's rescaling)
RescaleChoice = Literal["fro", "spectral", "none"]
ShuffleMode = Literal["rows", "rows-columns", "elements"]
_ROW_BLOCK = 1 << 14


def rescale_norm(choice: str | None) -> Norm | None:
    """The Norm W is rescaled to (paper 000 sec. 4.1) for a --rescale-w choice; None for "none" or nothing."""
    return None if choice in (None, "none") else choice  # type: ignore[return-value]


def _work_dtype(x: torch.Tensor) -> torch.dtype:
    if not x.is_floating_point():
        raise ConfigError(f"expected a floating-point tensor, got {x.dtype}")
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def unigram_log_prior(counts: np.ndarray, vocab_size: int, k: float = 1.0) -> torch.Tensor:
    """Output bias b = log p(y), the add-k smoothed log-unigram distribution (paper 000, sec. 3), as
    float32 [vocab_size]: the one counts -> log-prior step (bias init, logit adjustment, the
    unigram of the KL to the model's predictions).

    Counts shorter than the model's vocabulary (padded vocabularies, e.g. 50257 vs 50304) are
    padded with zero counts (`nbcli.counts.pad_counts`), so padding rows get the smoothed floor
    log(k / (N + k V_model)) and the distribution is normalised over the model's vocabulary. Longer
    counts are an error. The smoothing formula is `nbcli.counts.log_unigram`, the one place it lives.
    """
    return torch.from_numpy(log_unigram(pad_counts(counts, vocab_size), k).astype(np.float32))


def matrix_norm(w: torch.Tensor, norm: Norm = "fro") -> float:
    """||W||_F (sqrt of the sum of squares) or ||W||_2 (largest singular value), in float64.

    The spectral norm is sqrt(largest eigenvalue of W^T W), with W^T W accumulated in float64 in row
    blocks: O(V d^2) time and O(d^2) extra memory, never a copy of W.
    """
    if w.ndim != 2:
        raise ConfigError(f"expected a matrix, got shape {list(w.shape)}")
    if norm == "fro":
        total = 0.0
        for start in range(0, w.shape[0], _ROW_BLOCK):
            block = w[start:start + _ROW_BLOCK].to(torch.float64)
            total += float((block * block).sum())
        return math.sqrt(total)
    if norm == "spectral":
        gram = torch.zeros(w.shape[1], w.shape[1], dtype=torch.float64)
        for start in range(0, w.shape[0], _ROW_BLOCK):
            block = w[start:start + _ROW_BLOCK].to(torch.float64)
            gram += block.T @ block
        return math.sqrt(max(float(torch.linalg.eigvalsh(gram)[-1]), 0.0))
    raise ConfigError(f"unknown matrix norm {norm!r}: expected fro or spectral")


def rescale_to_norm(w: torch.Tensor, target_norm: float, norm: Norm = "fro") -> torch.Tensor:
    """W * target / ||W|| so that the chosen matrix norm of the result equals `target_norm`."""
    current = matrix_norm(w, norm)
    if current == 0 or not math.isfinite(current):
        raise ConfigError(f"cannot rescale a matrix whose {norm} norm is {current}")
    if not math.isfinite(target_norm) or target_norm < 0:
        raise ConfigError(f"target norm must be a finite number >= 0, got {target_norm}")
    return (w.to(_work_dtype(w)) * (target_norm / current)).to(w.dtype)


def rescale_w(w: torch.Tensor, bias: torch.Tensor, norm: Norm = "fro") -> torch.Tensor:
    """Paper 000 sec. 4.1: scale the output projection W so that its matrix norm equals the bias's
    l2 norm. The paper says "matrix l2 norm"; nb's default is Frobenius (the l2 norm of the entries,
    what `W.norm()` gives, like for like with the bias vector's l2 norm); `spectral` is the induced
    2-norm."""
    target = math.sqrt(float((bias.to(torch.float64) ** 2).sum()))
    return rescale_to_norm(w, target, norm)


def embedding_stats(x: torch.Tensor) -> tuple[float, float]:
    """Mean and sample standard deviation (ddof = 1) over all entries, float64 in row blocks
    (paper 002 eq. 1: "the mean of the values in X_p", "(sample) standard deviations")."""
    n = x.numel()
    if n < 2:
        raise ConfigError(f"standardising needs at least two values, the tensor has {n} ({list(x.shape)})")
    moments = _moments(x)
    return moments.mean, math.sqrt(moments.m2 / (n - 1))


def xavier_std(n: int, d: int) -> float:
    """Standard deviation of uniform Xavier init U(-sqrt(6/(N+D)), sqrt(6/(N+D))) for an N x D
    matrix: sqrt(2/(N+D)) (paper 002 sec. 3.1; Glorot and Bengio, 2010)."""
    if n + d <= 0:
        raise ConfigError("xavier_std needs a non-empty matrix")
    return math.sqrt(2.0 / (n + d))


def xavier_uniform(n: int, d: int, seed: int) -> torch.Tensor:
    """An N x D float32 draw from Xavier's uniform U(-sqrt(6/(N+D)), sqrt(6/(N+D))) (paper 002 sec.
    3.1; Glorot and Bengio, 2010) with a seeded torch.Generator (same seed, same matrix)."""
    if n <= 0 or d <= 0:
        raise ConfigError(f"xavier_uniform needs a non-empty matrix, got {n} x {d}")
    bound = math.sqrt(6.0 / (n + d))
    generator = torch.Generator().manual_seed(int(seed))
    return (torch.rand(n, d, generator=generator) * 2 - 1) * bound


def standardise_embeddings(x: torch.Tensor, target_mean: float = 0.0, target_std: float | None = None,
                           ) -> torch.Tensor:
    """x* = (x - mean(X)) * sigma_target / sigma(X) + mean_target.

    Paper 002 eq. 1 (Pre-trained_Xavier: target mean 0, sigma = Xavier's sqrt(2/(N+D)), the default
    here when `target_std` is None) and eq. 4 (match another matrix's mean and std)."""
    if target_std is None:
        if x.ndim != 2:
            raise ConfigError(f"xavier standardisation needs a matrix, got shape {list(x.shape)}")
        target_std = xavier_std(x.shape[0], x.shape[1])
    if not (math.isfinite(target_mean) and math.isfinite(target_std)) or target_std < 0:
        raise ConfigError(f"target mean/std must be finite (std >= 0), got {target_mean}, {target_std}")
    mean, std = embedding_stats(x)
    if std == 0:
        raise ConfigError("cannot standardise a tensor whose values are all equal (std 0)")
    work = x.to(_work_dtype(x))
    return ((work - mean) * (target_std / std) + target_mean).to(x.dtype)


def shuffle_embeddings(x: torch.Tensor, seed: int, mode: ShuffleMode = "rows") -> torch.Tensor:
    """Paper 002 sec. 3.4 Pre-trained_Shuffled, with a seeded torch.Generator (same seed, same result).

    rows: permute the rows (each token gets another token's vector: word-to-vector relation gone,
    every statistic of the matrix kept). rows-columns: also permute the columns, as the paper's text
    says ("the rows and columns of X_p are randomly shuffled"). elements: permute all entries
    (the paper's finding 3 wording, "shuffling the elements"); destroys the vectors' geometry too.
    """
    if x.ndim != 2:
        raise ConfigError(f"shuffling needs a matrix, got shape {list(x.shape)}")
    generator = torch.Generator().manual_seed(int(seed))
    if mode == "rows":
        return x[torch.randperm(x.shape[0], generator=generator)].clone()
    if mode == "rows-columns":
        rows = torch.randperm(x.shape[0], generator=generator)
        cols = torch.randperm(x.shape[1], generator=generator)
        return x[rows][:, cols].clone()
    if mode == "elements":
        flat = x.reshape(-1)
        return flat[torch.randperm(flat.numel(), generator=generator)].reshape(x.shape).clone()
    raise ConfigError(f"unknown shuffle mode {mode!r}: expected rows, rows-columns or elements")


def scale_ln_bias(b: torch.Tensor, lam: float) -> torch.Tensor:
    """Paper 003 sec. 3.3: b_LN <- lam * b_LN (lam in [0, 1] in the paper; any finite value here)."""
    if not isinstance(lam, (int, float)) or not math.isfinite(lam):
        raise ConfigError(f"lambda must be a finite number, got {lam!r}")
    return (b.to(_work_dtype(b)) * lam).to(b.dtype)


@dataclass(frozen=True)
class _Moments:
    mean: float
    m2: float  # sum of squared deviations from the mean
    squares: float  # sum of squares (the l2 norm squared)
    lo: float
    hi: float


def _moments(x: torch.Tensor) -> _Moments:
    """Mean, sum of squared deviations, sum of squares, min and max of all entries in one pass of
    float64 row blocks, the blocks merged by Chan et al.'s update (stable when the mean is large
    against the spread, where sum(x^2)/n - mean^2 cancels)."""
    flat = x.reshape(x.shape[0], -1) if x.ndim > 1 else x.reshape(-1, 1)
    count, mean, m2, squares, lo, hi = 0, 0.0, 0.0, 0.0, math.inf, -math.inf
    for start in range(0, flat.shape[0], _ROW_BLOCK):
        block = flat[start:start + _ROW_BLOCK].to(torch.float64)
        size = block.numel()
        if size == 0:
            continue
        block_mean = float(block.mean())
        block_m2 = float(((block - block_mean) ** 2).sum())
        delta, total = block_mean - mean, count + size
        mean += delta * size / total
        m2 += block_m2 + delta * delta * count * size / total
        count = total
        squares += float((block * block).sum())
        lo, hi = min(lo, float(block.min())), max(hi, float(block.max()))
    return _Moments(mean, m2, squares, lo, hi)


def tensor_summary(x: torch.Tensor) -> dict[str, float]:
    """l2 norm (Frobenius for matrices), mean, sample std (ddof 1), min, max; float64, row blocks."""
    n = x.numel()
    if n == 0:
        return {"norm": 0.0, "mean": math.nan, "std": math.nan, "min": math.nan, "max": math.nan}
    m = _moments(x)
    std = math.sqrt(m.m2 / (n - 1)) if n > 1 else 0.0
    return {"norm": math.sqrt(m.squares), "mean": m.mean, "std": std, "min": m.lo, "max": m.hi}


def weighted_moments(x: Any, p: np.ndarray | torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(mu, Sigma) in float64 (Zipfian whitening, Yokoi et al. 2024, eq. for the p-weighted moments):
    mu = sum_w p(w) v_w and Sigma = sum_w p(w) (v_w - mu)(v_w - mu)^T over the rows v_w of `x`.

    `x` is anything with `.shape` [V, d] and row slicing (a tensor, a numpy array, a lazy checkpoint
    tensor); two passes over row blocks (the mean, then the centred second moment: no cancellation),
    never a V x d float64 copy. `p` must be finite, >= 0 and sum to a positive number; it is used as
    given (normalise it first: `unigram_weights` does)."""
    n, d = (int(s) for s in x.shape)
    weights = torch.as_tensor(np.asarray(p, dtype=np.float64) if not isinstance(p, torch.Tensor) else p,
                              dtype=torch.float64).reshape(-1)
    if weights.shape[0] != n:
        raise ConfigError(f"weights have {weights.shape[0]} entries but the matrix has {n} rows")
    if not bool(torch.isfinite(weights).all()) or bool((weights < 0).any()) or float(weights.sum()) <= 0:
        raise ConfigError("weights must be finite, >= 0 and not all zero")

    def block(start: int) -> torch.Tensor:
        rows = x[start:start + _ROW_BLOCK]
        if not isinstance(rows, torch.Tensor):
            rows = torch.from_numpy(np.asarray(rows))
        return rows.to(torch.float64)

    mu = torch.zeros(d, dtype=torch.float64)
    for start in range(0, n, _ROW_BLOCK):
        mu += weights[start:start + _ROW_BLOCK] @ block(start)
    sigma = torch.zeros(d, d, dtype=torch.float64)
    for start in range(0, n, _ROW_BLOCK):
        centred = block(start) - mu
        sigma += centred.T @ (centred * weights[start:start + _ROW_BLOCK, None])
    return mu, sigma


def inverse_sqrt(sigma: torch.Tensor) -> torch.Tensor:
    """Sigma^(-1/2) = U diag(lambda^(-1/2)) U^T of a symmetric positive definite matrix, float64:
    the symmetric (ZCA) root, so whitened coordinates stay on the original axes. A covariance with
    an eigenvalue <= lambda_max * d * 2^-52 (numerically singular, e.g. fewer weighted rows than
    dimensions) is an error: whitening is undefined."""
    s = sigma.to(torch.float64)
    if s.ndim != 2 or s.shape[0] != s.shape[1] or not bool(torch.isfinite(s).all()):
        raise ConfigError(f"expected a finite square matrix, got shape {list(s.shape)}")
    values, vectors = torch.linalg.eigh((s + s.T) / 2)
    return inverse_sqrt_from_eigh(values, vectors)


def zipfian_whiten(x: torch.Tensor, p: np.ndarray | torch.Tensor) -> torch.Tensor:
    """Zipfian whitening (Yokoi et al. 2024): v' = Sigma^(-1/2) (v - mu) for every row v of `x`, with
    mu, Sigma the p-weighted mean and covariance (`weighted_moments`) and the symmetric inverse root
    (`inverse_sqrt`). Afterwards sum_w p(w) v'_w = 0 and sum_w p(w) v'_w v'_w^T = I. The transform
    is computed in float64; the result has the input's dtype."""
    if x.ndim != 2:
        raise ConfigError(f"whitening needs a [V, d] matrix, got shape {list(x.shape)}")
    _work_dtype(x)
    mu, sigma = weighted_moments(x, p)
    root = inverse_sqrt(sigma)
    out = torch.empty(x.shape, dtype=x.dtype)
    for start in range(0, x.shape[0], _ROW_BLOCK):
        out[start:start + _ROW_BLOCK] = ((x[start:start + _ROW_BLOCK].to(torch.float64) - mu) @ root).to(x.dtype)
    return out


def sinusoidal_positions(positions: torch.Tensor, d: int) -> torch.Tensor:
    """The sinusoidal positional encodings P[p] of the given positions, float32 [len(positions), d]
    (paper 002 app. A.1 eq. 2; Vaswani et al. 2017 sec. 3.5): P[p, 2k] = sin(p / 10000^(2k/d)) and
    P[p, 2k+1] = cos(p / 10000^(2k/d)).

    Eq. 2 as printed divides by 10000^(j/D) for the odd columns too; nb follows Vaswani's 2k/d (the
    PyTorch transformer tutorial's PositionalEncoding, which the paper's table 6 matches: its "Pos.
    Encoding" mean 0.131 is Vaswani's over max_len = 5000 positions at D = 300; the printed form gives
    0.133). The angles are computed in float64."""
    if d < 1:
        raise ConfigError(f"positional encodings need a width >= 1, got {d}")
    pos = positions.to(torch.float64).reshape(-1, 1)
    even = torch.arange(0, d, 2, dtype=torch.float64)
    angles = pos / torch.pow(10000.0, even / d)
    out = torch.empty(pos.shape[0], d, dtype=torch.float64)
    out[:, 0::2] = torch.sin(angles)
    out[:, 1::2] = torch.cos(angles[:, : d // 2])
    return out.to(torch.float32)
