"""Frequency-weighted geometry of an embedding (Yokoi et al. 2024, "Zipfian Whitening", NeurIPS):
the `zipfian` section of `nb probe-bias`, assembled from the two passes of
`nbcli.analysis.geometry`, and the paper's own symmetry scores as small pure functions.

Yokoi et al.'s scores (sec. 3 of the paper; `calc_zipfian_isotropy_score` and
`calc_uniform_isotropy_score` in their code, src/calc_isotropy_score.py, taken as ground truth), for
rows w under a distribution p (uniform: p = 1/V), both 1 for a perfectly symmetric embedding:
* first moment (degree of centrality): Sym1 = 1 - ||sum_w p(w) w|| / sum_w p(w) ||w||;
* second moment (degree of isotropy): Sym2 = -sum_k l_k log l_k / log d, l_k = lambda_k / sum lambda,
  lambda the eigenvalues of the p-weighted covariance sum_w p(w) (w - mu)(w - mu)^T (their code: the
  squared singular values of sqrt(p) (W - mu)): the spectrum's entropy over its maximum.

nb's own measures beside them (not in the paper): the mean cosine sum_ij p_i p_j cos(w_i, w_j) and
Mu & Viswanath's partition ratio with Z(c) = sum_i p_i exp(<c, w_i>), each uniform and unigram-
weighted, and the weighted share of the frequency direction before and after whitening.

Choices the paper leaves to nb (documented in `nb probe-bias --help` and docs/probes.md):
* p(w) (`--zipfian-weights`): `raw` by default, the relative frequencies the paper uses (a token
  with count 0 gets weight 0: it enters neither the mean, the covariance nor any weighted measure);
  `add-k:K` the add-k smoothed unigram (the one smoothing formula, `nbcli.counts.log_unigram`).
* Sigma^(-1/2) is the symmetric (ZCA) root (their code uses the PCA root V S^-1; both whiten, and
  every measure here is unchanged by the rotation between them), so whitened rows keep the original
  axes and a direction u means the same thing before and after.
* The frequency direction u is b_LN when the checkpoint has a non-zero one (paper 003 sec. 3.2),
  otherwise the unigram-weighted mean mu of the rows (the direction whitening centres away).
* 0 log 0 = 0 in Sym2 (their code would give NaN for an exactly zero eigenvalue); eigenvalues below
  0 by rounding count as 0.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from array_api_compat import device as device_of

from nbcli.analysis.geometry import Moments, ProjectedRows, SecondPass, Whitening
from nbcli.analysis.kernels import Array, eigvalsh, namespace_of
from nbcli.array_ops import unigram_weights
from nbcli.counts import parse_smoothing
from nbcli.errors import ConfigError
from nbcli.probes import frequency_correlation, partition_isotropy_from_log_z

#: The default `--zipfian-weights`: the raw relative frequencies of Yokoi et al.
DEFAULT_WEIGHTS = "raw"


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


# ---------------------------------------------------------------------------------------------
# Weights


def parse_zipfian_weights(spec: str) -> float:
    """`raw` (Yokoi et al.'s relative frequencies) -> 0.0, or `add-k:K` -> K (add-k:0 is raw)."""
    if spec == "raw":
        return 0.0
    try:
        return parse_smoothing(spec)
    except ConfigError:
        raise ConfigError(f"--zipfian-weights {spec!r}: expected raw or add-k:K with K >= 0, e.g. add-k:1") from None


def weighting_label(k: float) -> str:
    """The `--zipfian-weights` spelling of k: raw for 0."""
    return "raw" if k == 0 else f"add-k:{k:g}"


def zipfian_weights(counts: np.ndarray, rows: int, k: float) -> tuple[np.ndarray | None, str | None]:
    """p(w) over `rows` tokens (`nbcli.array_ops.unigram_weights`: raw frequencies for k = 0), or None
    and why (raw weights of counts that are all zero)."""
    try:
        return unigram_weights(counts, rows, k), None
    except ConfigError as err:
        return None, str(err)


# ---------------------------------------------------------------------------------------------
# Yokoi et al.'s symmetry scores


def first_moment_symmetry(mean: Array, mean_norm: float) -> float:
    """Yokoi et al. 2024's first-moment symmetry (degree of centrality) 1 - ||E_p[w]|| / E_p[||w||],
    from the weighted mean row and the weighted mean row length (NaN when every row is zero)."""
    if not mean_norm > 0:
        return math.nan
    xp = namespace_of(mean)
    return 1.0 - float(xp.linalg.vector_norm(xp.astype(mean, xp.float64))) / mean_norm


def second_moment_symmetry(spectrum: Array) -> float:
    """Yokoi et al. 2024's second-moment symmetry (degree of isotropy): the entropy of the covariance
    spectrum normalised to sum 1, over its maximum log d: -sum l log l / log d, 0 log 0 = 0 (NaN for
    d = 1 or an all-zero spectrum)."""
    xp = namespace_of(spectrum)
    values = xp.astype(spectrum, xp.float64)
    values = xp.where(values > 0, values, 0.0)
    total = float(xp.sum(values))
    d = int(values.shape[0]) if values.ndim else 1
    if d < 2 or not total > 0:
        return math.nan
    share = values[values > 0] / total
    return float(-xp.sum(share * xp.log(share))) / math.log(d)


def symmetry_scores(w: Array, p: Array | None = None) -> tuple[float, float]:
    """(Sym1, Sym2) of the rows of a [V, d] matrix under weights p (normalised here; None: uniform),
    computed densely in float64: the reference for the streamed scores of `zipfian_section`."""
    xp = namespace_of(w)
    x = xp.astype(w, xp.float64)
    weights = xp.ones(int(x.shape[0]), dtype=xp.float64, device=device_of(x)) if p is None \
        else xp.reshape(xp.astype(p, xp.float64), (-1,))
    weights = weights / weights.sum()
    mu = weights @ x
    centred = x - mu
    sigma = centred.T @ (centred * weights[:, None])
    return (first_moment_symmetry(mu, float(weights @ xp.linalg.vector_norm(x, axis=1))),
            second_moment_symmetry(eigvalsh(sigma)))


# ---------------------------------------------------------------------------------------------
# The section


def _raw_measures(raw: ProjectedRows, moments: Moments, whitening: Whitening, partition: bool) -> dict[str, Any]:
    spectrum_uniform = whitening.uniform_spectrum
    return _measures(raw, partition, {
        "sym1_uniform": first_moment_symmetry(moments.uniform_mean(), moments.norm_sum / moments.n),
        "sym1_unigram": first_moment_symmetry(moments.weighted_mean(), moments.weighted_norm_sum / moments.weight_total),
        "sym2_uniform": second_moment_symmetry(spectrum_uniform),
        "sym2_unigram": second_moment_symmetry(whitening.spectrum)})


def _whitened_measures(white: ProjectedRows, moments: Moments, whitening: Whitening, partition: bool) -> dict[str, Any]:
    total = moments.weight_total
    return _measures(white, partition, {
        "sym1_uniform": first_moment_symmetry(whitening.whitened_uniform_mean, white.norm_sum / moments.n),
        "sym1_unigram": first_moment_symmetry(white.weighted_sum / total, white.weighted_norm_sum / total),
        "sym2_uniform": second_moment_symmetry(whitening.whitened_uniform_spectrum),
        "sym2_unigram": second_moment_symmetry(whitening.whitened_spectrum)})


def _measures(rows: ProjectedRows, partition: bool, scores: dict[str, float]) -> dict[str, Any]:
    out: dict[str, Any] = {"mean_cosine_uniform": _finite(rows.mean_cosine(weighted=False)),
                           "mean_cosine_unigram": _finite(rows.mean_cosine(weighted=True)),
                           "partition_ratio_uniform": None, "partition_ratio_unigram": None}
    if partition:
        flat, zipf = (partition_isotropy_from_log_z(log_z) for log_z in rows.log_partition())
        out.update(partition_ratio_uniform=flat.ratio, partition_ratio_unigram=zipf.ratio)
    out.update({key: _finite(value) for key, value in scores.items()})
    return out


def _frequency_direction(raw: ProjectedRows, white: ProjectedRows, counts: np.ndarray) -> dict[str, Any]:
    """How much of the weighted share sum p cos^2(w_i, u) whitening removes, and rho(<w_i, u>, count)."""
    before, after = _finite(raw.frequency_share()), _finite(white.frequency_share())
    removed = 1.0 - after / before if before is not None and after is not None and before > 0 else None
    assert raw.projections is not None and white.projections is not None
    return {"share_before": before, "share_after": after, "removed": removed,
            "spearman_before": _finite(frequency_correlation(raw.projections, counts).spearman),
            "spearman_after": _finite(frequency_correlation(white.projections, counts).spearman)}


def zipfian_section(second: SecondPass | None, counts: np.ndarray, k: float, partition: bool, note: str | None = None,
                    ) -> tuple[dict[str, Any], dict[str, Any]]:
    """The `zipfian` report section from pass 2 (`nbcli.analysis.geometry.second_pass` with the
    unigram weights of `counts`, k as `--zipfian-weights`), and the arrays its figure draws (<w_i, u>
    before and after whitening). A weighting or whitening that is undefined (all counts zero under
    raw weights, a singular weighted covariance) makes the section absent with the reason as its
    note, not a failed probe."""
    section: dict[str, Any] = {"present": False, "note": note, "weighting": weighting_label(k), "direction": None,
                               "raw": None, "whitened": None, "frequency_direction": None}
    if second is None or second.whitening is None or second.whitened is None or second.raw is None:
        section["note"] = note or (second.note if second is not None else None)
        return section, {}
    assert second.moments is not None
    raw = _raw_measures(second.raw, second.moments, second.whitening, partition)
    white = _whitened_measures(second.whitened, second.moments, second.whitening, partition)
    section.update(present=True, direction=second.direction, raw=raw, whitened=white)
    if second.direction is None:
        return section, {}
    section["frequency_direction"] = _frequency_direction(second.raw, second.whitened, counts)
    return section, {"before": second.raw.projections, "after": second.whitened.projections}
