"""The one safetensors reader: single files and shards (+ index), config.json, lazy mmap tensors.

Public API (stable; used by patch-checkpoint, inspect, probe-bias and train):

    open_checkpoint(path) -> Checkpoint
        `path`: a `.safetensors` file, a sharded Hugging Face checkpoint directory, or its
        `*.safetensors.index.json`. `.bin`/`.pt`/`.pth`/`.ckpt` are refused (never unpickled).
        Every header is parsed and validated up front (`format.read_header`); any defect is a
        CheckpointError naming the file and, where it applies, the tensor.
    Checkpoint (context manager; also fine to leave to the garbage collector)
        .path, .files (shard paths, in index order), .sharded, .index_path, .metadata (dict[str, str];
            sharded: the shards' entries, the index's `nb.*` ones winning: an in-place edit
            rewrites only the shards it changes, so the index holds the latest provenance)
        .model_dir, .model_config       the Hugging Face model folder around it and its config.json
        .names() -> list[str]           all tensor names, file order (shard by shard)
        .dtype(name) -> str             safetensors code: "F32", "F16", "BF16", "I64", ...
        .shape(name) -> tuple[int, ...]
        .info(name) -> TensorInfo       file, byte range, dtype, shape
        .get(name) -> torch.Tensor      lazy: a copy-on-write mmap view (writing to it never
                                        touches the file); only the pages you read are loaded
        .get_float(name) -> torch.Tensor  float32 copy (for computing; cast back with .to(dtype))
        .shard_of(name) -> Path
        .rows(name) -> RowBlocks        the tensor read by row blocks (pread), as float32 numpy
        .recovered -> list[str]         notes: an interrupted nb commit in its folder completed on open
    find_checkpoint_files(path) -> (shard files, index path or None, index data)
    read_model_config(directory) -> dict | None
"""

from __future__ import annotations

import math
import mmap
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nbcli.checkpoint.format import (
    DTYPE_SIZES, FLOAT_CODES, NUMPY_STORED, SafetensorsHeader, TensorInfo, TensorLookup, float32_from_stored,
    read_header, torch_dtype,
)
from nbcli.errors import CheckpointError, NbError, OutputError
from nbcli.jsonsafe import load_bytes, load_file
from nbcli.limits import input_stat, read_capped
from nbcli.resolve import PICKLE_SUFFIXES

if TYPE_CHECKING:
    import numpy as np
    import torch

INDEX_SUFFIX = ".safetensors.index.json"


class Checkpoint(TensorLookup):
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
        for key, value in index_metadata.items():  # an in-place edit rewrites only some shards: the
            if key.startswith("nb.") and isinstance(value, str):  # index holds the latest provenance
                self.metadata[key] = value
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

    def rows(self, name: str) -> RowBlocks:
        """The tensor read by contiguous row slices, as float32 numpy (see RowBlocks)."""
        return RowBlocks(self, name)

    def close(self) -> None:
        """Forget the mmaps (they are unmapped once no tensor views them)."""
        self._maps.clear()

    def __enter__(self) -> Checkpoint:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class RowBlocks:
    """A [V, d] (or [V]) checkpoint tensor read by contiguous row slices with pread, as float32 numpy.

    Reads the byte range the header validated (`info`); nothing is mmapped, so only the block being
    processed is resident (a 16 MiB block, not the whole tensor's pages), and F32 / F16 / BF16 / F64
    need neither torch nor a copy of the tensor. Other dtypes (F8, integers) go through
    `Checkpoint.get` (a mmapped torch view).
    """

    def __init__(self, checkpoint: Checkpoint, name: str) -> None:
        self.info = checkpoint.info(name)
        self.name = name
        self._checkpoint = checkpoint
        self.shape = self.info.shape
        self._row_items = math.prod(self.shape[1:]) if len(self.shape) > 1 else 1

    def __getitem__(self, key: slice) -> np.ndarray:
        import numpy as np

        start, stop, step = key.indices(int(self.shape[0]))
        if step != 1:
            raise ValueError("RowBlocks supports contiguous row slices only")
        stop = max(start, stop)
        code = self.info.dtype
        if code not in NUMPY_STORED:
            import torch

            return np.ascontiguousarray(self._checkpoint.get(self.name)[start:stop].to(torch.float32).numpy())
        dtype = np.dtype(NUMPY_STORED[code])
        count = (stop - start) * self._row_items
        offset = self.info.start + start * self._row_items * dtype.itemsize
        buffer = np.empty(count, dtype=dtype)
        view = memoryview(buffer).cast("B")
        got = 0
        with open(self.info.file, "rb", buffering=0) as handle:
            handle.seek(offset)
            while got < buffer.nbytes:
                n = handle.readinto(view[got:])
                if not n:
                    break
                got += n
        if got != buffer.nbytes:
            raise CheckpointError(f"{self.info.file}: tensor {self.name!r} ended early (file truncated?)")
        return float32_from_stored(buffer, code).reshape((stop - start, *self.shape[1:]))

    def read_all(self) -> np.ndarray:
        return self[0:int(self.shape[0])]


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
    parsed = load_bytes(raw, index, error=CheckpointError, what="index", max_bytes=len(raw), unique_keys=True)
    weight_map = parsed.get("weight_map") if isinstance(parsed, dict) else None
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        raise CheckpointError(f"{index}: no 'weight_map' object mapping tensor names to shard files")
    if not weight_map:
        raise CheckpointError(f"{index}: 'weight_map' is empty: the index names no tensor and no shard")
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


def checkpoint_inputs(path: Path | str) -> list[Path]:
    """The files a checkpoint argument reads (the path, its shards and index), for the output guard
    before any work; just the path when it cannot be resolved (that error comes when it is opened)."""
    found: list[Path] = [Path(path)]
    try:
        files, index, _ = find_checkpoint_files(path)
    except NbError:
        return found
    return list(dict.fromkeys([*found, *files, *([index] if index is not None else [])]))


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


def checkpoint_file(spec: Path | str) -> Path:
    """The one file that names a checkpoint given as a path or repo id: the file itself, else its
    folder's index (sharded) or only .safetensors file (what `match:FILE:TENSOR` records and hashes)."""
    from nbcli.resolve import local_path

    found = local_path(spec, "model")
    if not found.is_dir():
        return found
    files, index, _ = find_checkpoint_files(found)
    return index if index is not None else files[0]
