"""Read back what a tracker wrote, with each tool's own reader: TensorBoard's EventAccumulator, the
MLflow tracking client, and W&B's offline transaction log (run-ID.wandb) parsed into wandb's own
protobuf `Record`s.

wandb 0.31 ships no Python reader of that log any more (wandb.sdk.internal.datastore, which read it,
left with the move to the Go core), so `wandb_records` reads the framing that reader read, LevelDB's
log format behind a W&B header: 7 bytes (":W&B", magic 0xBEE1, version 0), then 32 KiB blocks of
chunks, each a 7-byte header (CRC-32 of type byte + data, length, type: 1 full, 2 first, 3 middle,
4 last) and its data. The records themselves are parsed by wandb's own protobuf classes.
"""

from __future__ import annotations

import importlib
import json
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

BLOCK = 32 * 1024
EXTRAS = {"tensorboard": "tensorboard", "wandb": "wandb", "mlflow": "mlflow-skinny"}


def client(module: str, extra: str) -> ModuleType:
    """The tracker client `module`, or a failure naming what to install (the `test` extra has them)."""
    try:
        return importlib.import_module(module)
    except ImportError as err:
        pytest.fail(f"{module} is not importable ({err}); the tracker tests need it: pip install -e '.[test]' "
                    f"(or pip install {extra})", pytrace=False)


def log_records(run: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]


def log_series(run: Path) -> dict[str, list[tuple[int, float]]]:
    """Every number of log.jsonl (booleans as 0/1) as key -> [(step, value)], in order."""
    series: dict[str, list[tuple[int, float]]] = {}
    for record in log_records(run):
        for key, value in record.items():
            if key != "step" and isinstance(value, (bool, int, float)):
                series.setdefault(key, []).append((record["step"], float(value)))
    return series


def tensorboard_scalars(log_dir: Path) -> tuple[dict[str, list[tuple[int, float]]], dict[str, str]]:
    """(scalars: tag -> [(step, value)], texts: tag -> text) of the event files in `log_dir`."""
    client("tensorboard", "tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(log_dir), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    scalars = {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}
    texts = {}
    for tag in acc.Tags()["tensors"]:
        events = acc.Tensors(tag)
        texts[tag.removesuffix("/text_summary")] = events[-1].tensor_proto.string_val[0].decode()
    return scalars, texts


def wandb_records(path: Path) -> Iterator[Any]:
    """The protobuf Records of a W&B transaction log, CRCs checked (module doc)."""
    pb = client("wandb.proto.wandb_internal_pb2", "wandb")
    data = path.read_bytes()
    assert struct.unpack("<4sHB", data[:7]) == (b":W&B", 0xBEE1, 0), data[:7]
    pos, pending = 7, b""
    while pos + 7 <= len(data):
        room = BLOCK - pos % BLOCK
        if room < 7:
            pos += room
            continue
        crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if kind == 0:      # the zero padding at a block's end
            pos += room
            continue
        chunk = data[pos + 7:pos + 7 + length]
        assert zlib.crc32(chunk, zlib.crc32(bytes([kind]))) == crc, f"{path}: bad CRC at byte {pos}"
        pos += 7 + length
        pending += chunk
        if kind in (1, 4):
            record = pb.Record()
            record.ParseFromString(pending)
            pending = b""
            yield record


def wandb_run(path: Path) -> dict[str, Any]:
    """What a W&B offline run holds: its run record's name, project, config, the history (key ->
    [(step, value)]), the last summary values, and the exit code."""
    out: dict[str, Any] = {"history": {}, "summary": {}, "config": {}, "exit_code": None}
    for record in wandb_records(path):
        kind = record.WhichOneof("record_type")
        if kind == "run":
            out.update(name=record.run.display_name, project=record.run.project, id=record.run.run_id)
            out["config"].update({i.key: json.loads(i.value_json) for i in record.run.config.update})
        elif kind == "config":
            out["config"].update({i.key: json.loads(i.value_json) for i in record.config.update})
        elif kind == "history":
            items = {(i.key or "/".join(i.nested_key)): json.loads(i.value_json) for i in record.history.item}
            for key, value in items.items():
                if not key.startswith("_"):
                    out["history"].setdefault(key, []).append((items["_step"], float(value)))
        elif kind == "summary":
            out["summary"].update({(i.key or "/".join(i.nested_key)): json.loads(i.value_json)
                                   for i in record.summary.update})
        elif kind == "exit":
            out["exit_code"] = record.exit.exit_code
    return out
