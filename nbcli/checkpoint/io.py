"""The one safetensors reader/writer: validated headers, lazy mmap tensors, streaming atomic writes.

Public API (stable; used by patch-checkpoint, inspect, probe-bias and train):

    open_checkpoint(path) -> Checkpoint
        `path`: a `.safetensors` file, a sharded Hugging Face checkpoint directory, or its
        `*.safetensors.index.json`. `.bin`/`.pt`/`.pth`/`.ckpt` are refused (never unpickled).
        Every header is parsed and validated up front; any defect is a CheckpointError naming the
        file and, where it applies, the tensor.
    Checkpoint (context manager; also fine to leave to the garbage collector)
        .path, .files (shard paths, in index order), .sharded, .index_path, .metadata (dict[str, str])
        .names() -> list[str]           all tensor names, file order (shard by shard)
        .dtype(name) -> str             safetensors code: "F32", "F16", "BF16", "I64", ...
        .shape(name) -> tuple[int, ...]
        .info(name) -> TensorInfo       file, byte range, dtype, shape
        .get(name) -> torch.Tensor      lazy: a copy-on-write mmap view (writing to it never
                                        touches the file); only the pages you read are loaded
        .get_float(name) -> torch.Tensor  float32 copy (for computing; cast back with .to(dtype))
        .shard_of(name) -> Path
        .recovered -> list[str]         notes: an interrupted nb commit in its folder completed on open
    save_tensors(path, tensors, metadata=None, progress=None)
        Write a dict of torch tensors (+ string metadata) as one safetensors file, atomically.
    write_safetensors(path, entries, metadata, progress=None)
        Streaming writer. `entries`: (name, torch.Tensor | TensorInfo) in output order; a TensorInfo
        is copied byte for byte from its file (copy_file_range/sendfile, nothing materialised).
    write_like(source, out, replace={}, add={}, metadata=..., in_place=False, progress=None) -> list[Path]
        Write a copy of `source` (single file or sharded: same shard names and layout, rewritten
        index) with some tensors replaced or added; untouched tensors are copied byte for byte.
        All outputs are temp files in the target directory, renamed into place only when every one
        is complete. OUT == IN is refused unless in_place=True.
        `deferred=Deferred(names, compute, poll)`: those source tensors are held back; every other
        tensor is copied first, then compute() gives their new values (same dtype and shape), which
        are written into the byte ranges kept for them (the rest of them copied from the source).
        This lets the caller compute them (e.g. in a thread) while the bulk copy runs.
        `other_inputs`: files the caller reads besides `source` (counts, match file); no output
        may be one of them (see nbcli.outputs).
    check_output_paths(source, out, in_place=False, other_inputs=()) the same check, up front
    resolve_output(source, out) -> Path   where write_like will write (file, or directory if sharded)
    torch_dtype(code) / dtype_code(torch_dtype)

Byte layout (https://github.com/huggingface/safetensors): u64 little-endian header length N, N
bytes of JSON {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {str: str}},
then the data buffer; offsets are relative to the buffer's start.
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import mmap
import os
import shutil
import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Union

from nbcli.atomic import OutputSet, atomic_write, check_output_dir, start_writeback
from nbcli.errors import CheckpointError, ConfigError, OutputError
from nbcli.jsonsafe import load_bytes, load_file, metadata_count, metadata_object
from nbcli.limits import input_stat, max_read_bytes, read_capped

if TYPE_CHECKING:
    import torch

Progress = Callable[[int], None]
"""Called with the number of bytes just written."""

INDEX_SUFFIX = ".safetensors.index.json"
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle")

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


def torch_dtype(code: str) -> torch.dtype:
    """The torch dtype of a safetensors dtype code."""
    import torch

    return getattr(torch, _TORCH_NAMES[code])


def dtype_code(dtype: torch.dtype) -> str:
    """The safetensors dtype code of a torch dtype."""
    name = str(dtype).removeprefix("torch.")
    for code, torch_name in _TORCH_NAMES.items():
        if torch_name == name:
            return code
    raise ConfigError(f"dtype {dtype} cannot be stored in safetensors")


# ---------------------------------------------------------------------------------------------
# Reading


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
    parsed = load_bytes(raw, path, error=CheckpointError, what="header", bom=False)
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


class Checkpoint:
    """A single-file or sharded safetensors checkpoint, opened lazily. See the module docstring."""

    def __init__(self, path: Path, files: list[Path], index_path: Path | None,
                 headers: list[SafetensorsHeader], index_metadata: dict[str, Any]) -> None:
        self.path = path
        self.files = files
        self.index_path = index_path
        self.headers = headers
        self.index_metadata = index_metadata
        self._infos: dict[str, TensorInfo] = {}
        for header in headers:
            for name, info in header.tensors.items():
                if name in self._infos:
                    raise CheckpointError(f"{header.path}: tensor {name!r} also appears in {self._infos[name].file}")
                self._infos[name] = info
        self.metadata: dict[str, str] = {}
        for header in headers:
            for key, value in header.metadata.items():
                self.metadata.setdefault(key, value)
        self._maps: dict[Path, mmap.mmap] = {}
        self.recovered: list[str] = []

    @property
    def sharded(self) -> bool:
        return self.index_path is not None

    @property
    def model_dir(self) -> Path | None:
        """The Hugging Face model folder holding the checkpoint: its directory, when a config.json
        there is a model config (an object with `model_type` or `architectures`); else None."""
        return self.files[0].parent if self.model_config is not None else None

    @property
    def model_config(self) -> dict[str, Any] | None:
        """The model folder's config.json, parsed (None when there is none, or it is not a model's)."""
        if not hasattr(self, "_model_config"):
            self._model_config = read_model_config(self.files[0].parent)
        return self._model_config

    def names(self) -> list[str]:
        return list(self._infos)

    def __contains__(self, name: object) -> bool:
        return name in self._infos

    def info(self, name: str) -> TensorInfo:
        try:
            return self._infos[name]
        except KeyError:
            raise CheckpointError(f"{self.path}: no tensor named {name!r}") from None

    def dtype(self, name: str) -> str:
        return self.info(name).dtype

    def shape(self, name: str) -> tuple[int, ...]:
        return self.info(name).shape

    def shard_of(self, name: str) -> Path:
        return self.info(name).file

    @property
    def total_bytes(self) -> int:
        return sum(info.nbytes for info in self._infos.values())

    def _map(self, file: Path) -> mmap.mmap:
        if file not in self._maps:
            with open(file, "rb") as handle:
                # ACCESS_COPY: private copy-on-write pages, so tensors are writable and the file never changes.
                self._maps[file] = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_COPY)
        return self._maps[file]

    def get(self, name: str) -> torch.Tensor:
        """The tensor, as a lazy copy-on-write view of the file's pages (dtype as stored)."""
        import torch

        info = self.info(name)
        dtype = torch_dtype(info.dtype)
        if info.numel == 0:
            return torch.empty(info.shape, dtype=dtype)
        if info.start % DTYPE_SIZES[info.dtype]:  # misaligned data: copy instead of viewing
            with open(info.file, "rb") as handle:
                handle.seek(info.start)
                buffer = bytearray(handle.read(info.nbytes))
            return torch.frombuffer(buffer, dtype=dtype).reshape(info.shape)
        return torch.frombuffer(self._map(info.file), dtype=dtype, count=info.numel,
                                offset=info.start).reshape(info.shape)

    def get_float(self, name: str) -> torch.Tensor:
        """A float32 copy of a floating-point tensor (compute in fp32, cast back on writing)."""
        import torch

        info = self.info(name)
        if info.dtype not in FLOAT_CODES:
            raise CheckpointError(f"{info.file}: tensor {name!r} is {info.dtype}, expected a floating-point tensor")
        return self.get(name).to(torch.float32, copy=True)

    def close(self) -> None:
        """Forget the mmaps (they are unmapped once no tensor views them)."""
        self._maps.clear()

    def __enter__(self) -> Checkpoint:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_model_config(directory: Path) -> dict[str, Any] | None:
    """`directory/config.json` when it is a Hugging Face model config (a JSON object with
    `model_type` or `architectures`; nb train's own config.json is not), else None."""
    try:
        parsed = load_file(directory / "config.json", error=CheckpointError, what="model config", max_bytes=16 << 20)
    except (OSError, CheckpointError):  # absent, unreadable or not JSON: not a model config
        return None
    if isinstance(parsed, dict) and ("model_type" in parsed or "architectures" in parsed):
        return parsed
    return None


