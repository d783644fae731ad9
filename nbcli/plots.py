"""PNG figures for `nb probe-bias` (matplotlib, an optional extra: `pip install nbcli[plot]`).

matplotlib is imported inside the functions, never at import time, and only through its
object-oriented API (Figure + Agg canvas), so no global pyplot state and no display is needed.
Every figure is written atomically (with `outputs`, as part of one commit) and carries provenance in its PNG text chunks.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from nbcli.atomic import OutputSet, atomic_write
from nbcli.errors import ConfigError
from nbcli.probes import FrequencyBin

#: At most this many points in a scatter plot (a random subset beyond; binned means use all tokens).
MAX_SCATTER_POINTS = 60_000


def _figure(width: float, height: float) -> Any:
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise ConfigError("--plot needs matplotlib: pip install 'nbcli[plot]'") from None
    fig = Figure(figsize=(width, height), dpi=120, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _save(fig: Any, path: Path, metadata: dict[str, str], outputs: OutputSet | None) -> None:
    """Write the PNG atomically, or as one of `outputs` (committed together by the caller)."""
    with contextlib.nullcontext(outputs.open(path)) if outputs is not None else atomic_write(path) as handle:
        fig.savefig(handle, format="png", metadata={"Software": metadata.get("nb.version", "nb"),
                                                    "Description": "; ".join(f"{k}={v}" for k, v in metadata.items())})


def plot_frequency_direction(path: Path, counts: np.ndarray, scores: np.ndarray, bins: Sequence[FrequencyBin],
                             *, rho: float, title: str, metadata: dict[str, str], seed: int = 0,
                             outputs: OutputSet | None = None) -> None:
    """Corpus count (log x) vs <b_LN, w_i>, with binned mean +- std (paper 003 fig. 3 style)."""
    c = np.asarray(counts)
    s = np.asarray(scores, dtype=np.float64)
    seen = np.flatnonzero(c > 0)
    shown = seen
    if seen.size > MAX_SCATTER_POINTS:
        shown = np.random.default_rng(seed).choice(seen, MAX_SCATTER_POINTS, replace=False)
    fig = _figure(7.0, 4.6)
    ax = fig.add_subplot()
    ax.scatter(c[shown], s[shown], s=3, alpha=0.25, color="tab:blue", linewidths=0, rasterized=True,
               label=f"tokens ({shown.size:,}{' sampled' if shown.size < seen.size else ''} of {seen.size:,} seen)")
    full = [b for b in bins if b.tokens]
    centres = [10 ** ((b.log10_lo + b.log10_hi) / 2) for b in full]
    ax.errorbar(centres, [b.mean for b in full], yerr=[b.std for b in full], color="tab:red", marker="o",
                markersize=5, capsize=3, linewidth=1.5, label="bin mean ± std")
    ax.set_xscale("log")
    ax.set_xlabel("corpus frequency (count, log scale)")
    ax.set_ylabel(r"$\langle b_{LN}, w_i \rangle$")
    ax.set_title(f"{title}  (Spearman ρ = {rho:.3f})" if np.isfinite(rho) else title, fontsize=10)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    _save(fig, path, metadata, outputs)


def plot_cosine_histogram(path: Path, before: np.ndarray, after: np.ndarray | None, *, mean_before: float,
                          mean_after: float | None, title: str, metadata: dict[str, str],
                          outputs: OutputSet | None = None) -> None:
    """Histogram of pairwise cosines of output embeddings, before/after removing the b_LN direction."""
    fig = _figure(7.0, 4.2)
    ax = fig.add_subplot()
    data = [np.asarray(before)] + ([np.asarray(after)] if after is not None else [])
    lo = min(float(x.min()) for x in data if x.size) if any(x.size for x in data) else -1.0
    hi = max(float(x.max()) for x in data if x.size) if any(x.size for x in data) else 1.0
    edges = np.linspace(lo, hi, 81)
    ax.hist(before, bins=edges, alpha=0.55, color="tab:blue",
            label=f"W (mean cosine, all pairs incl. i = j: {mean_before:.3g})")
    ax.axvline(mean_before, color="tab:blue", linestyle="--", linewidth=1)
    if after is not None and mean_after is not None:
        ax.hist(after, bins=edges, alpha=0.55, color="tab:orange",
                label=f"W without the b_LN direction ({mean_after:.3g})")
        ax.axvline(mean_after, color="tab:orange", linestyle="--", linewidth=1)
    ax.set_xlabel(r"$\cos(w_i, w_j)$, $i \neq j$")
    ax.set_ylabel("pairs (sampled tokens)")
    ax.set_title(title, fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    _save(fig, path, metadata, outputs)


def plot_diversity_vs_perplexity(path: Path, rows: Sequence[dict[str, Any]], *, title: str,
                                 metadata: dict[str, str], outputs: OutputSet | None = None) -> None:
    """n-gram diversity D (paper 003 eq. 6) against the perplexity of human text, one point per arm
    (lambda arms joined in lambda order, paper 003 table 2's trade-off)."""
    fig = _figure(6.4, 4.4)
    ax = fig.add_subplot()
    lam = sorted((r for r in rows if r.get("logit_adjust") is None and r.get("perplexity") is not None),
                 key=lambda r: -1.0 if r.get("lambda") is None else r["lambda"])
    if lam:
        ax.plot([r["perplexity"] for r in lam], [r["diversity"] for r in lam], color="tab:blue", marker="o",
                linewidth=1.2, label=r"$\lambda b_{LN}$")
        for r in lam:
            ax.annotate(r["arm"].replace("lambda ", "λ="), (r["perplexity"], r["diversity"]), fontsize=7,
                        textcoords="offset points", xytext=(4, 3))
    for r in rows:
        if r.get("logit_adjust") is not None and r.get("perplexity") is not None:
            ax.scatter([r["perplexity"]], [r["diversity"]], color="tab:red", marker="s", zorder=3, label=r["arm"])
    ax.set_xlabel("perplexity of human text (lower is better)")
    ax.set_ylabel("n-gram diversity D (higher is more diverse)")
    ax.set_title(title, fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    _save(fig, path, metadata, outputs)
