"""Inference precision for `nb eval` and `nb generate`: `--dtype` (bf16 autocast) and `--tf32`.

    amp = autocast_dtype("auto", device)    # bfloat16 on CUDA, None (float32) elsewhere
    set_tf32(device, True)                   # CUDA float32 matmuls/convolutions on TF32 tensor cores
    with autocast(device, amp): ...          # the forward passes

`--dtype` means what it means for `nb train` (one declaration, `nbcli.cli.options.DtypeOption`): the
autocast precision, auto = bfloat16 on CUDA and float32 on CPU; bfloat16 works on CPU too (slow but
correct). Weights keep the dtype they were saved in. nb's output layer runs in float32 whatever the
autocast (`nbcli.models.output.output_logits`); a transformers model's logits come back in the autocast
dtype and the runner hands them on as float32.

TF32 (on by default, `--no-tf32` turns it off) lets CUDA run float32 matmuls with 10-bit mantissas
on tensor cores (`torch.backends.cuda.matmul.allow_tf32`, i.e. float32 matmul precision "high"), as
`nb train` does; it changes nothing on CPU. It is process-wide torch state, set when the model is
loaded.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

from nbcli.errors import ConfigError

if TYPE_CHECKING:
    import torch

DTYPES = ("auto", "float32", "bfloat16")


def autocast_dtype(choice: str, device: torch.device) -> torch.dtype | None:
    """The autocast dtype of `--dtype choice` on `device` (None: no autocast, float32)."""
    import torch

    if choice not in DTYPES:
        raise ConfigError(f"--dtype {choice!r}: expected one of {', '.join(DTYPES)}")
    if choice == "bfloat16" or (choice == "auto" and device.type == "cuda"):
        if device.type == "cuda" and not torch.cuda.is_bf16_supported():
            if choice == "auto":
                return None
            raise ConfigError("--dtype bfloat16: this GPU does not support bf16; use --dtype float32")
        return torch.bfloat16
    return None


def set_tf32(device: torch.device, enabled: bool) -> None:
    """TF32 for CUDA float32 matmuls and cuDNN convolutions (a no-op off CUDA)."""
    import torch

    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = enabled
        torch.backends.cudnn.allow_tf32 = enabled


def autocast(device: torch.device, dtype: torch.dtype | None) -> contextlib.AbstractContextManager[object]:
    """torch.autocast to `dtype` on `device`; nothing when dtype is None."""
    import torch

    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)
