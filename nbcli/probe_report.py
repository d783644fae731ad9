"""The `nb probe-bias` report: which statistics a checkpoint's tensors allow, computed and collected.

`build_report` takes the tensors (by role) and counts and returns a JSON-ready dict whose keys are
the documented interface (`frequency_direction.spearman`, `isotropy.mean_cosine`, ...). The
formulas live in `nbcli.probes`; this module decides what can be computed from what, and says why
a section is absent. `load_probe_inputs` reads them from a checkpoint through the one reader and
architecture table (`nbcli.checkpoint`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from nbcli import probes
from nbcli.counts import log_unigram

#: Roles the report uses, in the order the error message lists them.
ROLES_USED = ("output_weight", "final_ln_bias", "output_bias")


@dataclass
class ProbeInputs:
    """Tensors by role (None = the checkpoint has no such tensor) and the corpus counts."""

    counts: np.ndarray  # int64 [V] (padded with zeros to the embedding's rows when shorter)
    output_weight: probes.Rows | None = None  # [V, d], read lazily by row blocks
    final_ln_bias: np.ndarray | None = None  # [d] float32
    output_bias: np.ndarray | None = None  # [V] float32
    names: dict[str, str | None] = field(default_factory=dict)  # role -> tensor name


Progress = Callable[[str], None]


def _none(_: str) -> None:
    return None


def _finite_or_none(value: float) -> float | None:
    return value if math.isfinite(value) else None


def report_steps(inputs: ProbeInputs, partition: bool) -> int:
    """How many progress steps `build_report` will announce (for a progress bar's total)."""
    steps = 0
    if inputs.output_weight is not None:
        steps += 1 + (inputs.final_ln_bias is not None) * 2 + (2 if partition else 0)
    return steps + (inputs.output_bias is not None)


def build_report(inputs: ProbeInputs, *, bins: int = 10, smoothing_k: float = 1.0, partition: bool = True,
                 progress: Progress = _none) -> dict[str, Any]:
    """All sections that the available roles allow; absent ones carry `present: false` and a note.

    Sections: frequency_direction (paper 003 sec. 3.2, table 3), isotropy (paper 003 sec. 3.2;
    Mu & Viswanath 2018), output_bias (paper 000 app. B.5), frequency_bins (paper 003 fig. 3).
    Returns the report and, under the private key `_arrays`, the per-token scores for plotting.
    """
    counts = inputs.counts
    w, b_ln, b_out = inputs.output_weight, inputs.final_ln_bias, inputs.output_bias
    seen = int((counts > 0).sum())
    report: dict[str, Any] = {"counts": {"tokens_seen": seen, "vocab_size": int(counts.size),
                                         "total": int(counts.sum()), "smoothing_k": smoothing_k}}
    arrays: dict[str, Any] = {}

    # 1. frequency direction: <b_LN, w_i> vs counts
    fd: dict[str, Any] = {"present": False, "spearman": None, "pearson_log": None, "tokens": seen,
                          "b_ln_norm": None, "note": None}
    ln_usable = b_ln is not None and bool(np.any(b_ln != 0))
    if w is None or b_ln is None:
        fd["note"] = "needs " + " and ".join(r for r, t in (("output weight", w), ("final LayerNorm bias", b_ln))
                                              if t is None) + " (absent)"
    else:
        fd["b_ln_norm"] = float(np.linalg.norm(b_ln.astype(np.float64)))
        if not ln_usable:
            fd["note"] = "b_LN is all zeros (e.g. an untrained model): it defines no direction"
        else:
            progress("<b_LN, w_i>")
            scores = probes.row_projections(w, b_ln)
            corr = probes.frequency_correlation(scores, counts)
            fd.update(present=True, spearman=_finite_or_none(corr.spearman),
                      pearson_log=_finite_or_none(corr.pearson_log), tokens=corr.tokens)
            arrays["scores"] = scores
    report["frequency_direction"] = fd

    # 2. isotropy of the output embedding rows
    iso: dict[str, Any] = {"present": w is not None, "mean_cosine": None,
                           "mean_cosine_without_bias_direction": None, "partition_ratio": None,
                           "rows": None, "note": None if w is not None else "needs the output weight (absent)"}
    if w is not None:
        iso["rows"] = int(w.shape[0])
        progress("mean cosine")
        iso["mean_cosine"] = _finite_or_none(probes.mean_pairwise_cosine(w))
        if ln_usable:
            progress("mean cosine without b_LN direction")
            iso["mean_cosine_without_bias_direction"] = _finite_or_none(probes.mean_pairwise_cosine(w, remove=b_ln))
        else:
            iso["note"] = "no usable b_LN direction to remove"
        if partition:
            progress("partition function (W^T W, eigenvectors, Z(c))")
            part = probes.partition_isotropy(w)
            progress("partition function done")
            iso.update(partition_ratio=part.ratio, partition_log_z_min=part.log_z_min,
                       partition_log_z_max=part.log_z_max, partition_directions=part.directions)
        else:
            iso["partition_ratio_note"] = "skipped (--no-partition)"
    report["isotropy"] = iso

    # 3. output bias vs unigram
    ob: dict[str, Any] = {"present": b_out is not None, "spearman": None, "tokens": seen,
                          "kl_unigram_to_bias": None, "kl_bias_to_unigram": None, "norm": None,
                          "note": None if b_out is not None else "no output bias"}
    if b_out is not None:
        progress("output bias")
        ob["spearman"] = _finite_or_none(probes.frequency_correlation(b_out, counts).spearman)
        kl = probes.bias_vs_unigram(b_out, log_unigram(counts, smoothing_k))
        ob.update(kl_unigram_to_bias=kl.kl_unigram_to_bias, kl_bias_to_unigram=kl.kl_bias_to_unigram, norm=kl.norm)
    report["output_bias"] = ob

    # 4. frequency-binned <b_LN, w_i>
    rows = []
    if "scores" in arrays:
        arrays["bins"] = probes.frequency_bins(arrays["scores"], counts, bins)
        for item in arrays["bins"]:
            rows.append({"log10_lo": item.log10_lo, "log10_hi": item.log10_hi, "count_lo": 10 ** item.log10_lo,
                         "count_hi": 10 ** item.log10_hi, "tokens": item.tokens,
                         "mean": _finite_or_none(item.mean), "std": _finite_or_none(item.std)})
    report["frequency_bins"] = rows
    report["_arrays"] = arrays
    return report
