"""The figures of probe-bias, eval, plot-by-frequency, generate, embedding-stats and attention-maps,
each drawn like its paper counterpart (matplotlib, an optional extra: `pip install nbcli[plot]`);
plot-run's are `nbcli.reports.plot_run`.

Every function here draws inside nb's house style and writes through `nbcli.figure_style`: one
rcParams set (`house_style`), the object API only (no pyplot state, no display), the format from the
file's extension (.pdf, .svg, .png), --dpi/--figsize/--title (`FigureOptions`), provenance in the
file's metadata, written atomically (with `outputs`, as part of one commit). Standard errors are
drawn as bars, evaluated steps as markers, and the axes are log where the papers' are.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from nbcli.atomic import OutputSet
from nbcli.analysis.bins import FrequencyBin
from nbcli.figure_style import (CYCLE, GREY, PALETTE, FigureOptions, figure_format, house_style, new_figure,
                                require_matplotlib, save_figure, set_title)

__all__ = ["check_figure_outputs", "new_figure", "save_figure"]  # new_figure / save_figure: nbcli.figure_style's

#: At most this many points in a scatter plot (a random subset beyond; binned means use all tokens).
MAX_SCATTER_POINTS = 60_000
BLUE, VERMILLION, GREEN, ORANGE, PURPLE = (PALETTE[k] for k in ("blue", "vermillion", "green", "orange", "purple"))


def check_figure_outputs(option: str, outputs: list[Path], inputs: list[Any], *, folder: Path | None = None) -> None:
    """Before any work: matplotlib is installed, each figure's name ends in .pdf, .svg or .png
    (`figure_format`), and no figure lands on an input (`nbcli.outputs.guard_outputs`; `folder`: a
    folder of figures)."""
    from nbcli.outputs import guard_outputs

    require_matplotlib(option)
    for path in outputs:
        figure_format(path, option)
    guard_outputs(outputs, inputs, folder=folder, option=option)


def _sampled(counts: np.ndarray, keep: np.ndarray, seed: int) -> np.ndarray:
    """The indices a scatter draws: `keep`'s, at most MAX_SCATTER_POINTS of them (a seeded sample)."""
    seen = np.flatnonzero(keep)
    if seen.size > MAX_SCATTER_POINTS:
        seen = np.sort(np.random.default_rng(seed).choice(seen, MAX_SCATTER_POINTS, replace=False))
    return seen


def _scatter(ax: Any, x: np.ndarray, y: np.ndarray, colour: str, label: str | None, alpha: float = 0.25) -> None:
    """Tokens as small points, rasterised (a PDF/SVG with 50k vector dots is slow to open)."""
    ax.scatter(x, y, s=3, alpha=alpha, color=colour, linewidths=0, rasterized=True, label=label)


def _legend(ax: Any, **kwargs: Any) -> Any:
    """A legend whose token-point entries are drawn large and opaque (the points themselves are tiny
    and faint), the other entries as drawn."""
    from matplotlib.collections import PathCollection

    legend = ax.legend(**kwargs)
    for handle in getattr(legend, "legend_handles", None) or getattr(legend, "legendHandles", []):
        if isinstance(handle, PathCollection):
            handle.set_sizes([16])
            handle.set_alpha(1.0)
    return legend


def _token_note(shown: int, seen: int) -> str:
    return f"{shown:,}{' sampled' if shown < seen else ''} of {seen:,} tokens"


