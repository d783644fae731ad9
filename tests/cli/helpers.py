"""Helpers for CLI tests: run nb in-process (CliRunner) or as a real subprocess."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import typer
import typer.main
import typer.testing
from typer.testing import CliRunner

from nbcli.cli import COMMAND_MODULES, app_for
from nbcli.tasks.registry import task_targets
from tests import forked_nb


@functools.lru_cache(maxsize=64)
def _command(name: str | None, tasks: tuple[tuple[str, str], ...]) -> Any:
    """The click command typer builds of `app_for([name])` (the whole app for None), once per command and
    set of registered tasks (a test may patch the registry): typer builds it on every CliRunner call from
    every option's type hints (2-60 ms a call; a real `nb` process builds it once), and click commands
    keep nothing from one invocation to the next."""
    return typer.main.get_command(app_for([name] if name else []))


class _PrebuiltRunner(CliRunner):
    """typer's CliRunner over a command already built (typer.testing builds one per call)."""

    def invoke_command(self, command: Any, words: list[str], **options: Any):  # noqa: ANN201 - click Result
        build = typer.testing._get_command
        typer.testing._get_command = lambda _app: command
        try:
            return self.invoke(typer.Typer(), words, **options)
        finally:
            typer.testing._get_command = build


def run_cli(args: list[str], **options: Any):  # noqa: ANN201 - click Result
    """Run `nb ARGS` in-process as the console script does (the app of that command alone:
    `nbcli.cli.app_for`); stdout and stderr are kept apart. `options`: CliRunner.invoke's (input, env)."""
    words = [str(a) for a in args]
    name = words[0] if words and words[0] in COMMAND_MODULES else None
    command = _command(name, tuple(sorted(task_targets().items())))
    return _PrebuiltRunner().invoke_command(command, words, **options)


def invoke(*args: str | Path, input: str | None = None):  # noqa: ANN201 - click Result
    """Run `nb ARGS` in-process; stdout and stderr are kept apart."""
    return run_cli(list(args), input=input)


def run_nb(*args: str | Path, input: bytes | None = None, timeout: float = 120,
           cwd: Path | None = None) -> subprocess.CompletedProcess[bytes]:
    """Run the installed `nb` console script as a subprocess (stdout/stderr piped, so no progress)."""
    env = {**os.environ, "COLUMNS": "120"}
    return forked_nb.run(["nb", *map(str, args)], input=input, capture_output=True, timeout=timeout,
                          env=env, cwd=cwd)


def assert_one_line_error(stderr: str, *fragments: str) -> None:
    """An expected failure: exactly one non-empty line on stderr, no traceback, naming what's wrong."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert lines[0].startswith("nb: error: "), stderr
    assert "Traceback" not in stderr
    for fragment in fragments:
        assert fragment in lines[0], (fragment, stderr)


PYTHON = sys.executable
