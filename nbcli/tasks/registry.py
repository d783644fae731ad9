"""The tasks nb knows: the built-in ones and every task another package registers under the
entry-point group `nbcli.tasks` (the convention of pytest plugins), e.g. in its pyproject.toml:

    [project.entry-points."nbcli.tasks"]
    regression = "my_package.regression:RegressionTask"

An entry point names a `nbcli.tasks.base.Task` subclass; its `name` is the task's name on the
command line (`nb train regression`). Tasks are imported when asked for, not at start-up; the
installed entry points are read once per process (a package installed since needs a new one).
"""

from __future__ import annotations

import functools
import importlib
from importlib.metadata import entry_points

from nbcli.errors import ConfigError
from nbcli.tasks.base import Task

GROUP = "nbcli.tasks"
#: name -> "module:Class" of the built-in tasks, in `nb train --help` order.
BUILTIN = {
    "lm": "nbcli.tasks.lm:LanguageModelTask",
    "translation": "nbcli.tasks.translation_task:TranslationTask",
    "classification": "nbcli.tasks.finetune_tasks:ClassificationTask",
    "tagging": "nbcli.tasks.finetune_tasks:TaggingTask",
}


def _load(target: str) -> type[Task]:
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


def task_targets() -> dict[str, str]:
    """name -> "module:Class" of every task: the built-in ones, then the entry points' (a name that
    repeats a built-in one is ignored: nb's own tasks keep their names)."""
    targets = dict(BUILTIN)
    for name, value in _registered():
        targets.setdefault(name, value)
    return targets


@functools.cache
def _registered() -> tuple[tuple[str, str], ...]:
    """(name, "module:Class") of the `nbcli.tasks` entry points installed: a scan of every installed
    distribution's metadata (~20 ms), made once."""
    return tuple((ep.name, ep.value) for ep in entry_points(group=GROUP))


def task_names() -> list[str]:
    return list(task_targets())


def get_task(name: str) -> Task:
    """The task called `name` (an instance); ConfigError naming the known ones otherwise, or when a
    registered entry point does not load or is no Task."""
    targets = task_targets()
    if name not in targets:
        raise ConfigError(f"no task {name!r}; nb train knows {', '.join(targets)}")
    try:
        cls = _load(targets[name])
    except Exception as err:  # noqa: BLE001 - another package's import: one line, naming it
        raise ConfigError(f"task {name!r} ({targets[name]}, entry point group {GROUP}) does not load: "
                          f"{type(err).__name__}: {err}") from None
    if not (isinstance(cls, type) and issubclass(cls, Task)):
        raise ConfigError(f"task {name!r} ({targets[name]}) is not a nbcli.tasks.base.Task subclass")
    return cls()


def option_owners() -> dict[str, list[str]]:
    """Every flag of a built-in task (`--beam`, `--max-len`, `-t`, `--no-scale-embedding`) -> the
    built-in tasks that take it: for the error that refuses another task's option."""
    owners: dict[str, list[str]] = {}
    for name in BUILTIN:
        for opt in get_task(name).options():
            for flag in opt.typed_flags:
                owners.setdefault(flag, []).append(name)
    return owners
