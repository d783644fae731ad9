"""The row geometry of an output embedding W [V, d] for `nb probe-bias`: two passes over its row
blocks, the heavy algebra (the V d^2 products and the d x d eigendecompositions) on one device
(numpy on the CPU, torch on an accelerator: `nbcli.analysis.kernels`), float64 where the whitening
needs it.

* Pass 1 (`RowMoments`): about a shift c (the first block's mean, so nothing cancels), the Gram
  matrix sum_i (w_i - c)(w_i - c)^T and, with unigram weights p, the weighted scatter
  sum_i p_i (w_i - c)(w_i - c)^T, with the sums and norm sums beside them: the Gram matrix's block
  products in float32 without weights, float64 with them (the whitened rows' Gram matrix is it
  transformed by Sigma^(-1/2)), the weighted scatter's in float64 (whitening amplifies the errors of
  Sigma's small directions), all summed over blocks in float64. From these alone (`Moments`): W^T W,
  the weighted mean mu and covariance Sigma, the uniform scatter, and the scatter of the rows about mu:
  d x d algebra in float64, no further pass.
* Between the passes (`solve_whitening`, `second_pass`): one eigendecomposition per matrix, each used for everything it
  gives: W^T W (the partition function's candidate directions, Mu & Viswanath 2018), Sigma
  (Sigma^(-1/2), the symmetric ZCA root of Zipfian whitening, and its spectrum for Yokoi et al.'s
  second-moment score) and the whitened rows' Gram matrix S (W - mu)^T (W - mu) S (their candidate
  directions C_w). Yokoi et al.'s uniform spectra differ by rank one from W^T W and from the
  whitened Gram matrix: with the partition function they are those decompositions' secular
  equations (`nbcli.analysis.rank_one`, O(d^2)) where that keeps the digits, otherwise (and without
  the partition function) eigenvalue-only decompositions.
* Pass 2 (`ProjectedRows`): per block the logits B C (raw) and Y = (B - mu) S C_w (the whitened
  rows in the orthonormal basis C_w, so ||y_i|| = ||w'_i|| and every inner product is kept): both
  partition functions, the whitened rows' norms, mean cosines, projections on the frequency
  direction and its weighted share, without a whitened copy of W.

So the statistics take three eigendecompositions, each needed by its own statistic, and four V d^2
products, the weighted scatter's and (with weights) the Gram matrix's in float64
(`nbcli.analysis.probe_precision` says which precision each statistic uses and its tolerance). The
block kernels and eigensolvers are `nbcli.analysis.kernels` (numpy's BLAS and LAPACK on the CPU,
written once for numpy and torch through the array API standard).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from nbcli.analysis.kernels import (Array, Device, eigh, eigvalsh, gram_block, is_accelerator, namespace, namespace_of,
                                    on_device, outer, pass_workers, to_numpy)
from nbcli.errors import ConfigError
from nbcli.analysis.passes import Rows, concurrently, run_pass
from nbcli.analysis.rank_one import keeps_digits, rank_one_eigenvalues
from nbcli.probes import LogPartition, MeanCosine, Projections
from nbcli.array_ops import inverse_sqrt_from_eigh


@contextlib.contextmanager
def full_float32(device: Device) -> Iterator[None]:
    """float32 matmuls at full precision on CUDA (TF32 keeps 10 mantissa bits: too few for whitening),
    restoring the caller's setting afterwards."""
    if not is_accelerator(device) or device.type != "cuda":
        yield
        return
    import torch

    saved = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved


class RowMoments:
    """Pass 1: the row sums of a [V, d] matrix about a shift c (see the module docstring)."""

    def __init__(self, width: int, device: Device, weights: np.ndarray | None = None) -> None:
        self.device = device
        self.xp = namespace(device)
        self.shift: Array | None = None  # c, float64 [d]
        self.n = 0
        self.gram = on_device(np.zeros((width, width)), device)  # sum (w - c)(w - c)^T
        self.sum = on_device(np.zeros(width), device)  # sum (w - c)
        self.norm_sum = 0.0  # sum ||w||
        self.max_norm = 0.0
        self.weights = None if weights is None else on_device(np.asarray(weights, dtype=np.float64), device)
        self.weight_total = 0.0  # sum p
        # sum p (w - c)(w - c)^T and sum p (w - c)
        self.weighted_scatter = on_device(np.zeros((0 if weights is None else width, width)), device)
        self.weighted_sum = on_device(np.zeros(width), device)
        self.weighted_norm_sum = 0.0  # sum p ||w||

    def prepare(self, block: np.ndarray) -> None:
        """The shift c: the first block's mean, rounded to float32 (any c is exact)."""
        if self.shift is None:
            mean = block.mean(axis=0, dtype=np.float64).astype(np.float32).astype(np.float64)
            self.shift = on_device(mean, self.device)

    def update(self, start: int, block: np.ndarray) -> None:
        self.prepare(block)
        self.merge(start, self.partial(start, block))

    def partial(self, start: int, block: np.ndarray) -> dict[str, Any]:
        """A block's sums about the shift (set by `prepare` with the first block); no shared state."""
        assert self.shift is not None, "prepare() comes first"
        xp = self.xp
        x = on_device(block, self.device)
        norms = xp.astype(xp.sqrt(xp.vecdot(x, x)), xp.float64)
        part: dict[str, Any] = {"n": int(x.shape[0]), "norm_sum": float(xp.sum(norms)), "max_norm": float(xp.max(norms))}
        if self.weights is None:
            # W^T W (the partition function's directions, the uniform spectra) without a whitened view:
            # float32 products, each block's summed in float64 (within 1e-7 of float64 on the
            # known-spectrum test, tests/analysis/test_probe_precision.py)
            shifted = x - xp.astype(self.shift, xp.float32)  # a new array: x may be the caller's W
            part.update(gram=xp.astype(gram_block(shifted), xp.float64), sum=xp.sum(shifted, axis=0, dtype=xp.float64))
            return part
        # With counts, the whitened view transforms W^T W by Sigma^(-1/2): float64 products, as Sigma's
        # (float32 ones put 1e-5 into the whitened scores and 1e-2 into the whitened partition ratio of
        # an ill-conditioned Sigma, tests/analysis/test_zipfian.py's property test)
        gram_rows = xp.astype(x, xp.float64)
        gram_rows -= self.shift
        part.update(gram=gram_block(gram_rows), sum=xp.sum(gram_rows, axis=0))
        weight = self.weights[start:start + int(x.shape[0])]
        part.update(weight_total=float(xp.sum(weight)), weighted_norm_sum=float(weight @ norms))
        # Sigma (whitening): float64 products. Whitening divides by Sigma's small eigenvalues: float32
        # products put 5e-5 into the whitened scores and 1e-2 (relative) into the whitened partition
        # ratio at Sigma's condition number 1e3, with the rows centred at mu exactly or not
        exact = gram_rows  # w - c in float64 once: the Gram matrix and sums above are done with it
        seen = weight > 0  # zero-weight rows add nothing: leave them out of the weighted product
        if not bool(xp.all(seen)):
            exact, weight = exact[seen], weight[seen]
        root = xp.sqrt(weight)
        exact *= root[:, None]  # sqrt(p) (w - c), in place
        part.update(weighted_sum=root @ exact, weighted_scatter=gram_block(exact))
        return part

    def merge(self, start: int, part: dict[str, Any]) -> None:
        self.n += part["n"]
        self.norm_sum += part["norm_sum"]
        self.max_norm = max(self.max_norm, part["max_norm"])
        self.gram += part["gram"]
        self.sum += part["sum"]
        if self.weights is not None:
            self.weight_total += part["weight_total"]
            self.weighted_norm_sum += part["weighted_norm_sum"]
            self.weighted_sum += part["weighted_sum"]
            self.weighted_scatter += part["weighted_scatter"]

    def moments(self) -> Moments:
        assert self.shift is not None, "no rows"
        return Moments(self.n, self.shift, self.gram, self.sum, self.norm_sum, self.weight_total,
                       self.weighted_sum, self.weighted_scatter, self.weighted_norm_sum)

    def finite(self) -> bool:
        """False for non-finite rows, or rows whose squared length overflows float32 (the row
        statistics and logits are float32)."""
        return bool(self.xp.all(self.xp.isfinite(self.gram))) and math.isfinite(self.norm_sum) \
            and self.max_norm ** 2 <= float(np.finfo(np.float32).max)


