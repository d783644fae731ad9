"""Output conventions: results on stdout, progress and status on stderr, progress only on a terminal."""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

# rich (~25 ms to import) is loaded only when something is rendered or a progress bar can show:
# `nb count-unigrams ... --json | jq` never imports it.
_TERMINAL_OVERRIDES = ("FORCE_TERMINAL", "TTY_COMPATIBLE", "FORCE_COLOR", "TTY_INTERACTIVE")


_BRACKET = re.compile(r"(\\*)(\[[a-z#/@][^[]*?\])|(\\*)\[")  # a rich tag (rich.markup's pattern), or another [
_OPEN_TAIL = re.compile(r"\[[^[\]]*$")  # a [ that text after the data could make a tag of


def stdout_console() -> Console:
    from rich.console import Console

    return Console(highlight=False, soft_wrap=True, emoji=False)


def stderr_console() -> Console:
    from rich.console import Console

    return Console(stderr=True, highlight=False, soft_wrap=True, emoji=False)


def stderr_is_terminal() -> bool:
    """Whether rich would treat stderr as a terminal (a progress bar shows). Answered without
    importing rich when stderr is not a TTY and no environment variable can force one."""
    if not any(name in os.environ for name in _TERMINAL_OVERRIDES):
        try:
            if not sys.stderr.isatty():
                return False
        except (AttributeError, ValueError):  # no isatty, or a closed stream: not a terminal
            return False
    return stderr_console().is_terminal


def esc(value: object) -> str:
    """Data for a rich markup string or table cell: a file or tensor name, a tokenizer piece, a
    metadata value. Printed exactly as it is wherever it is placed, never read as markup (`[/INST]`,
    `[bold]`) or as an emoji code (these consoles have emoji off). Every piece of data that reaches
    rich goes through this.

    Rich reads `[` + a letter, `#`, `/` or `@` ... `]` as a tag and halves the backslashes before
    it, and drops one backslash before any other `[`. So a tag gets 2k+1 backslashes for k, another
    `[` gets k+1; data ending in backslashes or in an unclosed `[` is closed by an empty span, so
    nothing after it (a tag, a `]`) can change how it reads."""
    text = str(value)
    if "[" not in text and not text.endswith("\\"):
        return text
    text = _BRACKET.sub(lambda m: (m.group(1) * 2 + "\\" + m.group(2)) if m.group(2)
                        else m.group(3) + "\\[", text)
    trailing = len(text) - len(text.rstrip("\\"))
    if trailing or _OPEN_TAIL.search(text):
        text += "\\" * trailing + "[dim][/dim]"
    return text


def print_warnings(warnings: list[str]) -> None:
    """Each warning on stderr as one `warning:` line (the report's --json keeps them too)."""
    if not warnings:
        return
    err = stderr_console()
    for warning in warnings:
        err.print(f"[yellow]warning:[/] {esc(warning)}", markup=True)


def check_table_targets(as_json: bool, csv: str | None = None, tsv: str | None = None,
                        inputs: Sequence[Any] = ()) -> None:
    """Before any work: at most one of --json, --csv -, --tsv - writes to stdout, and no table file
    lands on an input (`nbcli.outputs.guard_outputs`)."""
    from pathlib import Path

    from nbcli.outputs import guard_outputs

    one_stdout(as_json, {"--csv": csv, "--tsv": tsv})
    for name, target in (("--csv", csv), ("--tsv", tsv)):
        if target and target != "-":
            guard_outputs([Path(target)], list(inputs), option=name)


def one_stdout(as_json: bool, targets: dict[str, Any]) -> None:
    """Before any work: at most one of --json and the outputs given as `-` (option name -> value)
    writes to stdout (nbcli.outputs: `-` is standard output wherever a file of text is written)."""
    from nbcli.errors import ConfigError

    to_stdout = [name for name, target in targets.items() if target is not None and str(target) == "-"]
    if len(to_stdout) + as_json > 1:
        claims = (["--json"] if as_json else []) + [f"{name} -" for name in to_stdout]
        raise ConfigError(f"{' and '.join(claims)} all write to stdout; give {'/'.join(to_stdout)} a FILE")


def print_report(report: dict[str, Any], as_json: bool, render: Callable[[dict[str, Any]], None], *,
                 csv: str | None = None, tsv: str | None = None, table: str | None = None) -> None:
    """A command's result: the JSON object with --json, else `render(report)` for a person; with
    --csv/--tsv FILE also the table `table` (nbcli.tables) written there, and with `-` that table
    alone on stdout."""
    if csv or tsv:
        from nbcli.tables import table_records, write_table

        records = table_records(report, table)  # an unknown table: the error before anything is written
        targets = [(target, sep) for target, sep in ((csv, ","), (tsv, "\t")) if target]
        for target, sep in sorted(targets, key=lambda t: t[0] == "-"):  # files first, stdout last
            write_table(records, target, sep)
        if any(target == "-" for target, _ in targets):
            return
    if as_json:
        print_json(report)
    else:
        render(report)