def _refuse_pickle(path: Path) -> None:
    if path.suffix.lower() in PICKLE_SUFFIXES:
        raise CheckpointError(
            f"{path}: pickled PyTorch checkpoints are never loaded (unpickling can run code); convert it to "
            "safetensors first, e.g. with safetensors' convert script or "
            "`safetensors.torch.save_file(torch.load(p, weights_only=True), 'model.safetensors')`")


def _index_in_dir(directory: Path) -> Path | None:
    indexes = sorted(directory.glob(f"*{INDEX_SUFFIX}"))
    if len(indexes) > 1:
        raise CheckpointError(f"{directory}: several index files ({', '.join(p.name for p in indexes)}); "
                              "name the one to use")
    return indexes[0] if indexes else None


def find_checkpoint_files(path: Path | str) -> tuple[list[Path], Path | None, dict[str, Any]]:
    """Resolve a user path (or a Hub repo id: nbcli.resolve) to (shard files, index path or None, index metadata)."""
    from nbcli.resolve import local_path

    path = local_path(path, "model")
    _refuse_pickle(path)
    if path.is_dir():
        index = _index_in_dir(path)
        if index is None:
            singles = sorted(path.glob("*.safetensors"))
            if len(singles) == 1:
                return singles, None, {}
            pickles = [p.name for p in path.iterdir() if p.suffix.lower() in PICKLE_SUFFIXES]
            if pickles:
                _refuse_pickle(path / pickles[0])
            if not singles:
                raise CheckpointError(f"{path}: no .safetensors file or *{INDEX_SUFFIX} in this directory")
            raise CheckpointError(f"{path}: several .safetensors files and no index; name the file to use")
        path = index
    if path.name.endswith(INDEX_SUFFIX) or path.name.endswith(".index.json"):
        return _read_index(path)
    input_stat(path, "checkpoint", error=CheckpointError)
    return [path], None, {}


