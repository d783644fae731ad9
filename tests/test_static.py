"""Static checks over the package and the benchmarks: no undefined names, unused imports or
placeholder-less f-strings (pyflakes). A name error in a rarely run branch (a report's recovery
line, an error path) is a traceback a user meets and the tests may not."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("folder", ["nbcli", "benchmarks"])
def test_pyflakes_finds_nothing(folder: str) -> None:
    from pyflakes.api import checkRecursive
    from pyflakes.reporter import Reporter

    class Collect(Reporter):
        def __init__(self) -> None:
            self.messages: list[str] = []

        def unexpectedError(self, filename: str, message: str) -> None:  # noqa: N802 (pyflakes API)
            self.messages.append(f"{filename}: {message}")

        def syntaxError(self, filename: str, msg: str, lineno: int, offset: int, text: str) -> None:  # noqa: N802
            self.messages.append(f"{filename}:{lineno}: {msg}")

        def flake(self, message: object) -> None:
            self.messages.append(str(message))

    reporter = Collect()
    files = sorted(str(p) for p in (ROOT / folder).rglob("*.py") if ".cache" not in p.parts)
    assert files
    checkRecursive(files, reporter)
    assert reporter.messages == []


MAX_MODULE_LINES = 450
MAX_FUNCTION_BODY_LINES = 80


def function_bodies(source: str) -> list[tuple[str, int, int]]:
    """(name, first line, body lines) of every function in `source`: the body runs from its first
    statement after the docstring to its end (a typer command's parameter list is a declaration,
    not logic)."""
    import ast

    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if len(body) > 1 and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                body = body[1:]
            found.append((node.name, node.lineno, node.end_lineno - body[0].lineno + 1))  # type: ignore[operator]
    return found


def test_modules_and_functions_stay_small() -> None:
    """A module past ~450 lines or a function past 80 is split along its seam (layout notes)."""
    too_long = []
    for path in sorted((ROOT / "nbcli").rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        name = path.relative_to(ROOT)
        if source.count("\n") > MAX_MODULE_LINES:
            too_long.append(f"{name}: {source.count(chr(10))} lines")
        too_long += [f"{name}:{line} {function}(): {n} lines" for function, line, n in function_bodies(source)
                     if n > MAX_FUNCTION_BODY_LINES]
    assert too_long == []


def test_function_bodies_are_measured_without_docstring_or_signature() -> None:
    source = 'def f(\n    a: int,\n    b: int,\n) -> int:\n    """Doc.\n\n    More."""\n    x = a\n    return x + b\n'
    assert function_bodies(source) == [("f", 1, 2)]
    assert function_bodies("def g():\n    pass\n") == [("g", 1, 1)]
