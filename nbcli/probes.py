"""Frequency-direction, isotropy and output-bias statistics: arrays in, numbers out.

Paper 003 (Kobayashi et al., "Transformer Language Models Handle Word Frequency in Prediction
Head") sec. 3.2 / table 3 / fig. 3: the inner product <b_LN, w_i> of the final LayerNorm bias with
each output embedding row correlates with corpus frequency (Spearman rho), and removing the b_LN
direction from W lowers the mean pairwise cosine. Paper 000 (Meister et al.) app. B.5 / figs.
11-12: KL between softmax(b) of the output bias and the unigram distribution, and ||b||_2.
Mu & Viswanath ("All-but-the-top", ICLR 2018): partition-function isotropy.

Embedding matrices are passed as `rows`: anything with `.shape` ([V, d]) and row slicing
(`rows[a:b]`) -- a numpy array, a torch tensor of any float dtype, or a lazy checkpoint tensor.
Every pass reads row blocks (`nbcli.analysis.passes`, on several threads where asked), converts each
block to float32 and never materialises a V x V or V x d intermediate, so memory stays bounded by a
few blocks and d x d matrices. The partition
function's sums (`LogPartition`) are arrays of any device (numpy on the CPU, torch on an
accelerator: `nbcli.analysis.kernels`), as the passes of `nbcli.analysis.geometry` that `nb
probe-bias` runs need them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from nbcli.analysis.kernels import Array, Device, divide, eigh, exp_, namespace, on_device, subtract, to_numpy
from nbcli.analysis.passes import Rows, float32_block, run_pass
from nbcli.array_ops import kl_divergence, remove_direction

# ---------------------------------------------------------------------------------------------
# Correlation


def average_ranks(values: np.ndarray) -> np.ndarray:
    """1-based ranks with ties given the average of the ranks they span (as scipy's rankdata)."""
    x = np.asarray(values).ravel()
    order = np.argsort(x, kind="mergesort")
    sorted_x = x[order]
    starts_group = np.empty(x.size, dtype=bool)
    if x.size:
        starts_group[0] = True
        starts_group[1:] = sorted_x[1:] != sorted_x[:-1]
    group = np.cumsum(starts_group) - 1
    starts = np.flatnonzero(starts_group)
    ends = np.append(starts[1:], x.size)  # exclusive
    mean_rank = (starts + 1 + ends) / 2.0  # mean of the 1-based ranks start+1 .. end
    ranks = np.empty(x.size, dtype=np.float64)
    ranks[order] = mean_rank[group]
    return ranks


def pearson(x: np.ndarray, y: np.ndarray) -> float:
    """Pearson correlation; NaN when either input is constant or has fewer than 2 values."""
    a = np.asarray(x, dtype=np.float64).ravel()
    b = np.asarray(y, dtype=np.float64).ravel()
    if a.size != b.size:
        raise ValueError(f"pearson: lengths differ ({a.size} vs {b.size})")
    if a.size < 2:
        return math.nan
    a = a - a.mean()
    b = b - b.mean()
    denom = math.sqrt(float(a @ a) * float(b @ b))
    if denom == 0.0:
        return math.nan
    return float(np.clip((a @ b) / denom, -1.0, 1.0))


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman's rho, tie-aware: the Pearson correlation of average ranks (paper 003, table 3)."""
    return pearson(average_ranks(x), average_ranks(y))


@dataclass(frozen=True)
class FrequencyCorrelation:
    """Correlation of per-token scores with corpus counts over the tokens seen in the corpus."""

    spearman: float  # scores vs counts (ties averaged)
    pearson_log: float  # scores vs log(count)
    tokens: int  # tokens with count > 0 that entered both statistics


def frequency_correlation(scores: np.ndarray, counts: np.ndarray) -> FrequencyCorrelation:
    """Spearman rho of scores vs counts and Pearson r of scores vs log-frequency, over count > 0.

    Paper 003 sec. 3.2 and table 3 (scores = <b_LN, w_i>; rho = 0.78 for GPT-2 small). Tokens that
    never occur have no log-frequency and carry no rank information beyond a tie, so they are left
    out of both statistics. Log base and normalisation by the total do not change Pearson r.
    """
    s = np.asarray(scores, dtype=np.float64).ravel()
    c = np.asarray(counts).ravel()
    if s.size != c.size:
        raise ValueError(f"frequency_correlation: {s.size} scores but {c.size} counts")
    seen = c > 0
    s, c = s[seen], c[seen]
    return FrequencyCorrelation(spearman=spearman(s, c), pearson_log=pearson(s, np.log(c.astype(np.float64))),
                                tokens=int(seen.sum()))


# ---------------------------------------------------------------------------------------------
# Projections and isotropy


class Projections:
    """<direction, w_i> for every row w_i, float64 [V] (paper 003 sec. 3.2, fig. 3: <b_LN, w_i>)."""

    def __init__(self, direction: np.ndarray, n_rows: int) -> None:
        self.direction = np.asarray(direction, dtype=np.float32).ravel()
        self.values = np.empty(n_rows, dtype=np.float64)

    def update(self, start: int, block: np.ndarray) -> None:
        self.merge(start, self.partial(start, block))

    def partial(self, start: int, block: np.ndarray) -> np.ndarray:
        return block @ self.direction

    def merge(self, start: int, part: np.ndarray) -> None:
        self.values[start:start + part.shape[0]] = part


def row_projections(rows: Rows, direction: np.ndarray, block_rows: int | None = None) -> np.ndarray:
    """<direction, w_i> for every row (see `Projections`)."""
    stat = Projections(direction, int(rows.shape[0]))
    run_pass(rows, [stat], block_rows)
    return stat.values


def unit_direction(direction: np.ndarray | None) -> np.ndarray | None:
    """`direction` scaled to unit length (float32), None for None; ValueError for a zero or non-finite one."""
    if direction is None:
        return None
    v = np.asarray(direction, dtype=np.float64).ravel()
    norm = float(np.linalg.norm(v))
    if norm == 0.0 or not math.isfinite(norm):
        raise ValueError("direction to remove has zero (or non-finite) norm")
    return (v / norm).astype(np.float32)


def _unit_rows(block: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length; zero rows are dropped (their cosine is undefined)."""
    norms = np.sqrt(np.einsum("ij,ij->i", block, block, dtype=np.float64))
    keep = norms > 0
    return block[keep] / norms[keep, None].astype(np.float32)


class MeanCosine:
    """(1/n^2) sum_i sum_j cos(w_i, w_j) over all ordered pairs, i = j included (paper 003 sec. 3.2).

    Exact in O(V d): with u_i = w_i / ||w_i||, sum_ij cos(w_i, w_j) = sum_ij <u_i, u_j> =
    ||sum_i u_i||^2, and sum_i u_i = sum_i w_i / ||w_i|| is one matrix-vector product per block.
    With `remove` = b, each row first loses its component along b (w_i <- w_i - <w_i, e> e,
    e = b / ||b||, as the paper does with b_LN); then ||w_i'||^2 = ||w_i||^2 - <w_i, e>^2 and
    sum_i w_i' / ||w_i'|| = sum_i w_i / ||w_i'|| - (sum_i <w_i, e> / ||w_i'||) e, so the projected
    rows are never materialised. Rows of zero length (after the removal: shorter than 1e-5 of
    their original length, i.e. parallel to b up to rounding) have no cosine and are left out of
    n. NaN when no row is left.
    """

    #: relative length below which a row counts as zero after removing the direction
    PARALLEL_TOLERANCE = 1e-5

    def __init__(self, width: int, remove: np.ndarray | None = None, weights: np.ndarray | None = None) -> None:
        self.unit = unit_direction(remove)
        self.total = np.zeros(width, dtype=np.float64)
        self.n = 0
        self.weights = None if weights is None else np.asarray(weights, dtype=np.float64).ravel()
        self.weight_total = 0.0

    def update(self, start: int, block: np.ndarray) -> None:
        self.merge(start, self.partial(start, block))

    def partial(self, start: int, block: np.ndarray) -> tuple[np.ndarray, int, float]:
        """This block's sum_i a_i w_i / ||w_i|| (float64), rows kept and their weight."""
        sq_norms = np.einsum("ij,ij->i", block, block).astype(np.float64)
        if self.unit is None:
            keep = sq_norms > 0
        else:
            along = (block @ self.unit).astype(np.float64)
            residual = np.maximum(sq_norms - along * along, 0.0)
            # ||w||^2 - <w, e>^2 cancels for rows nearly parallel to e: recompute those directly
            close = np.flatnonzero(residual <= 1e-6 * sq_norms)
            if close.size:
                rest = block[close] - np.outer(along[close], self.unit).astype(np.float32)
                residual[close] = np.einsum("ij,ij->i", rest, rest, dtype=np.float64)
            keep = residual > (self.PARALLEL_TOLERANCE ** 2) * sq_norms
            sq_norms = residual
        inverse = np.zeros_like(sq_norms)
        inverse[keep] = 1.0 / np.sqrt(sq_norms[keep])
        weight_kept = 0.0
        if self.weights is not None:  # sum_ij p_i p_j cos(w_i, w_j) = ||sum_i p_i w_i / ||w_i||||^2
            weight = self.weights[start:start + block.shape[0]]
            inverse *= weight
            weight_kept = float(weight[keep].sum())
        total = (inverse.astype(np.float32) @ block).astype(np.float64)
        if self.unit is not None:
            total -= float(inverse @ along) * self.unit.astype(np.float64)
        return total, int(keep.sum()), weight_kept

    def merge(self, start: int, part: tuple[np.ndarray, int, float]) -> None:
        total, kept, weight_kept = part
        self.total += total
        self.n += kept
        self.weight_total += weight_kept

    def result(self) -> float:
        if self.weights is not None:
            return float(self.total @ self.total) / self.weight_total ** 2 if self.weight_total > 0 else math.nan
        return float(self.total @ self.total) / (self.n * self.n) if self.n else math.nan


def mean_pairwise_cosine(rows: Rows, remove: np.ndarray | None = None, block_rows: int | None = None,
                         weights: np.ndarray | None = None) -> float:
    """Mean pairwise cosine of the rows, optionally without one direction (see `MeanCosine`).

    With `weights` p (e.g. the unigram distribution): the p-weighted mean
    sum_ij p_i p_j cos(w_i, w_j) / (sum_i p_i)^2 over the rows kept, the frequency-weighted isotropy
    of Yokoi et al. 2024 (uniform p gives the unweighted mean)."""
    stat = MeanCosine(int(rows.shape[1]), remove, weights)
    run_pass(rows, [stat], block_rows)
    return stat.result()


def sample_pairwise_cosines(rows: Rows, sample: int = 2000, remove: np.ndarray | None = None,
                            seed: int = 0) -> np.ndarray:
    """Cosines of all distinct pairs among `sample` random rows (for histograms; not a statistic).

    Returns the upper triangle (i < j) as float32, sample*(sample-1)/2 values at most.
    """
    n = int(rows.shape[0])
    rng = np.random.default_rng(seed)
    picked = np.sort(rng.choice(n, size=min(sample, n), replace=False))
    block = np.concatenate([float32_block(rows[int(i):int(i) + 1]) for i in picked]) if picked.size else \
        np.zeros((0, int(rows.shape[1])), dtype=np.float32)
    if remove is not None:  # paper 003 sec. 3.2: w_i <- w_i - <w_i, u> u, u = remove / ||remove||
        block = remove_direction(block, np.asarray(remove, np.float64).ravel())
    units = _unit_rows(block)
    cos = units @ units.T
    return cos[np.triu_indices(units.shape[0], k=1)].astype(np.float32)


@dataclass(frozen=True)
class CosineSample:
    """Pairwise cosines of `rows` sampled output-embedding rows, for the isotropy histogram."""

    rows: int
    before: np.ndarray
    after: np.ndarray | None  # with the b_LN direction projected out; None without b_LN


def cosine_sample(rows: Rows, remove: np.ndarray | None = None, sample: int = 2000) -> CosineSample:
    """The cosines the histogram of W's pairwise cosines draws (paper 003 sec. 3.2): all distinct
    pairs among min(sample, V) rows, as they are and, given `remove` (b_LN), after projecting its
    direction out of every row."""
    picked = min(sample, int(rows.shape[0]))
    before = sample_pairwise_cosines(rows, sample=picked)
    after = sample_pairwise_cosines(rows, sample=picked, remove=remove) if remove is not None else None
    return CosineSample(picked, before, after)


class Gram:
    """W^T W, float64 [d, d], accumulated over row blocks (each block product in float32)."""

    def __init__(self, width: int) -> None:
        self.matrix = np.zeros((width, width), dtype=np.float64)

    def update(self, start: int, block: np.ndarray) -> None:
        self.matrix += block.T @ block  # numpy recognises a.T @ a: a symmetric rank-k update


def gram_matrix(rows: Rows, block_rows: int | None = None) -> np.ndarray:
    """W^T W (see `Gram`)."""
    stat = Gram(int(rows.shape[1]))
    run_pass(rows, [stat], block_rows)
    return stat.matrix


@dataclass(frozen=True)
class PartitionIsotropy:
    """Mu & Viswanath's I(W) = min_c Z(c) / max_c Z(c) and where the extremes lie."""

    ratio: float  # in (0, 1]; 1 = perfectly isotropic
    log_z_min: float
    log_z_max: float
    directions: int  # candidate unit vectors c (2 d: each eigenvector with both signs)


class LogPartition:
    """log Z_p(c) = log sum_i p_i exp(<c, w_i>) for every column c of a basis and for -c, under
    several weightings p at once (None: p_i = 1, Mu & Viswanath's Z), as running log-sum-exps: sums
    of float32 exponentials in float64, shifted by the running maximum, so large <c, w_i> cannot
    overflow. Each block's exponentials are computed once and shared by all weightings. Arrays of
    `device` ("cpu": numpy; a torch.device: torch, `nbcli.analysis.kernels`): `add` takes the block's
    logits <c, w_i> [rows, k]."""

    #: widest range of a column's logits (max - min) for which -c's exponentials are c's reciprocals
    #: (exp(-80) = 1.8e-35 is a normal float32, whose reciprocal keeps its relative precision)
    RECIPROCAL_SPAN = 80.0

    def __init__(self, k: int, weightings: Sequence[Any], device: Device = "cpu") -> None:
        xp = self.xp = namespace(device)
        self.weightings = [None if w is None else xp.reshape(xp.astype(on_device(to_numpy(w), device), xp.float32), (-1,))
                           for w in weightings]
        self.m = on_device(np.full(2 * k, -math.inf), device)  # running max of the exponents
        self.s = [on_device(np.zeros(2 * k), device) for _ in self.weightings]  # sums of exp(x - m)

    def add(self, start: int, logits: Array) -> None:
        self.merge(self.partial(start, logits))

    def partial(self, start: int, logits: Array) -> tuple[Array, list[Array]]:
        """A block's maxima and sums of exp(x - max) per weighting (no shared state: any thread)."""
        xp = self.xp
        hi = xp.max(logits, axis=0)
        lo = xp.min(logits, axis=0)
        rows = int(logits.shape[0])
        sums: list[list[Array]] = [[] for _ in self.weightings]
        e = logits - hi  # c: exponents <c, w_i> - max
        # -c from c's exponentials, a division instead of an exponential (10x cheaper):
        # exp(lo - x) = exp(lo - hi) / exp(x - hi), within 3 ulp where exp(x - hi) is a normal float32,
        # i.e. a column's logits span at most RECIPROCAL_SPAN; otherwise exponentials again
        reciprocal = bool(xp.all(hi - lo <= self.RECIPROCAL_SPAN))
        for sign in (1, -1):
            if sign > 0:
                exp_(e)
            elif reciprocal:  # the buffer reused: e = exp(lo - hi) / e
                divide(xp.exp(lo - hi), e, out=e)
            else:
                subtract(lo, logits, out=e)
                exp_(e)
            for out, weights in zip(sums, self.weightings):  # float32 exponentials, sums float64
                out.append(xp.sum(e, axis=0, dtype=xp.float64) if weights is None
                           else xp.astype(weights[start:start + rows] @ e, xp.float64))
        return xp.astype(xp.concat([hi, -lo]), xp.float64), [xp.concat(parts) for parts in sums]

    def merge(self, part: tuple[Array, list[Array]]) -> None:
        """Add a block's `partial` into the running log-sum-exps."""
        xp = self.xp
        m_new, block_sums = part
        top = xp.maximum(self.m, m_new)
        old_scale = xp.where(xp.isfinite(self.m), xp.exp(self.m - xp.where(xp.isfinite(self.m), top, 0.0)), 0.0)
        new_scale = xp.exp(m_new - top)
        self.s = [s * old_scale + block * new_scale for s, block in zip(self.s, block_sums)]
        self.m = top

    def result(self) -> list[np.ndarray]:
        """log Z per weighting, float64 [2k]: columns c first, then -c."""
        return [to_numpy(self.m + self.xp.log(s)) for s in self.s]


def partition_isotropy_from_log_z(log_z: np.ndarray) -> PartitionIsotropy:
    """min_c Z(c) / max_c Z(c) from log Z over the candidate directions."""
    lo_z, hi_z = float(log_z.min()), float(log_z.max())
    return PartitionIsotropy(ratio=math.exp(lo_z - hi_z), log_z_min=lo_z, log_z_max=hi_z, directions=log_z.size)


class BasisLogits:
    """Row statistic feeding a LogPartition with <c, w_i> for the columns c of `basis`."""

    def __init__(self, basis: Array, partition: LogPartition, device: Device = "cpu") -> None:
        self.basis = partition.xp.astype(basis, partition.xp.float32)
        self.partition = partition
        self.device = device

    def update(self, start: int, block: np.ndarray) -> None:
        self.partition.add(start, on_device(block, self.device) @ self.basis)


def partition_isotropy_from_gram(rows: Rows, gram: np.ndarray, block_rows: int | None = None,
                                 weights: np.ndarray | None = None) -> PartitionIsotropy:
    """The partition-function pass of `partition_isotropy`, given W^T W from an earlier pass."""
    return partition_isotropies_from_gram(rows, gram, [weights], block_rows)[0]


def partition_isotropies_from_gram(rows: Rows, gram: Array, weightings: list[np.ndarray | None],
                                   block_rows: int | None = None, device: Device = "cpu",
                                   ) -> list[PartitionIsotropy]:
    """`partition_isotropy` under several weightings (None = uniform) in one pass over the rows:
    the candidate directions c are the same (eigenvectors of W^T W), only Z's weights differ."""
    _, eigenvectors = eigh(on_device(to_numpy(gram), device, np.float64))
    partition = LogPartition(int(eigenvectors.shape[1]), [None if w is None else np.asarray(w, dtype=np.float64)
                                                          for w in weightings], device)
    run_pass(rows, [BasisLogits(eigenvectors, partition, device)], block_rows)
    return [partition_isotropy_from_log_z(log_z) for log_z in partition.result()]


def partition_isotropy(rows: Rows, block_rows: int | None = None, weights: np.ndarray | None = None,
                       ) -> PartitionIsotropy:
    """Partition-function isotropy (Mu & Viswanath 2018, sec. 2), an extra beside paper 003's measure.

    Paper 003 does not use it: its isotropy is the mean pairwise cosine (sec. 3.2, `mean_pairwise_cosine`
    here). Z(c) = sum_i exp(<c, w_i>) over output embedding rows w_i, and I(W) = min_c Z(c) / max_c Z(c)
    with c ranging over the unit eigenvectors of W^T W (d x d, never V x V).

    Departure from the original, on purpose: Mu & Viswanath take each eigenvector once, with
    whatever sign the eigensolver returns; nb takes both c and -c (2 d candidates), because that sign
    is arbitrary (LAPACK's choice) and would otherwise change the result. So nb's ratio is a property
    of W alone and is <= the one-sign ratio computed with any sign choice. Cost: two passes over W and
    O(V d^2) arithmetic (W^T W, then W C).

    With `weights` p: Z_p(c) = sum_i p_i exp(<c, w_i>) (the unigram-weighted partition function, beside
    Yokoi et al. 2024's weighted isotropy), over the same candidate directions c.
    """
    return partition_isotropy_from_gram(rows, gram_matrix(rows, block_rows), block_rows, weights)


# ---------------------------------------------------------------------------------------------
# Output bias vs unigram


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """log softmax(x) in float64, stable."""
    x = np.asarray(logits, dtype=np.float64).ravel()
    top = x.max()
    return x - (top + math.log(np.exp(x - top).sum()))


@dataclass(frozen=True)
class BiasVsUnigram:
    """Paper 000 app. B.5 (figs. 11-12): how far softmax(b) is from the unigram distribution."""

    kl_unigram_to_bias: float  # KL(unigram || softmax(b)), nats
    kl_bias_to_unigram: float  # KL(softmax(b) || unigram), nats
    norm: float  # ||b||_2


def bias_vs_unigram(bias: np.ndarray, log_unigram_probs: np.ndarray) -> BiasVsUnigram:
    """KL both ways between softmax(b) and a (smoothed) unigram distribution, and ||b||_2.

    `log_unigram_probs` comes from `nbcli.counts.log_unigram` (the one smoothing formula): with
    the same counts and k, a bias set by `nb patch-checkpoint` gives KL = 0 both ways.
    """
    b = np.asarray(bias, dtype=np.float64).ravel()
    log_bias_probs = log_softmax(b)
    log_unigram = np.asarray(log_unigram_probs, dtype=np.float64).ravel()
    if log_unigram.size != b.size:
        raise ValueError(f"bias_vs_unigram: sizes differ ({b.size} bias entries vs {log_unigram.size} unigram)")
    return BiasVsUnigram(
        kl_unigram_to_bias=float(kl_divergence(log_p=log_unigram, log_q=log_bias_probs)),
        kl_bias_to_unigram=float(kl_divergence(log_p=log_bias_probs, log_q=log_unigram)),
        norm=float(np.linalg.norm(b)),
    )
