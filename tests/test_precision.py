from __future__ import annotations

import pytest
import torch

from nbcli.errors import ConfigError
from nbcli.precision import autocast, autocast_dtype, set_tf32


@pytest.mark.parametrize("choice,expected", [("auto", None), ("float32", None), ("bfloat16", torch.bfloat16)])
def test_dtype_choices_on_cpu(choice: str, expected: torch.dtype | None) -> None:
    """auto is float32 (no autocast) on CPU; bfloat16 autocasts on CPU too."""
    assert autocast_dtype(choice, torch.device("cpu")) is expected


def test_auto_is_bfloat16_on_a_cuda_device_with_bf16(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    assert autocast_dtype("auto", torch.device("cuda")) is torch.bfloat16
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    assert autocast_dtype("auto", torch.device("cuda")) is None     # an older GPU: float32, no error
    with pytest.raises(ConfigError, match="does not support bf16"):
        autocast_dtype("bfloat16", torch.device("cuda"))


def test_unknown_dtype_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="--dtype 'float16'"):
        autocast_dtype("float16", torch.device("cpu"))


def test_tf32_touches_cuda_state_only_for_a_cuda_device() -> None:
    before = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    try:
        set_tf32(torch.device("cpu"), not before[0])
        assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32) == before
        for enabled in (True, False):
            set_tf32(torch.device("cuda"), enabled)       # flags only: no CUDA device needed to set them
            assert torch.backends.cuda.matmul.allow_tf32 is enabled and torch.backends.cudnn.allow_tf32 is enabled
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


def test_autocast_context() -> None:
    a, b = torch.randn(4, 8), torch.randn(8, 3)
    with autocast(torch.device("cpu"), None):
        assert (a @ b).dtype == torch.float32
    with autocast(torch.device("cpu"), torch.bfloat16):
        assert (a @ b).dtype == torch.bfloat16