def _read_index(index: Path) -> tuple[list[Path], Path, dict[str, Any]]:
    raw = read_capped(index, "index file", error=CheckpointError)
    parsed = load_bytes(raw, index, error=CheckpointError, what="index", max_bytes=len(raw))
    weight_map = parsed.get("weight_map") if isinstance(parsed, dict) else None
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        raise CheckpointError(f"{index}: no 'weight_map' object mapping tensor names to shard files")
    files: list[Path] = []
    for shard in weight_map.values():
        shard_path = index.parent / shard
        if Path(shard).name != shard:
            raise CheckpointError(f"{index}: shard name {shard!r} must be a file name in the index's directory")
        if shard_path not in files:
            files.append(shard_path)
    for shard_path in files:
        _refuse_pickle(shard_path)
        if not shard_path.is_file():
            raise CheckpointError(f"{index}: shard {shard_path.name} is missing")
    metadata = parsed.get("metadata") if isinstance(parsed.get("metadata"), dict) else {}
    return files, index, {"metadata": metadata, "weight_map": weight_map}


def open_checkpoint(path: Path | str) -> Checkpoint:
    """Open a single-file or sharded safetensors checkpoint; every header is validated now.

    An interrupted nb write in the checkpoint's directory is completed first (its journal; see
    nbcli.atomic) and stale temporaries are removed; `.recovered` says what was done."""
    from nbcli.atomic import recover_directory
    from nbcli.resolve import inside_hub_cache, local_path

    path = local_path(path, "model")  # a repo id[@rev] becomes its snapshot folder
    try:  # the hub cache is never written to, not even to finish an interrupted write
        recovered = [] if inside_hub_cache(path) else recover_directory(path if path.is_dir() else path.parent,
                                                                         strict=True)
    except OutputError as err:
        raise CheckpointError(str(err)) from None
    files, index, index_data = find_checkpoint_files(path)
    headers = [read_header(file) for file in files]
    checkpoint = Checkpoint(path, files, index, headers, index_data.get("metadata", {}))
    checkpoint.recovered = recovered
    if index is not None:
        for name, shard in index_data["weight_map"].items():
            if name not in checkpoint or checkpoint.shard_of(name).name != shard:
                raise CheckpointError(f"{index}: index says tensor {name!r} is in {shard}, but it is not there")
        missing = set(checkpoint.names()) - set(index_data["weight_map"])
        if missing:
            raise CheckpointError(f"{index}: tensor {sorted(missing)[0]!r} is in a shard but not in the index")
    return checkpoint


