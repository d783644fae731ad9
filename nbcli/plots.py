"""PNG figures of probe-bias, eval, generate, embedding-stats and attention-maps (matplotlib, an optional
extra: `pip install nbcli[plot]`); `nb plot-run`'s run curves are `nbcli.run_plots`, built on
`new_figure` and `save_figure` here.

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
from nbcli.analysis.bins import FrequencyBin

#: At most this many points in a scatter plot (a random subset beyond; binned means use all tokens).
MAX_SCATTER_POINTS = 60_000


def check_figure_outputs(option: str, outputs: list[Path], inputs: list[Any], *, folder: Path | None = None,
                         png: bool = True) -> None:
    """Before any work: matplotlib is installed, each figure name ends in .png (`png`), and no
    figure lands on an input (`nbcli.outputs.guard_outputs`; `folder`: a folder of figures)."""
    import importlib.util

    from nbcli.outputs import guard_outputs

    if importlib.util.find_spec("matplotlib") is None:
        raise ConfigError(f"{option} needs matplotlib: pip install 'nbcli[plot]'")
    for path in outputs if png else ():
        if Path(path).suffix.lower() != ".png":
            raise ConfigError(f"{option} {path}: the figure is a PNG; give a name ending in .png")
    guard_outputs(outputs, inputs, folder=folder, option=option)


def new_figure(width: float, height: float) -> Any:
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise ConfigError("--plot needs matplotlib: pip install 'nbcli[plot]'") from None
    fig = Figure(figsize=(width, height), dpi=120, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def save_figure(fig: Any, path: Path, metadata: dict[str, str], outputs: OutputSet | None) -> None:
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
    fig = new_figure(7.0, 4.6)
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
    save_figure(fig, path, metadata, outputs)


def plot_cosine_histogram(path: Path, before: np.ndarray, after: np.ndarray | None, *, mean_before: float,
                          mean_after: float | None, title: str, metadata: dict[str, str],
                          outputs: OutputSet | None = None) -> None:
    """Histogram of pairwise cosines of output embeddings, before/after removing the b_LN direction."""
    fig = new_figure(7.0, 4.2)
    ax = fig.add_subplot()
    data = [np.asarray(before)] + ([np.asarray(after)] if after is not None else [])
    lo = min(float(x.min()) for x in data if x.size) if any(x.size for x in data) else -1.0
    hi = max(float(x.max()) for x in data if x.size) if any(x.size for x in data) else 1.0
    edges = np.linspace(lo, hi, 81)
    # Step outlines over light fills: where the two series overlap, both outlines stay visible
    # (an opaque or same-alpha bar of one series hid the other).
    ax.hist(before, bins=edges, histtype="stepfilled", alpha=0.2, color="tab:blue")
    ax.hist(before, bins=edges, histtype="step", linewidth=1.6, color="tab:blue",
            label=f"W (mean cosine, all pairs incl. i = j: {mean_before:.3g})")
    ax.axvline(mean_before, color="tab:blue", linestyle="--", linewidth=1)
    if after is not None and mean_after is not None:
        ax.hist(after, bins=edges, histtype="stepfilled", alpha=0.2, color="tab:orange")
        ax.hist(after, bins=edges, histtype="step", linewidth=1.6, linestyle=(0, (4, 1.5)), color="tab:orange",
                label=f"W without the b_LN direction ({mean_after:.3g})")
        ax.axvline(mean_after, color="tab:orange", linestyle="--", linewidth=1)
    ax.set_xlabel(r"$\cos(w_i, w_j)$, $i \neq j$")
    ax.set_ylabel("pairs (sampled tokens)")
    ax.set_title(title, fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    save_figure(fig, path, metadata, outputs)


def plot_zipfian(path: Path, counts: np.ndarray, before: np.ndarray, after: np.ndarray,
                 section: dict[str, Any], *, title: str, metadata: dict[str, str], seed: int = 0,
                 outputs: OutputSet | None = None) -> None:
    """Zipfian whitening (Yokoi et al. 2024): left, corpus count against <w_i, u> (u the frequency
    direction) before and after whitening; right, Yokoi et al.'s symmetry scores (unigram-weighted),
    mean cosine and partition ratio under uniform and unigram weighting, raw and whitened."""
    c = np.asarray(counts)
    seen = np.flatnonzero(c > 0)
    shown = seen
    if seen.size > MAX_SCATTER_POINTS:
        shown = np.random.default_rng(seed).choice(seen, MAX_SCATTER_POINTS, replace=False)
    fig = new_figure(11.0, 4.4)
    left, right = fig.subplots(1, 2, width_ratios=[1.3, 1])
    fd = section.get("frequency_direction") or {}
    for values, colour, label, rho in ((before, "tab:blue", "raw", fd.get("spearman_before")),
                                       (after, "tab:orange", "Zipfian-whitened", fd.get("spearman_after"))):
        v = np.asarray(values, dtype=np.float64)
        scale = float(np.std(v[seen])) or 1.0  # both on one axis: each in units of its own std
        extra = f", ρ = {rho:.3f}" if rho is not None else ""
        left.scatter(c[shown], v[shown] / scale, s=3, alpha=0.25, color=colour, linewidths=0, rasterized=True,
                     label=f"{label}{extra}")
    left.set_xscale("log")
    left.set_xlabel("corpus frequency (count, log scale)")
    left.set_ylabel(f"<w_i, u> / std   (u = {section.get('direction')})")
    left.grid(True, alpha=0.3)
    left.legend(loc="best", fontsize=8, markerscale=4)
    names = ["sym1_unigram", "sym2_unigram", "mean_cosine_uniform", "mean_cosine_unigram", "partition_ratio_uniform",
             "partition_ratio_unigram"]
    labels = ["Sym1\nunigram", "Sym2\nunigram", "mean cos\nuniform", "mean cos\nunigram", "Z ratio\nuniform",
              "Z ratio\nunigram"]
    x = np.arange(len(names))
    for offset, key, colour in ((-0.2, "raw", "tab:blue"), (0.2, "whitened", "tab:orange")):
        values = [(section.get(key) or {}).get(n) for n in names]
        right.bar(x + offset, [np.nan if v is None else v for v in values], width=0.4, color=colour,
                  label="raw" if key == "raw" else "Zipfian-whitened")
    right.set_xticks(x, labels, fontsize=8)
    right.axhline(0, color="black", linewidth=0.6)
    right.set_ylabel("Sym1, Sym2, Z ratio: 1 best; mean cos: 0 best")
    right.grid(True, axis="y", alpha=0.3)
    right.legend(loc="best", fontsize=8)
    removed = fd.get("removed")
    suffix = f"  (whitening removes {removed:.1%} of the frequency direction's share)" if removed is not None else ""
    fig.suptitle(f"{title}{suffix}", fontsize=10)
    save_figure(fig, path, metadata, outputs)


def _shown(counts: np.ndarray, keep: np.ndarray, seed: int) -> np.ndarray:
    """The indices a scatter draws: `keep`'s, at most MAX_SCATTER_POINTS of them (a seeded sample)."""
    seen = np.flatnonzero(keep)
    if seen.size > MAX_SCATTER_POINTS:
        seen = np.sort(np.random.default_rng(seed).choice(seen, MAX_SCATTER_POINTS, replace=False))
    return seen


