"""The frequency-binned table: equal-width bins of x with the count, mean, population std and
standard error of the mean of y in each (the one binning rule of nb's frequency tables and figures),
and its log10(count) form for `nb probe-bias` (paper 003 fig. 3; paper 000 fig. 4)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class FrequencyBin:
    """Tokens whose log10(count) falls in [log10_lo, log10_hi) (the last bin includes its top)."""

    log10_lo: float
    log10_hi: float
    tokens: int
    mean: float  # of the scores in the bin; NaN when empty
    std: float  # population standard deviation (ddof = 0); NaN when empty


@dataclass(frozen=True)
class BinnedStatistics:
    """`equal_width_bins`' result, one entry per bin: edges [bins + 1], n, mean and population std
    (ddof 0) of y (NaN where a bin is empty), and the standard error of the mean, the sample std
    (ddof 1) / sqrt(n), as scipy.stats.sem (NaN where a bin has fewer than 2 points: one value has no
    standard error)."""

    edges: np.ndarray
    n: np.ndarray
    mean: np.ndarray
    std: np.ndarray
    sem: np.ndarray


def equal_width_bins(x: np.ndarray, y: np.ndarray, bins: int) -> BinnedStatistics | None:
    """Equal-width bins of x over [min x, max x] (the last bin includes its top) with the count,
    mean, population std and standard error (ddof 1) of y in each; None when no point is left. Points whose x or y is not
    finite are left out; when every x is equal, all points fall in the first bin of a zero-width
    range. The one binning rule of nb's frequency tables and figures (paper 003 fig. 3, paper 000
    fig. 4)."""
    if bins < 1:
        raise ValueError("bins must be >= 1")
    x = np.asarray(x, dtype=np.float64).ravel()
    y = np.asarray(y, dtype=np.float64).ravel()
    keep = np.isfinite(x) & np.isfinite(y)
    x, y = x[keep], y[keep]
    if x.size == 0:
        return None
    lo, hi = float(x.min()), float(x.max())
    edges = np.linspace(lo, hi, bins + 1)
    if hi > lo:
        index = np.clip(np.searchsorted(edges, x, side="right") - 1, 0, bins - 1)
    else:
        index = np.zeros(x.size, dtype=np.intp)
    n = np.bincount(index, minlength=bins)
    total = np.bincount(index, weights=y, minlength=bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = total / n
        sq = np.bincount(index, weights=(y - mean[index]) ** 2, minlength=bins)
        std = np.sqrt(sq / n)
        sem = np.where(n > 1, np.sqrt(sq / np.maximum(n - 1, 1) / n), np.nan)
    return BinnedStatistics(edges, n, mean, std, sem)


def frequency_bins(scores: np.ndarray, counts: np.ndarray, bins: int = 10) -> list[FrequencyBin]:
    """Equal-width bins of log10 corpus count with the mean and std of the scores (paper 003 fig. 3).

    Only tokens with count > 0 are binned. When all seen tokens share one count, every token goes
    to the first bin of a zero-width range.
    """
    c = np.asarray(counts).ravel()
    seen = c > 0
    table = equal_width_bins(np.log10(c[seen].astype(np.float64)), np.asarray(scores, dtype=np.float64).ravel()[seen],
                             bins)
    if table is None:
        return []
    return [FrequencyBin(float(table.edges[i]), float(table.edges[i + 1]), int(table.n[i]),
                         float(table.mean[i]) if table.n[i] else math.nan,
                         float(table.std[i]) if table.n[i] else math.nan)
            for i in range(bins)]