# ---------------------------------------------------------------------------------------------
# Writing

@dataclass(frozen=True)
class Held:
    """A source tensor whose bytes are written last: from `Deferred.compute()` if it returns a new
    value for it, else copied from the source. Its byte range is kept free until then."""

    info: TensorInfo


@dataclass(frozen=True)
class Deferred:
    """Tensors of the source whose new values are computed while the other tensors are copied.

    `names`: source tensors to hold back (written last, into byte ranges kept for them).
    `compute()`: called once, after every other tensor is copied; returns new values for some of
    `names`, each with the stored dtype and shape (the others are copied from the source).
    `poll()`: called between copy blocks; raises to abandon the write (e.g. when the computation
    has already failed), which removes every temporary file.
    """

    names: frozenset[str]
    compute: Callable[[], Mapping[str, torch.Tensor]]
    poll: Callable[[], None] = lambda: None


TensorData = Union["torch.Tensor", TensorInfo, Held]
_COPY_BLOCK = 1 << 28  # 256 MiB per copy_file_range / sendfile call, then its writeback is started
# (64 MiB measured ~20% slower than 1 GiB; 256 MiB measured as fast as 1 GiB)
_UNSUPPORTED = (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.EBADF)


def _tensor_bytes(tensor: torch.Tensor) -> memoryview:
    import torch

    flat = tensor.detach().to("cpu").contiguous().reshape(-1)
    if flat.numel() == 0:
        return memoryview(b"")
    return memoryview(flat.view(torch.uint8).numpy()).cast("B")


def _entry_meta(name: str, data: TensorData) -> tuple[str, list[int], int]:
    if isinstance(data, Held):
        data = data.info
    if isinstance(data, TensorInfo):
        return data.dtype, list(data.shape), data.nbytes
    code = dtype_code(data.dtype)
    return code, list(data.shape), data.numel() * DTYPE_SIZES[code]


def build_header(entries: Sequence[tuple[str, TensorData]], metadata: Mapping[str, str]) -> bytes:
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
        dtype, shape, nbytes = _entry_meta(name, data)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    raw = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw


Copied = Callable[[int, int, int], None]
"""Called with (output fd, offset, byte count) after each block copied into the output."""


def _copy_range(src: TensorInfo, out: BinaryIO, progress: Progress | None,
                poll: Callable[[], None] | None = None, copied_block: Copied | None = None) -> None:
    """Copy src's bytes to the current position of `out` in the kernel where possible; `poll` is
    called before each block (it raises to abandon the copy), `copied_block` after each."""
    out.flush()
    dst_fd = out.fileno()
    dst_offset = out.tell()
    with open(src.file, "rb") as handle:
        src_fd = handle.fileno()
        offset, remaining = src.start, src.nbytes
        use_cfr, use_sendfile = hasattr(os, "copy_file_range"), hasattr(os, "sendfile")
        while remaining:
            if poll:
                poll()
            count = min(remaining, _COPY_BLOCK)
            copied = 0
            if use_cfr:
                try:
                    copied = os.copy_file_range(src_fd, dst_fd, count, offset)
                except OSError as err:
                    if err.errno not in _UNSUPPORTED:
                        raise
                    use_cfr = False
            if not copied and not use_cfr and use_sendfile:
                try:
                    copied = os.sendfile(dst_fd, src_fd, offset, count)
                except OSError as err:
                    if err.errno not in _UNSUPPORTED:
                        raise
                    use_sendfile = False
            if not copied and not use_cfr and not use_sendfile:
                handle.seek(offset)
                block = handle.read(count)
                out.write(block)
                out.flush()
                copied = len(block)
            if copied == 0:
                raise CheckpointError(f"{src.file}: tensor data {src.name!r} ended early (file truncated while "
                                      "copying?)")
            if copied_block:
                copied_block(dst_fd, dst_offset, copied)
            offset += copied
            dst_offset += copied
            remaining -= copied
            if progress:
                progress(copied)