@dataclass(frozen=True)
class Moments:
    """Pass 1's sums about the shift c; every matrix below is d x d algebra on them (arrays of the
    pass's device, float64)."""

    n: int
    shift: Array
    gram_c: Array  # sum_i (w_i - c)(w_i - c)^T
    sum_c: Array  # sum_i (w_i - c)
    norm_sum: float  # sum_i ||w_i||
    weight_total: float  # sum_i p_i (0 without weights)
    weighted_sum_c: Array  # sum_i p_i (w_i - c)
    weighted_scatter_c: Array  # sum_i p_i (w_i - c)(w_i - c)^T
    weighted_norm_sum: float  # sum_i p_i ||w_i||

    def gram(self) -> Array:
        """W^T W = sum (w - c)(w - c)^T + s c^T + c s^T + n c c^T, s = sum (w - c)."""
        c, s = self.shift, self.sum_c
        return self.gram_c + outer(s, c) + outer(c, s) + self.n * outer(c, c)

    def uniform_mean(self) -> Array:
        return self.shift + self.sum_c / self.n

    def scatter_about(self, centre: Array) -> Array:
        """sum_i (w_i - m)(w_i - m)^T for any m: the Gram matrix about c, moved to m (no cancellation
        when m is near c)."""
        d, s = centre - self.shift, self.sum_c
        return self.gram_c - outer(s, d) - outer(d, s) + self.n * outer(d, d)

    def weighted_mean(self) -> Array:
        """mu = sum p w / sum p (Yokoi et al. 2024, the p-weighted mean)."""
        return self.shift + self.weighted_sum_c / self.weight_total

    def weighted_covariance(self) -> Array:
        """Sigma = sum p (w - mu)(w - mu)^T / sum p (Yokoi et al. 2024), as `nbcli.ops.weighted_moments`
        computes it in two passes."""
        d = self.weighted_mean() - self.shift
        return self.weighted_scatter_c / self.weight_total - outer(d, d)


@dataclass(frozen=True)
class Whitening:
    """Zipfian whitening's transform w' = (w - mu) S, S = Sigma^(-1/2), and the spectra `solve_whitening`
    derived from pass 1's sums (Yokoi et al. 2024's second-moment score reads them); float64 arrays of
    the pass's device."""

    mu: Array  # [d]
    root: Array  # S, [d, d], symmetric
    spectrum: Array  # eigenvalues of Sigma (unigram-weighted covariance of W)
    uniform_spectrum: Array  # eigenvalues of the uniform covariance of W
    whitened_spectrum: Array  # eigenvalues of S Sigma S = U diag(lambda^-1/2 lambda lambda^-1/2) U^T: all 1
    whitened_uniform_spectrum: Array  # eigenvalues of the whitened rows' uniform covariance
    whitened_uniform_mean: Array  # mean_i w'_i = (mean_i w_i - mu) S
    basis: Array | None  # C_w: eigenvectors of the whitened rows' Gram matrix (None without partition)


