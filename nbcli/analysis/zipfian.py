"""Frequency-weighted geometry of an embedding: isotropy under uniform and unigram weighting, before
and after Zipfian whitening (Yokoi et al. 2024, "Zipfian Whitening"), and how much of the frequency
direction whitening removes. The `zipfian` section of `nb probe-bias`, and its streaming pieces:
the whitened view of a matrix (`zipfian_whitened`) and the weighted share along a direction
(`FrequencyShare`), both row-block statistics in the manner of nbcli.probes.

Choices the paper leaves to nb (documented in `nb probe-bias --help` and docs/probes.md):
* p(w) is the add-k smoothed unigram of the counts (--smoothing; add-k:0 gives raw frequencies).
* Sigma^(-1/2) is the symmetric (ZCA) root, so whitened rows keep the original axes and a direction
  u means the same thing before and after.
* The frequency direction u is b_LN when the checkpoint has a non-zero one (paper 003 sec. 3.2),
  otherwise the unigram-weighted mean mu of the rows (the direction whitening centres away).
* Its share: sum_i p_i cos^2(w_i, u) (unigram-weighted); removed = 1 - share_after / share_before.
* The partition ratio's candidate directions are the eigenvectors of W^T W of the matrix measured
  (raw or whitened), both signs; only Z's weights differ between uniform and unigram.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from nbcli import ops, probes
from nbcli.errors import ConfigError


#: Progress steps `zipfian_section` announces.
STEPS = 3


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


class WhitenedRows:
    """Rows v' = (v - mu) S of a [V, d] matrix, computed block by block on slicing (S = Sigma^(-1/2),
    symmetric: `nbcli.ops.zipfian_whiten`'s transform without a whitened copy of the matrix)."""

    def __init__(self, rows: probes.Rows, mu: np.ndarray, root: np.ndarray) -> None:
        self.rows = rows
        self.mu = np.asarray(mu, dtype=np.float64)
        self.root = np.asarray(root, dtype=np.float64)

    @property
    def shape(self) -> tuple[int, int]:
        return (int(self.rows.shape[0]), int(self.rows.shape[1]))

    def __getitem__(self, key: slice) -> np.ndarray:
        block = probes.float32_block(self.rows[key]).astype(np.float64)
        return ((block - self.mu) @ self.root).astype(np.float32)


def zipfian_whitened(rows: probes.Rows, weights: np.ndarray) -> WhitenedRows:
    """The Zipfian-whitened view of `rows` under the unigram weights p (two passes for mu and Sigma,
    `nbcli.ops.weighted_moments`; Sigma^(-1/2) by `nbcli.ops.inverse_sqrt`: the one formula)."""
    mu, sigma = ops.weighted_moments(_FloatRows(rows), weights)
    return WhitenedRows(rows, mu.numpy(), ops.inverse_sqrt(sigma).numpy())


class _FloatRows:
    """`rows` with every slice converted to a float32 numpy block (what `weighted_moments` reads)."""

    def __init__(self, rows: probes.Rows) -> None:
        self.rows = rows
        self.shape = tuple(int(s) for s in rows.shape)

    def __getitem__(self, key: slice) -> np.ndarray:
        return probes.float32_block(self.rows[key])


class FrequencyShare:
    """sum_i p_i cos^2(w_i, u) / sum_i p_i over non-zero rows: the unigram-weighted share of each
    row's squared length that lies along the unit direction u (the frequency direction)."""

    def __init__(self, direction: np.ndarray, weights: np.ndarray) -> None:
        unit = probes.unit_direction(direction)
        assert unit is not None
        self.unit = unit
        self.weights = np.asarray(weights, dtype=np.float64).ravel()
        self.total = 0.0
        self.weight_total = 0.0

    def update(self, start: int, block: np.ndarray) -> None:
        sq_norms = np.einsum("ij,ij->i", block, block, dtype=np.float64)
        keep = sq_norms > 0
        along = (block @ self.unit).astype(np.float64)
        weight = self.weights[start:start + block.shape[0]]
        self.total += float((weight[keep] * along[keep] ** 2 / sq_norms[keep]).sum())
        self.weight_total += float(weight[keep].sum())

    def result(self) -> float:
        return self.total / self.weight_total if self.weight_total > 0 else math.nan


