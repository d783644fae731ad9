"""Reading a finished (or running) `nb train` directory without torch: its log, config and summary.

Used by `nb plot-run`; `area_under_curve` is the one ALC formula (paper 000 sec. 4.2), also used by
the training loop.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from nbcli.errors import ConfigError


def area_under_curve(points: list[tuple[int, float]]) -> float | None:
    """ALC: trapezoid area under (step, value), normalised by the step span (paper 000 sec. 4.2)."""
    if len(points) < 2:
        return points[0][1] if points else None
    xs = np.array([p[0] for p in points], dtype=np.float64)
    ys = np.array([p[1] for p in points], dtype=np.float64)
    return float(np.sum((xs[1:] - xs[:-1]) * (ys[1:] + ys[:-1]) / 2) / (xs[-1] - xs[0]))


@dataclass
class RunLog:
    """One run's curves: `series[key]` = (steps, values) for every numeric key of log.jsonl."""

    path: Path
    name: str
    group: str                        # the name without a trailing seed suffix (-s0, _seed1): one colour
    config: dict[str, Any]
    summary: dict[str, Any]
    series: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)

    def has(self, key: str) -> bool:
        return key in self.series and self.series[key][0].size > 0

    def alc(self) -> float | None:
        if not self.has("val_loss"):
            return None
        steps, values = self.series["val_loss"]
        return area_under_curve(list(zip(steps.tolist(), values.tolist())))


SEED_SUFFIX = re.compile(r"[-_](s|seed)\d+$")


def read_run(directory: Path | str) -> RunLog:
    """A run directory's log.jsonl (required), config.json and summary.json (optional)."""
    directory = Path(directory)
    log = directory / "log.jsonl"
    if not log.is_file():
        raise ConfigError(f"{directory}: no log.jsonl (not an nb train run directory)")
    records: list[dict[str, Any]] = []
    for n, line in enumerate(log.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            raise ConfigError(f"{log}:{n}: not a JSON object") from None
        if not isinstance(record, dict) or not isinstance(record.get("step"), int):
            raise ConfigError(f"{log}:{n}: a log record needs an integer 'step'")
        records.append(record)
    keys = sorted({k for r in records for k, v in r.items()
                   if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool)})
    series = {}
    for key in keys:
        pts = [(r["step"], float(r[key])) for r in records if isinstance(r.get(key), (int, float))]
        series[key] = (np.array([p[0] for p in pts], dtype=np.int64), np.array([p[1] for p in pts]))
    name = directory.resolve().name
    return RunLog(path=directory, name=name, group=SEED_SUFFIX.sub("", name),
                  config=_json_or_empty(directory / "config.json"), summary=_json_or_empty(directory / "summary.json"),
                  series=series)


def _json_or_empty(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError:
        raise ConfigError(f"{path}: not valid JSON") from None
    return value if isinstance(value, dict) else {}
