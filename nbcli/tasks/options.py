"""A task's options, declared once: each is a field of a dataclass, its metadata the flag, help text,
metavar and bounds. The declaration is the single source of the CLI's options (`nb train TASK` is
generated from it), the Python API's keyword arguments and recipe keys: a field's name is the
keyword, its default the default, its type the conversion.

Option groups (`TrainingOptions`, `OutputBiasOptions`, ...) are plain dataclasses that several tasks
list; a task takes exactly the fields of the groups it lists (`Task.option_groups`), so an option of
another task is refused in one line naming the task that has it.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from nbcli.errors import ConfigError

REQUIRED: Any = dataclasses.MISSING  # a field without a default: the option must be given

# Bounds that keep every derived count (tokens seen, positions, step numbers) inside int64 and every
# allocation representable; values beyond them are usage errors rather than overflows or hangs.
MAX_STEPS = 10**12
MAX_SEQUENCES = 2**24
MAX_SEQ_LEN = 2**20
MAX_SEED = 2**63 - 1  # torch generators take 64-bit seeds, numpy's non-negative ones


@dataclass(frozen=True)
class Opt:
    """How one option is written: its flags (the first long one names it), help, metavar and the
    closed bounds of a number (None: unbounded)."""

    flags: tuple[str, ...]
    help: str
    metavar: str | None = None
    min: float | None = None
    max: float | None = None

    @property
    def flag(self) -> str:
        """The option's name as typed: its longest flag (--max-len's alias --seq-len is shorter)."""
        return max((f for f in self.flags if f.startswith("--")), key=len) if self.flags else ""


def option(default: Any, *flags: str, help: str, metavar: str | None = None, min: float | None = None,
           max: float | None = None) -> Any:
    """A dataclass field declaring an option (`REQUIRED` as `default`: it must be given). Flags
    default to --the-field-name."""
    meta = {"nb": Opt(tuple(flags), help, metavar, min, max)}
    if default is REQUIRED:
        return field(metadata=meta)
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata=meta)
    return field(default=default, metadata=meta)


@dataclass(frozen=True)
class Declared:
    """One option as the faces see it: its keyword name, type, default (REQUIRED: none) and `Opt`."""

    name: str
    type: Any
    default: Any
    opt: Opt

    @property
    def flag(self) -> str:
        return self.opt.flag or "--" + self.name.replace("_", "-")

    @property
    def required(self) -> bool:
        return self.default is REQUIRED

    @property
    def typed_flags(self) -> set[str]:
        """Every way to type it: each flag, and both halves of an on/off pair (`--scale-embedding/--no-...`)."""
        return {f for spec in (self.opt.flags or (self.flag,)) for f in spec.split("/")}


def declared(groups: Iterable[type]) -> list[Declared]:
    """The options of the dataclasses `groups`, in order; a name declared twice is a bug (ValueError)."""
    out: list[Declared] = []
    seen: set[str] = set()
    for group in groups:
        hints = typing.get_type_hints(group, include_extras=True)
        for f in dataclasses.fields(group):
            if f.name in seen:
                raise ValueError(f"option {f.name!r} declared twice ({group.__name__})")
            seen.add(f.name)
            default = f.default if f.default is not dataclasses.MISSING else (
                f.default_factory() if f.default_factory is not dataclasses.MISSING else REQUIRED)
            out.append(Declared(f.name, hints[f.name], default, f.metadata["nb"]))
    return out


def option_values(options: Sequence[Declared], given: Mapping[str, Any], *, task: str,
                  elsewhere: Mapping[str, str] = {}) -> dict[str, Any]:
    """Every option of `options` with its value: `given` (keyword -> value) over the defaults.

    ConfigError, before any work: a keyword the task does not take (naming the task that has it, from
    `elsewhere`: keyword -> task name), or a required option missing."""
    names = {o.name: o for o in options}
    for key in given:
        if key not in names:
            flag = "--" + key.replace("_", "-")
            owner = elsewhere.get(key)
            where = f"; it belongs to nb train {owner}" if owner else ""
            raise ConfigError(f"{flag} does not apply to nb train {task}{where}")
    values = {o.name: given.get(o.name, o.default) for o in options}
    missing = [names[k].flag for k, v in values.items() if v is REQUIRED]
    if missing:
        raise ConfigError(f"nb train {task} needs {', '.join(missing)}")
    return values
