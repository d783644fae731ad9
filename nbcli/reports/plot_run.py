"""`nb plot-run`'s figures: curves of `nb train` runs, several overlaid, one colour per arm.

The seeds of an arm (`nbcli.analysis.runs.group_runs`: configs equal but for the seed) are drawn as
their mean ± standard error (ddof 1) at the steps they all evaluated, paper 000 figs. 2-3's 5 seeds;
validation loss and validation BLEU carry each arm's ALC over the first N updates (paper 000 sec.
4.2, mean ± SE over its seeds) in the legend; curves logged at evaluations carry a marker at each
evaluated step, and the divergences (paper 000 fig. 1) standard-error bars over an arm's seeds.
Figures are built and written through `nbcli.figure_style` (house style, --figure-format,
--dpi/--figsize/--title, provenance in the files' metadata), all in one OutputSet (committed
together or not at all).
"""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from nbcli.analysis.curves import ALC_UPDATES, mean_curve, mean_standard_error
from nbcli.atomic import OutputSet
from nbcli.errors import InputError
from nbcli.figure_style import CYCLE, FigureOptions, house_style, new_figure, save_figure, set_title

def plot_runs(directories: Sequence[Path], output: Path, *, group_seeds: bool = True,
              alc_steps: int | None = ALC_UPDATES, fmt: str = "png",
              options: FigureOptions | None = None, accuracy_spread: str = "sd") -> dict[str, Any]:
    """`nb plot-run`: read the run directories, group their seeds into arms (`group_seeds`), write
    the figures into `output` as `fmt` files (pdf, svg, png) drawn with `options` (--dpi, --figsize,
    --title; created if missing; none, and no folder it made, when drawing fails) and return the
    report: files, each run (`RunLog.as_dict`) and each arm's mean ± SE table (`arm_table`), ALCs
    over the first `alc_steps` updates (None: whole curves). `accuracy_spread`: the band of the
    classifiers' val_accuracy figure, "sd" (σ over seeds, paper 002 table 1) or "se"."""
    from nbcli.figure_style import check_format_choice, require_matplotlib
    from nbcli.atomic.checks import make_output_dir, remove_made
    from nbcli.outputs import guard_outputs
    from nbcli.provenance import tool_version, utc_now
    from nbcli.analysis.runs import arm_table, read_runs

    check_format_choice(fmt)
    if accuracy_spread not in ("sd", "se"):
        raise InputError(f"--accuracy-spread must be sd or se, got {accuracy_spread!r}")
    require_matplotlib("nb plot-run")
    logs = read_runs(directories, group_seeds)
    guard_outputs([output / f"{name}.{fmt}" for name in RUN_FIGURES],
                  [d / name for d in directories for name in ("log.jsonl", "config.json", "summary.json")],
                  folder=output)
    made = make_output_dir(output, what=f"-o {output}")   # and its missing parents (nbcli.outputs' rule)
    metadata = {"nb.version": tool_version(), "nb.created": utc_now(), "nb.command": "plot-run",
                "nb.runs": ",".join(str(d) for d in directories)}
    try:
        files = plot_run_figures(output, logs, metadata, alc_steps, fmt, options, accuracy_spread)
    except BaseException:
        remove_made(made)  # a failed run leaves no output, not even the folders it made
        raise
    return {"output": str(output), "files": [str(f) for f in files], "alc_steps": alc_steps,
            "group_seeds": group_seeds, "accuracy_spread": accuracy_spread, "runs": [r.as_dict(alc_steps) for r in logs],
            "groups": arm_table(logs, alc_steps)}


RUN_FIGURES = ("val_loss", "val_bleu", "val_accuracy", "divergence", "bias", "attention_guidance", "unigram_reg")


#: Curves logged at evaluation steps: drawn with a marker at each evaluated step (paper 000 fig. 1).
EVAL_SERIES = ("val_loss", "val_bleu", "val_accuracy", "kl_unigram", "kl_uniform", "bias_norm", "bias_kl_unigram")