@house_style
def plot_frequency_direction(path: Path, counts: np.ndarray, scores: np.ndarray, bins: Sequence[FrequencyBin],
                             *, rho: float, title: str, metadata: dict[str, str], seed: int = 0,
                             outputs: OutputSet | None = None, options: FigureOptions | None = None) -> None:
    """Paper 003 fig. 3 (figs. 10-12): corpus count (log x) against <b_LN, w_i>, each token a point,
    with the binned mean ± std (population) of each log-count bin."""
    c = np.asarray(counts)
    s = np.asarray(scores, dtype=np.float64)
    keep = c > 0
    shown = _sampled(c, keep, seed)
    fig = new_figure(6.4, 4.2, options)
    ax = fig.add_subplot()
    rho_note = f"; Spearman ρ = {rho:.3f}" if np.isfinite(rho) else ""
    _scatter(ax, c[shown], s[shown], BLUE, f"tokens ({_token_note(shown.size, int(keep.sum()))}{rho_note})")
    full = [b for b in bins if b.tokens]
    centres = [10 ** ((b.log10_lo + b.log10_hi) / 2) for b in full]
    ax.errorbar(centres, [b.mean for b in full], yerr=[b.std for b in full], color=VERMILLION, marker="o",
                label="bin mean ± std")
    ax.set_xscale("log")
    ax.set_xlabel("corpus frequency (count, log scale)")
    ax.set_ylabel(r"$\langle \mathbf{b}_{\mathrm{LN}}, \mathbf{w}_i \rangle$")
    ax.grid(True, which="major")
    _legend(ax, loc="best")
    set_title(fig, title, options)
    save_figure(fig, path, metadata, outputs, options)


@house_style
def plot_cosine_histogram(path: Path, before: np.ndarray, after: np.ndarray | None, *, mean_before: float,
                          mean_after: float | None, title: str, metadata: dict[str, str],
                          outputs: OutputSet | None = None, options: FigureOptions | None = None) -> None:
    """Paper 003 sec. 3.2: the pairwise cosines of sampled output-embedding rows, before and after
    removing the b_LN direction, each mean (all pairs, i = j included) as a dashed line."""
    fig = new_figure(6.4, 3.8, options)
    ax = fig.add_subplot()
    data = [np.asarray(before)] + ([np.asarray(after)] if after is not None else [])
    lo = min(float(x.min()) for x in data if x.size) if any(x.size for x in data) else -1.0
    hi = max(float(x.max()) for x in data if x.size) if any(x.size for x in data) else 1.0
    edges = np.linspace(lo, hi, 81)
    # Step outlines over light fills: where the two series overlap, both outlines stay visible
    # (an opaque or same-alpha bar of one series hid the other).
    series = [(before, mean_before, BLUE, "-", r"$W$")]
    if after is not None and mean_after is not None:
        series.append((after, mean_after, ORANGE, (0, (4, 1.5)), r"$W$ without the $\mathbf{b}_{\mathrm{LN}}$ direction"))
    for values, mean, colour, style, label in series:
        ax.hist(values, bins=edges, histtype="stepfilled", alpha=0.2, color=colour)
        ax.hist(values, bins=edges, histtype="step", linewidth=1.6, linestyle=style, color=colour,
                label=f"{label}: mean cosine {mean:.3g}")
        ax.axvline(mean, color=colour, linestyle="--", linewidth=1)
    ax.set_xlabel(r"$\cos(\mathbf{w}_i, \mathbf{w}_j)$, $i \neq j$")
    ax.set_ylabel("pairs of sampled tokens")
    ax.grid(True)
    ax.legend(loc="best")
    set_title(fig, title, options)
    save_figure(fig, path, metadata, outputs, options)


def _share_note(fd: dict[str, Any]) -> str:
    """What whitening did to the frequency direction's share, in words that fit either sign."""
    before, after, removed = fd.get("share_before"), fd.get("share_after"), fd.get("removed")
    if before is None or after is None or removed is None:
        return ""
    verb = f"whitening removes {removed:.1%}" if removed >= 0 else f"whitening raises it by {-removed:.1%}"
    return f"share along u: {before:.3g} → {after:.3g} ({verb})"


