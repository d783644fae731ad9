"""What the faces call (`nb train|eval|predict` and the Python API): train a task by name from
option values, find the task a run directory records, and evaluate or predict with it."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from nbcli.errors import ConfigError
from nbcli.tasks.base import SEAM_GROUPS, TrainHooks
from nbcli.tasks.options import declared, option_values
from nbcli.tasks.registry import BUILTIN, get_task, option_owners
from nbcli.trackers import (TrackerSettings, TrackingSession, check_settings, load_trackers, parse_names,
                            previous_runs, run_config)


def train_task(name: str, options: Mapping[str, Any], hooks: TrainHooks | None = None) -> dict[str, Any]:
    """Train task `name` with `options` (its option names as keywords; the rest take their defaults),
    refused in one line before any work if an option is not the task's, a required one is missing or
    a tracker's client is not installed. `--track`: the trackers hear the run through `hooks`. The
    run computes on `threads` CPU threads (`nbcli.threads`; the summary's `threads`: torch's count
    during the run) when the task takes that option. Returns the run's summary."""
    from nbcli.threads import cpu_threads

    task = get_task(name)
    owners = {key.lstrip("-").replace("-", "_"): tasks[0] for key, tasks in option_owners().items()}
    values = option_values(task.options(), options, task=name, elsewhere=owners)
    hooks = hooks or TrainHooks()
    with cpu_threads(values["threads"]):   # a seam option: tracking_session takes it out of `values`
        session = tracking_session(name, values, hooks.on_warning)
        if session is None:
            return with_threads(task.train(values, hooks))
        with session:
            summary = with_threads(task.train(values, tracked(hooks, session)))
            session.finish(summary)   # the summary the caller gets, threads included
    return summary


def with_threads(summary: dict[str, Any]) -> dict[str, Any]:
    """`summary` with the torch threads the run computed on, as write_summary records them in
    summary.json (a task of another package may not)."""
    if "threads" not in summary:
        import torch

        summary["threads"] = torch.get_num_threads()
    return summary


def tracking_session(task: str, values: dict[str, Any], warn: Callable[[str], None]) -> TrackingSession | None:
    """The trackers `values` ask for (the seam's options, taken out of `values`: the task never sees
    them), their clients imported on every rank; None when there are none, or on ranks other than 0."""
    from nbcli.train.runtime import main_process

    every = dict(values)
    seam = {o.name: values.pop(o.name) for o in declared(SEAM_GROUPS)}
    names = parse_names(seam["track"])
    run_dir = values.get("out")
    settings = TrackerSettings(project=seam["track_project"], run_name=seam["track_run_name"], uri=seam["track_uri"],
                               tensorboard_dir=seam["tensorboard_dir"],
                               previous=previous_runs(run_dir) if values.get("resume") else {})
    check_settings(names, settings)
    trackers = load_trackers(names, settings)
    if not trackers or not main_process():
        return None
    return TrackingSession(trackers, run_config(every, names, task=task, run_dir=run_dir), run_dir, warn)


def tracked(hooks: TrainHooks, session: TrackingSession) -> TrainHooks:
    """`hooks` that also start the trackers (before the task's own start: a tracker that cannot start
    stops the run before any progress shows) and give them each record after the face has it. The
    trackers hear `on_step`, not a loop callback: every task calls it, a task of another package with
    a loop of its own too (docs/tasks.md's example)."""
    def on_start(total: int | None) -> None:
        session.start()
        hooks.on_start(total)

    def on_step(step: int, record: dict[str, Any]) -> None:
        hooks.on_step(step, record)
        session.log(step, record)

    return dataclasses.replace(hooks, on_start=on_start, on_step=on_step)


def task_of_run(run: Path | str) -> str | None:
    """The task a run directory records (its config.json's `task`; a fine-tuning run's `data.task`),
    or None when `run` is no run directory (a lone checkpoint, a model folder, a repo id)."""
    folder = Path(run)
    if folder.is_file():
        folder = folder.parent
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(config, dict):
        return None
    task = config.get("task")
    data = config.get("data")
    if task is None and isinstance(data, dict):
        task = data.get("task")
    return task if isinstance(task, str) else None


def external_task_of_run(run: Path | str) -> str | None:
    """The task of a run trained by a task from another package (None for nb's own and for no run):
    `nb eval` and `nb predict` hand such a run to its task."""
    name = task_of_run(run)
    return name if name is not None and name not in BUILTIN else None


def predict_run(run: Path | str, corpus: Sequence[str]) -> list[dict[str, Any]]:
    """`nb predict RUN --corpus ...` for a run of a task from another package: its `Task.predict`."""
    name = _recorded(run)
    return get_task(name).predict(Path(run), list(corpus))


def _recorded(run: Path | str) -> str:
    name = task_of_run(run)
    if name is None:
        raise ConfigError(f"{run}: no run directory of nb train (no config.json naming its task)")
    return name


def predict_run_report(run: Path | str, corpus: Sequence[str], output: Path | str | None) -> dict[str, Any]:
    """`nb predict RUN --corpus ... [-o FILE]` for a run of a task from another package: its
    predictions as JSON lines in `output` (atomically; no input overwritten) or in the report."""
    from nbcli.atomic import write_text_atomic
    from nbcli.outputs import guard_outputs, model_inputs

    guard_outputs([output], [*model_inputs(run), *corpus])
    predictions = predict_run(run, corpus)
    if output is not None:
        write_text_atomic(output, "".join(json.dumps(p, ensure_ascii=False) + "\n" for p in predictions))
    return {"task": task_of_run(run), "checkpoint": str(run), "corpus": list(corpus),
            "output": None if output is None else str(output), "records": len(predictions), "labels": [],
            "predictions": predictions if output is None else None, "warnings": []}
