"""Run one hostile case and check every promise of docs/guarantees.md ("What nb promises when
things go wrong").

A case is a command line plus the input files it reads (created fresh in the case's own
directory). `check_case` runs it in-process (typer's CliRunner, fast) or as a real `nb` process
and asserts: non-zero exit; no traceback; exactly one non-empty stderr line, starting `nb: error:`,
naming the file (or option); nothing on stdout; no file added, removed or changed anywhere in the
case directory (no partial output, no stale temporary, every input byte-identical); no warning
emitted; no process left behind. Each outcome is tallied for the figure printed at the end of the
run (tests/fuzz/conftest.py) and recorded in BENCHMARKS.md.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from nbcli.cli.base import one_line
from tests import forked_nb

FIGURE_KEYS = ("cases", "tracebacks", "exit_0", "not_one_line", "unnamed", "partial_outputs", "inputs_modified",
               "warnings", "processes_left", "hangs")
TALLY: dict[str, int] = dict.fromkeys(FIGURE_KEYS, 0)
FAILURES: list[str] = []

Files = Mapping[str, bytes]


@dataclass(frozen=True)
class Case:
    """`args` may hold `{NAME}` placeholders: `{DIR}` (the case directory) and the shared inputs
    given to check_case (`{SP}`, `{CORPUS}`, ...). `files` builds the inputs (called at run time).
    `names`: fragments the error line must contain (the file, tensor or option at fault)."""

    id: str
    args: tuple[str, ...]
    files: Callable[[], Files] = dict
    names: tuple[str, ...] = ()
    family: str = ""
    timeout: float = 120.0
    known: str = ""  # why this case still breaks a promise (an xfail, strict: it must start failing)
    fast: bool = True  # in the default suite (the others run under the fuzz_slow marker)
    env: tuple[tuple[str, str], ...] = ()  # environment variables the run sees (e.g. a lower NB_MAX_LINE_MB)

    def expand(self, directory: Path, shared: Mapping[str, Path]) -> list[str]:
        values = {"DIR": str(directory), **{k: str(v) for k, v in shared.items()}}
        out = []
        for arg in self.args:
            for key, value in values.items():
                arg = arg.replace("{" + key + "}", value)
            out.append(arg)
        return out


@dataclass
class Outcome:
    exit_code: int | None
    stdout: str
    stderr: str
    traceback: bool
    warnings: list[str] = field(default_factory=list)
    processes_left: list[int] = field(default_factory=list)
    hung: bool = False


def snapshot(paths: list[Path]) -> dict[str, tuple[int, str]]:
    """Every file under `paths` (directories walked, hidden files included): (mode, sha256)."""
    state: dict[str, tuple[int, str]] = {}
    for root in paths:
        if root.is_dir():
            for dirpath, dirnames, filenames in os.walk(root):
                for name in dirnames + filenames:
                    p = Path(dirpath) / name
                    state[str(p)] = _fingerprint(p)
        elif root.exists():
            state[str(root)] = _fingerprint(root)
    return state


def _fingerprint(path: Path) -> tuple[int, str]:
    st = os.lstat(path)
    if path.is_symlink() or not path.is_file():
        return st.st_mode, os.readlink(path) if path.is_symlink() else ""
    return st.st_mode, hashlib.sha256(path.read_bytes()).hexdigest()


def _children() -> set[int]:
    """Live child processes of this process, but multiprocessing's resource tracker (started once by
    the first process pool, it lives as long as its parent: a real `nb` process takes it along)."""
    pids: set[int] = set()
    for task in Path("/proc/self/task").iterdir():
        try:
            pids.update(int(p) for p in (task / "children").read_text().split())
        except OSError:
            pass
    alive = set()
    for pid in pids:
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if b"resource_tracker" not in cmdline and state != "Z":
            alive.add(pid)
    return alive


def _session_members(sid: int) -> list[int]:
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if int(fields[3]) == sid and fields[0] != "Z":
            members.append(int(entry.name))
    return members


class CaseTimeout(BaseException):
    """Raised by SIGALRM in a case that runs too long (BaseException: nb and CliRunner let it through)."""


def _alarm(signum: int, frame: object) -> None:
    raise CaseTimeout()


def run_inprocess(args: list[str], timeout: float, env: Mapping[str, str] | None = None) -> Outcome:

    from tests.cli.helpers import run_cli

    before = _children()
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = run_cli(args, env=dict(env or {}))
    except CaseTimeout:
        return Outcome(None, "", "", False, hung=True)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    left = sorted(_children() - before)
    exc = result.exception
    traceback = (exc is not None and not isinstance(exc, SystemExit)) or "Traceback" in result.stderr
    if traceback and exc is not None and not isinstance(exc, SystemExit):
        import traceback as tb

        detail = "".join(tb.format_exception(type(exc), exc, exc.__traceback__))[-3000:]
        stderr = result.stderr + "\n[in-process exception]\n" + detail
    else:
        stderr = result.stderr
    return Outcome(result.exit_code, result.stdout, stderr, traceback,
                   [f"{w.category.__name__}: {w.message}" for w in caught], left)


def run_subprocess(args: list[str], cwd: Path, timeout: float, extra_env: Mapping[str, str] | None = None) -> Outcome:
    env = {**os.environ, "COLUMNS": "120", **(extra_env or {})}
    proc = forked_nb.Popen(["nb", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd, env=env,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
        hung = False
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        hung = True
    deadline = time.monotonic() + 5
    left = _session_members(proc.pid)
    while left and time.monotonic() < deadline:  # children may take a moment to notice
        time.sleep(0.05)
        left = _session_members(proc.pid)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    stderr = err.decode("utf-8", "replace")
    return Outcome(proc.returncode, out.decode("utf-8", "replace"), stderr, "Traceback" in stderr,
                   processes_left=left, hung=hung)


def check_case(case: Case, directory: Path, shared: Mapping[str, Path], *, subprocess_mode: bool = False) -> None:
    """Create the inputs, run the case, assert every promise; tally what broke (see FIGURE_KEYS)."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, data in case.files().items():
        path = directory / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    watched = [directory, *shared.values()]
    before = snapshot(watched)
    args = case.expand(directory, shared)
    outcome = (run_subprocess(args, directory, case.timeout, dict(case.env)) if subprocess_mode
               else run_inprocess(args, case.timeout, dict(case.env)))
    after = snapshot(watched)

    lines = [line for line in outcome.stderr.splitlines() if line.strip()]
    added = sorted(set(after) - set(before))
    changed = sorted(k for k in before if after.get(k) != before[k])
    problems = {
        "tracebacks": outcome.traceback,
        "exit_0": outcome.exit_code == 0,
        "not_one_line": len(lines) != 1 or not lines[0].startswith("nb: error: ") or bool(outcome.stdout.strip()),
        "unnamed": bool(lines) and not all(one_line(n) in lines[0] for n in case.names),
        "partial_outputs": bool(added),
        "inputs_modified": bool(changed),
        "warnings": bool(outcome.warnings),
        "processes_left": bool(outcome.processes_left),
        "hangs": outcome.hung,
    }
    TALLY["cases"] += 1
    for key, bad in problems.items():
        TALLY[key] += int(bad)
    broken = [key for key, bad in problems.items() if bad]
    if broken:
        FAILURES.append(f"{case.family}/{case.id}: {', '.join(broken)}")
    assert not broken, (
        f"{case.id}: {broken}\nargs: {args}\nexit: {outcome.exit_code}\nstdout: {outcome.stdout[-2000:]}\n"
        f"stderr: {outcome.stderr[-4000:]}\nwarnings: {outcome.warnings}\nadded: {added}\nchanged: {changed}\n"
        f"processes left: {outcome.processes_left}\nexpected names: {case.names}")
