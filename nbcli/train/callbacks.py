"""The seams of the shared update loop (transformers' `TrainerCallback`): what happens after an
evaluation and after a logged record is a list of callbacks, not code in the loop. The loop calls
`on_evaluate` on every rank (each rank holds the same record), `on_log` on rank 0 only, and
`on_train_end` on every rank once the run ends, however it ends.

The built-in ones: `LogFile` (DIR/log.jsonl), `StepHook` (a face's progress), `KeepBest` (the best
checkpoint by --select-by, saved as best.safetensors when the task keeps one). A tracker is one more.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from nbcli.train.best import BestCheckpoint


class Callback:
    """A hook into the update loop; every method does nothing unless overridden."""

    def on_evaluate(self, step: int, record: dict[str, Any], scheduled: bool) -> None:
        """An evaluation's fields at `step` (not called for a task without a validation set);
        `scheduled`: at an --eval-every step or the run's last, as opposed to a --stop-at stop."""

    def on_log(self, record: dict[str, Any]) -> None:
        """A record of DIR/log.jsonl (rank 0): one update's, or the final evaluation's."""

    def on_train_end(self) -> None:
        """The run ended (finished, stopped, failed or interrupted)."""


class LogFile(Callback):
    """DIR/log.jsonl: one JSON object a line, flushed as written (a crash keeps what was logged)."""

    def __init__(self, path: Path) -> None:
        self.file = open(path, "a", encoding="utf-8")

    def on_log(self, record: dict[str, Any]) -> None:
        self.file.write(json.dumps(record) + "\n")
        self.file.flush()

    def on_train_end(self) -> None:
        self.file.close()


class StepHook(Callback):
    """Each logged record to a face's `on_step(step, record)` (a progress bar, --json lines)."""

    def __init__(self, on_step: Callable[[int, dict[str, Any]], None]) -> None:
        self.on_step = on_step

    def on_log(self, record: dict[str, Any]) -> None:
        self.on_step(record["step"], record)


class KeepBest(Callback):
    """The best checkpoint by one validation metric (`BestCheckpoint`): `save(step)` writes it
    (best.safetensors) when an evaluation is the new best; None for a task that only reports it."""

    def __init__(self, best: BestCheckpoint, save: Callable[[int], None] | None) -> None:
        self.best = best
        self.save = save

    def on_evaluate(self, step: int, record: dict[str, Any], scheduled: bool) -> None:
        if self.best.better(step, record, scheduled=scheduled) and self.save is not None:
            self.save(step)


class Events:
    """The callbacks of one run, called in order; `evaluated` and `logged` return what they were given
    so the loop reads as a pipeline."""

    def __init__(self, callbacks: Sequence[Callback], is_main: bool) -> None:
        self.callbacks = list(callbacks)
        self.is_main = is_main

    def evaluated(self, step: int, record: dict[str, Any], scheduled: bool) -> dict[str, Any]:
        if record:
            for callback in self.callbacks:
                callback.on_evaluate(step, record, scheduled)
        return record

    def logged(self, record: dict[str, Any]) -> None:
        if self.is_main:
            for callback in self.callbacks:
                callback.on_log(record)

    def ended(self) -> None:
        for callback in self.callbacks:
            callback.on_train_end()
