"""What one run of a recipe is: training a task of `nb train` (any task the registry knows,
through `nbcli.tasks.runs.train_task`), or one of nb's analyses on given data (`analogy`: paper
002 table 4; `lm-eval`: `nb eval`, paper 003 table 1 and fig. 1). Each kind declares its options
(the keys a recipe may set), says when a run directory holds a finished run and when a stopped one
can resume, and runs into a directory.
"""

from __future__ import annotations

import inspect
import json
import typing
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nbcli.errors import ConfigError


@dataclass(frozen=True)
class Option:
    """One key a recipe may set: its type (the annotation), whether it must be given, its bounds."""

    name: str
    type: Any
    required: bool = False
    min: float | None = None
    max: float | None = None


class Kind:
    """A kind of run. `options` are the keys a recipe's options may use (`out` and `resume` are
    the runner's); `run` trains or analyses into `out`."""

    name: str
    #: The options the runner sets for every run (a recipe may not).
    managed: tuple[str, ...] = ("out", "resume")

    def options(self) -> dict[str, Option]:
        raise NotImplementedError

    def finished(self, out: Path) -> bool:
        raise NotImplementedError

    def resumable(self, out: Path) -> bool:
        return False

    def run(self, values: dict[str, Any], out: Path, resume: bool) -> None:
        raise NotImplementedError

    def elsewhere(self, name: str) -> str:
        """Where an option this kind lacks belongs ('' when nowhere known)."""
        return ""


class TaskKind(Kind):
    """`nb train TASK`: the run directory is the task's (config.json, log.jsonl, summary.json)."""

    def __init__(self, task: str) -> None:
        from nbcli.tasks.registry import get_task

        self.name = task
        self.task = get_task(task)

    def options(self) -> dict[str, Option]:
        return {o.name: Option(o.name, o.type, o.required, o.opt.min, o.opt.max) for o in self.task.options()}

    def elsewhere(self, name: str) -> str:
        from nbcli.tasks.registry import BUILTIN, get_task

        owners = [task for task in BUILTIN if any(o.name == name for o in get_task(task).options())]
        return f"; it belongs to nb train {', '.join(owners)}" if owners else ""

    def finished(self, out: Path) -> bool:
        return (out / "summary.json").is_file()

    def resumable(self, out: Path) -> bool:
        return (out / "train-state.json").is_file()

    def run(self, values: dict[str, Any], out: Path, resume: bool) -> None:
        from nbcli.tasks.runs import train_task

        paths = {name for name, o in self.options().items() if _is_path(o.type)}
        given = {k: Path(v) if k in paths and isinstance(v, str) else v for k, v in values.items()}
        train_task(self.name, {**given, "out": out, "resume": resume})


def _is_path(hint: Any) -> bool:
    return hint is Path or Path in typing.get_args(hint)


class AnalysisKind(Kind):
    """An analysis by its public API function (`nbcli.api`): its parameters are the options; the
    report goes to OUT/result.json (a finished run), written atomically."""

    managed = ("out", "resume", "output")

    def __init__(self, name: str, function: Callable[..., Any], skip: tuple[str, ...] = (),
                 files: dict[str, str] | None = None) -> None:
        self.name, self.function, self.skip = name, function, skip
        self.files = files or {}          # option -> file name in OUT (a figure the analysis draws)

    def options(self) -> dict[str, Option]:
        hints = typing.get_type_hints(inspect.unwrap(self.function))
        out = {}
        for name, p in inspect.signature(self.function).parameters.items():
            if name in self.skip or p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL):
                continue
            out[name] = Option(name, hints.get(name, Any), p.default is inspect.Parameter.empty)
        return out

    def finished(self, out: Path) -> bool:
        return (out / "result.json").is_file()

    def run(self, values: dict[str, Any], out: Path, resume: bool) -> None:
        from nbcli.atomic import write_text_atomic
        from nbcli.jsonsafe import json_ready

        import importlib.util

        out.mkdir(parents=True, exist_ok=True)
        drawn = {option: out / name for option, name in self.files.items()} \
            if importlib.util.find_spec("matplotlib") is not None else {}  # figures: the optional extra
        report = self.function(**values, **drawn)
        write_text_atomic(out / "result.json", json.dumps(json_ready(report.to_dict()), indent=2, sort_keys=True) + "\n")


def _analysis(name: str) -> Kind:
    if name == "analogy":
        from nbcli.api.vectors import analogy

        return AnalysisKind("analogy", analogy)
    from nbcli.api.language_models import evaluate

    return AnalysisKind("lm-eval", evaluate, skip=("bias_effect_plot", "by_frequency_plot"),
                        files={"bias_effect_plot": "bias_effect.png"})


ANALYSES = ("analogy", "lm-eval")


def get_kind(name: str) -> Kind:
    """The kind of run `name` names: an analysis (ANALYSES) or a task of nb train."""
    if name in ANALYSES:
        return _analysis(name)
    from nbcli.tasks.registry import task_names

    if name not in task_names():
        raise ConfigError(f"task {name!r}: expected a task of nb train ({', '.join(task_names())}) or an analysis "
                          f"({', '.join(ANALYSES)})")
    return TaskKind(name)
