"""The one safetensors reader: every dtype, lazy copy-on-write reads, shards and their index, pickles refused."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from nbcli.checkpoint import open_checkpoint
from nbcli.errors import CheckpointError
from tests.checkpoint.builders import gpt2_tensors, raw_safetensors, save, save_sharded


ALL_DTYPES = [torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int32,
              torch.int16, torch.int8, torch.uint8, torch.bool]


def test_reads_every_dtype_scalar_and_empty(tmp_path: Path) -> None:
    tensors = {f"t{i}": (torch.randn(3, 5) * 10).to(dt) for i, dt in enumerate(ALL_DTYPES)}
    tensors["scalar"] = torch.tensor(2.5)
    tensors["empty"] = torch.zeros(0, 4)
    path = save(tmp_path / "m.safetensors", tensors, {"k": "v"})
    ckpt = open_checkpoint(path)
    assert sorted(ckpt.names()) == sorted(tensors)
    assert ckpt.metadata == {"k": "v"}
    for name, expected in tensors.items():
        got = ckpt.get(name)
        assert got.dtype == expected.dtype and got.shape == expected.shape
        assert torch.equal(got, expected), name
        assert ckpt.shape(name) == tuple(expected.shape)


def test_names_follow_file_order(tmp_path: Path) -> None:
    path = save(tmp_path / "m.safetensors", gpt2_tensors())
    ckpt = open_checkpoint(path)
    starts = [ckpt.info(n).start for n in ckpt.names()]
    assert starts == sorted(starts)


def test_get_is_copy_on_write(tmp_path: Path) -> None:
    path = save(tmp_path / "m.safetensors", {"a": torch.arange(6.0)})
    before = path.read_bytes()
    ckpt = open_checkpoint(path)
    view = ckpt.get("a")
    view.mul_(100)
    assert path.read_bytes() == before
    assert torch.equal(open_checkpoint(path).get("a"), torch.arange(6.0))


def test_get_float_refuses_integers(tmp_path: Path) -> None:
    ckpt = open_checkpoint(save(tmp_path / "m.safetensors", {"i": torch.arange(3)}))
    with pytest.raises(CheckpointError, match="'i'"):
        ckpt.get_float("i")


def test_misaligned_offsets_are_read_by_copy(tmp_path: Path) -> None:
    data = b"\x00" + torch.arange(4, dtype=torch.float32).numpy().tobytes()
    header = {"pad": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]},
              "x": {"dtype": "F32", "shape": [4], "data_offsets": [1, 17]}}
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    path = raw_safetensors(tmp_path / "m.safetensors", raw, data)
    assert torch.equal(open_checkpoint(path).get("x"), torch.arange(4, dtype=torch.float32))


@pytest.mark.parametrize("name", ["pytorch_model.bin", "model.pt", "x.pth", "y.ckpt"])
def test_pickles_are_refused_unread(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    path.write_bytes(b"\x80\x04 this would be unpickled")
    with pytest.raises(CheckpointError, match="convert it to safetensors"):
        open_checkpoint(path)
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / name).write_bytes(b"\x80")
    with pytest.raises(CheckpointError, match="never loaded"):
        open_checkpoint(tmp_path / "d")


def test_missing_and_empty_directory(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="not found"):
        open_checkpoint(tmp_path / "nope.safetensors")
    with pytest.raises(CheckpointError, match="no .safetensors"):
        open_checkpoint(tmp_path)


@pytest.mark.parametrize(("mutate", "message"), [
    (lambda d, idx: idx["weight_map"].update({"ghost": "model-00001-of-00003.safetensors"}), "ghost"),
    (lambda d, idx: idx["weight_map"].update({"wte.weight": "model-00009-of-00009.safetensors"}), "missing"),
    (lambda d, idx: idx.pop("weight_map"), "weight_map"),
])
def test_bad_index(tmp_path: Path, mutate, message: str) -> None:  # noqa: ANN001
    src = save_sharded(tmp_path / "in", gpt2_tensors())
    index_path = src / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    mutate(src, index)
    index_path.write_text(json.dumps(index))
    with pytest.raises(CheckpointError, match=message):
        open_checkpoint(src)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int32,
                                   torch.float8_e4m3fn])
def test_row_blocks_are_the_tensor_as_float32(tmp_path: Path, dtype: torch.dtype) -> None:
    """Row blocks (pread, or the mmapped view for F8 and integers) equal the tensor's float32 rows."""
    matrix = (torch.randn(7, 5, generator=torch.Generator().manual_seed(0)) * 4).to(dtype)
    ckpt = open_checkpoint(save(tmp_path / "m.safetensors", {"pad": torch.zeros(3), "w": matrix, "v": matrix[0].clone()}))
    rows = ckpt.rows("w")
    assert rows.shape == (7, 5)
    expected = matrix.to(torch.float32).numpy()
    for start, stop in [(0, 7), (2, 5), (6, 100), (4, 4)]:
        block = rows[start:stop]
        assert block.dtype == np.float32 and block.flags.c_contiguous
        assert np.array_equal(block, expected[start:stop])
    assert np.array_equal(ckpt.rows("v").read_all(), expected[0])


def test_row_blocks_refuse_strides_and_name_a_file_truncated_after_open(tmp_path: Path) -> None:
    path = save(tmp_path / "m.safetensors", {"w": torch.randn(6, 4)})
    ckpt = open_checkpoint(path)
    with pytest.raises(ValueError, match="contiguous"):
        ckpt.rows("w")[::2]
    path.write_bytes(path.read_bytes()[:-20])
    assert ckpt.rows("w")[0:1].shape == (1, 4)  # the first row is still whole
    with pytest.raises(CheckpointError, match=r"m\.safetensors: tensor 'w' ended early"):
        ckpt.rows("w")[0:6]


def test_checkpoint_inputs_names_the_shards_and_index_or_just_the_path(tmp_path: Path) -> None:
    from safetensors.torch import save_file

    from nbcli.checkpoint.reader import checkpoint_inputs

    single = tmp_path / "m.safetensors"
    save_file({"a": torch.zeros(2)}, str(single))
    assert checkpoint_inputs(single) == [single]
    folder = tmp_path / "sharded"
    folder.mkdir()
    save_file({"a": torch.zeros(2)}, str(folder / "m-1.safetensors"))
    save_file({"b": torch.zeros(2)}, str(folder / "m-2.safetensors"))
    index = folder / "model.safetensors.index.json"
    index.write_text(json.dumps({"weight_map": {"a": "m-1.safetensors", "b": "m-2.safetensors"}}))
    assert set(checkpoint_inputs(folder)) == {folder, folder / "m-1.safetensors", folder / "m-2.safetensors", index}
    assert checkpoint_inputs(tmp_path / "missing") == [tmp_path / "missing"]  # its error comes when it is opened