def print_json(payload: dict[str, Any]) -> None:
    """Print one JSON object on stdout (NaN -> null, so the output is strict JSON)."""
    import sys

    from nbcli.jsonsafe import json_ready

    sys.stdout.write(json.dumps(json_ready(payload), indent=2, ensure_ascii=False) + "\n")
    sys.stdout.flush()


@contextlib.contextmanager
def byte_progress(description: str) -> Iterator[Callable[[int, int | None], None]]:
    """A progress bar by bytes on stderr when it is a terminal; a no-op callback otherwise.

    The callback takes (advance_bytes, total_bytes_or_None).
    """
    if not stderr_is_terminal():
        yield lambda advance, total: None
        return
    from rich.progress import (
        BarColumn, DownloadColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn,
        TimeRemainingColumn, TransferSpeedColumn,
    )

    progress = Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), TaskProgressColumn(), DownloadColumn(),
        TransferSpeedColumn(), TimeElapsedColumn(), TimeRemainingColumn(), console=stderr_console(),
        transient=True,
    )
    task = progress.add_task(description, total=None)

    def update(advance: int, total: int | None) -> None:
        if not progress.live.is_started:
            progress.start()  # at the first report: its refresh thread starts after any fork
        progress.update(task, advance=advance, total=total)

    try:
        yield update
    finally:
        if progress.live.is_started:
            progress.stop()


@contextlib.contextmanager
def step_progress(description: str, total: int | None, *, every: int | None = None,
                  quiet: bool = False) -> Iterator[Callable[..., None]]:
    """A progress bar by steps (tensors, training steps) on stderr when it is a terminal; off a
    terminal (nohup, a batch job's log file) a log line every `every` steps, or every
    NB_LOG_SECONDS seconds (default 30; 0: none) when `every` is None; nothing with `quiet`.

    The callback takes (advance=1, **fields) where fields fill `{task.fields[...]}` columns.
    """
    if quiet:
        yield lambda advance=1, **fields: None
        return
    if not stderr_is_terminal():
        yield log_lines(description, total, every)
        return
    from rich.progress import (
        BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn,
    )

    progress = Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), TaskProgressColumn(),
        TextColumn("{task.fields[status]}"), TimeElapsedColumn(), TimeRemainingColumn(),
        console=stderr_console(), transient=True,
    )
    task = progress.add_task(description, total=total, status="")

    def update(advance: int = 1, status: str = "", **_: Any) -> None:
        progress.update(task, advance=advance, status=status)

    with progress:
        yield update


def log_lines(description: str, total: int | None, every: int | None) -> Callable[..., None]:
    """The progress of a job off a terminal, as plain lines on stderr (HF Trainer's logging_steps,
    fairseq's --log-interval): `nb: DESCRIPTION: 120/1,000 (12.0 %) STATUS, 1m02s, ETA 8m40s`, every
    `every` steps, or every NB_LOG_SECONDS seconds (default 30; 0: no lines)."""
    import time

    try:
        seconds = float(os.environ.get("NB_LOG_SECONDS", "30"))
    except ValueError:
        seconds = 30.0
    if every is None and not seconds > 0:
        return lambda advance=1, **fields: None
    start = last = time.monotonic()
    done = 0

    def update(advance: int = 1, status: str = "", **_: Any) -> None:
        nonlocal done, last
        done += advance
        now = time.monotonic()
        due = done % every < advance if every else now - last >= seconds
        if not due and not (total is not None and done >= total and (every or now - start >= seconds)):
            return
        last = now
        where = f"{done:,}" if total is None else f"{done:,}/{total:,} ({100 * done / max(total, 1):.1f} %)"
        eta = "" if total is None or done == 0 or done >= total else \
            f", ETA {_duration((now - start) * (total - done) / done)}"
        line = f"nb: {description}: {where}{' ' + status if status else ''}, {_duration(now - start)}{eta}"
        print(line, file=sys.stderr, flush=True)

    return update


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


@contextlib.contextmanager
def token_progress(description: str, total: int | None) -> Iterator[Callable[[int], None]]:
    """A progress bar by tokens on stderr when it is a terminal; the callback takes tokens advanced."""
    with step_progress(description, total) as update:
        yield lambda n: update(advance=n)