def _run_colours(runs: Sequence[Any]) -> dict[str, Any]:
    """One colour per arm: the house palette, or tab20 beyond its 8 colours."""
    from matplotlib import colormaps

    groups = list(dict.fromkeys(r.group for r in runs))
    if len(groups) <= len(CYCLE):
        return {g: CYCLE[i] for i, g in enumerate(groups)}
    cmap = colormaps["tab20"]
    return {g: cmap(i % cmap.N) for i, g in enumerate(groups)}


def _markers(key: str, steps: np.ndarray) -> dict[str, Any]:
    """A marker at each evaluated step of an evaluation curve (smaller when there are many)."""
    if key not in EVAL_SERIES:
        return {}
    return {"marker": "o", "markersize": 3.0 if len(steps) <= 60 else 1.5}


def _series_pair(runs: list[Any], colours: dict[Any, Any], panels: tuple[tuple[str, str], tuple[str, str]],
                 linewidth: float, grid: str, options: FigureOptions | None) -> tuple[Any, Any]:
    """A figure of two side-by-side panels, each one logged series (key, y label) per run against the step."""
    fig = new_figure(10.0, 4.0, options)
    axes = fig.subplots(1, 2)
    for ax, (key, ylabel) in zip(axes, panels):
        seen: set[str] = set()
        for r in runs:
            if r.has(key):
                steps, values = r.series[key]
                ax.plot(steps, values, color=colours[r.group], linewidth=linewidth, label=_label(r, seen),
                        **_markers(key, steps))
        ax.set_xlabel("training step")
        ax.set_ylabel(ylabel)
        ax.grid(True, which=grid)
    return fig, axes


def _mark_unigram_switch(axes: Sequence[Any], runs: Sequence[Any], colours: dict[Any, Any]) -> list[dict[str, Any]]:
    """A dotted vertical line, in the run's colour, at the update where each run's regulariser away
    from the unigram stops (paper 000 app. B.3, fig. 9's 'regularisation steps'), one legend entry per
    arm and switch; returns the marks drawn (for the PNG's text chunk)."""
    marks: list[dict[str, Any]] = []
    for r in runs:
        switch = r.unigram_reg_switch()
        if switch is None or any(m["group"] == r.group and m["step"] == switch[1] for m in marks):
            continue
        lam, step = switch
        marks.append({"group": r.group, "step": step, "lambda": lam})
        for i, ax in enumerate(axes):
            ax.axvline(step, color=colours[r.group], linestyle=":", linewidth=1.4,
                       label=f"{r.group}: unigram reg. (λ={lam:g}) off at step {step}" if i == 0 else None)
    return marks


def _marks_metadata(metadata: dict[str, str], marks: list[dict[str, Any]]) -> dict[str, str]:
    return {**metadata, "nb.unigram_reg_switch": json.dumps(marks)} if marks else metadata


def _label(run: Any, seen: set[str], extra: str = "") -> str | None:
    """One legend entry per arm (its group); seeds of an arm share colour and entry."""
    if run.group in seen:
        return None
    seen.add(run.group)
    return run.group + extra


def below_axes_legend(fig: Any) -> None:
    """The arms' legend under the axes, outside them (constrained layout makes room): inside, any
    corner covers some arm's curve or band once there are several arms with long labels."""
    fig.legend(loc="outside lower center", ncols=1, frameon=False)


def run_title(runs: Sequence[Any]) -> str:
    """What plot-run's figures show: the arms (run groups) compared."""
    groups = list(dict.fromkeys(r.group for r in runs))
    shown = ", ".join(groups[:4]) + (f" and {len(groups) - 4} more" if len(groups) > 4 else "")
    return f"nb train runs: {shown}" if groups else ""