@house_style
def plot_zipfian(path: Path, counts: np.ndarray, before: np.ndarray, after: np.ndarray,
                 section: dict[str, Any], *, title: str, metadata: dict[str, str], seed: int = 0,
                 outputs: OutputSet | None = None, options: FigureOptions | None = None) -> None:
    """Zipfian whitening (Yokoi et al. 2024) in three panels: corpus count against the projection on
    the frequency direction u (in standard deviations) before and after whitening; the measures
    whose ideal is 1 (Yokoi et al.'s Sym1 and Sym2, the partition ratio); the mean cosines, whose
    ideal is 0. Raw and whitened side by side in each."""
    c = np.asarray(counts)
    keep = c > 0
    shown = _sampled(c, keep, seed)
    fig = new_figure(12.0, 4.0, options)
    left, ones, zeros = fig.subplots(1, 3, width_ratios=[1.4, 1.2, 0.7])
    fd = section.get("frequency_direction") or {}
    for values, colour, label, rho in ((before, BLUE, "raw", fd.get("spearman_before")),
                                       (after, ORANGE, "Zipfian-whitened", fd.get("spearman_after"))):
        v = np.asarray(values, dtype=np.float64)
        scale = float(np.std(v[keep])) if keep.any() else 1.0
        extra = f", ρ = {rho:.3f}" if rho is not None else ""
        _scatter(left, c[shown], v[shown] / (scale or 1.0), colour, f"{label}{extra}")
    left.set_xscale("log")
    left.set_xlabel("corpus frequency (count, log scale)")
    direction = section.get("direction") or "u"
    left.set_ylabel(r"$\langle \mathbf{w}_i, \mathbf{u} \rangle$ (standard deviations)")
    left.set_title(f"projection on u = {direction}" + (f"\n{_share_note(fd)}" if _share_note(fd) else ""))
    left.grid(True)
    _legend(left, loc="best")
    for ax, measures, ideal in (
            (ones, [("sym1_unigram", "Sym1\nunigram"), ("sym2_unigram", "Sym2\nunigram"),
                    ("partition_ratio_uniform", "Z ratio\nuniform"), ("partition_ratio_unigram", "Z ratio\nunigram")], 1.0),
            (zeros, [("mean_cosine_uniform", "uniform"), ("mean_cosine_unigram", "unigram")], 0.0)):
        measures = [(k, label) for k, label in measures
                    if any((section.get(arm) or {}).get(k) is not None for arm in ("raw", "whitened"))]
        x = np.arange(len(measures))
        for offset, arm, colour in ((-0.2, "raw", BLUE), (0.2, "whitened", ORANGE)):
            values = [(section.get(arm) or {}).get(k) for k, _ in measures]
            ax.bar(x + offset, [np.nan if v is None else v for v in values], width=0.4, color=colour,
                   label="raw" if arm == "raw" else "Zipfian-whitened")
        ax.set_xticks(x, [label for _, label in measures])
        ax.axhline(ideal, color=GREY, linestyle=":", linewidth=1.0)
        ax.axhline(0, color="black", linewidth=0.6)
        ax.grid(True, axis="y")
    ones.set_ylabel("score (1 = isotropic)")
    ones.set_title("symmetry and partition ratio (1 best)")
    zeros.set_ylabel("mean cosine (0 = isotropic)")
    zeros.set_title("mean cosine (0 best)")
    ones.legend(loc="best")
    set_title(fig, title, options)
    save_figure(fig, path, metadata, outputs, options)