def plot_bias_effect(path: Path, arrays: dict[str, np.ndarray], section: dict[str, Any], *, title: str,
                     metadata: dict[str, str], seed: int = 0, outputs: OutputSet | None = None) -> None:
    """Paper 003 fig. 1: left, corpus count (log x) against each token's predicted probability with
    and without b_LN (log y), the binned geometric means with their geometric spread (x/÷ 10^std of
    log10 p; the paper's footnote 4 std of p itself is in the JSON, but would reach below 0 on a log
    axis), the unigram's bins and the uniform 1/V; right, the per-token change
    log10 p_without - log10 p_with and its bin means."""
    c = np.asarray(arrays["counts"], dtype=np.float64)
    pw = np.asarray(arrays["with"], dtype=np.float64)
    po = np.asarray(arrays["without"], dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        keep = (c > 0) & (pw > 0) & (po > 0)
    shown = _shown(c, keep, seed)
    fig = new_figure(11.0, 4.4)
    left, right = fig.subplots(1, 2)
    bins = [b for b in section["bins"] if b["tokens"]]
    centres = [10 ** ((b["log10_count_lo"] + b["log10_count_hi"]) / 2) for b in bins]
    for values, key, colour, label in ((pw, "with", "tab:blue", "with b_LN"),
                                       (po, "without", "tab:orange", "without b_LN")):
        left.scatter(c[shown], values[shown], s=3, alpha=0.15, color=colour, linewidths=0, rasterized=True)
        mean = np.array([b[f"log10_p_{key}"] for b in bins])
        std = np.array([b[f"log10_p_{key}_std"] for b in bins])
        left.errorbar(centres, 10 ** mean, yerr=[10 ** mean - 10 ** (mean - std), 10 ** (mean + std) - 10 ** mean],
                      color=colour, marker="o", markersize=4, capsize=3, label=f"{label} (bin geometric mean ×/÷ geometric std)")
    left.plot(centres, [10 ** b["log10_unigram"] for b in bins], color="tab:green", linestyle="--", label="Unigram")
    left.axhline(10 ** section["log10_uniform"], color="grey", linestyle=":", label="Uniform")
    left.set_xscale("log")
    left.set_yscale("log")
    left.set_xlabel("corpus frequency (count, log scale)")
    left.set_ylabel(f"predicted probability ({section['positions']} positions, {section['space']} mean)")
    left.legend(loc="best", fontsize=7)
    left.grid(True, alpha=0.3)
    change = np.log10(po) - np.log10(pw) if shown.size else np.zeros(0)
    right.scatter(c[shown], change[shown] if shown.size else [], s=4, alpha=0.5, color="tab:purple", linewidths=0,
                  rasterized=True, label=f"tokens ({shown.size:,} of {int(keep.sum()):,})")
    right.plot(centres, [b["log10_change"] for b in bins], color="tab:red", marker="o", label="bin mean")
    right.axhline(0.0, color="grey", linewidth=0.8)
    right.set_xscale("log")
    right.set_xlabel("corpus frequency (count, log scale)")
    right.set_ylabel(r"$\log_{10} p_{w/o\ b_{LN}} - \log_{10} p$")
    rho = section.get("spearman_change_vs_count")
    right.set_title(f"Spearman ρ(change, count) = {rho:.3f}" if rho is not None else "", fontsize=9)
    right.legend(loc="best", fontsize=7)
    right.grid(True, alpha=0.3)
    fig.suptitle(title, fontsize=10)
    save_figure(fig, path, metadata, outputs)


def plot_by_frequency(path: Path, series: Sequence[tuple[str, dict[str, Any]]], *, title: str,
                      metadata: dict[str, str], outputs: OutputSet | None = None) -> None:
    """Paper 000 fig. 4: per checkpoint, the binned average log-probability of the ground-truth
    token (+- standard error; no bar for a one-token bin, which has none) against its log-unigram probability; upper panel the full model,
    lower panel with the output bias dropped (when any checkpoint has one). Tokens per bin are
    written beside each point of the first series."""
    lower = any(s.get("output_bias_dropped") for _name, s in series)
    fig = new_figure(7.0, 7.6 if lower else 4.4)
    axes = fig.subplots(2, 1, sharex=True) if lower else [fig.add_subplot()]
    panels = [("mean_log_prob", "sem", "all parameters")]
    if lower:
        panels.append(("mean_log_prob_without_bias", "sem_without_bias", "output bias dropped"))
    for ax, (key, err, label) in zip(axes, panels):
        for i, (name, section) in enumerate(series):
            bins = [b for b in section["bins"] if b["tokens"] and b.get(key) is not None]
            if not bins:
                continue
            x = [(b["log_unigram_lo"] + b["log_unigram_hi"]) / 2 for b in bins]
            # a one-token bin has no standard error (null): its point is drawn without a bar
            yerr = [np.nan if b.get(err) is None else b[err] for b in bins]
            ax.errorbar(x, [b[key] for b in bins], yerr=yerr, marker="o", markersize=4, capsize=3, label=name)
            if i == 0:
                for xi, b in zip(x, bins):
                    ax.annotate(str(b["tokens"]), (xi, b[key]), textcoords="offset points", xytext=(0, 6),
                                fontsize=6, ha="center", color="grey")
        ax.set_ylabel("average log-probability (nats)")
        ax.set_title(label, fontsize=9)
        ax.grid(True, alpha=0.3)
        ax.legend(loc="best", fontsize=7)
    axes[-1].set_xlabel("log-unigram probability in the training counts (nats)")
    fig.suptitle(title, fontsize=10)
    save_figure(fig, path, metadata, outputs)


def plot_embedding_stats(path: Path, rows: Sequence[dict[str, Any]], *, title: str, metadata: dict[str, str],
                         outputs: OutputSet | None = None) -> None:
    """Paper 002 tables 2, 6, 8 as a figure: per row, the range [min, max] as a bar and mean +- sigma
    as a marker with error bars; left as stored, right scaled by sqrt(D) (table 6). Symmetric-log x
    axis, since ranges differ by orders of magnitude (T5's -792..332 next to Xavier's +-0.03)."""
    fig = new_figure(11.0, 1.2 + 0.45 * max(1, len(rows)))
    panels = fig.subplots(1, 2, sharey=True)
    y = np.arange(len(rows))[::-1]
    for ax, scaled in zip(panels, (False, True)):
        values = [r["scaled"] if scaled else r for r in rows]
        lo = np.array([v["min"] for v in values])
        hi = np.array([v["max"] for v in values])
        mean = np.array([v["mean"] for v in values])
        std = np.array([v["std"] for v in values])
        ax.hlines(y, lo, hi, color="tab:blue", linewidth=6, alpha=0.35, label="range [min, max]")
        ax.errorbar(mean, y, xerr=std, fmt="o", color="tab:red", markersize=4, capsize=3, label="mean ± σ")
        spread = max(float(np.abs(np.concatenate([lo, hi])).max()), 1e-12)
        ax.set_xscale("symlog", linthresh=max(spread * 1e-3, float(np.min(std[std > 0])) if np.any(std > 0) else 1e-6))
        ax.axvline(0, color="black", linewidth=0.6)
        ax.set_xlabel("value × √D (table 6's scaled)" if scaled else "value")
        ax.grid(True, axis="x", alpha=0.3)
    panels[0].set_yticks(y, [r["label"] for r in rows], fontsize=8)
    panels[0].legend(loc="best", fontsize=8)
    fig.suptitle(title, fontsize=10)
    save_figure(fig, path, metadata, outputs)


def plot_diversity_vs_perplexity(path: Path, rows: Sequence[dict[str, Any]], *, title: str,
                                 metadata: dict[str, str], outputs: OutputSet | None = None) -> None:
    """n-gram diversity D (paper 003 eq. 6) against the perplexity of human text, one point per arm
    (lambda arms joined in lambda order, paper 003 table 2's trade-off)."""
    fig = new_figure(6.4, 4.4)
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
    save_figure(fig, path, metadata, outputs)


PATTERN_LABELS = {"next": "[Next]", "prev": "[Prev]", "first": "[First]", "delim": "[Delim]", "period": "[Period]"}


def plot_attention_maps(path: Path, report: dict[str, Any], *, metadata: dict[str, str],
                        outputs: OutputSet | None = None) -> None:
    """Paper 001 figs. 1, 2, 4 from an `nb attention-maps` report: one row per head, one column per
    checkpoint, then the head's target pattern (the one AG assigned it, else the closest at the last
    checkpoint); a last row with every pattern for the same tokens. Rows are queries, columns keys."""
    checkpoints = report["checkpoints"]
    heads = report["heads"]
    patterns = {name: np.asarray(P) for name, P in report["patterns"].items()}
    tokens = report["tokens"]
    n_cols = max(len(checkpoints) + 1, len(patterns))
    size = 1.9 if len(tokens) <= 24 else 2.6
    fig = new_figure(size * n_cols + 0.6, size * (len(heads) + 1) + 0.4)
    axes = fig.subplots(len(heads) + 1, n_cols, squeeze=False)
    for ax in axes.flat:
        ax.set_axis_off()
    labels = tokens if len(tokens) <= 40 else None

    def show(ax: Any, matrix: np.ndarray, title: str) -> None:
        ax.set_axis_on()
        ax.imshow(matrix, cmap="viridis", vmin=0.0, vmax=1.0, interpolation="nearest")
        ax.set_title(title, fontsize=7)
        n = matrix.shape[0]
        if labels is None:
            ax.set_xticks([])
            ax.set_yticks([])
        else:
            ax.set_xticks(range(n), labels, rotation=90, fontsize=5)
            ax.set_yticks(range(n), labels, fontsize=5)

    by_key = {(m["layer"], m["head"], m["checkpoint"]): m for m in report["maps"]}
    for row, head in enumerate(heads):
        last = None
        for col, ckpt in enumerate(checkpoints):
            entry = by_key[(head["layer"], head["head"], ckpt["path"])]
            last = entry
            show(axes[row, col], np.asarray(entry["matrix"]),
                 f"L{head['layer']}.H{head['head']} step {ckpt['step']} ({ckpt['request']})\n"
                 f"closest {PATTERN_LABELS[entry['closest']]}")
        target = head["assigned"] or (last["closest"] if last else None)
        if target in patterns:
            kind = "AG target" if head["assigned"] else "closest pattern"
            show(axes[row, len(checkpoints)], patterns[target], f"{kind}: {PATTERN_LABELS[target]}")
    for col, (name, P) in enumerate(patterns.items()):
        show(axes[len(heads), col], P, f"pattern {PATTERN_LABELS[name]}")
    fig.suptitle(f"Attention maps for {report['sentence']!r} (paper 001 figs. 1, 2, 4; rows: queries, "
                 "columns: keys)", fontsize=9)
    save_figure(fig, path, metadata, outputs)
