"""Helpers for CLI tests: run nb in-process (CliRunner) or as a real subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from nbcli.cli import app_for
from tests import forked_nb


def run_cli(args: list[str], **options: Any):  # noqa: ANN201 - click Result
    """Run `nb ARGS` in-process as the console script does (the app of that command alone:
    `nbcli.cli.app_for`); stdout and stderr are kept apart. `options`: CliRunner.invoke's (input, env)."""
    words = [str(a) for a in args]
    return CliRunner().invoke(app_for(words), words, **options)


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