def solve_whitening(moments: Moments, partition: bool, workers: int = 1,
                    gram_basis: bool = False) -> tuple[Array | None, Whitening | None, str | None]:
    """The eigendecompositions between the passes: with `gram_basis` the eigenvectors of W^T W (the
    partition function's directions, Mu & Viswanath 2018), and Zipfian whitening: S = Sigma^(-1/2) from
    one eigendecomposition of Sigma and, from pass 1's sums alone, the spectra of the uniform
    covariances of W and of the whitened rows, of S Sigma S (from Sigma's own eigenvalues: S and
    Sigma share eigenvectors) and (with `partition`) the eigenvectors of the whitened rows' Gram
    matrix S (W - mu)^T (W - mu) S. Each uniform spectrum differs by rank one from a matrix
    decomposed anyway where there is one (W^T W = U + n m m^T; the whitened Gram matrix is S U S +
    n v v^T, v = S (m - mu)): then it is that decomposition's secular equation
    (`nbcli.analysis.rank_one`), not a decomposition of its own. Sigma's and W^T W's run side by side
    on `workers` threads (`nbcli.analysis.passes.concurrently`). Returns (W^T W's eigenvectors or
    None, the whitening or None, why not: a singular Sigma, the rule of `nbcli.ops.inverse_sqrt`)."""
    mu, mean = moments.weighted_mean(), moments.uniform_mean()
    uniform_scatter = moments.scatter_about(mean)
    first: list[Callable[[], Any]] = [lambda: eigh(moments.weighted_covariance())]
    first.append((lambda: eigh(moments.gram())) if gram_basis else (lambda: eigvalsh(uniform_scatter)))
    (values, vectors), second = concurrently(first, workers)
    basis = second[1] if gram_basis else None
    # U = W^T W - n m m^T: its spectrum from W^T W's eigendecomposition where there is one
    uniform_spectrum = second if not gram_basis else \
        _spectrum_after(second, mean, -moments.n, lambda: uniform_scatter)
    try:
        root = inverse_sqrt_from_eigh(values, vectors)
    except ConfigError as err:
        return basis, None, str(err)
    whitened_mean = (mean - mu) @ root  # v = S (m - mu), the whitened rows' uniform mean
    whitened_basis = None
    if partition:
        whitened_values, whitened_basis = eigh(root @ moments.scatter_about(mu) @ root)
        # S U S = S X S - n v v^T, X = U + n (m - mu)(m - mu)^T the rows' scatter about mu
        whitened_uniform_spectrum = _spectrum_after((whitened_values, whitened_basis), whitened_mean, -moments.n,
                                                    lambda: root @ uniform_scatter @ root)
    else:
        whitened_uniform_spectrum = eigvalsh(root @ uniform_scatter @ root)
    inverse_root = 1.0 / namespace_of(values).sqrt(values)
    return basis, Whitening(mu=mu, root=root, spectrum=values, uniform_spectrum=uniform_spectrum,
                            whitened_spectrum=inverse_root * values * inverse_root,
                            whitened_uniform_spectrum=whitened_uniform_spectrum,
                            whitened_uniform_mean=whitened_mean, basis=whitened_basis), None


def _spectrum_after(decomposed: tuple[Array, Array], u: Array, rho: float, changed: Callable[[], Array]) -> Array:
    """The eigenvalues of `changed()` = A + rho u u^T from A's eigendecomposition (the secular
    equation) where that keeps the digits (`nbcli.analysis.rank_one.keeps_digits`: a mean that dwarfs
    the rows' spread does not), else its own eigenvalue decomposition."""
    values, vectors = decomposed
    if keeps_digits(values, u, rho):
        return rank_one_eigenvalues(values, vectors, u, rho)
    return eigvalsh(changed())


