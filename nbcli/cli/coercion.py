"""Option values converted without importing pydantic, where the result is certain.

typer (0.2x) converts every command-line value through a pydantic TypeAdapter, and importing
pydantic costs ~0.1 s, a sixth of a short `nb count-unigrams` run. nb's options are plain `str`,
`Path`, `int`/`float` with bounds, `Literal` choices and lists of those: `fast_value` converts such a
value when the answer is plain (a decimal integer within its bounds, a Path, a listed choice) and
returns `NOT_FAST` otherwise, so that typer's own conversion runs and gives the same value or the
same error message (tests/cli/test_coercion.py compares the two for every option of every command).

This reaches into typer's private modules (`typer._coercion`, `typer._param_types`): typer offers no
public way around pydantic (a `parser=` goes through a TypeAdapter too). So pyproject.toml pins typer
to one minor release, and CI (.ci/typer-range) runs the CLI tests under its oldest and newest
version; a typer without this machinery is left as it is (`install_fast_coercion` does nothing).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

NOT_FAST: Any = object()
_INTEGER = re.compile(r"[+-]?[0-9]+")
_DECIMAL = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_PLAIN_PATH = {"exists": False, "file_okay": True, "dir_okay": True, "writable": False,
               "resolve_path": False, "allow_dash": False, "path_type": None}


def _within(value: int | float, info: Any) -> bool:
    return ((info.min is None or value >= info.min) and (info.max is None or value <= info.max)
            and not info.clamp)


def _number(value: Any, kind: type, info: Any) -> Any:
    if isinstance(value, str):
        if not (_INTEGER if kind is int else _DECIMAL).fullmatch(value):
            return NOT_FAST
        number = kind(value)
    elif type(value) is int or (kind is float and type(value) is float):
        number = kind(value)
    else:
        return NOT_FAST
    return number if _within(number, info) else NOT_FAST


def fast_value(annotation: Any, info: Any, value: Any, param: Any = None, ctx: Any = None) -> Any:
    """`value` (a command-line string, or a default) as `annotation`, or NOT_FAST to let typer decide;
    `param` and `ctx` name the option in the errors of typer's own path checks."""
    if get_origin(annotation) is list:
        if not isinstance(value, (list, tuple)) or info.parser is not None:
            return NOT_FAST
        (item,) = get_args(annotation)
        items = [fast_value(item, info, v, param, ctx) for v in value]
        return NOT_FAST if any(v is NOT_FAST for v in items) else items
    if info.parser is not None:
        return NOT_FAST
    if annotation is str:
        return value if isinstance(value, str) else NOT_FAST
    if annotation is int or annotation is float:
        return _number(value, annotation, info)
    if get_origin(annotation) is Literal:
        choices = get_args(annotation)
        return value if info.case_sensitive and isinstance(value, str) and value in choices else NOT_FAST
    if annotation is Path:
        if not (isinstance(value, str) and value and "\0" not in value):
            return NOT_FAST
        if any(getattr(info, name, None) != plain for name, plain in _PLAIN_PATH.items()):
            return NOT_FAST
        from typer._param_types import coerce_cli_path  # typer's own checks (readable), given a Path

        from nbcli.resolve import TypedPath  # keeps `./name` as typed: a local path, never a repo id

        return coerce_cli_path(TypedPath(value), info, path_type=Path, param=param, ctx=ctx)
    return NOT_FAST


def install_fast_coercion(command: Any) -> None:
    """Give each typer parameter of `command` a converter trying `fast_value` before typer's own."""
    try:
        from typer._coercion import RuntimeParam, build_runtime_param
    except ImportError:  # an older typer: click types, no pydantic
        return

    class FastRuntimeParam(RuntimeParam):  # type: ignore[misc,valid-type]
        def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
            fast = fast_value(self.annotation, self.parameter_info, value, param, ctx)
            if fast is not NOT_FAST:
                return fast
            return build_runtime_param(param.type_descriptor)._coerce_value(value, param=param, ctx=ctx)

    for param in command.params:
        descriptor = getattr(param, "type_descriptor", None)
        if descriptor is None or getattr(param, "_runtime_param", False) is not None or descriptor.is_file:
            continue
        param._runtime_param = FastRuntimeParam(parameter_info=descriptor.parameter_info,
                                                annotation=descriptor.annotation)
