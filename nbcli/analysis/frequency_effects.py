"""Per-token predictions against token frequency: paper 003 fig. 1 (and figs. 4-7), the change in
each token's predicted probability when b_LN is removed, and paper 000 fig. 4, the average
log-probability of each ground-truth token against its log-unigram probability. Arrays in,
JSON-ready sections out; the sums (`TokenStats`) come from one `nb eval` pass (`nbcli.lm.perplexity`).

Choices the papers leave to nb (documented in `nb eval --help` and docs/eval-generate.md):
* Paper 003 fig. 1 averages "the word prediction distributions for each time step" (sec. 3.1): by
  default every scored position, in probability space (p_bar, the distribution of table 1's KL);
  `positions="target"` averages p(i) only where i is the ground truth, `space="log"` averages log p
  (a geometric mean). Bins: equal-width intervals of log10 corpus count, each with what the paper's
  footnote 4 plots, the geometric mean of p and the (population) std of p itself, and beside them
  the std of log10 p (the geometric spread, which the figure draws: on its log axis the std of p
  would reach below 0); tokens with count 0 are not binned.
* Paper 000 fig. 4: a token's average is over the positions where it is the ground truth, of the
  natural-log probability; bins are equal-width intervals of the log-unigram probability (nats) with
  the mean and its standard error (the paper's bars: sample std, ddof 1, / sqrt(n); none for a bin
  of one token) and the number of tokens per bin.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from nbcli.analysis.bins import equal_width_bins as equal_width_table
from nbcli.errors import ConfigError

Positions = Literal["all", "target"]
Space = Literal["prob", "log"]
POSITIONS: tuple[str, ...] = ("all", "target")
SPACES: tuple[str, ...] = ("prob", "log")


@dataclass
class TokenStats:
    """Per-token sums over the scored positions (float64 numpy [V]) for paper 003 fig. 1 and paper 000
    fig. 4, as one `nb eval` pass sums them (`nbcli.lm.perplexity`). "without": with the logits shifted
    (W b_LN, or the output bias b) before the softmax, one entry per named shift.

    prob_sum[i] = sum over all positions of p(i | context); log_prob_sum likewise of log p(i | ...);
    target_count[i] = positions whose ground-truth token is i; target_log_prob_sum[i] = sum of
    log p(i | context) over those positions (target_prob_sum likewise of p)."""

    positions: int
    prob_sum: np.ndarray
    log_prob_sum: np.ndarray
    target_count: np.ndarray
    target_prob_sum: np.ndarray
    target_log_prob_sum: np.ndarray
    without: dict[str, TokenStats] = field(default_factory=dict)


def equal_width_bins(x: np.ndarray, y: np.ndarray, bins: int) -> list[dict[str, Any]]:
    """Equal-width bins of x over [min x, max x] (the last includes its top) with the count, mean,
    population std (ddof 0) and standard error of the mean (sample std, ddof 1, / sqrt(n), as
    scipy.stats.sem) of y in each; NaN entries of x or y are left out; None for an empty bin's
    statistics and for the standard error of a one-point bin. All points in one bin when x is
    constant."""
    if bins < 1:
        raise ConfigError(f"--bins {bins}: must be at least 1")
    table = equal_width_table(x, y, bins)
    if table is None:
        return []
    out = []
    for b in range(bins):
        n = int(table.n[b])
        mean = float(table.mean[b]) if n else None
        std = float(table.std[b]) if n else None
        out.append({"lo": float(table.edges[b]), "hi": float(table.edges[b + 1]), "tokens": n, "mean": mean,
                    "std": std, "sem": float(table.sem[b]) if n > 1 else None})
    return out


def per_token_probability(stats: TokenStats, positions: Positions = "all", space: Space = "prob") -> np.ndarray:
    """Each token's predicted probability averaged over positions [V]: over every scored position
    (`all`) or only where the token is the ground truth (`target`; NaN for a token that never is),
    of p (`prob`: the arithmetic mean) or of log p (`log`: exp of the mean, a geometric mean)."""
    if positions not in POSITIONS or space not in SPACES:
        raise ConfigError(f"positions {positions!r} / space {space!r}: expected one of {POSITIONS} / {SPACES}")
    if positions == "all":
        total, n = (stats.prob_sum if space == "prob" else stats.log_prob_sum), float(stats.positions)
    else:
        total, n = (stats.target_prob_sum if space == "prob" else stats.target_log_prob_sum), stats.target_count
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(np.asarray(n) > 0, total / np.maximum(n, 1), np.nan)
    return mean if space == "prob" else np.exp(mean)


def bias_effect(p_with: np.ndarray, p_without: np.ndarray, counts: np.ndarray, bins: int = 10) -> dict[str, Any]:
    """Paper 003 fig. 1: per token the change log10 p_without - log10 p_with, and equal-width bins of
    log10 count with, for p with b_LN and without it, the geometric mean (the mean of log10 p) and
    the std of p (footnote 4: "each bin's geometric mean and standard deviation for the word
    prediction probabilities"; population std, ddof 0) and of log10 p, and the geometric mean of the
    unigram counts / total; tokens with count 0 or an undefined probability are not binned.
    Spearman rho of the change with the count over the binned tokens."""
    from nbcli.probes import spearman

    c = np.asarray(counts, dtype=np.float64)
    pw, po = np.asarray(p_with, dtype=np.float64), np.asarray(p_without, dtype=np.float64)
    if not (c.shape == pw.shape == po.shape):
        raise ConfigError(f"bias effect: {c.shape[0]} counts for {pw.shape[0]} token probabilities")
    with np.errstate(divide="ignore", invalid="ignore"):
        lw, lo_ = np.log10(pw), np.log10(po)
        x = np.where(c > 0, np.log10(np.where(c > 0, c, 1.0)), np.nan)
        unigram = np.log10(c / c.sum()) if c.sum() > 0 else np.full_like(c, np.nan)
    keep = (c > 0) & np.isfinite(lw) & np.isfinite(lo_)
    x = np.where(keep, x, np.nan)
    change = lo_ - lw
    series = {name: equal_width_bins(x, values, bins)
              for name, values in (("with", lw), ("without", lo_), ("unigram", unigram), ("change", change),
                                   ("p_with", pw), ("p_without", po))}
    table = [{"log10_count_lo": w["lo"], "log10_count_hi": w["hi"], "tokens": w["tokens"],
              "log10_p_with": w["mean"], "log10_p_without": o["mean"], "p_with_std": pw_["std"],
              "p_without_std": po_["std"], "log10_p_with_std": w["std"], "log10_p_without_std": o["std"],
              "log10_unigram": u["mean"], "log10_change": d["mean"]}
             for w, o, u, d, pw_, po_ in zip(series["with"], series["without"], series["unigram"], series["change"],
                                            series["p_with"], series["p_without"])]
    rho = spearman(change[keep], c[keep]) if int(keep.sum()) > 1 else math.nan
    return {"tokens": int(keep.sum()), "log10_uniform": -math.log10(pw.size),
            "spearman_change_vs_count": None if not math.isfinite(rho) else rho, "bins": table}


def by_frequency(mean_log_prob: np.ndarray, log_unigram: np.ndarray, bins: int = 10,
                 mean_log_prob_without: np.ndarray | None = None) -> dict[str, Any]:
    """Paper 000 fig. 4: equal-width bins of the log-unigram probability (nats) of each token that
    is a ground truth at least once (`mean_log_prob` finite), with the number of tokens, the mean of
    their average log-probabilities and its standard error; `mean_log_prob_without` the same with
    the output bias dropped (the figure's lower row)."""
    x = np.asarray(log_unigram, dtype=np.float64)
    y = np.asarray(mean_log_prob, dtype=np.float64)
    if x.shape != y.shape:
        raise ConfigError(f"by frequency: {x.shape[0]} unigram entries for {y.shape[0]} tokens")
    full = equal_width_bins(x, y, bins)
    rows = [{"log_unigram_lo": b["lo"], "log_unigram_hi": b["hi"], "tokens": b["tokens"],
             "mean_log_prob": b["mean"], "sem": b["sem"]} for b in full]
    if mean_log_prob_without is not None:
        # the same tokens in the same bins: a token is binned by whether it is a ground truth at all
        wo = np.where(np.isfinite(y), np.asarray(mean_log_prob_without, dtype=np.float64), np.nan)
        for row, b in zip(rows, equal_width_bins(np.where(np.isfinite(y), x, np.nan), wo, bins)):
            row["mean_log_prob_without_bias"], row["sem_without_bias"] = b["mean"], b["sem"]
    return {"tokens": int(np.isfinite(y).sum()), "bins": rows}