class ProjectedRows:
    """Pass 2, for W (`root` None) or its whitened rows (`root` = S, `centre` = mu): the rows
    r_i = (w_i - centre) R and their coordinates y_i = r_i C in an orthonormal basis C (eigenvectors of
    the measured matrix's Gram matrix: the partition function's candidate directions), one product
    per block. Accumulates log Z(c) over the columns of C under uniform and (with `weights`) unigram
    weights when `partition`; the (weighted) sums of r_i / ||r_i|| (mean cosines), ||r_i|| and r_i;
    with a direction u the projections <r_i, u> and the weighted share sum p cos^2(r_i, u). For the
    whitened rows these come from y_i (C is orthonormal, so norms and inner products are r_i's): no
    second product; for W from the rows themselves. Zero rows have no cosine and are left out."""

    def __init__(self, shape: tuple[int, int], device: Device, *, basis: Array | None = None,
                 centre: Array | None = None, root: Array | None = None,
                 weights: np.ndarray | None = None, direction: np.ndarray | None = None,
                 partition: bool = False) -> None:
        self.device = device
        xp = self.xp = namespace(device)
        n_rows, width = shape
        self.rotated = root is not None  # statistics from y (whitened rows) or from the rows as read (W)
        transform = root if basis is None else basis if root is None else root @ basis
        self.transform = None if transform is None else xp.astype(transform, xp.float32)
        # the centre as float32 head + tail: w - head - tail keeps the centred row's own precision (a
        # centre rounded to float32 alone would shift every row by the same error, which S amplifies)
        self.centre = None if centre is None else xp.astype(centre, xp.float32)
        self.centre_tail = None if centre is None or self.centre is None else \
            xp.astype(centre - xp.astype(self.centre, xp.float64), xp.float32)
        self.weights = None if weights is None else on_device(np.asarray(weights, dtype=np.float64), device)
        self.unit_sum, self.weighted_unit_sum, self.weighted_sum = (
            on_device(np.zeros(width), device) for _ in range(3))
        self.kept = 0
        self.kept_weight = self.norm_sum = self.weighted_norm_sum = self.share = 0.0
        self.along: Array | None = None
        self.projections: np.ndarray | None = None
        if direction is not None:
            unit = np.asarray(direction, dtype=np.float64)
            unit = on_device(unit / np.linalg.norm(unit), device)
            self.along = xp.astype(basis.T @ unit if self.rotated and basis is not None else unit, xp.float32)
            self.projections = np.empty(n_rows, dtype=np.float64)
        self.partition = LogPartition(width, [None] if self.weights is None else [None, self.weights], device) \
            if partition else None

    def update(self, start: int, block: np.ndarray) -> None:
        self.merge(start, self.partial(start, block))

    def partial(self, start: int, block: np.ndarray) -> tuple[Any, dict[str, Any]]:
        """A block's partition sums and row sums (no shared state: any thread)."""
        rows = on_device(block, self.device)
        if self.centre is not None and self.centre_tail is not None:
            rows = rows - self.centre
            rows -= self.centre_tail
        y = rows if self.transform is None else rows @ self.transform
        partition = None if self.partition is None else self.partition.partial(start, y)
        return partition, self._sums(start, y if self.rotated else rows)

    def merge(self, start: int, part: tuple[Any, dict[str, Any]]) -> None:
        partition, sums = part
        if self.partition is not None:
            self.partition.merge(partition)
        self.kept += sums["kept"]
        self.norm_sum += sums["norm_sum"]
        self.unit_sum += sums["unit_sum"]
        if self.projections is not None:
            self.projections[start:start + sums["along"].shape[0]] = sums["along"]
        if self.weights is not None:
            self.kept_weight += sums["kept_weight"]
            self.weighted_norm_sum += sums["weighted_norm_sum"]
            self.weighted_unit_sum += sums["weighted_unit_sum"]
            self.weighted_sum += sums["weighted_sum"]
            self.share += sums["share"]

    def _sums(self, start: int, r: Array) -> dict[str, Any]:
        xp = self.xp
        sq_norms = xp.astype(xp.vecdot(r, r), xp.float64)
        keep = sq_norms > 0
        norms = xp.sqrt(sq_norms)
        inverse = xp.where(keep, 1.0 / xp.where(keep, norms, 1.0), 0.0)
        sums: dict[str, Any] = {"kept": int(xp.sum(xp.astype(keep, xp.int64))), "norm_sum": float(xp.sum(norms)),
                                "unit_sum": xp.astype(xp.astype(inverse, xp.float32) @ r, xp.float64)}
        along = None if self.along is None else xp.astype(r @ self.along, xp.float64)
        if along is not None:
            sums["along"] = to_numpy(along)
        if self.weights is None:
            return sums
        weight = self.weights[start:start + int(r.shape[0])]
        sums.update(kept_weight=float(xp.sum(xp.where(keep, weight, 0.0))), weighted_norm_sum=float(weight @ norms),
                    weighted_unit_sum=xp.astype(xp.astype(weight * inverse, xp.float32) @ r, xp.float64),
                    weighted_sum=xp.astype(xp.astype(weight, xp.float32) @ r, xp.float64),
                    share=0.0 if along is None else float(xp.sum(weight * (along * inverse) ** 2)))
        return sums

    def mean_cosine(self, weighted: bool) -> float:
        """sum_ij a_i a_j cos(y_i, y_j) / (sum_i a_i)^2 over the non-zero rows, a = 1 or p
        (`nbcli.probes.MeanCosine`'s formula)."""
        total, norm = (self.weighted_unit_sum, self.kept_weight) if weighted else (self.unit_sum, float(self.kept))
        return float(total @ total) / norm ** 2 if norm > 0 else math.nan

    def frequency_share(self) -> float:
        """sum_i p_i cos^2(row_i, u) / sum_i p_i over the non-zero rows."""
        return self.share / self.kept_weight if self.kept_weight > 0 else math.nan

    def log_partition(self) -> list[np.ndarray]:
        assert self.partition is not None
        return self.partition.result()


