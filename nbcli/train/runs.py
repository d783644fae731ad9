"""Reading a finished (or running) `nb train` directory without torch: its log, config and summary.

Used by `nb plot-run`. The ALC formula (paper 000 sec. 4.2) is `nbcli.analysis.curves.area_under_curve`,
also used by the training loop.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from nbcli.analysis.curves import area_under_curve
from nbcli.errors import CheckpointError, ConfigError
from nbcli.jsonsafe import JsonProblem, load_file
from nbcli.jsonsafe import parse as parse_json


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

    def unigram_reg_switch(self) -> tuple[float, int] | None:
        """(lambda, S) when the run regularised away from the unigram for updates < S (config.json's
        unigram_reg_lambda / unigram_reg_steps, paper 000 app. B.3), else None."""
        lam, steps = self.config.get("unigram_reg_lambda"), self.config.get("unigram_reg_steps")
        if (isinstance(lam, (int, float)) and not isinstance(lam, bool) and math.isfinite(lam) and lam > 0
                and isinstance(steps, int) and not isinstance(steps, bool) and 0 < steps < 2**53):
            return float(lam), steps
        return None

    def as_dict(self) -> dict[str, Any]:
        """The run as `nb plot-run --json` lists it: directory, colour group, last validated step,
        ALC (paper 000 sec. 4.2), final validation loss (None before the first evaluation), and the
        step at which the unigram regulariser switched off with its lambda (None without one)."""
        logged = self.has("val_loss")
        steps, values = self.series["val_loss"] if logged else (None, None)
        switch = self.unigram_reg_switch()
        return {"dir": str(self.path), "group": self.group, "steps": int(steps.max()) if logged else None,
                "alc": self.alc(), "final_val_loss": float(values[-1]) if logged else None,
                "unigram_reg_switch": switch[1] if switch else None,
                "unigram_reg_lambda": switch[0] if switch else None}


SEED_SUFFIX = re.compile(r"[-_](s|seed)\d+$")


def read_run(directory: Path | str) -> RunLog:
    """A run directory's log.jsonl (required), config.json and summary.json (optional)."""
    directory = Path(directory)
    log = directory / "log.jsonl"
    if not log.is_file():
        raise ConfigError(f"{directory}: no log.jsonl (not an nb train run directory)")
    records = read_log_records(log)
    keys = sorted({k for r in records for k, v in r.items()
                   if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool)})
    series = {}
    for key in keys:  # a non-finite value (NaN loss of a diverged step) is no point of a curve
        pts = [(r["step"], float(r[key])) for r in records
               if isinstance(r.get(key), (int, float)) and math.isfinite(r[key])]
        series[key] = (np.array([p[0] for p in pts], dtype=np.int64), np.array([p[1] for p in pts]))
    name = directory.resolve().name
    return RunLog(path=directory, name=name, group=SEED_SUFFIX.sub("", name),
                  config=_json_or_empty(directory / "config.json"), summary=_json_or_empty(directory / "summary.json"),
                  series=series)


def _json_or_empty(path: Path) -> dict[str, Any]:
    """A run's config.json or summary.json: {} when absent or not an object; ConfigError naming
    the file when it is not UTF-8 JSON (nb writes NaN for a NaN loss, so NaN is read)."""
    if not path.is_file():
        return {}
    value = load_file(path, error=ConfigError, allow_nan=True)
    return value if isinstance(value, dict) else {}


def read_log_records(path: Path) -> list[dict[str, Any]]:
    """The records of a log.jsonl (none when absent); CheckpointError naming file and line for one
    nb did not write (not UTF-8, not JSON, too deep, no integer 'step', a loss that is no number)."""
    if not path.exists():
        return []
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as err:
        raise CheckpointError(f"{path}: not UTF-8 (byte {err.start})") from None
    records = []
    for number, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            record = parse_json(line, allow_nan=True)  # json.dumps writes NaN for a NaN loss
        except JsonProblem as err:
            raise CheckpointError(f"{path}:{number}: not valid JSON ({err})") from None
        if (not isinstance(record, dict) or not isinstance(record.get("step"), int)
                or isinstance(record["step"], bool)):
            raise CheckpointError(f"{path}:{number}: not a log record (a JSON object with an integer 'step')")
        if not 0 <= record["step"] < 2**53:
            raise CheckpointError(f"{path}:{number}: step {record['step']} is out of range")
        for key, value in record.items():  # every number must be a float (plots, ALC)
            if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 2**1023:
                raise CheckpointError(f"{path}:{number}: {key!r} is out of range")
        for key in ("val_loss", "loss"):
            if key in record and (not isinstance(record[key], (int, float)) or isinstance(record[key], bool)):
                raise CheckpointError(f"{path}:{number}: {key!r} is not a number")
        records.append(record)
    return records