@house_style
def plot_bias_effect(path: Path, arrays: dict[str, np.ndarray], section: dict[str, Any], *, title: str,
                     metadata: dict[str, str], seed: int = 0, outputs: OutputSet | None = None,
                     options: FigureOptions | None = None) -> None:
    """Paper 003 fig. 1: left, corpus count (log x) against each token's predicted probability with
    and without b_LN (log y), the binned geometric means with their geometric spread (×/÷ 10^std of
    log10 p; the paper's footnote 4 std of p itself is in the JSON, but would reach below 0 on a log
    axis), the unigram's bins and the uniform 1/V; right, the per-token change
    log10 p_without - log10 p_with and its bin means."""
    c = np.asarray(arrays["counts"], dtype=np.float64)
    pw = np.asarray(arrays["with"], dtype=np.float64)
    po = np.asarray(arrays["without"], dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        keep = (c > 0) & (pw > 0) & (po > 0)
    shown = _sampled(c, keep, seed)
    fig = new_figure(11.0, 4.2, options)
    left, right = fig.subplots(1, 2)
    bins = [b for b in section["bins"] if b["tokens"]]
    centres = [10 ** ((b["log10_count_lo"] + b["log10_count_hi"]) / 2) for b in bins]
    for values, key, colour, label in ((pw, "with", BLUE, r"with $\mathbf{b}_{\mathrm{LN}}$"),
                                       (po, "without", ORANGE, r"without $\mathbf{b}_{\mathrm{LN}}$")):
        _scatter(left, c[shown], values[shown], colour, None, alpha=0.15)
        mean = np.array([b[f"log10_p_{key}"] for b in bins])
        std = np.array([b[f"log10_p_{key}_std"] for b in bins])
        left.errorbar(centres, 10 ** mean, yerr=[10 ** mean - 10 ** (mean - std), 10 ** (mean + std) - 10 ** mean],
                      color=colour, marker="o", label=f"{label} (bin geometric mean ×/÷ geometric std)")
    left.plot(centres, [10 ** b["log10_unigram"] for b in bins], color=GREEN, linestyle="--", marker="s",
              markersize=3, label="unigram")
    left.axhline(10 ** section["log10_uniform"], color=GREY, linestyle=":", label="uniform 1/V")
    left.set_xscale("log")
    left.set_yscale("log")
    left.set_xlabel("corpus frequency (count, log scale)")
    left.set_ylabel(f"predicted probability ({section['positions']} positions, {section['space']} mean)")
    left.legend(loc="best", fontsize=7)
    left.grid(True)
    change = np.log10(po) - np.log10(pw) if shown.size else np.zeros(0)
    _scatter(right, c[shown], change[shown] if shown.size else np.zeros(0), PURPLE,
             f"tokens ({_token_note(shown.size, int(keep.sum()))})", alpha=0.5)
    right.plot(centres, [b["log10_change"] for b in bins], color=VERMILLION, marker="o", label="bin mean")
    right.axhline(0.0, color=GREY, linewidth=0.8)
    right.set_xscale("log")
    right.set_xlabel("corpus frequency (count, log scale)")
    right.set_ylabel(r"$\log_{10} p_{\mathrm{w/o}\ b_{\mathrm{LN}}} - \log_{10} p$")
    rho = section.get("spearman_change_vs_count")
    if rho is not None:
        right.set_title(f"Spearman ρ(change, count) = {rho:.3f}")
    _legend(right, loc="best", fontsize=7)
    right.grid(True)
    set_title(fig, title, options)
    save_figure(fig, path, metadata, outputs, options)


def _bin_centre(b: dict[str, Any]) -> float:
    return (b["log_unigram_lo"] + b["log_unigram_hi"]) / 2


@house_style
def plot_by_frequency(path: Path, series: Sequence[tuple[str, dict[str, Any]]], *, title: str,
                      metadata: dict[str, str], outputs: OutputSet | None = None,
                      options: FigureOptions | None = None) -> None:
    """Paper 000 fig. 4: per checkpoint, the binned average log-probability of the ground-truth
    token ± its standard error (no bar for a one-token bin, which has none) against its log-unigram
    probability; upper panel the full model, lower panel with the output bias dropped (when any
    checkpoint has one). The tokens in each bin of the first series are the top axis's labels, clear
    of the error bars."""
    lower = any(s.get("output_bias_dropped") for _name, s in series)
    fig = new_figure(6.4, 7.0 if lower else 4.2, options)
    axes = fig.subplots(2, 1, sharex=True) if lower else [fig.add_subplot()]
    panels = [("mean_log_prob", "sem", "all parameters")]
    if lower:
        panels.append(("mean_log_prob_without_bias", "sem_without_bias", "output bias dropped"))
    markers = ("o", "s", "^", "D", "v", "P", "X")
    for ax, (key, err, label) in zip(axes, panels):
        for i, (name, section) in enumerate(series):
            bins = [b for b in section["bins"] if b["tokens"] and b.get(key) is not None]
            if not bins:
                continue
            yerr = [np.nan if b.get(err) is None else b[err] for b in bins]
            ax.errorbar([_bin_centre(b) for b in bins], [b[key] for b in bins], yerr=yerr,
                        marker=markers[i % len(markers)], color=CYCLE[i % len(CYCLE)], label=name)
        ax.set_ylabel("average log-probability (nats)")
        ax.set_title(label, loc="left")
        ax.grid(True)
        ax.legend(loc="lower right")
    first = [b for b in series[0][1]["bins"] if b["tokens"]] if series else []
    if first:
        top = axes[0].secondary_xaxis("top")
        top.set_xticks([_bin_centre(b) for b in first], [f"{b['tokens']:,}" for b in first],
                       fontsize=6, color=GREY, rotation=90 if len(first) > 8 else 0)
        top.tick_params(length=2, colors=GREY)
        top.set_xlabel("tokens per bin" + (f" ({series[0][0]})" if len(series) > 1 else ""), fontsize=7, color=GREY)
    axes[-1].set_xlabel("log-unigram probability in the training counts (nats)")
    set_title(fig, title, options)
    save_figure(fig, path, metadata, outputs, options)


@house_style
def plot_embedding_stats(path: Path, rows: Sequence[dict[str, Any]], *, title: str, metadata: dict[str, str],
                         outputs: OutputSet | None = None, options: FigureOptions | None = None) -> None:
    """Paper 002 tables 2, 6, 8 as a figure: per row, the range [min, max] as a bar and mean ± σ
    as a marker with error bars; left as stored, right scaled by sqrt(D) (table 6). Symmetric-log x
    axis, since ranges differ by orders of magnitude (T5's -792..332 next to Xavier's ±0.03)."""
    fig = new_figure(10.0, 1.2 + 0.45 * max(1, len(rows)), options)
    panels = fig.subplots(1, 2, sharey=True)
    y = np.arange(len(rows))[::-1]
    for ax, scaled in zip(panels, (False, True)):
        values = [r["scaled"] if scaled else r for r in rows]
        lo = np.array([v["min"] for v in values])
        hi = np.array([v["max"] for v in values])
        mean = np.array([v["mean"] for v in values])
        std = np.array([v["std"] for v in values])
        ax.hlines(y, lo, hi, color=BLUE, linewidth=6, alpha=0.35, label="range [min, max]")
        ax.errorbar(mean, y, xerr=std, fmt="o", color=VERMILLION, label="mean ± σ")
        spread = max(float(np.abs(np.concatenate([lo, hi])).max()), 1e-12)
        ax.set_xscale("symlog", linthresh=max(spread * 1e-3, float(np.min(std[std > 0])) if np.any(std > 0) else 1e-6))
        ax.axvline(0, color="black", linewidth=0.6)
        ax.set_xlabel(r"value $\times \sqrt{D}$ (table 6's scaled)" if scaled else "value")
        ax.grid(True, axis="x")
    panels[0].set_yticks(y, [r["label"] for r in rows])
    handles, labels = panels[0].get_legend_handles_labels()
    try:  # below the panels, clear of the bars (matplotlib >= 3.7)
        fig.legend(handles, labels, loc="outside lower center", ncols=2)
    except ValueError:
        panels[0].legend(loc="best")
    set_title(fig, title, options)
    save_figure(fig, path, metadata, outputs, options)


@house_style
def plot_diversity_vs_perplexity(path: Path, rows: Sequence[dict[str, Any]], *, title: str,
                                 metadata: dict[str, str], outputs: OutputSet | None = None,
                                 options: FigureOptions | None = None) -> None:
    """n-gram diversity D (paper 003 eq. 6) against the perplexity of human text, one point per arm
    (lambda arms joined in lambda order, paper 003 table 2's trade-off)."""
    fig = new_figure(6.0, 4.0, options)
    ax = fig.add_subplot()
    lam = sorted((r for r in rows if r.get("logit_adjust") is None and r.get("perplexity") is not None),
                 key=lambda r: -1.0 if r.get("lambda") is None else r["lambda"])
    if lam:
        ax.plot([r["perplexity"] for r in lam], [r["diversity"] for r in lam], color=BLUE, marker="o",
                label=r"$\lambda\, \mathbf{b}_{\mathrm{LN}}$")
        for r in lam:
            ax.annotate(r["arm"].replace("lambda ", "λ="), (r["perplexity"], r["diversity"]), fontsize=7,
                        textcoords="offset points", xytext=(4, 3))
    for r in rows:
        if r.get("logit_adjust") is not None and r.get("perplexity") is not None:
            ax.scatter([r["perplexity"]], [r["diversity"]], color=VERMILLION, marker="s", zorder=3, label=r["arm"])
    ax.set_xlabel("perplexity of human text (lower is better)")
    ax.set_ylabel("n-gram diversity D (higher is more diverse)")
    ax.grid(True)
    ax.legend(loc="best")
    set_title(fig, title, options)
    save_figure(fig, path, metadata, outputs, options)


PATTERN_LABELS = {"next": "[Next]", "prev": "[Prev]", "first": "[First]", "delim": "[Delim]", "period": "[Period]"}


def _percent(request: str) -> str:
    """`1%` as the figure writes it (`1 %`)."""
    return request.replace("%", " %") if request.endswith("%") else request


@house_style
def plot_attention_maps(path: Path, report: dict[str, Any], *, title: str, metadata: dict[str, str],
                        outputs: OutputSet | None = None, options: FigureOptions | None = None) -> None:
    """Paper 001 figs. 1, 2, 4 from an `nb attention-maps` report: one row per head, one column per
    distinct checkpoint (requests that found the same checkpoint share its column, headed by all of
    them), then the head's target pattern (the one AG assigned it, else the closest at the last
    checkpoint); a last row with every pattern for the same tokens. Rows of a map are queries,
    columns keys; one colour scale (0..1) for all, in a shared colour bar."""
    columns: dict[str, dict[str, Any]] = {}
    for ckpt in report["checkpoints"]:
        column = columns.setdefault(ckpt["path"], {"step": ckpt["step"], "requests": []})
        column["requests"].append(_percent(ckpt["request"]))
    heads = report["heads"]
    patterns = {name: np.asarray(P) for name, P in report["patterns"].items()}
    tokens = report["tokens"]
    n_cols = max(len(columns) + 1, len(patterns))
    size = 1.55 if len(tokens) <= 12 else 2.1 if len(tokens) <= 24 else 2.8
    fig = new_figure(size * n_cols + 1.2, size * (len(heads) + 1) + 0.7, options)
    axes = fig.subplots(len(heads) + 1, n_cols, squeeze=False)
    for ax in axes.flat:
        ax.set_axis_off()
    labels = tokens if len(tokens) <= 40 else None
    image = None

    def show(ax: Any, matrix: np.ndarray, caption: str | None = None, *, xticks: bool, yticks: bool) -> None:
        nonlocal image
        ax.set_axis_on()
        ax.spines[:].set_visible(True)  # a map is framed on all sides (the house style drops top/right spines)
        image = ax.imshow(matrix, vmin=0.0, vmax=1.0, interpolation="nearest")
        n = matrix.shape[0]
        ax.set_xticks(range(n), labels if labels is not None and xticks else [""] * n, rotation=90, fontsize=6)
        ax.set_yticks(range(n), labels if labels is not None and yticks else [""] * n, fontsize=6)
        ax.tick_params(length=0)
        if caption:
            ax.set_xlabel(caption, fontsize=7, labelpad=2)

    by_key = {(m["layer"], m["head"], m["checkpoint"]): m for m in report["maps"]}
    for row, head in enumerate(heads):
        last = None
        for col, (ckpt_path, column) in enumerate(columns.items()):
            entry = by_key[(head["layer"], head["head"], ckpt_path)]
            last = entry
            ax = axes[row, col]
            show(ax, np.asarray(entry["matrix"]), f"closest {PATTERN_LABELS[entry['closest']]}",
                 xticks=row == len(heads) - 1, yticks=col == 0)
            if row == 0:
                ax.set_title(f"step {column['step']}\n({', '.join(column['requests'])})", fontsize=8)
            if col == 0:
                guided = f"AG {PATTERN_LABELS[head['assigned']]}" if head["assigned"] else "not guided"
                ax.set_ylabel(f"layer {head['layer']} head {head['head']}\n{guided}", fontsize=8)
        target = head["assigned"] or (last["closest"] if last else None)
        if target in patterns:
            ax = axes[row, len(columns)]
            show(ax, patterns[target], xticks=row == len(heads) - 1, yticks=False)
            if row == 0:
                ax.set_title("target" if head["assigned"] else "closest pattern", fontsize=8)
            ax.set_xlabel(PATTERN_LABELS[target], fontsize=7, labelpad=2)
    for col, (name, P) in enumerate(patterns.items()):
        ax = axes[len(heads), col]
        show(ax, P, xticks=True, yticks=col == 0)
        ax.set_title(f"pattern {PATTERN_LABELS[name]}", fontsize=8)
    if image is not None:
        fig.colorbar(image, ax=axes, shrink=0.5, label="attention weight (rows: queries, columns: keys)")
    set_title(fig, title, options)
    save_figure(fig, path, metadata, outputs, options)