@dataclass
class FirstPass:
    """Pass 1 over W: the mean cosines of section 2 (with and without the b_LN direction, paper 003
    sec. 3.2), <b_LN, w_i> (section 1) and, for the partition function or Zipfian whitening, the
    moments (`RowMoments`)."""

    cosine: MeanCosine
    cosine_without: MeanCosine | None
    scores: Projections | None
    moments: RowMoments | None

    def finite(self) -> bool:
        """False when W has non-finite values (or values whose products overflow float32)."""
        return (self.scores is None or bool(np.all(np.isfinite(self.scores.values)))) \
            and math.isfinite(self.cosine.total.sum()) and (self.moments is None or self.moments.finite())


def first_pass(rows: Rows, b_ln: np.ndarray | None, weights: np.ndarray | None, partition: bool,
               device: Device, threads: int = 1) -> FirstPass:
    """Pass 1 (b_ln: a usable, non-zero b_LN or None; weights: the unigram weights when the Zipfian
    section is computed; `threads`: the pass's worker threads on the CPU, `nbcli.analysis.passes`)."""
    n_rows, width = (int(x) for x in rows.shape)
    moments = RowMoments(width, device, weights) if partition or weights is not None else None
    first = FirstPass(MeanCosine(width), None if b_ln is None else MeanCosine(width, remove=b_ln),
                      None if b_ln is None else Projections(b_ln, n_rows), moments)
    with np.errstate(over="ignore", invalid="ignore"):  # non-finite W: the caller's error
        run_pass(rows, [s for s in (first.cosine, first.cosine_without, first.scores, first.moments) if s is not None],
                 workers=pass_workers(device, threads))
    return first


@dataclass
class SecondPass:
    """Pass 2 over W: W's own projections (`raw`: partition function, weighted measures) and its
    whitened rows' (`whitened`), with what the whitening was solved from; `note` says why there are
    no whitened rows when weights were given (a singular covariance)."""

    raw: ProjectedRows | None
    whitened: ProjectedRows | None
    moments: Moments | None
    whitening: Whitening | None
    direction: str | None  # "b_LN", "unigram-weighted mean" or None: the frequency direction u
    note: str | None = None


def frequency_direction(b_ln: np.ndarray | None, mu: Array) -> tuple[np.ndarray | None, str | None]:
    """u = b_LN when usable (paper 003 sec. 3.2), else the unigram-weighted mean mu, the direction
    whitening centres away (none when mu = 0)."""
    if b_ln is not None:
        return np.asarray(b_ln, dtype=np.float64), "b_LN"
    m = to_numpy(mu)
    return (m, "unigram-weighted mean") if np.any(m != 0) else (None, None)


def second_pass(rows: Rows, first: FirstPass, b_ln: np.ndarray | None, weights: np.ndarray | None,
                partition: bool, device: Device, threads: int = 1) -> SecondPass:
    """Eigendecompositions (W^T W with `partition`; Sigma and the whitened Gram matrix with weights),
    then pass 2 over W feeding W's and the whitened rows' `ProjectedRows`."""
    if first.moments is None:
        return SecondPass(None, None, None, None, None)
    moments = first.moments.moments()
    shape = (int(rows.shape[0]), int(rows.shape[1]))
    workers = pass_workers(device, threads)
    if weights is None:
        raw = ProjectedRows(shape, device, basis=eigh(moments.gram())[1], partition=True)
        run_pass(rows, [raw], workers=workers)
        return SecondPass(raw, None, moments, None, None)
    basis, whitening, note = solve_whitening(moments, partition, workers, gram_basis=partition)
    direction, name = frequency_direction(b_ln, moments.weighted_mean())
    stats = [ProjectedRows(shape, device, basis=basis, weights=weights, direction=direction, partition=partition)]
    if whitening is not None:
        stats.append(ProjectedRows(shape, device, basis=whitening.basis, centre=whitening.mu, root=whitening.root,
                                   weights=weights, direction=direction, partition=partition))
    if partition or whitening is not None:
        run_pass(rows, list(stats), workers=workers)
    return SecondPass(stats[0], stats[1] if whitening is not None else None, moments, whitening, name, note)
