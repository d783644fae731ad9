"""A checkpoint held in memory: a state dict (name -> torch.Tensor) or a loaded `transformers` model,
with the reading interface of `nbcli.checkpoint.reader.Checkpoint` that the architecture table
(`roles.resolve_roles`), the probe report and the surgery plan (`surgery.run_surgery`) read.

    ckpt = MemoryCheckpoint.from_state_dict(state_dict, label="my model")
    ckpt = MemoryCheckpoint.from_model(model)          # its state_dict() and config.to_dict()
    roles = resolve_roles(ckpt)                         # the same table as for files

Tied parameters (one storage under two names, as transformers' `state_dict()` lists the tied
`lm_head.weight` beside `transformer.wte.weight`) are shown once, under the first name, exactly as
`save_pretrained` writes them; `aliases` keeps the other names so a new value reaches all of them.
Nothing here copies or changes a tensor: `get` returns the caller's tensor (detached).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nbcli.checkpoint.format import TensorLookup
from nbcli.errors import CheckpointError

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class MemoryTensorInfo:
    """What the readers ask of a tensor's header entry: name, safetensors dtype code, shape, and
    `file`, the label error messages name (no byte range: the data is in memory)."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    file: str

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        from nbcli.checkpoint.format import DTYPE_SIZES

        return self.numel * DTYPE_SIZES[self.dtype]


def _storage_key(tensor: torch.Tensor) -> tuple[Any, ...] | None:
    """Two names with the same key are the same parameter (tied): same memory, shape and strides."""
    if tensor.numel() == 0:
        return None
    return (tensor.device, tensor.data_ptr(), tensor.dtype, tuple(tensor.shape), tuple(tensor.stride()))


class MemoryCheckpoint(TensorLookup):
    """Tensors by name, read like a checkpoint file (see the module docstring)."""

    sharded = False
    index_path = None
    model_dir = None

    def __init__(self, tensors: Mapping[str, torch.Tensor], *, label: str = "state dict",
                 model_config: dict[str, Any] | None = None, metadata: Mapping[str, str] | None = None) -> None:
        import torch

        from nbcli.checkpoint.format import dtype_code

        self.path = label
        self.recovered: list[str] = []
        self.model_config = model_config
        self.metadata: dict[str, str] = dict(metadata or {})
        self._tensors: dict[str, torch.Tensor] = {}
        self._infos: dict[str, MemoryTensorInfo] = {}
        self.aliases: dict[str, list[str]] = {}
        """kept name -> the other names of the same (tied) tensor in the caller's dict"""
        first: dict[tuple[Any, ...], str] = {}
        for name, tensor in tensors.items():
            if not isinstance(name, str) or not isinstance(tensor, torch.Tensor):
                raise CheckpointError(f"{label}: expected str -> torch.Tensor entries, got {name!r}: "
                                      f"{type(tensor).__name__}")
            key = _storage_key(tensor)
            if key is not None and key in first:
                self.aliases.setdefault(first[key], []).append(name)
                continue
            if key is not None:
                first[key] = name
            self._tensors[name] = tensor.detach()
            self._infos[name] = MemoryTensorInfo(name, dtype_code(tensor.dtype), tuple(tensor.shape), label)

    @classmethod
    def from_model(cls, model: Any, *, label: str | None = None) -> MemoryCheckpoint:
        """A loaded `transformers` PreTrainedModel (or any torch module): its state_dict() and, when it
        has one, its config as a dict (config.json's content: `model_type` picks the architecture)."""
        config = getattr(model, "config", None)
        as_dict = config.to_dict() if config is not None and hasattr(config, "to_dict") else None
        return cls(model.state_dict(), label=label or type(model).__name__, model_config=as_dict)

    # -- the Checkpoint reading interface ------------------------------------------------------------
    @property
    def files(self) -> list[Path]:
        return []

    @property
    def total_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self._tensors.values())

    def get(self, name: str) -> torch.Tensor:
        """The tensor itself (detached; on its own device). Readers copy before they compute."""
        self.info(name)
        return self._tensors[name]

    def get_float(self, name: str) -> torch.Tensor:
        import torch

        return self.get(name).to(device="cpu", dtype=torch.float32, copy=True)

    def rows(self, name: str) -> TensorRows:
        """`name` for row-block readers (the probe report), like a file's `RowReader`."""
        return TensorRows(self, name)

    def close(self) -> None:
        pass

    def __enter__(self) -> MemoryCheckpoint:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class TensorRows:
    """A [V, d] (or [V]) in-memory tensor read by row slices as float32 numpy: the interface of
    `nbcli.reports.probe_bias.RowReader` (info, name, shape, rows[a:b], read_all())."""

    def __init__(self, checkpoint: MemoryCheckpoint, name: str) -> None:
        self.info = checkpoint.info(name)
        self.name = name
        self.shape = self.info.shape
        self._tensor = checkpoint.get(name)

    def __getitem__(self, key: slice) -> Any:
        import torch

        return self._tensor[key].to(device="cpu", dtype=torch.float32, copy=True).numpy()

    def read_all(self) -> Any:
        return self[0:int(self.shape[0])]