@house_style
def plot_run_figures(out_dir: Path, runs: Sequence[Any], metadata: dict[str, str],
                     alc_steps: int | None = ALC_UPDATES, fmt: str = "png",
                     options: FigureOptions | None = None, accuracy_spread: str = "sd") -> list[Path]:
    """The figures of `nb plot-run` in `out_dir` (NAME.`fmt`), committed together or not at all (one
    OutputSet); figures whose curves no run logged are skipped. `runs` are
    `nbcli.analysis.runs.RunLog`s, grouped into arms (`group`); ALCs over the first `alc_steps` updates
    (None: the whole curve)."""
    with OutputSet() as outputs:
        try:
            with warnings.catch_warnings():  # overflow inside matplotlib's tick maths: the error below says it
                warnings.simplefilter("ignore", RuntimeWarning)
                return _plot_run_figures(out_dir, runs, metadata, outputs, alc_steps, fmt,
                                         options or FigureOptions(), accuracy_spread)
        except (OverflowError, ValueError) as err:  # values no figure can draw (|loss| near 1e308)
            logs = ", ".join(str(Path(r.path) / "log.jsonl") for r in runs)
            raise InputError(f"{logs}: matplotlib cannot draw these curves ({err})") from None


def _plot_run_figures(out_dir: Path, runs: Sequence[Any], metadata: dict[str, str],
                      outputs: OutputSet, alc_steps: int | None, fmt: str, options: FigureOptions,
                      accuracy_spread: str = "sd") -> list[Path]:
    written: list[Path] = []
    colours = _run_colours(runs) if runs else {}
    title = run_title(runs)

    def save(fig: Any, name: str, marks: list[dict[str, Any]]) -> None:
        set_title(fig, title, options)
        written.append(_save_named(fig, out_dir, name, _marks_metadata(metadata, marks), outputs, fmt, options))

    for key, ylabel, label, digits in (
            ("val_loss", "validation loss (nats/token)", "Validation loss", 3),
            ("val_bleu", "validation BLEU (sacreBLEU)", "Validation BLEU", 2)):
        if any(r.has(key) for r in runs):
            save(*_validation_figure(runs, colours, key, ylabel, label, digits, alc_steps, options))
    if any(r.has("val_accuracy") for r in runs):
        save(_accuracy_figure(runs, colours, accuracy_spread, options), "val_accuracy", [])
    if any(r.has("kl_unigram") for r in runs):
        save(_divergence_figure(runs, colours, options), "divergence", [])
    if any(r.has("bias_norm") for r in runs):
        save(_bias_figure(runs, colours, options), "bias", [])
    if any(r.has("ag_loss") for r in runs):
        save(_guidance_figure(runs, colours, options), "attention_guidance", [])
    if any(r.has("unigram_kl") for r in runs):
        save(*_unigram_reg_figure(runs, colours, options))
    return written


def _validation_figure(runs: Sequence[Any], colours: dict[Any, Any], key: str, ylabel: str, label: str, digits: int,
                       alc_steps: int | None, options: FigureOptions) -> tuple[Any, str, list[dict[str, Any]]]:
    """Validation loss or validation BLEU (`key`), each arm's mean ± SE, the area under it shaded (ALC,
    paper 000 sec. 4.2; BLEU: figs. 2-3); the figure, its name and the regulariser switches marked."""
    fig = new_figure(7.5, 4.6, options)
    ax = fig.add_subplot()
    lo, hi = _arm_curves(ax, runs, key, colours, alc_steps, digits)
    bottom = 0.0 if key == "val_bleu" else max(0.0, lo - 0.1 * (hi - lo))
    top = hi + 0.05 * (hi - lo)
    if math.isfinite(bottom) and math.isfinite(top) and top > bottom:  # else matplotlib's own limits
        ax.set_ylim(bottom, top)
    ax.set_xlabel("training step (update)")
    ax.set_ylabel(ylabel)
    window = f"first {alc_steps:,} updates" if alc_steps else "whole curve"
    band = "band: ± standard error over seeds; " if _several_seeds(runs, key) else ""
    ax.set_title(f"{label}; {band}shaded: area under the curve\n"
                 f"(ALC = area / span over the {window}, paper 000 sec. 4.2)")
    ax.grid(True)
    marks = _mark_unigram_switch([ax], runs, colours)
    below_axes_legend(fig)
    return fig, key, marks


def _accuracy_figure(runs: Sequence[Any], colours: dict[Any, Any], accuracy_spread: str,
                     options: FigureOptions) -> Any:
    """Classifiers: validation accuracy (the first --valid set), each arm's mean ± σ over seeds (paper 002
    table 1; --accuracy-spread se for the standard error), best accuracy and its epoch in the legend."""
    fig = new_figure(7.5, 4.6, options)
    ax = fig.add_subplot()
    _accuracy_curves(ax, runs, colours, accuracy_spread)
    ax.set_xlabel("training step (update)")
    ax.set_ylabel("validation accuracy")
    if _several_seeds(runs, "val_accuracy"):
        name = "σ (standard deviation, ddof 1)" if accuracy_spread == "sd" else "standard error"
        ax.set_title(f"Validation accuracy; band: ± {name} over seeds\n(legend: best accuracy and its epoch, "
                     f"mean ± {'σ' if accuracy_spread == 'sd' else 'SE'} over seeds, paper 002 table 1)")
    else:
        ax.set_title("Validation accuracy\n(legend: best accuracy and its epoch, paper 002 table 1)")
    ax.grid(True)
    below_axes_legend(fig)
    return fig


def _divergence_figure(runs: Sequence[Any], colours: dict[Any, Any], options: FigureOptions) -> Any:
    """Divergence of the model from the unigram and uniform distributions (paper 000 fig. 1): each arm's
    mean over its seeds, a marker at each evaluated step, ± standard-error bars."""
    fig = new_figure(7.5, 4.6, options)
    ax = fig.add_subplot()
    for group in dict.fromkeys(r.group for r in runs):
        for key, style in (("kl_unigram", "-"), ("kl_uniform", "--")):
            members = [r for r in runs if r.group == group and r.has(key)]
            if not members:
                continue
            label = group if key == "kl_unigram" else None
            steps, mean, se = mean_curve([m.series[key] for m in members])
            if steps.size == 0:  # seeds evaluated on disjoint steps: each run on its own
                for i, m in enumerate(members):
                    _log_step_curve(ax, *m.series[key], None, key, linestyle=style, color=colours[group],
                                    linewidth=1.0, label=label if i == 0 else None)
                continue
            _log_step_curve(ax, steps, mean, se if len(members) > 1 else None, key, linestyle=style,
                            color=colours[group], linewidth=1.3, label=label)
    ax.plot([], [], "k-", marker="o", markersize=3, label="KL(p_θ ‖ unigram)")
    ax.plot([], [], "k--", marker="o", markersize=3, label="KL(p_θ ‖ uniform)")
    ax.set_xscale("symlog", linthresh=1.0)
    ax.set_xlabel("training step (log scale; step 0 shown linearly, a marker not joined to the curve; "
                  "markers: evaluated steps)")
    ax.set_ylabel("mean per-token divergence (nats)")
    bars = "\nbars: ± standard error over seeds" if _several_seeds(runs, "kl_unigram") else ""
    ax.set_title(f"Divergence of the model from the unigram and uniform distributions (paper 000 fig. 1){bars}")
    ax.grid(True, which="both")
    ax.legend(loc="best")
    return fig


def _bias_figure(runs: Sequence[Any], colours: dict[Any, Any], options: FigureOptions) -> Any:
    """Output bias: norm and KL(softmax(b) || unigram) (paper 000 app. B.5, figs. 11-12)."""
    panels = (("bias_norm", "‖b‖₂"), ("bias_kl_unigram", "KL(softmax(b) ‖ unigram)"))
    fig, axes = _series_pair(list(runs), colours, panels, linewidth=1.3, grid="major", options=options)
    axes[0].set_title("Output-bias norm (paper 000 app. B.5)")
    axes[1].set_title("Bias drift from the unigram (nats)")
    axes[0].legend(loc="best")
    return fig


