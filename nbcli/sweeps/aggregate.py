"""The aggregate of a sweep, computed from the run directories alone (so a crashed scheduler loses
nothing finished and a resumed sweep aggregates to the same bytes): each run's metrics, each arm's
mean ± SE or σ over its seeds (`nbcli.analysis.curves.mean_standard_error`, ddof 1), the paper's
published numbers beside them and the difference; as results.json, results.csv and a markdown table
in the paper's layout (arms down, metrics across).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nbcli.errors import ConfigError
from nbcli.sweeps.execute import read_record, record_path
from nbcli.sweeps.plan import Plan, recipe_arms
from nbcli.sweeps.recipe import Metric, Published


def run_rows(plan: Plan, out: Path) -> list[dict[str, Any]]:
    """Per run: id, arm, seed and each metric's value (None where the run did not log it)."""
    from nbcli.sweeps.scoring import run_value

    rows = []
    for spec in plan.runs:
        record = read_record(record_path(out, spec.id))
        if record is None or not record.get("finished"):
            raise ConfigError(f"runs/{spec.id} has not finished; run the sweep again to finish it")
        run = out / "runs" / spec.id
        rows.append({"run": f"runs/{spec.id}", "arm": spec.arm, "seed": spec.seed,
                     "metrics": {m.name: run_value(m, run, record, plan.recipe.alc_steps) for m in plan.recipe.metrics}})
    return rows


def summarise(values: Sequence[float], spread: str) -> dict[str, Any]:
    """mean, SE and σ (ddof 1) of the seeds' values, n, and which of SE / σ the table shows."""
    from nbcli.analysis.curves import mean_standard_error

    mean, se = mean_standard_error(values)
    return {"mean": mean, "se": se, "sd": mean_standard_error(values, "sd")[1], "n": len(values), "spread": spread}


def _published(published: Sequence[Published], arm: str, metric: str) -> Published | None:
    return next((p for p in published if p.arm == arm and p.metric == metric), None)


def arm_rows(plan: Plan, runs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per arm (the recipe's order; then arms only the paper ran): each metric's nb summary, the
    paper's number and spread, and nb's mean minus the paper's."""
    recipe = plan.recipe
    every = {name for name, _ in recipe_arms(recipe)}
    arms = list(plan.arms) + [p.arm for p in recipe.published if p.arm not in every]
    rows = []
    for arm in dict.fromkeys(arms):
        mine = [r for r in runs if r["arm"] == arm]
        row: dict[str, Any] = {"arm": arm, "seeds": [r["seed"] for r in mine], "metrics": {}}
        for m in recipe.metrics:
            values = [r["metrics"][m.name] for r in mine if r["metrics"][m.name] is not None]
            cell = summarise(values, m.spread) if values else {"mean": None, "se": None, "sd": None, "n": 0,
                                                                "spread": m.spread}
            paper = _published(recipe.published, arm, m.name)
            cell["paper"] = None if paper is None else paper.value
            cell["paper_spread"] = None if paper is None else paper.spread
            cell["paper_note"] = "" if paper is None else paper.note
            cell["difference"] = None if paper is None or cell["mean"] is None else cell["mean"] - paper.value
            row["metrics"][m.name] = cell
        rows.append(row)
    return rows


def shown(value: float | None, digits: int) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def nb_cell(cell: dict[str, Any], metric: Metric) -> str:
    """nb's `mean ± spread` (σ or SE as the metric says; the mean alone for one seed)."""
    if cell["mean"] is None:
        return "–"
    spread = cell.get(cell["spread"]) if cell["spread"] != "none" else None
    return shown(cell["mean"], metric.digits) + ("" if spread is None else f" ± {shown(spread, metric.digits)}")


def paper_cell(cell: dict[str, Any], metric: Metric) -> str:
    if cell["paper"] is None:
        return "–"
    spread = cell["paper_spread"]
    return shown(cell["paper"], metric.digits) + ("" if spread is None else f" ({shown(spread, metric.digits)})")


def markdown(plan: Plan, rows: Sequence[dict[str, Any]], sections: Sequence[str] = ()) -> str:
    """The table in the paper's layout: one row per arm; per metric nb's mean ± spread, the paper's
    number (its σ in parentheses where printed) and the difference nb - paper; `sections`: more lines
    before the notes (paper 000 fig. 4's per-bin tables)."""
    recipe = plan.recipe
    head = ["arm", "seeds"]
    for m in recipe.metrics:
        mark = {"se": " (± SE)", "sd": " (± σ)"}.get(m.spread, "")
        head += [f"{m.label}: nb{mark}", "paper", "Δ"]
    lines = [f"# {recipe.id}: {recipe.title}", "",
             f"{recipe.where} · scale {plan.scale.name} · {len(plan.runs)} runs", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        cells = [row["arm"], str(len(row["seeds"]))]
        for m in recipe.metrics:
            cell = row["metrics"][m.name]
            diff = cell["difference"]
            cells += [nb_cell(cell, m), paper_cell(cell, m), "–" if diff is None else f"{diff:+.{m.digits}f}"]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    lines += sections
    notes = [f"- {row['arm']}: {cell['paper_note']}" for row in rows for cell in row["metrics"].values()
             if cell["paper_note"]]
    if recipe.published_note:
        notes.append(f"- {recipe.published_note}")
    if notes:
        lines += ["", "Notes:", *dict.fromkeys(notes)]
    if recipe.deviations:
        lines += ["", "Where nb's setting differs from the paper's:", *(f"- {d}" for d in recipe.deviations)]
    return "\n".join(lines) + "\n"


CSV_COLUMNS = ("arm", "metric", "n", "nb_mean", "nb_se", "nb_sd", "spread", "paper", "paper_spread", "difference")


def csv_text(plan: Plan, rows: Sequence[dict[str, Any]]) -> str:
    """One line per arm and metric, full precision (repr of each float)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for row in rows:
        for m in plan.recipe.metrics:
            c = row["metrics"][m.name]
            writer.writerow([row["arm"], m.name, c["n"], *("" if c[k] is None else repr(c[k]) for k in
                                                            ("mean", "se", "sd")), c["spread"],
                             *("" if c[k] is None else repr(c[k]) for k in ("paper", "paper_spread", "difference"))])
    return buffer.getvalue()
