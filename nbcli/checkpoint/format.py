"""The safetensors byte format: dtype codes, where a tensor's bytes lie, the header read and built.

Bytes <-> structs, nothing else: opening checkpoints is `reader`, writing files is `writer`.

    read_header(path) -> SafetensorsHeader   parse and validate one file's header (CheckpointError
                                             naming the file and, where it applies, the tensor)
    build_header(entries, metadata) -> bytes the length-prefixed header for tensors laid out in order
    TensorInfo                               one tensor: file, absolute byte range, dtype, shape
    torch_dtype(code) / dtype_code(torch_dtype) / dtype_code_of_name("bfloat16") / DTYPE_SIZES / FLOAT_CODES
    NUMPY_STORED / float32_from_stored(words, code)   F32/F16/BF16/F64 bytes as float32 without torch

Byte layout (https://github.com/huggingface/safetensors): u64 little-endian header length N, N
bytes of JSON {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {str: str}},
then the data buffer; offsets are relative to the buffer's start.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Union

from nbcli.errors import CheckpointError, ConfigError
from nbcli.jsonsafe import load_bytes, metadata_count, metadata_object
from nbcli.limits import input_stat, max_read_bytes

if TYPE_CHECKING:
    import numpy as np
    import torch

#: safetensors dtype code -> bytes per element
DTYPE_SIZES: dict[str, int] = {
    "F64": 8, "F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1,
    "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U64": 8, "U32": 4, "U16": 2, "U8": 1, "BOOL": 1,
}
FLOAT_CODES = frozenset({"F64", "F32", "F16", "BF16", "F8_E4M3", "F8_E5M2"})

_TORCH_NAMES = {
    "F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16",
    "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2",
    "I64": "int64", "I32": "int32", "I16": "int16", "I8": "int8",
    "U64": "uint64", "U32": "uint32", "U16": "uint16", "U8": "uint8", "BOOL": "bool",
}


#: dtype codes read without torch: the numpy dtype of their stored words (BF16: raw 16-bit words)
NUMPY_STORED: dict[str, str] = {"F32": "<f4", "F16": "<f2", "BF16": "<u2", "F64": "<f8"}


def float32_from_stored(words: np.ndarray, code: str) -> np.ndarray:
    """float32 values of stored words read as NUMPY_STORED[code] (bfloat16 is the top half of a float32)."""
    import numpy as np

    if code == "BF16":
        return (words.astype(np.uint32) << 16).view(np.float32)
    return words.astype(np.float32, copy=False)


def torch_dtype(code: str) -> torch.dtype:
    """The torch dtype of a safetensors dtype code."""
    import torch

    return getattr(torch, _TORCH_NAMES[code])


def _code_of_name(name: str) -> str | None:
    return next((code for code, torch_name in _TORCH_NAMES.items() if torch_name == name), None)


def dtype_code(dtype: torch.dtype) -> str:
    """The safetensors dtype code of a torch dtype."""
    code = _code_of_name(str(dtype).removeprefix("torch."))
    if code is None:
        raise ConfigError(f"dtype {dtype} cannot be stored in safetensors")
    return code


def dtype_code_of_name(name: str) -> str:
    """The safetensors dtype code of a torch dtype's name, as options spell it: "float32" -> "F32",
    "bfloat16" -> "BF16" (`--new-tensor-dtype`)."""
    code = _code_of_name(name)
    if code is None:
        raise ConfigError(f"dtype {name!r} cannot be stored in safetensors")
    return code


@dataclass(frozen=True)
class TensorInfo:
    """Where one tensor's bytes live: `file`, absolute byte offsets [start, end)."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    file: Path
    start: int
    end: int

    @property
    def nbytes(self) -> int:
        return self.end - self.start

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


@dataclass
class SafetensorsHeader:
    """One parsed and validated safetensors file."""

    path: Path
    header_bytes: int
    tensors: dict[str, TensorInfo]
    metadata: dict[str, str]
    file_size: int


#: nb's metadata keys whose values other nb commands parse: JSON objects, and non-negative integers
#: (nb.provenance is parsed where it is extended, and kept as a string when it is not JSON)
class TensorLookup:
    """Tensor records by name, the part of the reading interface that a checkpoint file
    (`reader.Checkpoint`) and a state dict held in memory (`memory.MemoryCheckpoint`) share:
    subclasses fill `_infos` (name -> a record with dtype, shape, file) and set `path`."""

    path: Any
    _infos: dict[str, Any]

    def names(self) -> list[str]:
        return list(self._infos)

    def __contains__(self, name: object) -> bool:
        return name in self._infos

    def info(self, name: str) -> Any:
        try:
            return self._infos[name]
        except KeyError:
            raise CheckpointError(f"{self.path}: no tensor named {name!r}") from None

    def dtype(self, name: str) -> str:
        return self.info(name).dtype

    def shape(self, name: str) -> tuple[int, ...]:
        return self.info(name).shape

    def shard_of(self, name: str) -> Any:
        return self.info(name).file


NB_JSON_METADATA = ("nb.config", "nb.train_config")
NB_COUNT_METADATA = ("nb.documents", "nb.total_tokens", "nb.bytes_read", "nb.vocab_size", "nb.step")


def check_nb_metadata(metadata: Mapping[str, str], path: Path) -> None:
    """Refuse nb metadata values that nb cannot use later (CheckpointError naming file and key)."""
    for key in NB_JSON_METADATA:
        metadata_object(metadata, key, path, error=CheckpointError)
    for key in NB_COUNT_METADATA:
        metadata_count(metadata, key, path, error=CheckpointError)


