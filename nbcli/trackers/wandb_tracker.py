"""Weights & Biases through its own client (`wandb`): `wandb.init` with the run's config, every
log record by `run.log(..., step=)`, summary.json's values into the run's summary (where a key also
names a logged number, as tokens_per_s does, the run's value replaces the last step's).

W&B's own environment decides the rest, as for any script: WANDB_MODE (`offline` writes the run
under WANDB_DIR/wandb/offline-run-*/ for `wandb sync` later; no network needed), WANDB_PROJECT,
WANDB_ENTITY, WANDB_NAME, WANDB_DIR, WANDB_API_KEY (never recorded by nb). `--resume` continues the
same W&B run (its id in RUN_DIR/trackers.json); the steps it already has are not sent again (W&B
would refuse them).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nbcli.trackers.base import TrackerSettings, plain


class WandbTracker:
    name = "wandb"

    def __init__(self, settings: TrackerSettings) -> None:
        self.settings = settings
        self.run: Any = None
        self.first_step = 0

    def start(self, config: Mapping[str, Any], run_dir: Path | None) -> None:
        import wandb

        name = self.settings.run_name
        if name is None and "WANDB_NAME" not in os.environ and run_dir is not None:
            name = Path(run_dir).name
        previous = self.settings.previous.get(self.name, {}).get("id")
        resume: dict[str, Any] = {"id": previous, "resume": "allow"} if previous else {}
        self.run = wandb.init(project=self.settings.project, name=name, config=dict(config), **resume)
        self.first_step = int(getattr(self.run, "starting_step", 0) or 0) if previous else 0

    def log(self, step: int, record: Mapping[str, float]) -> None:
        if step >= self.first_step:   # a resumed W&B run refuses the steps it already has (a warning each)
            self.run.log(dict(record), step=step)

    def finish(self, summary: Mapping[str, Any] | None) -> None:
        if summary is not None:
            self.run.summary.update(plain(summary))
        self.run.finish(exit_code=None if summary is not None else 1)

    def where(self) -> dict[str, str]:
        run = self.run
        url = "" if getattr(run, "offline", False) else str(run.url or "")
        return {"id": str(run.id), "project": str(run.project or ""), "url": url,
                "dir": str(getattr(run, "sync_dir", "") or run.dir)}
