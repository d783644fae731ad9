"""A run's trackers together: started once before training (`start`), given every log record
(`log`) and the summary (`finish`), and marked failed when training fails (`with session:`).

A tracker that fails once the run trains (a network gone, a disk full) is warned about once and
left out for the rest of the run; training goes on, log.jsonl keeps every record. A tracker that
cannot start stops the run before it trains (one line naming it): a run asked to be tracked is not
silently untracked. Where each tracker's run went is written to RUN_DIR/trackers.json with the
first record (nb's loop has made the run directory by then, and a failed new run's clean-up removes
the file with the rest; a task that makes its directory at the end gets it then), and `--resume`
continues those runs (`previous_runs`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from nbcli.errors import ConfigError, NbError
from nbcli.trackers.base import Tracker, numbers, plain

RECORD = "trackers.json"


def run_config(options: Mapping[str, Any], trackers: Sequence[str], *, task: str,
               run_dir: Path | None) -> dict[str, Any]:
    """What a tracker records as the run's config: every option (plain JSON values, no credentials;
    `track`: the trackers' names) and, under `nb`, the run's provenance (task, run directory, nb
    version, start time)."""
    from nbcli.provenance import tool_version, utc_now

    where = None if run_dir is None else str(Path(run_dir).resolve())
    return {**plain(dict(options)), "track": list(trackers),
            "nb": {"task": task, "run_dir": where, "version": tool_version(), "started": utc_now()}}


def previous_runs(run_dir: Path | None) -> dict[str, dict[str, str]]:
    """RUN_DIR/trackers.json (tracker -> where its run went), empty when absent or unreadable."""
    from nbcli.jsonsafe import load_file

    if run_dir is None:
        return {}
    try:
        data = load_file(Path(run_dir) / RECORD, error=ConfigError, what="trackers record")
    except (FileNotFoundError, NotADirectoryError, ConfigError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {k: {str(a): str(b) for a, b in v.items()} for k, v in data.items() if isinstance(v, dict)}


def one_line(err: BaseException) -> str:
    return f"{type(err).__name__}: {' '.join(str(err).split())}"


class TrackingSession:
    """`trackers` of one run (module doc); `warn` hears a tracker that fails mid-run."""

    def __init__(self, trackers: Sequence[Tracker], config: Mapping[str, Any], run_dir: Path | None,
                 warn: Callable[[str], None]) -> None:
        self.trackers = list(trackers)
        self.config = config
        self.run_dir = None if run_dir is None else Path(run_dir)
        self.warn = warn
        self.started: list[Tracker] = []
        self.dropped: set[str] = set()
        self.recorded = False

    def start(self) -> None:
        """Start every tracker (once); ConfigError naming the first that cannot (those already
        started are closed as failed)."""
        if self.started:
            return
        for tracker in self.trackers:
            try:
                tracker.start(self.config, self.run_dir)
            except Exception as err:  # noqa: BLE001 - a client's own failure: one line naming the tracker
                self.close_failed()
                if isinstance(err, NbError):
                    raise
                raise ConfigError(f"--track {tracker.name}: cannot start its run ({one_line(err)})") from None
            self.started.append(tracker)

    def log(self, step: int, record: Mapping[str, Any]) -> None:
        """One log.jsonl record to every tracker still running (started first if the task never
        said it starts)."""
        self.start()
        if not self.recorded:
            self.recorded = self.write_record()
        values = numbers(record)
        for tracker in self.running():
            self.guard(tracker, f"logging step {step}", lambda t=tracker: t.log(step, values))

    def finish(self, summary: Mapping[str, Any] | None) -> None:
        """Close every running tracker with the run's summary (None: the run failed)."""
        if not self.recorded:   # a task that makes its run directory at the end
            self.recorded = self.write_record()
        for tracker in self.running():
            self.guard(tracker, "closing its run", lambda t=tracker: t.finish(summary))
        self.started = []

    def close_failed(self) -> None:
        for tracker in list(self.started):
            try:
                tracker.finish(None)
            except Exception:  # noqa: BLE001 - closing after another failure: that failure is the one to report
                pass
        self.started = []

    def running(self) -> list[Tracker]:
        return [t for t in self.started if t.name not in self.dropped]

    def guard(self, tracker: Tracker, what: str, call: Callable[[], None]) -> None:
        """`call()`; a failure drops `tracker` for the rest of the run with one warning."""
        try:
            call()
        except Exception as err:  # noqa: BLE001 - a tracker must not stop training
            self.dropped.add(tracker.name)
            self.warn(f"--track {tracker.name}: {what} failed ({one_line(err)}); training goes on without it "
                      "(log.jsonl keeps every record)")

    def write_record(self) -> bool:
        """RUN_DIR/trackers.json: where each tracker's run went; False while there is no run directory."""
        from nbcli.atomic import write_text_atomic

        if self.run_dir is None or not self.run_dir.is_dir():
            return False
        record = {t.name: t.where() for t in self.running()}
        try:
            write_text_atomic(self.run_dir / RECORD, json.dumps(record, indent=2) + "\n")
        except (OSError, NbError) as err:
            self.warn(f"{self.run_dir / RECORD}: not written ({one_line(err)}); --resume will start new tracker runs")
        return True

    def __enter__(self) -> TrackingSession:
        return self

    def __exit__(self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None) -> None:
        if kind is not None:
            self.close_failed()
