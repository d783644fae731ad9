"""inspect_checkpoint: the report `nb inspect` prints, from headers only."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from nbcli.checkpoint.report import inspect_checkpoint
from nbcli.errors import CheckpointError
from tests.checkpoint.builders import gpt2_tensors, llama_tensors, save, save_sharded


def test_single_file_lists_every_tensor_and_the_roles(tmp_path: Path) -> None:
    tensors = gpt2_tensors()
    path = save(tmp_path / "m.safetensors", tensors, {"note": "hello"})
    report = inspect_checkpoint(path)
    assert report["architecture"] == "gpt2" and report["architecture_error"] is None
    assert report["roles"]["final_ln_bias"] == "ln_f.bias" and report["tied"] is True
    assert not report["sharded"] and report["index"] is None and report["files"] == [str(path)]
    assert report["metadata"]["note"] == "hello"
    assert report["tensor_count"] == len(tensors)
    by_name = {t["name"]: t for t in report["tensors"]}
    assert set(by_name) == set(tensors)
    wte = by_name["wte.weight"]
    assert wte["shape"] == list(tensors["wte.weight"].shape) and wte["dtype"] == "F32"
    assert wte["bytes"] == tensors["wte.weight"].numel() * 4 and wte["file"] == path.name
    assert report["total_bytes"] == sum(t["bytes"] for t in report["tensors"])


def test_shards_name_their_file(tmp_path: Path) -> None:
    folder = save_sharded(tmp_path / "s", llama_tensors())
    report = inspect_checkpoint(folder)
    assert report["sharded"] and report["index"] is not None and len(report["files"]) > 1
    assert report["architecture"] == "llama"
    assert {t["file"] for t in report["tensors"]} == {Path(f).name for f in report["files"]}


def test_unknown_architecture_is_reported_unless_forced(tmp_path: Path) -> None:
    path = save(tmp_path / "m.safetensors", {"encoder.emb": torch.randn(40, 8), "decoder.norm.bias": torch.randn(8)})
    report = inspect_checkpoint(path)
    assert report["architecture"] is None and report["roles"] is None
    assert "cannot tell the architecture" in report["architecture_error"]
    with pytest.raises(CheckpointError, match="no tensor named 'nope'"):  # with --map: raised, not reported
        inspect_checkpoint(path, mapping={"final_ln_bias": "nope"})
    forced = inspect_checkpoint(path, "gpt2", {"input_embedding": "encoder.emb", "final_ln_bias": "decoder.norm.bias"})
    assert forced["architecture"] == "gpt2" and forced["roles"]["output_weight"] == "encoder.emb"
