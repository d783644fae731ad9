"""`nb probe-bias` (float32 products but for the weighted scatter, float64 sums and d x d algebra)
stays within the documented tolerances (nbcli.analysis.probe_precision.STATISTICS) of a plain float64 numpy
computation written here from the definitions, on random matrices U diag(s) V^T + m with a known
spectrum (issue 44). No nb function computes the reference."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from scipy import stats
from scipy.special import logsumexp

from nbcli.analysis import passes
from nbcli.analysis.probe_precision import tolerance_of
from nbcli.reports.probe_bias import ProbeInputs, build_report


def known_spectrum(seed: int, v: int, d: int, top: float = 1.0, bottom: float = 0.03) -> dict[str, np.ndarray]:
    """Rows of U diag(s) V^T (U: v x d orthonormal columns, V: d x d orthogonal, s from `top` down to
    `bottom`, geometric) scaled so rows have length ~1, plus a shared mean (anisotropy) and a b_LN
    direction that tracks log-frequency; Zipf counts with 10% unseen."""
    rng = np.random.default_rng(seed)
    u, _ = np.linalg.qr(rng.normal(size=(v, d)))
    vt, _ = np.linalg.qr(rng.normal(size=(d, d)))
    s = np.geomspace(top, bottom, d)
    counts = rng.zipf(1.3, size=v).clip(max=10**7)
    counts[rng.choice(v, v // 10, replace=False)] = 0
    b_ln = rng.normal(size=d)
    b_ln /= np.linalg.norm(b_ln)
    mean = rng.normal(size=d) * 0.3 / math.sqrt(d)
    w = (u * s) @ vt * math.sqrt(v / d) + mean + 0.02 * np.outer(np.log1p(counts), b_ln)
    return {"w": w.astype(np.float32), "counts": counts, "b_ln": (0.5 * b_ln).astype(np.float32), "mean": mean}


def mean_cosine(x: np.ndarray, p: np.ndarray) -> float:
    unit = x / np.linalg.norm(x, axis=1, keepdims=True)
    total = p @ unit
    return float(total @ total / p.sum() ** 2)


def partition_ratio(x: np.ndarray, p: np.ndarray) -> float:
    _, vectors = np.linalg.eigh(x.T @ x)
    c = np.concatenate([vectors, -vectors], axis=1)
    log_z = logsumexp(x @ c, axis=0, b=p[:, None])
    return math.exp(log_z.min() - log_z.max())


def sym2(covariance: np.ndarray) -> float:
    lam = np.clip(np.linalg.eigvalsh(covariance), 0, None)
    share = lam[lam > 0] / lam.sum()
    return float(-(share * np.log(share)).sum() / math.log(covariance.shape[0]))


def measures(x: np.ndarray, p: np.ndarray) -> dict[str, float]:
    """Yokoi et al.'s scores and nb's mean cosines and partition ratios of rows x, uniform and under p."""
    v = x.shape[0]
    flat = np.full(v, 1.0 / v)
    out: dict[str, float] = {}
    for name, q in (("uniform", flat), ("unigram", p)):
        mu = q @ x
        out[f"sym1_{name}"] = 1 - float(np.linalg.norm(mu)) / float(q @ np.linalg.norm(x, axis=1))
        out[f"sym2_{name}"] = sym2((x - mu).T @ ((x - mu) * q[:, None]))
        out[f"mean_cosine_{name}"] = mean_cosine(x, q)
        out[f"partition_ratio_{name}"] = partition_ratio(x, q)
    return out


def reference(t: dict[str, np.ndarray]) -> dict[str, Any]:
    """Every statistic of the report, in float64 numpy from its definition."""
    w, counts, b = t["w"].astype(np.float64), t["counts"], t["b_ln"].astype(np.float64)
    seen = counts > 0
    e = b / np.linalg.norm(b)
    scores = w @ b
    p = counts / counts.sum()
    mu = p @ w
    lam, vec = np.linalg.eigh((w - mu).T @ ((w - mu) * p[:, None]))
    white = (w - mu) @ (vec * lam ** -0.5) @ vec.T
    flat = np.ones(len(w))

    def share(x: np.ndarray) -> float:
        cos = (x @ e) / np.linalg.norm(x, axis=1)
        return float(p @ cos ** 2 / p.sum())

    before, after = share(w), share(white)
    return {
        "frequency_direction.spearman": stats.spearmanr(scores[seen], counts[seen]).statistic,
        "frequency_direction.pearson_log": stats.pearsonr(scores[seen], np.log(counts[seen])).statistic,
        "isotropy.mean_cosine": mean_cosine(w, flat),
        "isotropy.mean_cosine_without_bias_direction": mean_cosine(w - np.outer(w @ e, e), flat),
        "isotropy.partition_ratio": partition_ratio(w, flat),
        **{f"zipfian.raw.{k}": value for k, value in measures(w, p).items()},
        **{f"zipfian.whitened.{k}": value for k, value in measures(white, p).items()},
        "zipfian.frequency_direction.share_before": before, "zipfian.frequency_direction.share_after": after,
        "zipfian.frequency_direction.removed": 1 - after / before,
        "zipfian.frequency_direction.spearman_before": stats.spearmanr((w @ e)[seen], counts[seen]).statistic,
        "zipfian.frequency_direction.spearman_after": stats.spearmanr((white @ e)[seen], counts[seen]).statistic,
    }


def flatten(report: dict[str, Any]) -> dict[str, float]:
    out = {f"frequency_direction.{k}": report["frequency_direction"][k] for k in ("spearman", "pearson_log")}
    out.update({f"isotropy.{k}": report["isotropy"][k]
                for k in ("mean_cosine", "mean_cosine_without_bias_direction", "partition_ratio")})
    zipf = report["zipfian"]
    for side in ("raw", "whitened"):
        out.update({f"zipfian.{side}.{k}": value for k, value in zipf[side].items()})
    out.update({f"zipfian.frequency_direction.{k}": value for k, value in zipf["frequency_direction"].items()})
    return out


@pytest.mark.parametrize("seed, threads, arrays", [(0, 1, "numpy"), (1, 1, "numpy"), (0, 3, "numpy"), (1, 2, "torch")])
def test_every_statistic_is_within_its_documented_tolerance_of_float64(seed: int, threads: int, arrays: str,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Also on 3 worker threads (nbcli.analysis.passes), in blocks small enough that every worker has some,
    and in torch: the code CUDA runs (`nbcli.analysis.kernels`), here on torch's CPU."""
    monkeypatch.setattr(passes, "MIN_BLOCK_FLOATS", 1 << 12)
    if arrays == "torch":
        import torch

        from nbcli.reports import probe_bias

        monkeypatch.setattr(probe_bias, "probe_device", lambda choice: torch.device("cpu"))
    t = known_spectrum(seed, 6000, 96)
    report = build_report(ProbeInputs(counts=t["counts"], output_weight=t["w"], final_ln_bias=t["b_ln"]),
                          device="cpu", threads=threads)
    assert report["precision"]["threads"] == threads and report["precision"]["gram_products"] == "float32"
    got, want = flatten(report), reference(t)
    assert set(want) <= set(got)
    for key, value in want.items():
        kind, tol = tolerance_of(key)
        assert got[key] == pytest.approx(value, **{kind: tol}), (key, kind, tol, got[key] - value)


def test_the_spectrum_is_the_one_planted() -> None:
    """The generator's own check: without the shared mean and the planted direction, W's singular
    values are the planted s (times sqrt(v / d)), so Sigma's condition number is known."""
    t = known_spectrum(0, 2000, 16)
    core = t["w"].astype(np.float64) - t["mean"] - 0.02 * np.outer(np.log1p(t["counts"]), t["b_ln"] * 2)
    singular = np.linalg.svd(core, compute_uv=False) / math.sqrt(2000 / 16)
    np.testing.assert_allclose(singular, np.geomspace(1.0, 0.03, 16), rtol=1e-4, atol=1e-5)
