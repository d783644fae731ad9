"""Where a checkpoint write goes (file, folder, shard directory) and the checks before anything is renamed."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from nbcli.checkpoint import open_checkpoint, write_like
from nbcli.checkpoint.layout import check_output_paths, folder_output, output_paths, resolve_output, surgery_output
from nbcli.errors import ConfigError, OutputError
from tests.checkpoint.builders import gpt2_tensors, save, save_sharded


def test_output_equal_to_input_needs_in_place(tmp_path: Path) -> None:
    src = save(tmp_path / "m.safetensors", gpt2_tensors())
    ckpt = open_checkpoint(src)
    with pytest.raises(OutputError, match="--in-place"):
        write_like(ckpt, src, replace={"ln_f.bias": torch.zeros(8)})
    old_view = ckpt.get("wte.weight").clone()
    write_like(ckpt, src, replace={"ln_f.bias": torch.zeros(8)}, in_place=True)
    assert torch.equal(load_file(str(src))["ln_f.bias"], torch.zeros(8))
    assert torch.equal(load_file(str(src))["wte.weight"], old_view)
    assert [p.name for p in tmp_path.iterdir()] == ["m.safetensors"]


def test_single_file_output_is_the_file_or_a_file_in_the_directory(tmp_path: Path) -> None:
    ckpt = open_checkpoint(save(tmp_path / "m.safetensors", gpt2_tensors()))
    assert resolve_output(ckpt, tmp_path / "o.safetensors") == tmp_path / "o.safetensors"
    (tmp_path / "dir").mkdir()
    assert resolve_output(ckpt, tmp_path / "dir") == tmp_path / "dir" / "m.safetensors"
    assert resolve_output(ckpt, tmp_path / "new", folder=True) == tmp_path / "new" / "m.safetensors"
    assert output_paths(ckpt, tmp_path / "new", folder=True, extra=["config.json"]) == [
        tmp_path / "new" / "m.safetensors", tmp_path / "new" / "config.json"]
    with pytest.raises(OutputError, match="not a directory"):
        resolve_output(ckpt, tmp_path / "m.safetensors", folder=True)


def test_sharded_output_is_a_directory_of_the_same_shards(tmp_path: Path) -> None:
    ckpt = open_checkpoint(save_sharded(tmp_path / "in", gpt2_tensors()))
    out = tmp_path / "out"
    assert resolve_output(ckpt, out) == out
    assert resolve_output(ckpt, out / "model.safetensors.index.json") == out
    assert output_paths(ckpt, out) == [out / p.name for p in ckpt.files] + [out / "model.safetensors.index.json"]
    with pytest.raises(ConfigError, match="directory of shards"):
        resolve_output(ckpt, tmp_path / "x.safetensors")


def test_model_folder_output_only_without_a_safetensors_name(tmp_path: Path) -> None:
    folder = tmp_path / "model"
    folder.mkdir()
    save(folder / "model.safetensors", gpt2_tensors())
    (folder / "config.json").write_text('{"model_type": "gpt2"}')
    ckpt = open_checkpoint(folder)
    assert folder_output(ckpt, tmp_path / "patched")
    assert not folder_output(ckpt, tmp_path / "patched.safetensors")
    assert not folder_output(open_checkpoint(save(tmp_path / "lone.safetensors", gpt2_tensors())), tmp_path / "out")


def test_no_output_may_be_another_input(tmp_path: Path) -> None:
    ckpt = open_checkpoint(save(tmp_path / "m.safetensors", gpt2_tensors()))
    counts = tmp_path / "counts.safetensors"
    counts.write_bytes(b"counts")
    with pytest.raises(OutputError):
        check_output_paths(ckpt, counts, other_inputs=[counts])
    with pytest.raises(OutputError):
        check_output_paths(ckpt, counts, in_place=True, other_inputs=[counts])
    assert counts.read_bytes() == b"counts"
    check_output_paths(ckpt, tmp_path / "fresh.safetensors", other_inputs=[counts])


def test_surgery_output_defaults_to_the_input_only_in_place(tmp_path: Path) -> None:
    src = save(tmp_path / "m.safetensors", gpt2_tensors())
    ckpt = open_checkpoint(src)
    with pytest.raises(ConfigError, match="give an output"):
        surgery_output(ckpt, None)
    with pytest.raises(ConfigError, match="^say where$"):
        surgery_output(ckpt, None, missing="say where")
    assert surgery_output(ckpt, None, in_place=True) == src
    assert surgery_output(ckpt, None, dry_run=True) is None
    assert surgery_output(ckpt, tmp_path / "o.safetensors") == tmp_path / "o.safetensors"
    sharded = open_checkpoint(save_sharded(tmp_path / "s", gpt2_tensors()))
    assert surgery_output(sharded, None, in_place=True) == tmp_path / "s"


def test_surgery_output_checks_where_out_goes(tmp_path: Path) -> None:
    ckpt = open_checkpoint(save(tmp_path / "m.safetensors", gpt2_tensors()))
    surgery_output(ckpt, tmp_path / "missing" / "o.safetensors")  # one output rule: a missing folder is made
    assert not (tmp_path / "missing").exists()                      # when the file is written, not before
    taken = tmp_path / "taken"
    taken.write_text("x")
    with pytest.raises(OutputError, match="not a directory"):
        surgery_output(ckpt, taken / "o.safetensors")
    sharded = open_checkpoint(save_sharded(tmp_path / "s", gpt2_tensors()))
    with pytest.raises(OutputError, match="not a directory"):
        surgery_output(sharded, taken)
    assert surgery_output(ckpt, tmp_path / "o.safetensors", dry_run=True) == tmp_path / "o.safetensors"
    assert not (tmp_path / "o.safetensors").exists()