def _guidance_figure(runs: Sequence[Any], colours: dict[Any, Any], options: FigureOptions) -> Any:
    """Attention guidance: L_AG and alpha_t (paper 001 eqs. 3-4)."""
    fig, axes = _series_pair(list(runs), colours, (("ag_loss", "L_AG (log scale)"), ("ag_alpha", "α_t")),
                             linewidth=1.2, grid="both", options=options)
    if any(r.has("ag_loss") and (r.series["ag_loss"][1] > 0).all() for r in runs):
        axes[0].set_yscale("log")
    axes[0].set_title("Attention-guidance loss (paper 001 eq. 3)")
    axes[1].set_title("AG weight α_t (eq. 4)")
    axes[0].legend(loc="best")
    return fig


def _unigram_reg_figure(runs: Sequence[Any], colours: dict[Any, Any], options: FigureOptions,
                        ) -> tuple[Any, str, list[dict[str, Any]]]:
    """Regularising away from the unigram: training loss and KL(omega || p_theta), the switch marked
    (paper 000 app. B.3, fig. 9); the figure, its name and the switches marked."""
    panels = (("loss", "training cross-entropy (nats/token)"), ("unigram_kl", "KL(ω ‖ p_θ) (nats/token)"))
    fig, axes = _series_pair(list(runs), colours, panels, linewidth=1.2, grid="major", options=options)
    marks = _mark_unigram_switch(axes, runs, colours)
    axes[0].set_title("Training loss; dotted: back to the standard objective (paper 000 app. B.3)")
    axes[1].set_title("KL(ω ‖ p_θ) on the training batches while the regulariser is on")
    axes[0].legend(loc="best")
    return fig, "unigram_reg", marks


def _several_seeds(runs: Sequence[Any], key: str) -> bool:
    """Whether some arm has several runs that logged `key`: only then has a figure a spread to draw."""
    groups = [r.group for r in runs if r.has(key)]
    return len(groups) > len(set(groups))


def _log_step_curve(ax: Any, steps: np.ndarray, values: np.ndarray, err: np.ndarray | None, key: str,
                    **style: Any) -> None:
    """One curve on a symlog step axis: the evaluated steps after 0 joined, step 0 (drawn in the linear
    part of the axis) a marker of its own, since a straight line from it to the first evaluation would
    draw an interpolation the log axis does not mean. `err`: ± bars, or None."""
    steps, values = np.asarray(steps), np.asarray(values)
    at_zero = steps == 0
    label = style.pop("label", None)
    for part, joined in ((at_zero, False), (~at_zero, True)):
        if not part.any():
            continue
        ax.errorbar(steps[part], values[part], yerr=None if err is None else err[part],
                    **{**style, "linestyle": style["linestyle"] if joined else "none"},
                    label=label if joined or at_zero.all() else None, **_markers(key, steps))


def _save_named(fig: Any, out_dir: Path, name: str, metadata: dict[str, str], outputs: OutputSet, fmt: str = "png",
                options: FigureOptions | None = None) -> Path:
    path = out_dir / f"{name}.{fmt}"
    save_figure(fig, path, metadata, outputs, options)
    return path


