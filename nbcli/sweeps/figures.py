"""A sweep's figures, in nb's house style (`nbcli.figure_style`): the runs' curves as `nb plot-run`
draws them (validation loss, BLEU or accuracy per arm, mean ± SE over seeds, ALC in the legend) and
results.png, one panel per metric: each arm's mean ± its spread beside the paper's number."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nbcli.figure_style import CYCLE, house_style, new_figure, provenance, save_figure, set_title
from nbcli.sweeps.plan import Plan


def draw_figures(plan: Plan, out: Path, rows: Sequence[dict[str, Any]],
                 by_frequency: Sequence[dict[str, Any]] | None = None) -> tuple[list[str], list[str]]:
    """(files written, warnings): nothing but a warning without matplotlib (the optional extra).
    `by_frequency` (paper 000 fig. 4's arms): by_frequency.png, the arms overlaid, instead of the curves."""
    import importlib.util

    if importlib.util.find_spec("matplotlib") is None:
        return [], ["no figures: they need matplotlib (pip install 'nbcli[plot]')"]
    from nbcli.sweeps.kinds import ANALYSES
    from nbcli.reports.plot_run import plot_runs

    figures = out / plan.recipe.id / "figures"
    files: list[str] = []
    metadata = provenance("reproduce", item=plan.recipe.id, scale=plan.scale.name,
                          runs=",".join(r.id for r in plan.runs))
    if by_frequency is not None:
        from nbcli.sweeps.by_frequency import draw_overlay

        figures.mkdir(parents=True, exist_ok=True)
        draw_overlay(by_frequency, figures / "by_frequency.png", f"{plan.recipe.id} (paper {plan.recipe.paper}), "
                     f"scale {plan.scale.name}: log-prob. of the reference token by frequency", metadata)
        files.append(str(figures / "by_frequency.png"))
    elif plan.recipe.task not in ANALYSES:
        report = plot_runs([out / "runs" / r.id for r in plan.runs], figures, alc_steps=plan.recipe.alc_steps)
        files += report["files"]
    if plan.recipe.metrics:
        figures.mkdir(parents=True, exist_ok=True)
        path = figures / "results.png"
        results_figure(plan, rows, path, metadata)
        files.append(str(path))
    return [str(Path(f).relative_to(out)) if Path(f).is_relative_to(out) else f for f in files], []


@house_style
def results_figure(plan: Plan, rows: Sequence[dict[str, Any]], path: Path, metadata: dict[str, str]) -> None:
    """One panel per metric: a bar per arm (nb's mean, ± SE or σ as the metric says) and a black
    diamond at the paper's number where it prints one."""
    metrics = plan.recipe.metrics
    fig = new_figure(3.2 * len(metrics) + 1.5, 0.35 * len(rows) + 1.6)
    axes = fig.subplots(1, len(metrics), sharey=True, squeeze=False)[0]
    positions = list(range(len(rows)))
    for ax, metric in zip(axes, metrics):
        cells = [row["metrics"][metric.name] for row in rows]
        means = [c["mean"] if c["mean"] is not None else 0.0 for c in cells]
        errors = [(c.get(c["spread"]) or 0.0) if c["spread"] != "none" else 0.0 for c in cells]
        colours = [CYCLE[0] if c["mean"] is not None else "none" for c in cells]
        ax.barh(positions, means, xerr=errors, color=colours, height=0.6, label="nb")
        papers = [(i, c["paper"]) for i, c in enumerate(cells) if c["paper"] is not None]
        if papers:
            ax.plot([v for _, v in papers], [i for i, _ in papers], linestyle="none", marker="D", color="black",
                    markersize=4, label="paper")
        spread = {"se": " (± SE)", "sd": " (± σ)"}.get(metric.spread, "")
        ax.set_xlabel(metric.label + spread)
        ax.grid(True, axis="x")
        ax.legend(loc="lower right")
    axes[0].set_yticks(positions, [row["arm"] for row in rows])
    axes[0].invert_yaxis()
    set_title(fig, f"{plan.recipe.id}: {plan.recipe.title} (scale {plan.scale.name})")
    save_figure(fig, path, metadata)
