"""The papers' formulas that need no torch, on numpy arrays and torch tensors alike: KL divergence
(paper 000), removing a direction from every row (paper 003 sec. 3.2), Zipfian whitening's unigram
weights p(w) and symmetric inverse root Sigma^(-1/2) from an eigendecomposition (Yokoi et al. 2024);
and `namespace_of`, the array API namespace they (and `nbcli.analysis`) compute in. `nbcli.ops`'s
table lists them beside its torch functions; `nb probe-bias` runs them on numpy without importing
torch (~3 s of its start-up).
"""

from __future__ import annotations

import math
import sys
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
from array_api_compat import array_namespace, is_torch_array

from nbcli.counts import log_unigram, pad_counts
from nbcli.errors import ConfigError


def numpy_namespace() -> Any:
    """numpy itself from 2.0 (it follows the array API standard), array_api_compat's wrapper before:
    importing the wrapper costs ~0.16 s (it loads numpy.f2py and numpy.testing)."""
    if int(np.__version__.split(".")[0]) >= 2:
        return np
    import array_api_compat.numpy as xp

    return xp


def namespace_of(*arrays: Any) -> Any:
    """The array API namespace of the arrays given: numpy's (`numpy_namespace`) or torch's."""
    if all(isinstance(a, np.ndarray) for a in arrays):
        return numpy_namespace()
    return array_namespace(*arrays)


if TYPE_CHECKING:
    import torch

Probabilities = TypeVar("Probabilities", np.ndarray, "torch.Tensor")


def kl_divergence(*, log_p: Probabilities, log_q: Probabilities, dim: int = -1) -> Probabilities:
    """KL(p || q) = sum_i p_i (log p_i - log q_i) along `dim`, in nats, from log-probabilities: how far p
    is from the reference q (paper 000 fig. 1: the model's p_theta from the unigram u; app. B.3: the
    unigram omega from p_theta; app. B.5: softmax(b) from u; paper 003 table 1). Terms with p_i = 0
    are 0 (0 log 0 = 0, whatever q_i). The arguments are keyword-only, so a call reads which side is p.

    numpy arrays in, numpy out; tensors in, a tensor out (differentiable), in the inputs' dtype;
    `log_p` and `log_q` broadcast. When one p meets many q's (`log_p` smaller than the result, e.g.
    [V] against [N, V]) the sum is taken as sum_i p_i log p_i - sum_i p_i log q_i, the first term
    once, so no [N, V] copy of p's terms is made (a training loss on every position, app. B.3); there
    log q_i must be finite where p_i = 0."""
    torch_input = is_torch_array(log_p)
    xp: Any = sys.modules["torch"] if torch_input else np
    with np.errstate(invalid="ignore"):  # 0 * -inf where p_i = 0: the term is dropped below
        p = xp.exp(log_p)
        if tuple(log_p.shape) == tuple(xp.broadcast_shapes(log_p.shape, log_q.shape)):
            return xp.where(p > 0, p * (log_p - log_q), 0.0).sum(dim)
        if torch_input:
            neg_entropy = xp.special.xlogy(p, p).sum(dim)
        else:
            neg_entropy = np.where(p > 0, p * np.where(p > 0, log_p, 0.0), 0.0).sum(dim)
        return neg_entropy - (p * log_q).sum(dim)


def unigram_weights(counts: np.ndarray, vocab_size: int, k: float = 1.0) -> np.ndarray:
    """p(w) for Zipfian whitening: the add-k smoothed unigram distribution of `counts` (the one
    smoothing formula, `nbcli.counts.log_unigram`; k = 0 gives the raw relative frequencies Yokoi et
    al. 2024 use), zero-padded to `vocab_size` rows, float64 [vocab_size], summing to 1."""
    padded = pad_counts(counts, vocab_size)
    if k == 0:  # log_unigram refuses k = 0 (log 0 for unseen tokens); a weight of 0 is fine here
        total = float(padded.sum(dtype=np.float64))
        if total <= 0:
            raise ConfigError("the counts are all zero: no unigram distribution to weight by")
        return padded.astype(np.float64) / total
    return np.exp(log_unigram(padded, k))


def inverse_sqrt_from_eigh(values: Any, vectors: Any) -> Any:
    """Sigma^(-1/2) = U diag(values^(-1/2)) U^T from the eigendecomposition Sigma = U diag(values) U^T
    (values ascending, float64; numpy arrays or torch tensors): the symmetric (ZCA) root. A
    covariance with an eigenvalue <= lambda_max * d * 2^-52 (numerically singular, e.g. fewer
    weighted rows than dimensions) is an error: whitening is undefined."""
    xp = namespace_of(values, vectors)
    size = int(values.shape[0])
    top = float(values[-1]) if size else 0.0
    floor = max(top, 0.0) * size * float(np.finfo(np.float64).eps)
    rank = int((values > floor).sum())
    if top <= 0 or rank < size:
        raise ConfigError(f"the weighted covariance is singular (rank {rank} of {size}): whitening is "
                          "undefined (too few tokens with weight > 0, or an embedding confined to a subspace)")
    return (vectors * (1.0 / xp.sqrt(values))) @ vectors.T


def remove_direction(w: Any, direction: Any) -> Any:
    """Paper 003 sec. 3.2: w_i <- w_i - <w_i, u> u with u = direction / ||direction|| for every row
    w_i of W (the frequency direction when `direction` is b_LN). numpy arrays or torch tensors (of any
    float dtype); computed in float32 (float64 for float64 input), returned in W's dtype."""
    xp = namespace_of(w, direction)
    if w.ndim != 2 or direction.ndim != 1 or direction.shape[0] != w.shape[1]:
        raise ConfigError(f"cannot project a {list(direction.shape)} direction out of a {list(w.shape)} matrix")
    if not xp.isdtype(w.dtype, "real floating"):
        raise ConfigError(f"expected a floating-point tensor, got {w.dtype}")
    dtype = xp.float64 if w.dtype == xp.float64 else xp.float32
    u = xp.astype(direction, xp.float64)
    length = float(xp.linalg.vector_norm(u))
    if length == 0 or not math.isfinite(length):
        raise ConfigError(f"the direction vector has norm {length}; nothing to remove")
    u = xp.astype(u / length, dtype)
    work = xp.astype(w, dtype)
    return xp.astype(work - (work @ u)[:, None] * u[None, :], w.dtype)
