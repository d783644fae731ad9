"""TensorBoard through torch's own writer (`torch.utils.tensorboard.SummaryWriter`; the `tensorboard`
package): each number of a log record is a scalar under its log.jsonl name, the config and the
summary are text (JSON), the summary's numbers are also scalars `summary/KEY` at the last step.

Event files go to `--tensorboard-dir`, default RUN_DIR/tensorboard, so `tensorboard --logdir runs/`
shows every run under runs/ by its directory's name. The writer is opened with the first record,
inside the run directory nb train has made by then (a failed new run's clean-up removes it with the
rest), with `purge_step` at that record's step: a `--resume` hides the events of the steps it trains
again.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nbcli.errors import ConfigError
from nbcli.trackers.base import TrackerSettings, numbers, plain


def as_text(value: Mapping[str, Any]) -> str:
    """A JSON object as TensorBoard's text plugin shows it (markdown: a code block)."""
    return "```json\n" + json.dumps(plain(value), indent=2, ensure_ascii=False) + "\n```"


class TensorBoardTracker:
    name = "tensorboard"

    def __init__(self, settings: TrackerSettings) -> None:
        self.settings = settings
        self.log_dir: Path | None = None
        self.config: Mapping[str, Any] = {}
        self.writer: Any = None
        self.last_step = 0

    def start(self, config: Mapping[str, Any], run_dir: Path | None) -> None:
        chosen = self.settings.tensorboard_dir
        if chosen is None and run_dir is None:
            raise ConfigError("--track tensorboard: this task has no run directory; give --tensorboard-dir")
        self.log_dir = Path(chosen) if chosen is not None else Path(run_dir) / "tensorboard"  # type: ignore[arg-type]
        self.config = config

    def open(self, step: int) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(self.log_dir), purge_step=step)
        self.writer.add_text("config", as_text(self.config), step)

    def log(self, step: int, record: Mapping[str, float]) -> None:
        if self.writer is None:
            self.open(step)
        for key, value in record.items():
            self.writer.add_scalar(key, value, step)
        self.last_step = step

    def finish(self, summary: Mapping[str, Any] | None) -> None:
        if self.writer is None:
            return
        if summary is None:
            self.writer.add_text("status", "failed or interrupted", self.last_step)
        else:
            for key, value in numbers(summary).items():
                self.writer.add_scalar(f"summary/{key}", value, self.last_step)
            self.writer.add_text("summary", as_text(summary), self.last_step)
        self.writer.close()
        self.writer = None

    def where(self) -> dict[str, str]:
        return {"log_dir": str(Path(self.log_dir).resolve()) if self.log_dir is not None else ""}