def _arm_curves(ax: Any, runs: Sequence[Any], key: str, colours: dict[Any, Any], until: int | None,
                digits: int) -> tuple[float, float]:
    """Each arm's `key` curve on `ax`: a single run as logged; several (its seeds) as their mean at
    the steps all of them evaluated, with a ± standard-error band (each run drawn thinly instead
    when they share no step); the area under it lightly shaded; the arm's ALC in the legend (mean ±
    SE over its runs). A dotted line where the ALC window ends, when a curve goes past it. Returns
    the lowest and highest value drawn."""
    drawn: list[np.ndarray] = []
    for group in dict.fromkeys(r.group for r in runs):
        members = [r for r in runs if r.group == group and r.has(key)]
        if not members:
            continue
        colour = colours[group]
        alc, alc_se = mean_standard_error([a for a in (m.alc(key, until) for m in members) if a is not None])
        spread = f" ± {alc_se:.{digits}f}" if alc_se is not None else ""
        runs_note = f", {len(members)} runs" if len(members) > 1 else ""
        label = f"{group}  (ALC {alc:.{digits}f}{spread}{runs_note})" if alc is not None else group
        steps, mean, se = mean_curve([m.series[key] for m in members])
        if steps.size == 0:  # seeds evaluated on disjoint steps: no mean to take
            for i, m in enumerate(members):
                ax.plot(*m.series[key], color=colour, linewidth=1.0, label=label if i == 0 else None,
                        **_markers(key, m.series[key][0]))
                drawn.append(m.series[key][1])
            continue
        ax.plot(steps, mean, color=colour, linewidth=1.5, label=label, **_markers(key, steps))
        ax.fill_between(*_window(steps, mean, until), color=colour, alpha=0.06)
        drawn.append(mean)
        if len(members) > 1:
            ax.fill_between(steps, mean - se, mean + se, color=colour, alpha=0.22, linewidth=0)
            drawn.extend([mean - se, mean + se])
    last = max(int(r.series[key][0].max()) for r in runs if r.has(key))
    if until and last > until:
        ax.axvline(until, color="grey", linestyle=":", linewidth=1.2, label=f"end of the ALC window ({until:,} updates)")
    values = np.concatenate(drawn)
    values = values[np.isfinite(values)]
    return (float(values.min()), float(values.max())) if values.size else (math.nan, math.nan)


def _accuracy_curves(ax: Any, runs: Sequence[Any], colours: dict[Any, Any], spread: str) -> None:
    """Each arm's val_accuracy curve (mean at the steps all its seeds evaluated, a ± `spread` band for
    several), labelled with its best validation accuracy and that step's epoch, mean ± `spread`."""
    for group in dict.fromkeys(r.group for r in runs):
        members = [r for r in runs if r.group == group and r.has("val_accuracy")]
        if not members:
            continue
        best = [b for b in (m.best_val_accuracy() for m in members) if b is not None]
        acc, acc_spread = mean_standard_error([b[0] for b in best], spread)
        epoch, epoch_spread = mean_standard_error([b[1] for b in best if b[1] is not None], spread)
        label = group + (f"  (best {acc:.4f}" + (f" ± {acc_spread:.4f}" if acc_spread is not None else "")
                         if acc is not None else "  (")
        label += (f", epoch {epoch:.1f}" + (f" ± {epoch_spread:.1f}" if epoch_spread is not None else "")
                  if epoch is not None else "") + (f", {len(members)} runs)" if len(members) > 1 else ")")
        steps, mean, band = mean_curve([m.series["val_accuracy"] for m in members], spread)
        if steps.size == 0:   # seeds evaluated on disjoint steps: each run on its own
            for i, m in enumerate(members):
                ax.plot(*m.series["val_accuracy"], color=colours[group], linewidth=1.0, label=label if i == 0 else None,
                        **_markers("val_accuracy", m.series["val_accuracy"][0]))
            continue
        ax.plot(steps, mean, color=colours[group], linewidth=1.5, label=label, **_markers("val_accuracy", steps))
        if len(members) > 1:
            ax.fill_between(steps, mean - band, mean + band, color=colours[group], alpha=0.22, linewidth=0)


def _window(steps: np.ndarray, values: np.ndarray, until: int | None) -> tuple[np.ndarray, int, np.ndarray]:
    """(x, 0, y) of the area the ALC covers: the curve up to `until`, its value there interpolated."""
    if not until or steps.size == 0 or steps[0] >= until:
        return steps, 0, values
    inside = steps <= until
    xs, ys = steps[inside].astype(np.float64), values[inside]
    if xs[-1] < until < steps[-1]:
        xs, ys = np.append(xs, until), np.append(ys, np.interp(until, steps, values))
    return xs, 0, ys
