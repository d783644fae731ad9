"""The safetensors byte format: header validation names file and tensor; built headers read back."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from nbcli.checkpoint import open_checkpoint
from nbcli.checkpoint.format import (
    DTYPE_SIZES, build_header, dtype_code, dtype_code_of_name, read_header, torch_dtype,
)
from nbcli.errors import CheckpointError, ConfigError
from tests.checkpoint.builders import gpt2_tensors, raw_safetensors, save


GOOD = {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}


@pytest.mark.parametrize(("header", "data", "length", "message"), [
    (b"", b"", 3, "too short"),
    (GOOD, bytes(8), 10_000, "header length 10000 is larger than the file"),
    (b"{not json", bytes(8), None, "header is not JSON"),
    ([1, 2], bytes(8), None, "expected an object"),
    ({"a": {"dtype": "F33", "shape": [2], "data_offsets": [0, 8]}}, bytes(8), None, "unknown dtype 'F33'"),
    ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
      "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}, bytes(12), None, "overlapping"),
    ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}}, bytes(8), None, "out of range"),
    ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [8, 0]}}, bytes(8), None, "out of range"),
    ({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}, bytes(8), None, "needs 12"),
    ({"a": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}}, bytes(8), None, "shape"),
    ({"a": {"dtype": "F32", "shape": [2], "data_offsets": "0-8"}}, bytes(8), None, "data_offsets"),
    ({"__metadata__": {"k": 1}, **GOOD}, bytes(8), None, "__metadata__"),
])
def test_bad_headers_name_file_and_tensor(tmp_path: Path, header: object, data: bytes, length: int | None,
                                          message: str) -> None:
    path = tmp_path / "bad.safetensors"
    if header == b"" and length == 3:
        path.write_bytes(b"abc")
    else:
        raw_safetensors(path, header, data, length)
    with pytest.raises(CheckpointError) as err:
        open_checkpoint(path)
    assert str(path) in str(err.value) and message in str(err.value)
    names_tensor = isinstance(header, dict) and length is None and "__metadata__" not in header
    if names_tensor:
        assert "'a'" in str(err.value) or "'b'" in str(err.value)


def test_truncated_file(tmp_path: Path) -> None:
    path = save(tmp_path / "m.safetensors", gpt2_tensors())
    path.write_bytes(path.read_bytes()[:-5])
    with pytest.raises(CheckpointError, match="truncated"):
        open_checkpoint(path)


def test_text_file_is_not_safetensors(tmp_path: Path) -> None:
    path = tmp_path / "notes.safetensors"
    path.write_text("hello world, this is not a checkpoint at all\n" * 3)
    with pytest.raises(CheckpointError, match="not a safetensors file"):
        open_checkpoint(path)


def test_built_header_reads_back(tmp_path: Path) -> None:
    """build_header lays tensors out back to back; read_header finds each one's bytes there."""
    tensors = {"a": torch.arange(6, dtype=torch.float32).reshape(2, 3), "b": torch.ones(5, dtype=torch.bfloat16),
               "c": torch.arange(3, dtype=torch.int64), "empty": torch.zeros(0, 4)}
    header = build_header(list(tensors.items()), {"k": "v"})
    assert len(header) % 8 == 0
    data = b"".join(t.contiguous().view(torch.uint8).numpy().tobytes() for t in tensors.values())
    path = tmp_path / "m.safetensors"
    path.write_bytes(header + data)
    parsed = read_header(path)
    assert parsed.metadata == {"k": "v"} and list(parsed.tensors) == list(tensors)
    for name, tensor in tensors.items():
        info = parsed.tensors[name]
        assert info.dtype == dtype_code(tensor.dtype) and info.shape == tuple(tensor.shape)
        assert info.nbytes == tensor.numel() * DTYPE_SIZES[info.dtype]
        assert path.read_bytes()[info.start:info.end] == tensor.contiguous().view(torch.uint8).numpy().tobytes()


def test_build_header_refuses_twice_named_tensors_and_non_string_metadata() -> None:
    with pytest.raises(ConfigError, match="given twice"):
        build_header([("a", torch.zeros(1)), ("a", torch.zeros(1))], {})
    with pytest.raises(ConfigError, match="strings to strings"):
        build_header([("a", torch.zeros(1))], {"k": 1})  # type: ignore[dict-item]


@pytest.mark.parametrize("code", sorted(DTYPE_SIZES))
def test_dtype_codes_round_trip_through_torch(code: str) -> None:
    dtype = torch_dtype(code)
    assert dtype_code(dtype) == code
    assert torch.empty(0, dtype=dtype).element_size() == DTYPE_SIZES[code]


@pytest.mark.parametrize(("name", "code"), [("float32", "F32"), ("bfloat16", "BF16"), ("float16", "F16"),
                                            ("float64", "F64"), ("int64", "I64")])
def test_dtype_code_of_name_agrees_with_torch(name: str, code: str) -> None:
    assert dtype_code_of_name(name) == code == dtype_code(getattr(torch, name))
    with pytest.raises(ConfigError, match="'complex64'"):
        dtype_code_of_name("complex64")
