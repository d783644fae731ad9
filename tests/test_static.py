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
