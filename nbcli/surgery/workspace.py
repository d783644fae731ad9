"""The surgery's workspace: each tensor an operation touches, read once from the checkpoint as a
float32 working copy (float64 stays float64), written back in its stored dtype by `finish`, with
the before/after summaries the report shows (`TouchedTensor`). The tensors' I/O, dtypes and
finiteness live here; what each operation computes is `nbcli.surgery.operations`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from nbcli.errors import CheckpointError

if TYPE_CHECKING:
    import torch

    from nbcli.checkpoint.reader import Checkpoint


@dataclass
class TouchedTensor:
    name: str
    role: str
    shape: list[int]
    dtype: str
    created: bool
    before: dict[str, float] | None
    after: dict[str, float] = field(default_factory=dict)


class Workspace:
    """Touched tensors as float32 (float64 stays float64) working copies, read once each."""

    def __init__(self, checkpoint: Checkpoint, allow_nonfinite: bool) -> None:
        self.checkpoint = checkpoint
        self.allow_nonfinite = allow_nonfinite
        self.values: dict[str, torch.Tensor] = {}
        self.touched: dict[str, TouchedTensor] = {}
        self.anchor: dict[str, str | None] = {}
        self.config_updates: dict[str, Any] = {}
        """config.json changes the surgery needs (a model folder's; e.g. tie_word_embeddings)."""

    def read(self, name: str) -> torch.Tensor:
        """The current value (fp32) of `name`, from the workspace or the checkpoint."""
        if name in self.values:
            return self.values[name]
        return self.read_stored(name)

    def read_stored(self, name: str) -> torch.Tensor:
        """A working copy (fp32; fp64 stays fp64) of `name` as the checkpoint stores it, whatever the
        surgery wrote since; CheckpointError for a dtype surgery cannot use or NaN/Inf (unless allowed)."""
        import torch

        info = self.checkpoint.info(name)
        if info.dtype not in ("F64", "F32", "F16", "BF16"):
            raise CheckpointError(f"{info.file}: tensor {name!r} is {info.dtype}; surgery needs F32, F16, BF16 or F64")
        stored = self.checkpoint.get(name)
        if not self.allow_nonfinite and not bool(torch.isfinite(stored).all()):
            raise CheckpointError(f"{info.file}: tensor {name!r} contains NaN or Inf (pass --allow-nonfinite to "
                                  "operate on it anyway)")
        return stored.to(torch.float64 if info.dtype == "F64" else torch.float32, copy=True)

    def write(self, name: str, role: str, value: torch.Tensor, *, dtype: str | None = None,
              anchor: str | None = None) -> None:
        """Record the new value of `name` (a new tensor when it is not in the checkpoint)."""
        from nbcli.ops import tensor_summary

        if name not in self.touched:
            created = name not in self.checkpoint
            if created:
                before, stored_dtype, self.anchor[name] = None, dtype or "F32", anchor
            else:
                before, stored_dtype = tensor_summary(self.checkpoint.get(name)), self.checkpoint.dtype(name)
            self.touched[name] = TouchedTensor(name, role, list(value.shape), stored_dtype, created, before)
        elif role not in self.touched[name].role.split("+"):
            self.touched[name].role += f"+{role}"
        self.values[name] = value

    def finish(self) -> dict[str, torch.Tensor]:
        """Cast every touched tensor back to its stored dtype; check it is finite; summarise it."""
        import torch

        from nbcli.checkpoint.format import torch_dtype
        from nbcli.ops import tensor_summary

        final: dict[str, torch.Tensor] = {}
        for name, entry in self.touched.items():
            value = self.values[name].to(torch_dtype(entry.dtype))
            if not self.allow_nonfinite and not bool(torch.isfinite(value).all()):
                raise CheckpointError(f"{self.checkpoint.path}: tensor {name!r} would contain NaN or Inf after "
                                      f"the surgery (in {entry.dtype}); nothing was written")
            entry.after = tensor_summary(value)
            entry.shape = list(value.shape)
            final[name] = value
        return final
