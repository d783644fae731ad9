"""The API's arguments as the core takes them: paths as typed (a string may be a repo id), lists of
inputs, role maps, a loaded model or a state dict, a lambda list, a training function's **config."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nbcli.api.reports import PathLike, RoleMap, TrainReport

if TYPE_CHECKING:
    from nbcli.checkpoint.memory import MemoryCheckpoint


def local_path(source: PathLike) -> Path:
    """The path a source names, for the resolver: a string as typed (`./gpt2` is a folder, `gpt2` may
    be a repo id: nbcli.resolve.TypedPath), a Path as it is."""
    from nbcli.resolve import TypedPath

    return TypedPath(source) if isinstance(source, str) else Path(os.fspath(source))


def optional_path(source: PathLike | None) -> Path | None:
    return None if source is None else local_path(source)


def input_paths(sources: PathLike | Sequence[PathLike]) -> list[str]:
    """One input or several, as the command's INPUT... strings (globs and - allowed)."""
    if isinstance(sources, (str, os.PathLike)):
        return [os.fspath(sources)]
    return [os.fspath(s) for s in sources]


def role_map(mapping: RoleMap) -> dict[str, str]:
    from nbcli.checkpoint.roles import parse_role_map

    if mapping is None:
        return {}
    items = [f"{role}={name}" for role, name in mapping.items()] if isinstance(mapping, Mapping) else list(mapping)
    return parse_role_map(items)


def role_items(mapping: RoleMap) -> list[str]:
    return [f"{role}={name}" for role, name in role_map(mapping).items()]


def is_path(value: Any) -> bool:
    return isinstance(value, (str, os.PathLike))


def runnable_model(model: Any, function: str) -> Any:
    """A model argument of evaluate/generate: a path (or repo id) as given, or a loaded model (a
    transformers causal LM or nb's Transformer), run where it is; a state dict cannot run."""
    from nbcli.errors import ConfigError

    if is_path(model):
        return local_path(model)
    if isinstance(model, Mapping) or not callable(getattr(model, "parameters", None)):
        raise ConfigError(f"{function}() runs a model: give a path or a loaded model, not a "
                          f"{type(model).__name__} (load a state dict into its model first: model.load_state_dict(sd))")
    return model


def held_checkpoint(model: Any) -> MemoryCheckpoint:
    """A loaded transformers model (any torch module) or a state dict, as a checkpoint in memory."""
    from nbcli.checkpoint.memory import MemoryCheckpoint
    from nbcli.errors import ConfigError

    if isinstance(model, Mapping):
        return MemoryCheckpoint(model)
    if hasattr(model, "state_dict") and callable(model.state_dict):
        return MemoryCheckpoint.from_model(model)
    raise ConfigError(f"checkpoint= takes a path, a state dict (dict of str -> torch.Tensor) or a loaded model, got "
                      f"{type(model).__name__}")


def lambda_spec(values: str | Sequence[float] | float | None) -> str | None:
    """The command's LAMBDA list spec from a string or numbers."""
    if values is None or isinstance(values, str):
        return values
    if isinstance(values, (int, float)):
        return repr(float(values))
    return ",".join(repr(float(v)) for v in values)


def check_train_config(function: str, config: Mapping[str, Any]) -> None:
    """The options of a training function's **config, checked as its named parameters are: each a
    field of `nbcli.train.config.TrainConfig` (not preset, task or task_options) of its type."""
    import typing

    from nbcli.arguments import check
    from nbcli.errors import ConfigError
    from nbcli.train.config import TrainConfig

    fields = {k: v for k, v in typing.get_type_hints(TrainConfig).items()
              if k not in ("preset", "task", "task_options")}
    for key, value in config.items():
        if key not in fields:
            raise ConfigError(f"{function}(): unknown option {key}=; the options are the fields of "
                              f"nbcli.train.config.TrainConfig: {', '.join(fields)}")
        check(function, key, value, typing.Optional[fields[key]])



def trained(run: Callable[[], Mapping[str, Any]], threads: int | None) -> TrainReport:
    """A training function's summary, run on `threads` CPU threads (`--threads`; None: every core), with
    `threads` recorded as summary.json and `nb train --json` record it."""
    from nbcli.tasks.runs import with_threads
    from nbcli.threads import cpu_threads   # it checks `threads`

    with cpu_threads(threads):
        return TrainReport(with_threads(dict(run())))
