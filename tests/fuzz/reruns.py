"""The plain rerun after a kill, as the commit tests run it: the process killed at a commit point is
always a real `nb` process (SIGKILL needs one); the rerun that recovers is a real process for one case
of each test (its exit status, stderr and leftover processes as a user sees them) and in-process
(typer's CliRunner: the same recovery code, without a second interpreter and torch import) for the
others, which halves each case's cost (issue 44: the suite in half the time, no case dropped)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from tests import forked_nb


@dataclass(frozen=True)
class Rerun:
    returncode: int
    stdout: str
    stderr: str


def rerun(args: list[str | Path], *, as_process: bool) -> Rerun:
    """`nb ARGS` once more, with no fault injected: a real process when `as_process`, else in-process."""
    words = [str(a) for a in args]
    if as_process:
        env = {**os.environ, "COLUMNS": "200"}
        env.pop("NB_FAULT_INJECT", None)
        done = forked_nb.run(["nb", *words], capture_output=True, text=True, timeout=300, env=env)
        assert "Traceback" not in done.stderr, done.stderr
        return Rerun(done.returncode, done.stdout, done.stderr)
    from tests.cli.helpers import invoke

    assert "NB_FAULT_INJECT" not in os.environ
    result = invoke(*words)
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    return Rerun(result.exit_code, result.stdout, result.stderr)
