"""An `nb train` run directory read back (without torch): which checkpoints it holds, the one it
stands for, and its log.

    saved_steps(DIR)       {N: DIR/step-N.safetensors}, by step
    run_checkpoint(DIR)    THE rule for every reader of a run (nb eval, translate, predict, export, the
                           word-vector commands, fine-tuning from a run): the run's best checkpoint
                           (DIR/best.safetensors: the model of the best validation score by the run's
                           --select-by, config.json's select_by) when it has one, else its last step-N
    read_log_records(F)    log.jsonl's records, each checked (file and line named in errors)

Writing a run directory is `nbcli.train.rundir` and `nbcli.train.state`; summarising many runs (arms,
ALC) is `nbcli.analysis.runs`.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from nbcli.errors import CheckpointError
from nbcli.jsonsafe import JsonProblem
from nbcli.jsonsafe import parse as parse_json

#: The checkpoint a run keeps of its best validation score (a task that selects one, e.g. translation).
BEST = "best.safetensors"

STEP_FILE = re.compile(r"^step-(\d+)\.safetensors$")


def saved_steps(run_dir: Path) -> dict[int, Path]:
    """{step: DIR/step-N.safetensors} of the checkpoints a run directory holds, by step."""
    found = {}
    for path in run_dir.iterdir():
        match = STEP_FILE.match(path.name)
        if match and path.is_file():
            found[int(match.group(1))] = path
    return dict(sorted(found.items()))


def is_run_directory(path: Path | str) -> bool:
    """Whether `path` is a directory nb train saved checkpoints into (it holds best.safetensors or a
    step-N.safetensors)."""
    path = Path(path)
    return path.is_dir() and ((path / BEST).is_file() or bool(saved_steps(path)))


def run_checkpoint(path: Path | str) -> Path:
    """The checkpoint `path` stands for: a file as it is; a run directory's best checkpoint
    (best.safetensors, kept by its --select-by) when it has one, else its last step-N.safetensors.
    CheckpointError naming the directory when it holds neither."""
    path = Path(path)
    if not path.is_dir():
        return path
    if (path / BEST).is_file():
        return path / BEST
    steps = saved_steps(path)
    if not steps:
        raise CheckpointError(f"{path}: no {BEST} or step-N.safetensors in this directory (not an nb train run "
                              "directory)")
    return steps[max(steps)]


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