def read_header(path: Path | str) -> SafetensorsHeader:
    """Parse and validate the header of a safetensors file; CheckpointError names file and tensor."""
    path = Path(path)
    if path.is_dir():
        raise CheckpointError(f"{path}: is a directory, expected a .safetensors file")
    size = input_stat(path, "checkpoint", error=CheckpointError).st_size
    try:
        with open(path, "rb") as handle:
            prefix = handle.read(8)
            if len(prefix) < 8:
                raise CheckpointError(f"{path}: not a safetensors file ({size} bytes, too short for a header)")
            (n,) = struct.unpack("<Q", prefix)
            if n > size - 8:
                raise CheckpointError(
                    f"{path}: not a safetensors file or truncated: header length {n} is larger than the "
                    f"file ({size} bytes)")
            if n > max_read_bytes():
                raise CheckpointError(f"{path}: header of {n:,} bytes is over the {max_read_bytes() / 1e6:g} MB nb "
                                      "reads into memory (raise it with NB_MAX_READ_MB)")
            raw = handle.read(n)
    except FileNotFoundError:
        raise CheckpointError(f"{path}: checkpoint not found") from None
    except IsADirectoryError:
        raise CheckpointError(f"{path}: is a directory, expected a .safetensors file") from None
    except PermissionError:
        raise CheckpointError(f"{path}: permission denied") from None
    parsed = load_bytes(raw, path, error=CheckpointError, what="header", bom=False, unique_keys=True)
    if not isinstance(parsed, dict):
        raise CheckpointError(f"{path}: not a safetensors file: header is a JSON {type(parsed).__name__}, "
                              "expected an object")
    metadata = parsed.pop("__metadata__", None)
    if metadata is None:  # absent or null (the safetensors library accepts both)
        metadata = {}
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise CheckpointError(f"{path}: __metadata__ must be an object mapping strings to strings")
    check_nb_metadata(metadata, path)
    base = 8 + n
    data_size = size - base
    tensors: dict[str, TensorInfo] = {}
    for name, entry in parsed.items():
        tensors[name] = _tensor_info(path, name, entry, base, data_size)
    spans = sorted(tensors.values(), key=lambda t: (t.start, t.end))
    tensors = {info.name: info for info in spans}  # file order
    for before, after in zip(spans, spans[1:]):
        if after.start < before.end and after.nbytes and before.nbytes:
            raise CheckpointError(
                f"{path}: tensors {before.name!r} and {after.name!r} have overlapping data offsets")
    return SafetensorsHeader(path=path, header_bytes=n, tensors=tensors, metadata=dict(metadata), file_size=size)


def _tensor_info(path: Path, name: str, entry: Any, base: int, data_size: int) -> TensorInfo:
    where = f"{path}: tensor {name!r}"
    if not isinstance(entry, dict):
        raise CheckpointError(f"{where}: header entry is not an object")
    dtype = entry.get("dtype")
    if not isinstance(dtype, str) or dtype not in DTYPE_SIZES:
        raise CheckpointError(f"{where}: unknown dtype {dtype!r} (known: {', '.join(DTYPE_SIZES)})")
    shape = entry.get("shape")
    if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                              for d in shape):
        raise CheckpointError(f"{where}: shape {shape!r} is not a list of non-negative integers")
    offsets = entry.get("data_offsets")
    if (not isinstance(offsets, list) or len(offsets) != 2
            or not all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)):
        raise CheckpointError(f"{where}: data_offsets {offsets!r} is not a pair of integers")
    begin, end = offsets
    if begin < 0 or end < begin:
        raise CheckpointError(f"{where}: data offsets [{begin}, {end}] are out of range")
    expected = math.prod(shape) * DTYPE_SIZES[dtype]
    if end - begin != expected:
        raise CheckpointError(f"{where}: data offsets [{begin}, {end}] hold {end - begin} bytes but "
                              f"{dtype} {shape} needs {expected}")
    if end > data_size:
        raise CheckpointError(f"{where}: data offsets [{begin}, {end}] are out of range: the data buffer "
                              f"has {data_size} bytes (truncated file?)")
    return TensorInfo(name=name, dtype=dtype, shape=tuple(shape), file=path, start=base + begin, end=base + end)


StoredTensor = Union["torch.Tensor", TensorInfo]
"""A tensor to write: in memory, or bytes to copy from a checkpoint file."""


def stored_layout(data: StoredTensor) -> tuple[str, list[int], int]:
    """(dtype code, shape, byte count) of a tensor as safetensors stores it."""
    if isinstance(data, TensorInfo):
        return data.dtype, list(data.shape), data.nbytes
    code = dtype_code(data.dtype)
    return code, list(data.shape), data.numel() * DTYPE_SIZES[code]


def build_header(entries: Sequence[tuple[str, StoredTensor]], metadata: Mapping[str, str]) -> bytes:
    """The length-prefixed, 8-byte-padded header for `entries` laid out contiguously in order."""
    header: dict[str, Any] = {}
    if metadata:
        bad = [k for k, v in metadata.items() if not isinstance(k, str) or not isinstance(v, str)]
        if bad:
            raise ConfigError(f"metadata must map strings to strings (key {bad[0]!r})")
        header["__metadata__"] = dict(metadata)
    offset = 0
    for name, data in entries:
        if name in header:
            raise ConfigError(f"tensor name {name!r} given twice")
        dtype, shape, nbytes = stored_layout(data)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    raw = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw
