"""One sweep, start to end: plan (every check), run what is not done yet (here, in a pool or on
Dask), aggregate from the run directories, write OUT/ITEM/results.json, results.csv and results.md
together, and the figures in OUT/ITEM/figures. `nb reproduce ITEM` and `nb sweep RECIPE` are this with a
packaged or a user's recipe. The runs live in OUT/runs, shared by the items of one OUT (000-fig3 aggregates
000-fig2's runs); each item's results have their own folder.

OUT/sweep.json records each invocation (what each run did, seconds, jobs, Dask address, start and
end); the results files hold no time or host, so the same runs aggregate to the same bytes.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from nbcli.errors import ConfigError, NbError
from nbcli.sweeps.plan import Plan, build_plan
from nbcli.sweeps.recipe import Recipe

Event = Callable[[dict[str, Any]], None]


def run_sweep(recipe: Recipe, out: Path | str, *, data: Sequence[str] = (), scale: str | None = None,
              arms: Sequence[str] | None = None, jobs: int = 1, threads: int = 1, dask: str | None = None,
              resources: Sequence[str] = (), sets: Sequence[str] = (), seeds: Sequence[int] | None = None,
              figures: bool = True, download: bool = False,
              on_start: Callable[[int], None] | None = None, on_run: Event | None = None) -> dict[str, Any]:
    """Run `recipe`'s runs at `scale` into `out` and aggregate them; the report (results.json's
    content, the files written, what each run did). `download`: roles not given take the recipe's Hub
    source, fetched before any run (`build_plan`). `on_start(n)` hears the number of runs, `on_run`
    each run's outcome as it ends."""
    from nbcli.sweeps.execute import check_out, jobs_of, parse_resources, run_dask, run_local

    out = Path(out)
    if jobs < 1 or threads < 1:
        raise ConfigError(f"--jobs {jobs} --threads {threads}: each must be at least 1")
    if resources and not dask:
        raise ConfigError("--resources asks Dask workers for resources: give --dask ADDRESS too")
    wanted = parse_resources(resources)
    plan = build_plan(recipe, scale=scale, data=data, arms=arms, sets=sets, seeds=seeds, download=download)
    check_out(plan, out)
    from nbcli.sweeps.by_frequency import prepare_counts

    prepare_counts([r.evaluation for r in plan.runs], out)   # paper 000 fig. 4's training-target counts, once
    (out / "runs").mkdir(parents=True, exist_ok=True)
    outcomes: list[dict[str, Any]] = []

    def done(outcome: dict[str, Any]) -> None:
        outcomes.append(outcome)
        if on_run is not None:
            on_run(outcome)

    if on_start is not None:
        on_start(len(plan.runs))
    from nbcli.provenance import utc_now

    began = utc_now()
    work = jobs_of(plan, out, threads)
    try:
        if dask:
            run_dask(work, dask, wanted, done)
        else:
            run_local(work, jobs, done)
    finally:
        _log_invocation(out, plan, outcomes, began, jobs=jobs, threads=threads, dask=dask)
    failed = [o for o in outcomes if o["action"] == "failed"]
    if failed:
        raise NbError(f"{len(failed)} of {len(plan.runs)} runs failed (runs/{failed[0]['run']}: {failed[0]['error']}); "
                      f"the others are kept in {out}: run the same command again to retry")
    return aggregate(plan, out, outcomes, figures=figures)


def aggregate(plan: Plan, out: Path, outcomes: Sequence[dict[str, Any]] = (), *, figures: bool = True) -> dict[str, Any]:
    """OUT/ITEM/results.json, results.csv and results.md (one commit) and OUT/ITEM/figures, from OUT's runs."""
    from nbcli.atomic import write_all_atomic
    from nbcli.jsonsafe import json_ready
    from nbcli.sweeps.aggregate import arm_rows, csv_text, markdown, run_rows
    from nbcli.sweeps.figures import draw_figures

    from nbcli.sweeps.by_frequency import csv_section, markdown_section

    runs = run_rows(plan, out)
    rows = arm_rows(plan, runs)
    by_frequency = frequency_arms(plan, out, runs)
    document = results_document(plan, rows, runs)
    table, table_csv = markdown(plan, rows), csv_text(plan, rows)
    if by_frequency is not None:
        document["by_frequency"] = by_frequency
        table, table_csv = markdown(plan, rows, markdown_section(by_frequency)), csv_section(by_frequency)
    results = json_ready(document)
    text = json.dumps(results, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    folder = out / plan.recipe.id
    folder.mkdir(exist_ok=True)
    write_all_atomic({folder / "results.json": text.encode(), folder / "results.csv": table_csv.encode(),
                      folder / "results.md": table.encode()})
    files, warnings = draw_figures(plan, out, rows, by_frequency) if figures else ([], [])
    return {**results, "out": str(out), "files": [f"{plan.recipe.id}/results.{x}" for x in ("json", "csv", "md")]
            + files,
            "outcomes": list(outcomes), "warnings": warnings}


def frequency_arms(plan: Plan, out: Path, runs: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    """Paper 000 fig. 4's per-bin values per arm (`by_frequency.arm_bins`), each run's section added
    to its row of `runs`; None when the recipe's evaluation is not translation-by-frequency."""
    from nbcli.sweeps.by_frequency import KIND, arm_bins, run_section
    from nbcli.sweeps.execute import read_record, record_path

    if plan.recipe.evaluation is None or plan.recipe.evaluation.kind != KIND:
        return None
    for row in runs:
        name = row["run"].removeprefix("runs/")
        row["by_frequency"] = run_section(read_record(record_path(out, name)) or {}, name)
    return [arm_bins(arm, [r for r in runs if r["arm"] == arm]) for arm in plan.arms]


def recipe_sha256(recipe: Recipe) -> str:
    return hashlib.sha256(recipe.path.read_bytes()).hexdigest()


def results_document(plan: Plan, rows: Sequence[dict[str, Any]], runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """What results.json holds: the item, scale, recipe (id and sha256), nb's version, the data by
    role, the metrics' definitions, each arm's row and each run's values (paths relative to OUT)."""
    from nbcli.provenance import tool_version

    r = plan.recipe
    return {"item": r.id, "title": r.title, "paper": r.paper, "where": r.where, "task": r.task,
            "scale": plan.scale.name, "seeds": list(plan.scale.seeds), "arms_run": list(plan.arms),
            "recipe": {"id": r.id, "sha256": recipe_sha256(r)}, "nb_version": tool_version(), "data_roles": plan.data,
            "alc_steps": r.alc_steps, "metrics": [asdict(m) for m in r.metrics], "rows": list(rows),
            "runs": list(runs), "deviations": list(r.deviations), "published_note": r.published_note}


def _log_invocation(out: Path, plan: Plan, outcomes: Sequence[dict[str, Any]], began: str, **how: Any) -> None:
    """OUT/sweep.json: this invocation appended to the earlier ones (what each run did, when)."""
    from nbcli.atomic import write_text_atomic
    from nbcli.jsonsafe import load_file
    from nbcli.provenance import tool_version, utc_now

    path = out / "sweep.json"
    try:
        earlier = load_file(path, error=ConfigError) if path.is_file() else {}
    except ConfigError:
        earlier = {}
    log = earlier.get("invocations", []) if isinstance(earlier, dict) else []
    log.append({"item": plan.recipe.id, "scale": plan.scale.name, "started": began, "ended": utc_now(),
                "nb_version": tool_version(), **how, "runs": list(outcomes)})
    write_text_atomic(path, json.dumps({"invocations": log}, indent=2) + "\n")