def _write_entries(out: BinaryIO, entries: Sequence[tuple[str, TensorData]], metadata: Mapping[str, str],
                   progress: Progress | None, late: _LateMetadata | None = None,
                   poll: Callable[[], None] | None = None, copied_block: Copied | None = None,
                   ) -> list[tuple[int, Held]]:
    """Write the header (with `late.reserve` spare bytes) and every entry but the Held ones, whose
    byte ranges are skipped; returns (file offset, Held) for each of those."""
    header = build_header(entries, metadata)
    if late is not None:  # reserve room, filled in once the data are written (see write_like)
        (n,) = struct.unpack("<Q", header[:8])
        header = struct.pack("<Q", n + late.reserve) + header[8:] + b" " * late.reserve
    out.write(header)
    held: list[tuple[int, Held]] = []
    for data in _coalesced(entries):
        if poll:
            poll()
        if isinstance(data, Held):
            out.flush()
            held.append((out.tell(), data))
            out.seek(data.info.nbytes, os.SEEK_CUR)
        elif isinstance(data, TensorInfo):
            _copy_range(data, out, progress, poll, copied_block)
        else:
            view = _tensor_bytes(data)
            out.write(view)
            if progress:
                progress(len(view))
    return held


def _coalesced(entries: Sequence[tuple[str, TensorData]]) -> list[TensorData]:
    """The entries' data with each run of source tensors that lie back to back in one file merged
    into one range: one copy_file_range per run instead of several calls (and GIL round trips,
    slow while another thread imports torch) per tensor."""
    merged: list[TensorData] = []
    for _name, data in entries:
        last = merged[-1] if merged else None
        if (isinstance(data, TensorInfo) and isinstance(last, TensorInfo) and last.file == data.file
                and last.end == data.start):
            first = last.name.split(" .. ")[0]
            merged[-1] = TensorInfo(f"{first} .. {data.name}", "U8", (data.end - last.start,), data.file,
                                    last.start, data.end)
        else:
            merged.append(data)
    return merged


def _fill_held(out: BinaryIO, held: Sequence[tuple[int, Held]], values: Mapping[str, torch.Tensor],
               progress: Progress | None) -> None:
    """Write each held tensor at its offset: its new value from `values`, else the source's bytes."""
    for offset, item in held:
        info = item.info
        out.flush()
        out.seek(offset)
        if info.name not in values:
            _copy_range(info, out, progress)
            continue
        view = _tensor_bytes(values[info.name])
        done = 0
        while done < len(view):
            done += os.pwrite(out.fileno(), view[done:], offset + done)
        if progress:
            progress(len(view))
    out.flush()
    out.seek(0, os.SEEK_END)


def _check_deferred(values: Mapping[str, torch.Tensor], held: Mapping[str, Held]) -> None:
    """Deferred values must be held source tensors with their stored dtype and shape."""
    for name, tensor in values.items():
        if name not in held:
            raise ConfigError(f"deferred tensor {name!r} was not held back from the copy")
        info = held[name].info
        if dtype_code(tensor.dtype) != info.dtype or tuple(tensor.shape) != info.shape:
            raise ConfigError(f"deferred tensor {name!r} is {dtype_code(tensor.dtype)} {list(tensor.shape)}; "
                              f"its reserved bytes hold {info.dtype} {list(info.shape)}")


def _write_late_header(out: BinaryIO, entries: Sequence[tuple[str, TensorData]], metadata: Mapping[str, str],
                       late: _LateMetadata) -> None:
    """Overwrite the header with the late metadata merged in, padded to the reserved length."""
    reserved = len(build_header(entries, metadata)) + late.reserve
    final = build_header(entries, {**metadata, **late.values()})
    if len(final) > reserved:
        raise OutputError(f"late metadata needs {len(final) - reserved} more header bytes than reserved")
    out.flush()
    out.seek(8)
    out.write(final[8:] + b" " * (reserved - len(final)))
    out.flush()
    out.seek(0, os.SEEK_END)


class _LateMetadata:
    """Metadata known only after the data are written (e.g. input hashes computed concurrently):
    `reserve` header bytes are kept as trailing spaces (allowed by the format) and overwritten."""

    def __init__(self, compute: Callable[[], Mapping[str, str]], reserve: int) -> None:
        self._compute = compute
        self._values: dict[str, str] | None = None
        self.reserve = reserve + (-reserve % 8)

    def values(self) -> dict[str, str]:
        if self._values is None:
            self._values = dict(self._compute())
        return self._values


