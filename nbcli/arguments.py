"""The Python API's error promise: `@public` checks a function's arguments against its annotations
and bounds before it runs, and puts the core's messages in the function's own words.

    @public
    def evaluate(checkpoint: PathLike, corpus: ..., tokenizer: PathLike, *, batch_size: int = 8, ...)

* A wrong type (a model object where a path is expected, None for a tokenizer, "half" for a number,
  a choice outside a `Literal`) or an integer out of bounds (`BOUNDS`: the limits the CLI's options
  declare) raises `ConfigError` naming the parameter, what it takes and what it got:
  `evaluate(): tokenizer= takes a path or Hub repo id (str or os.PathLike), got None`.
* The core's messages name options as the command line spells them (`--scale-ln-bias`, `--map
  ROLE=TENSOR`, `-o`); an `NbError` leaving a public function is re-raised, same class, with each
  option named by its parameter (`python_terms`): `scale_ln_bias='half': ...`, `mapping ROLE=TENSOR`,
  `allow_nonfinite=True`. The CLI shows the core's message unchanged.

Only the standard library is imported here (`import nbcli` stays light); the hints are read on a
function's first call.
"""

from __future__ import annotations

import collections.abc
import functools
import inspect
import os
import re
import typing
from collections.abc import Callable
from typing import Any, TypeVar

from nbcli.errors import ConfigError, NbError

F = TypeVar("F", bound=Callable[..., Any])

#: Inclusive (min, max) of integer parameters, as the commands' options bound them (max None: none).
BOUNDS: dict[str, tuple[int, int | None]] = {
    "workers": (0, None), "seed": (0, 2**63 - 1), "batch_size": (1, None), "bins": (1, 1000), "stride": (1, None),
    "prompt_words": (1, None), "max_new_tokens": (1, None), "samples": (1, None), "max_prompts": (1, None),
    "min_count": (0, None), "alc_steps": (0, None), "restrict_vocab": (0, None), "max_len": (1, None),
    "limit": (1, None), "beam": (1, 1024)}

#: Command-line options whose parameter is not their long name in snake case.
RENAMED = {"map": "mapping", "standardise-embeddings": "standardise", "shuffle-embeddings": "shuffle",
           "label": "labels", "at": "steps", "checkpoint": "checkpoints"}
#: Short options -> the parameter they stand for (the first one the function has).
SHORT = {"o": ("output", "out"), "t": ("tokenizer",), "c": ("counts",), "j": ("workers",)}

_OPTION = re.compile(r"(?<![\w-])(--(?:no-)?[a-z][a-z0-9]*(?:-[a-z0-9]+)*|-[octj])(?![\w-])( (?=['\"\d/~.+-]|[A-Z]|[\w.-]*[.=_:/,\d]))?")


_MAP = re.compile(r"--map '?([\w.]+)=([\w.]+)'?")


def _key(text: str) -> str:
    """A role or tensor name as a dict literal shows it (a METAVAR stays bare)."""
    return text if text.isupper() else repr(text)


def public(function: F) -> F:
    """Check `function`'s arguments before it runs and word its NbErrors in its parameter names."""
    signature = inspect.signature(function)
    hints: list[dict[str, Any]] = []  # read on the first call

    @functools.wraps(function)
    def call(*args: Any, **kwargs: Any) -> Any:
        if not hints:
            hints.append(_hints(function, signature))
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError as err:
            raise ConfigError(f"{function.__name__}(): {err}") from None
        for name, value in bound.arguments.items():
            if name in hints[0]:
                check(function.__name__, name, value, hints[0][name])
        try:
            return function(*args, **kwargs)
        except NbError as err:
            worded = python_terms(str(err), signature)
            if worded == str(err):
                raise
            raise type(err)(worded) from None

    return call  # type: ignore[return-value]


def _hints(function: Callable[..., Any], signature: inspect.Signature) -> dict[str, Any]:
    """The parameters' annotations, resolved in the function's module (its return annotation may
    name a type imported for type checking only, so it is left out)."""
    annotations = {name: p.annotation for name, p in signature.parameters.items()
                   if p.annotation is not inspect.Parameter.empty
                   and p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)}
    holder = type("Parameters", (), {"__annotations__": annotations, "__module__": function.__module__})
    return typing.get_type_hints(holder)


def check(function: str, name: str, value: Any, hint: Any) -> None:
    """A ConfigError when `value` does not fit `hint` (or the bounds of `name`)."""
    if not conforms(value, hint):
        got = _shown(value)
        if isinstance(value, (list, tuple)) and value:  # say which item does not fit
            members = [hint, *typing.get_args(hint)]
            items = [a for a in members if typing.get_origin(a) in (collections.abc.Sequence, list, tuple)]
            item_hint = typing.get_args(items[0])[0] if items and typing.get_args(items[0]) else None
            bad = [i for i, item in enumerate(value) if item_hint is not None and not conforms(item, item_hint)]
            got += f" whose item {bad[0]} is {_shown(value[bad[0]])}" if bad else ""
        raise ConfigError(f"{function}(): {name}= takes {describe(hint)}, got {got}")
    if name in BOUNDS and isinstance(value, int) and not isinstance(value, bool):
        low, high = BOUNDS[name]
        if value < low or (high is not None and value > high):
            span = f"at least {low}" if high is None else f"{low} to {high}"
            raise ConfigError(f"{function}(): {name}={value}: expected {span}")


