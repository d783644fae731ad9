"""Which precision each `nb probe-bias` statistic is computed in, and its documented tolerance
against an all-float64 computation: the `precision` section of the report.

Every statistic reads W by row blocks converted to float32 and sums over blocks in float64; the
d x d algebra (eigendecompositions, Sigma^(-1/2)) is float64 (`nbcli.analysis.geometry`). Of the
V x d^2 products, pass 1's Gram matrix (W^T W: the partition function's directions, the uniform
spectra) and pass 2's (the partition logits, the whitened rows) are float32; the unigram-weighted
scatter (Sigma, which whitening inverts) is float64: whitening divides by Sigma's small
eigenvalues, and float32 products there put 5e-5 into the whitened scores (1e-2 relative into the
whitened partition ratio) at Sigma's condition number 1e3, against 1e-7 from the float32 Gram.

The tolerances are what tests/analysis/test_probe_precision.py checks on random matrices
U diag(s) V^T + m with a known spectrum (singular values from 1 to 0.03: Sigma's condition number
about 1e3), against a plain float64 numpy computation: absolute for scores in [-1, 1] or [0, 1],
relative for the partition ratios, which span orders of magnitude. Measured errors were 10 to 100
times smaller than these.
"""

from __future__ import annotations

from typing import Any


#: report key prefix (the longest that matches a key applies) -> (what it is computed in, tolerance
#: "abs X" or "rel X" against float64).
STATISTICS: dict[str, tuple[str, str]] = {
    "frequency_direction.": ("<b_LN, w_i> float32 products; ranks and correlations float64", "abs 1e-6"),
    "isotropy.mean_cosine": ("row norms and sums float32 per block, summed in float64", "abs 1e-5"),
    "isotropy.partition_ratio": ("directions: float64 eigenvectors of W^T W (float32 products summed in float64; "
                                 "float64 products with counts); logits and exponentials float32, sums float64",
                                 "rel 1e-5"),
    "zipfian.raw.sym1": ("row norms float32, sums float64", "abs 1e-6"),
    "zipfian.raw.sym2": ("float64 eigenvalues of Sigma and of the uniform covariance (float64 products: with "
                         "counts W^T W is float64 too; with the partition function the uniform covariance's from "
                         "W^T W's eigendecomposition by the rank-one secular equation unless the mean dwarfs the "
                         "spread)", "abs 1e-5"),
    "zipfian.raw.mean_cosine": ("row norms and sums float32 per block, summed in float64", "abs 1e-4"),
    "zipfian.raw.partition_ratio": ("as isotropy.partition_ratio", "rel 1e-5"),
    "zipfian.whitened.": ("Sigma^(-1/2) and W^T W float64 from float64 products; whitened rows float32 products, "
                          "sums float64", "abs 1e-5"),
    "zipfian.whitened.partition_ratio": ("as zipfian.whitened; directions as isotropy.partition_ratio", "rel 1e-4"),
    "zipfian.frequency_direction.": ("raw rows as zipfian.raw, whitened rows as zipfian.whitened", "abs 1e-5"),
}


def tolerance_of(key: str) -> tuple[str, float]:
    """("abs" | "rel", value): the documented tolerance of a report key such as
    `zipfian.whitened.sym2_uniform` (KeyError for a key no prefix covers)."""
    prefix = max((p for p in STATISTICS if key.startswith(p)), key=len, default=None)
    if prefix is None:
        raise KeyError(key)
    kind, value = STATISTICS[prefix][1].split()
    return kind, float(value)


def precision_section(device: str, threads: int) -> dict[str, Any]:
    """The report's `precision` section: where and on how many CPU threads the algebra ran, and per
    statistic what it was computed in and its tolerance against float64."""
    return {"gram_products": "float32", "weighted_scatter_products": "float64", "row_products": "float32",
            "sums": "float64", "d_by_d": "float64", "device": device, "threads": threads,
            "statistics": {name.rstrip("."): {"precision": how, "tolerance": tol}
                           for name, (how, tol) in STATISTICS.items()}}