def write_safetensors(path: Path | str, entries: Sequence[tuple[str, TensorData]],
                      metadata: Mapping[str, str] | None = None, progress: Progress | None = None) -> None:
    """Write `entries` (name, tensor or TensorInfo to copy) as one safetensors file, atomically."""
    with atomic_write(path) as out:
        _write_entries(out, entries, metadata or {}, progress)


def save_tensors(path: Path | str, tensors: Mapping[str, torch.Tensor],
                 metadata: Mapping[str, str] | None = None, progress: Progress | None = None) -> None:
    """Save a dict of torch tensors with string metadata as one safetensors file, atomically."""
    write_safetensors(path, list(tensors.items()), metadata, progress)


def resolve_output(source: Checkpoint, out: Path | str, folder: bool = False) -> Path:
    """Where write_like writes: a file for a single-file source (OUT, or OUT/<input name> if OUT is a
    directory), a directory for a sharded source (OUT, or OUT's directory if OUT names an index).
    `folder`: OUT is a model folder (created if absent): the file goes to OUT/<input name>."""
    out = Path(out)
    if source.sharded:
        if out.name.endswith(".index.json"):
            return out.parent
        if out.suffix == ".safetensors":
            raise ConfigError(f"{out}: the input is sharded, so the output is a directory of shards; "
                              "give a directory (or an index.json path)")
        return out
    if folder:
        if out.exists() and not out.is_dir():
            raise OutputError(f"{out}: exists and is not a directory (the input is a model folder, so the "
                              "output is one; end OUT with .safetensors to write the tensors alone)")
        return out / source.files[0].name
    if out.is_dir():
        return out / source.files[0].name
    return out


def folder_output(source: Checkpoint, out: Path | str) -> bool:
    """Whether OUT is written as a model folder: the source sits in a Hugging Face model folder
    (config.json beside it) and OUT names no .safetensors file or index."""
    name = Path(out).name
    return source.model_dir is not None and not name.endswith((".safetensors", ".index.json"))


#: Files of a model folder that are never copied beside a patched checkpoint: the tensors nb writes
#: itself, and weights in other formats (stale once the safetensors are patched; pickles never read).
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle", ".h5", ".msgpack",
                   ".onnx", ".gguf", ".ot", ".tflite", ".nbtmp")


def model_folder_files(source: Checkpoint) -> list[Path]:
    """The non-tensor files of the source's model folder (config.json, generation_config.json,
    tokenizer files, README, ...): regular, non-hidden files at its top level that hold no weights."""
    folder = source.model_dir
    if folder is None:
        return []
    skip = {p.name for p in source.files} | ({source.index_path.name} if source.index_path else set())
    return sorted(p for p in folder.iterdir()
                  if p.is_file() and not p.name.startswith(".") and p.name not in skip
                  and not p.name.lower().endswith(WEIGHT_SUFFIXES) and not p.name.endswith(".index.json"))


@dataclass
class _Plan:
    files: list[tuple[Path, list[tuple[str, TensorData]], dict[str, str]]] = field(default_factory=list)
    index: tuple[Path, dict[str, Any], dict[str, str]] | None = None
    extra: list[tuple[Path, Path | bytes]] = field(default_factory=list)


def write_like(source: Checkpoint, out: Path | str, *, replace: Mapping[str, torch.Tensor] | None = None,
               add: Mapping[str, tuple[torch.Tensor, str | None]] | None = None,
               metadata: Mapping[str, str] | None = None, in_place: bool = False,
               progress: Progress | None = None, update_metadata: Mapping[str, str] | None = None,
               late_metadata: Callable[[], Mapping[str, str]] | None = None,
               late_reserve: int = 8192, deferred: Deferred | None = None,
               other_inputs: Sequence[Path | str] = (), folder: bool = False,
               extra_files: Mapping[str, Path | bytes] | None = None) -> list[Path]:
    """Write a copy of `source` with `replace`d tensors (same name, any shape/dtype) and `add`ed ones.

    `add` maps a new name to (tensor, name of an existing tensor to place it after, or None for the
    end); in a sharded checkpoint it goes into that tensor's shard. `metadata` replaces the metadata
    of every written file (default: keep each file's own); `update_metadata` is merged into it.
    `deferred` holds back some source tensors: all other data of every file are written first,
    then `deferred.compute()` gives their new values (see Deferred). `late_metadata` is called
    once, after all data are written and before anything is renamed; its entries (at most
    `late_reserve` bytes of JSON) are merged into every file's metadata and the index's. Untouched
    tensors are copied byte for byte. `other_inputs` are files the caller also reads (see
    check_output_paths). `folder`: OUT is a directory (created) even for a single-file
    source; `extra_files` (file name -> source path or bytes) are written into it with the tensors
    and renamed into place with them (a model folder's config.json and tokenizer files). The index
    metadata's total_size (and total_parameters, when the source index has it) describe the output.
    Returns the written paths (shards, then the index, then the extra files).
    """
    replace = dict(replace or {})
    add = dict(add or {})
    held = {name: Held(source.info(name)) for name in sorted(deferred.names)} if deferred else {}
    for name in replace:
        source.info(name)
        if name in held:
            raise ConfigError(f"tensor {name!r} is both replaced and deferred")
    for name in add:
        if name in source:
            raise ConfigError(f"{source.path}: tensor {name!r} already exists; cannot create it")
    target = resolve_output(source, out, folder)
    check_output_paths(source, out, in_place=in_place, other_inputs=other_inputs, folder=folder,
                       extra=list(extra_files or ()))
    from nbcli.resolve import hub_inputs_metadata

    if hub := hub_inputs_metadata([source.files[0], *other_inputs]):  # provenance: repo id + commit of Hub inputs
        update_metadata = {**(update_metadata or {}), **hub}
    after: dict[str, list[str]] = {}
    tail: list[str] = []
    for name, (_tensor, anchor) in add.items():
        if anchor is None:
            tail.append(name)
        else:
            source.info(anchor)
            after.setdefault(anchor, []).append(name)
    plan = _Plan()
    file_names: dict[Path, list[str]] = {header.path: [] for header in source.headers}
    for header in source.headers:
        for name in header.tensors:
            file_names[header.path].append(name)
            file_names[header.path].extend(after.get(name, []))
    file_names[source.headers[-1].path].extend(tail)

    def data(name: str) -> TensorData:
        if name in held:
            return held[name]
        if name in replace:
            return replace[name]
        if name in add:
            return add[name][0]
        return source.info(name)

    target_dir = target if source.sharded else target.parent if folder else None
    if target_dir is not None:
        if not target_dir.exists():
            check_output_dir(target_dir)
        elif not target_dir.is_dir():
            raise OutputError(f"{target_dir}: exists and is not a directory")
    if source.sharded:
        assert target_dir is not None
        weight_map: dict[str, str] = {}
        total = parameters = 0
        for header in source.headers:
            entries = [(name, data(name)) for name in file_names[header.path]]
            meta = dict(metadata) if metadata is not None else dict(header.metadata)
            plan.files.append((target_dir / header.path.name, entries, {**meta, **(update_metadata or {})}))
            for name, item in entries:
                weight_map[name] = header.path.name
                _dtype, shape, nbytes = _entry_meta(name, item)
                total += nbytes
                parameters += math.prod(shape)
        index_meta = {**source.index_metadata, **(update_metadata or {}), "total_size": total}
        if "total_parameters" in source.index_metadata:
            index_meta["total_parameters"] = parameters
        assert source.index_path is not None
        plan.index = (target_dir / source.index_path.name, index_meta, dict(sorted(weight_map.items())))
    else:
        header = source.headers[0]
        entries = [(name, data(name)) for name in file_names[header.path]]
        meta = dict(metadata) if metadata is not None else dict(header.metadata)
        plan.files.append((target, entries, {**meta, **(update_metadata or {})}))
    if extra_files:
        if target_dir is None:
            raise ConfigError("extra files need a folder output")
        plan.extra = [(target_dir / name, content) for name, content in extra_files.items()]
    late = _LateMetadata(late_metadata, late_reserve) if late_metadata is not None else None
    return _execute(plan, target_dir, progress, late, deferred, held)


def output_paths(source: Checkpoint, out: Path | str, folder: bool = False, extra: Sequence[str] = ()) -> list[Path]:
    """The files write_like(source, out) writes: the shards (or the one file), the index, and in a
    folder output the `extra` file names."""
    target = resolve_output(source, out, folder)
    directory = target if source.sharded else target.parent
    if not source.sharded:
        return [target] + [directory / name for name in extra]
    assert source.index_path is not None
    return ([target / path.name for path in source.files] + [target / source.index_path.name]
            + [directory / name for name in extra])


def check_output_paths(source: Checkpoint, out: Path | str, *, in_place: bool = False,
                       other_inputs: Sequence[Path | str] = (), folder: bool = False,
                       extra: Sequence[str] | None = None) -> None:
    """OutputError unless writing `out` leaves every input intact: no output may be (a link to) a
    file of `other_inputs`, nor of the checkpoint (its model folder's files included) unless
    `in_place`. `extra`: the folder output's other file names (default: the model folder's)."""
    from nbcli.outputs import check_outputs

    folder_files = model_folder_files(source) if folder else []
    names = [p.name for p in folder_files] if extra is None else list(extra)
    outputs = output_paths(source, out, folder, names)
    ours = list(source.files) + ([source.index_path] if source.index_path else []) + folder_files
    check_outputs(outputs, other_inputs, replaceable=ours if in_place else ())
    if not in_place:
        check_outputs(outputs, ours, hint="pass --in-place to overwrite it (it stays intact until the new "
                                          "file is complete)")


def _execute(plan: _Plan, created_dir: Path | None, progress: Progress | None, late: _LateMetadata | None,
             deferred: Deferred | None, held: Mapping[str, Held]) -> list[Path]:
    """Write every file to a temporary beside its target: first all data but the held tensors, then
    those (deferred.compute()), then the late metadata; rename all only when all are complete."""
    from concurrent.futures import ThreadPoolExecutor

    made_dir = False
    if created_dir is not None and not created_dir.exists():
        try:
            created_dir.mkdir()
        except OSError as err:
            raise OutputError(f"{created_dir}: cannot create output directory: {err.strerror}") from None
        made_dir = True
    written: list[Path] = []
    # Start the writeback of each copied block from a helper thread (it may block on a busy
    # device queue), so the copy goes on and the fsync before each rename has little left to do.
    writeback = ThreadPoolExecutor(max_workers=1, thread_name_prefix="nb-writeback")

    def copied_block(fd: int, offset: int, nbytes: int) -> None:
        writeback.submit(start_writeback, fd, offset, nbytes)

    try:
        with contextlib.ExitStack() as stack:
            outputs = stack.enter_context(OutputSet())  # committed (shards, then index) when all are complete
            stack.callback(writeback.shutdown)  # no writeback request outlives the files' handles
            poll = deferred.poll if deferred else None
            handles = []
            for path, entries, meta in plan.files:
                handle = outputs.open(path)
                handles.append((handle, _write_entries(handle, entries, meta, progress, late, poll, copied_block)))
                written.append(path)
            if deferred is not None:
                values = deferred.compute()
                _check_deferred(values, held)
                for handle, held_ranges in handles:
                    _fill_held(handle, held_ranges, values, progress)
            if late is not None:
                for (handle, _held), (_path, entries, meta) in zip(handles, plan.files):
                    _write_late_header(handle, entries, meta, late)
            if plan.index is not None:
                index_path, index_meta, weight_map = plan.index
                if late is not None:
                    index_meta = {**index_meta, **late.values()}
                doc = {"metadata": index_meta, "weight_map": weight_map}
                handle = outputs.open(index_path)
                handle.write((json.dumps(doc, indent=2) + "\n").encode("utf-8"))
                written.append(index_path)
            from nbcli.outputs import file_identity

            for path, content in plan.extra:
                if isinstance(content, Path) and file_identity(content) == file_identity(path):
                    continue  # in place: the file is already there
                handle = outputs.open(path)  # committed with the tensors, after them
                if isinstance(content, Path):
                    with open(content, "rb") as source_file:
                        shutil.copyfileobj(source_file, handle, 1 << 20)
                else:
                    handle.write(content)
                written.append(path)
    except BaseException:
        if made_dir:
            for leftover in created_dir.iterdir():  # only this write's files can be here
                leftover.unlink(missing_ok=True)
            created_dir.rmdir()
        raise
    return written