def isotropy_measures(rows: probes.Rows, weights: np.ndarray, partition: bool = True,
                      direction: np.ndarray | None = None, counts: np.ndarray | None = None,
                      ) -> tuple[dict[str, Any], np.ndarray | None]:
    """Mean cosine and partition ratio of `rows` under uniform and unigram (`weights`) weighting;
    with `direction`, the weighted share along it and (with `counts`) the Spearman rho of
    <w_i, u> with the counts. Two passes (one without `partition`). Returns (measures, <w_i, u>)."""
    width = int(rows.shape[1])
    uniform = probes.MeanCosine(width)
    weighted = probes.MeanCosine(width, weights=weights)
    stats: list[Any] = [uniform, weighted]
    gram = share = projections = None
    if partition:
        gram = probes.Gram(width)
        stats.append(gram)
    if direction is not None:
        share = FrequencyShare(direction, weights)
        projections = probes.Projections(direction / np.linalg.norm(direction), int(rows.shape[0]))
        stats += [share, projections]
    probes.run_pass(rows, stats)
    out: dict[str, Any] = {"mean_cosine_uniform": _finite(uniform.result()),
                           "mean_cosine_unigram": _finite(weighted.result()),
                           "partition_ratio_uniform": None, "partition_ratio_unigram": None}
    if gram is not None:
        flat, zipf = probes.partition_isotropies_from_gram(rows, gram.matrix, [None, weights])
        out.update(partition_ratio_uniform=flat.ratio, partition_ratio_unigram=zipf.ratio)
    if share is not None:
        out["frequency_share"] = _finite(share.result())
    if projections is not None and counts is not None:
        out["spearman"] = _finite(probes.frequency_correlation(projections.values, counts).spearman)
    return out, None if projections is None else projections.values


def zipfian_section(rows: probes.Rows, counts: np.ndarray, b_ln: np.ndarray | None, *, smoothing_k: float = 1.0,
                    partition: bool = True, progress: Callable[[str], None] = lambda _: None,
                    ) -> tuple[dict[str, Any], dict[str, Any]]:
    """The `zipfian` report section and the arrays its figure draws (<w_i, u> before and after).

    `counts` has one entry per row (padded). Whitening errors (a singular weighted covariance) make
    the section absent with the reason as its note, not a failed probe."""
    section: dict[str, Any] = {"present": False, "note": None, "weighting": f"unigram add-k:{smoothing_k:g}",
                               "direction": None, "raw": None, "whitened": None, "frequency_direction": None}
    weights = ops.unigram_weights(counts, int(rows.shape[0]), smoothing_k)
    progress("Zipfian whitening: weighted mean and covariance")
    try:
        whitened = zipfian_whitened(rows, weights)
    except ConfigError as err:
        section["note"] = str(err)
        return section, {}
    if b_ln is not None and np.any(b_ln != 0):
        direction, section["direction"] = np.asarray(b_ln, dtype=np.float64), "b_LN"
    else:
        direction, section["direction"] = whitened.mu, "unigram-weighted mean"
        if not np.any(direction != 0):
            direction = None
            section["direction"] = None
    progress("isotropy, uniform and unigram-weighted")
    raw, before = isotropy_measures(rows, weights, partition, direction, counts)
    progress("isotropy after Zipfian whitening")
    white, after = isotropy_measures(whitened, weights, partition, direction, counts)
    section.update(present=True, raw=raw, whitened=white)
    if direction is not None:
        share_before, share_after = raw.pop("frequency_share"), white.pop("frequency_share")
        removed = (1.0 - share_after / share_before
                   if share_before is not None and share_after is not None and share_before > 0 else None)
        section["frequency_direction"] = {
            "share_before": share_before, "share_after": share_after, "removed": removed,
            "spearman_before": raw.pop("spearman", None), "spearman_after": white.pop("spearman", None)}
    arrays = {"before": before, "after": after} if before is not None else {}
    return section, arrays
