"""What the faces call (`nb train|eval|predict|export|translate|generate` and the Python API): train a task by
name from option values, find the task a run directory (or a checkpoint) records, and hand the run to
that task's command with the options it reads; an eval or predict report records the Hub datasets
among its inputs (`with_datasets`), whichever task made it."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from os import PathLike
from pathlib import Path
from typing import Any

from nbcli.errors import ConfigError
from nbcli.tasks.base import SEAM_GROUPS, Task, TrainHooks
from nbcli.tasks.options import declared, option_values
from nbcli.tasks.registry import get_task, option_owners
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


def task_of_checkpoint(run: Path | str, default: str) -> str:
    """The task of RUN_OR_CKPT for `nb predict` / `nb export` / `nb translate`: the one its run directory
    records, else a lone classifier checkpoint's own (its metadata `nb.task`), else `default`."""
    recorded = task_of_run(run)
    if recorded is not None:
        return recorded
    from nbcli.tasks.classifier_export import classifier_task

    return classifier_task(Path(run)) or default


def command_options(task: Task, command: str, declared: frozenset[str], values: Mapping[str, Any],
                    defaults: Mapping[str, Any], flags: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The values of the options `declared` by `task` for `nb COMMAND` (its `predict_options`,
    `export_options`, `translate_options`, `generate_options`), each by name; an option it does not read, given a value other than its default,
    is refused in one line naming the task (never ignored); so is a task without the command at all."""
    if command not in task.commands():
        raise ConfigError(task.lacks(command))
    refused = [(flags or {}).get(k, "--" + k.replace("_", "-")) for k, v in values.items()
               if k not in declared and v != defaults[k]]
    if refused:
        raise ConfigError(f"{', '.join(refused)}: not an option of nb {command} for a run of nb train {task.name}")
    return {k: v for k, v in values.items() if k in declared}


PREDICT_DEFAULTS = {"batch_size": 32, "device": "cpu"}
EXPORT_DEFAULTS: dict[str, Any] = {"source_tokenizer": None, "target_tokenizer": None, "beam": None, "lenpen": None}
EXPORT_FLAGS = {"source_tokenizer": "--tokenizer/--src-tokenizer", "target_tokenizer": "--tgt-tokenizer"}


def with_datasets(report: dict[str, Any], corpus: list[str]) -> dict[str, Any]:
    """`report` with the Hub datasets among its `corpus` inputs (as given) in `datasets`
    (`nbcli.resolve_datasets.dataset_inputs`; [] when every input is a file), as a training run's
    summary records them: what `eval_run` and `predict_run` add to every task's report."""
    from nbcli.resolve_datasets import dataset_inputs

    report["datasets"] = dataset_inputs(corpus)
    return report


def eval_run(task: Task, run: Any, corpus: list[str], **options: Any) -> dict[str, Any]:
    """`nb eval [RUN_OR_CKPT] --corpus ...`: `task`'s report (`Task.evaluate`; `options`: those of its
    `eval_options` given) with the Hub datasets it read (`with_datasets`)."""
    return with_datasets(task.evaluate(run, list(corpus), **options), list(corpus))


def predict_run(run: Path | str, corpus: list[str], output: Path | str | None, **options: Any) -> dict[str, Any]:
    """`nb predict RUN_OR_CKPT --corpus ... [-o FILE]`: the report of the run's task
    (`Task.predict_report`; a lone checkpoint: a classifier's) with the Hub datasets it read
    (`with_datasets`). `options`: nb predict's (`PREDICT_DEFAULTS`), those the task does not read
    refused unless at their defaults."""
    task = get_task(task_of_checkpoint(run, "classification"))
    values = {**PREDICT_DEFAULTS, **options}
    picked = command_options(task, "predict", task.predict_options, values, PREDICT_DEFAULTS)
    report = task.predict_report(Path(run), list(corpus), None if output is None else Path(output), **picked)
    return with_datasets(report, list(corpus))


def export_run(run: Path | str, out: Path | str, **options: Any) -> dict[str, Any]:
    """`nb export RUN_OR_CKPT -o DIR`: the run's task's export (`Task.export`; a lone checkpoint: a
    classifier's, else a translation model's). `options`: nb export's (`EXPORT_DEFAULTS`), those the
    task does not read refused when given."""
    task = get_task(task_of_checkpoint(run, "translation"))
    values = {**EXPORT_DEFAULTS, **options}
    picked = command_options(task, "export", task.export_options, values, EXPORT_DEFAULTS, EXPORT_FLAGS)
    return task.export(Path(run), Path(out), **picked)


TRANSLATE_DEFAULTS: dict[str, Any] = {
    "beam": None, "lenpen": None, "batch_size": 64, "max_len_a": None, "max_len_b": None, "source_tokenizer": None,
    "target_tokenizer": None, "device": "auto", "src_lang": None, "tgt_lang": None}


def translate_run(run: Path | str, input_path: Path | str, output: Path | str,
                  progress: Callable[[int], None] | None = None, **options: Any) -> dict[str, Any]:
    """`nb translate RUN_OR_CKPT -i FILE -o FILE`: the run's task's translation (`Task.translate`; a lone
    checkpoint: a translation model's). `options`: nb translate's (`TRANSLATE_DEFAULTS`), those the task
    does not read refused when given; `progress` (sentences done) goes to a task that declares it."""
    task = get_task(task_of_checkpoint(run, "translation"))
    values = {**TRANSLATE_DEFAULTS, **options}
    picked = command_options(task, "translate", task.translate_options, values, TRANSLATE_DEFAULTS, EXPORT_FLAGS)
    if "progress" in task.translate_options:
        picked["progress"] = progress
    return task.translate(Path(run), Path(input_path), Path(output), **picked)


GENERATE_DEFAULTS: dict[str, Any] = {
    "tokenizer": None, "allow_vocab_mismatch": False, "scale_ln_bias": None, "decoding": "top-p:0.9", "prompt_words": 10,
    "max_new_tokens": 256, "samples": 1, "max_prompts": None, "seed": 0, "eval_corpus": None, "logit_adjust": None,
    "counts": None, "smoothing": "add-k:1", "remove_direction": False, "mauve_featurizer": None, "out": None,
    "figure_format": "png", "dpi": 200, "figsize": None, "title": None, "batch_size": 16, "kv_cache": True,
    "arch": "auto", "mapping": None, "device": "auto", "dtype": "auto", "tf32": True}
GENERATE_FLAGS = {"remove_direction": "--remove-frequency-direction", "kv_cache": "--no-kv-cache", "mapping": "--map",
                  "tf32": "--no-tf32"}


def generating_task(checkpoint: Any) -> Task:
    """The task whose `generate` runs CHECKPOINT for `nb generate`: the one its run directory records (a
    lone classifier checkpoint: its own), else the LM's (a model folder, a Hub id, an nb checkpoint, a
    model in memory); a task without `generate` is refused in one line naming its inference command."""
    name = task_of_checkpoint(checkpoint, "lm") if isinstance(checkpoint, (str, PathLike)) else "lm"
    task = get_task(name)
    if "generate" not in task.commands():
        raise ConfigError(task.not_generating(checkpoint))
    return task


def generate_run(task: Task, checkpoint: Any, prompts: list[str], progress_bar: Callable[..., Any] | None = None,
                 **options: Any) -> dict[str, Any]:
    """`nb generate CHECKPOINT --prompts ...`: `task`'s generation (`Task.generate`; `generating_task`
    finds it). `options`: nb generate's (`GENERATE_DEFAULTS`), those the task does not read refused
    when given; `progress_bar` goes to a task that declares it."""
    values = {**GENERATE_DEFAULTS, **options}
    picked = command_options(task, "generate", task.generate_options, values, GENERATE_DEFAULTS, GENERATE_FLAGS)
    if "progress_bar" in task.generate_options:
        picked["progress_bar"] = progress_bar
    return task.generate(checkpoint, list(prompts), **picked)