def _shown(value: Any) -> str:
    """A value as an error message shows it: short scalars by repr and type, anything else by type."""
    if value is None:
        return "None"
    if isinstance(value, (bool, int, float)) or (isinstance(value, str) and len(value) <= 60):
        return f"{value!r} ({type(value).__name__})"
    kind = type(value)
    return f"a {kind.__name__}" if kind.__module__ == "builtins" else f"a {kind.__module__.split('.')[0]}.{kind.__name__}"


def _is_pathlike(hint: Any) -> bool:
    return typing.get_origin(hint) is os.PathLike or hint is os.PathLike


def conforms(value: Any, hint: Any) -> bool:
    """Whether `value` is what `hint` (a resolved annotation) admits."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any or hint is typing.Any:
        return True
    if hint is type(None) or hint is None:
        return value is None
    if origin is typing.Union or (origin is not None and type(hint).__name__ == "UnionType"):
        return any(conforms(value, arg) for arg in args)
    if origin is typing.Literal:
        return any(value == choice and type(value) is type(choice) for choice in args)
    if _is_pathlike(hint):
        return isinstance(value, os.PathLike)
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is str:
        return isinstance(value, str)
    if origin in (collections.abc.Sequence, list, tuple):
        return (isinstance(value, (list, tuple)) and
                all(conforms(item, args[0]) for item in value) if args else isinstance(value, (list, tuple)))
    if origin is collections.abc.Mapping or origin is dict:
        return isinstance(value, collections.abc.Mapping) and (
            not args or all(conforms(k, args[0]) and conforms(v, args[1]) for k, v in value.items()))
    if origin is collections.abc.Callable or hint is collections.abc.Callable:
        return callable(value)
    return True  # a type this check does not know: the function's own checks decide


def describe(hint: Any) -> str:
    """An annotation in words: 'a path or Hub repo id (str or os.PathLike) or None'."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is type(None) or hint is None:
        return "None"
    if origin is typing.Union or (origin is not None and type(hint).__name__ == "UnionType"):
        if str in args and any(_is_pathlike(a) for a in args):
            rest = [a for a in args if a is not str and not _is_pathlike(a)]
            return " or ".join(["a path (str or os.PathLike)", *map(describe, rest)])
        return " or ".join(describe(a) for a in args)
    if origin is typing.Literal:
        return "one of " + ", ".join(map(repr, args))
    if origin in (collections.abc.Sequence, list, tuple):
        return f"a list of {_plural(args[0])}" if args else "a list"
    if origin is collections.abc.Mapping or origin is dict:
        return f"a dict of {_plural(args[0])} -> {_plural(args[1])}" if args else "a dict"
    if origin is collections.abc.Callable or hint is collections.abc.Callable:
        return "a function"
    names = {bool: "True or False", int: "an integer", float: "a number", str: "a string"}
    return names.get(hint, getattr(hint, "__name__", str(hint)))


def _plural(hint: Any) -> str:
    """What a list of `hint` holds, in words: paths, strings, numbers (else its description)."""
    args = typing.get_args(hint)
    if str in args and any(_is_pathlike(a) for a in args):
        return "paths"
    return {str: "strings", int: "integers", float: "numbers", bool: "booleans"}.get(hint, f"({describe(hint)})")


def python_terms(message: str, signature: inspect.Signature) -> str:
    """`message` with each command-line option named by its parameter in `signature`: `--foo-bar`
    -> `foo_bar`, `--foo-bar 'x'` -> `foo_bar='x'`, a flag -> `foo_bar=True` (`--no-foo` ->
    `foo=False`), `-o` -> `output`; `--map` -> `mapping` (RENAMED)."""
    parameters = signature.parameters
    if "mapping" in parameters:  # --map ROLE=TENSOR -> mapping={ROLE: TENSOR}
        message = _MAP.sub(lambda m: f"mapping={{{_key(m.group(1))}: {_key(m.group(2))}}}", message)

    def flag(default: Any) -> bool:
        return isinstance(default, bool)

    def word(match: re.Match[str]) -> str:
        option, value_follows = match.group(1), match.group(2) is not None
        if not option.startswith("--"):
            name = next((n for n in SHORT[option[1]] if n in parameters), SHORT[option[1]][0])
            return name + ("=" if value_follows else "")
        long = option[2:]
        negated = long.startswith("no-") and long[3:].replace("-", "_") in parameters
        long = long[3:] if negated else long
        name = RENAMED.get(long, long.replace("-", "_"))
        if name not in parameters and long.replace("-", "_") in parameters:
            name = long.replace("-", "_")
        if name in parameters and flag(parameters[name].default):
            return f"{name}={not negated}" + (" " if value_follows else "")
        return name + ("=" if value_follows else "")

    return _OPTION.sub(word, message)
