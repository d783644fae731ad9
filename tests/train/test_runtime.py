"""Where training runs: device choice, bf16 autocast, the compile/DDP wrapper, MFU."""

from __future__ import annotations

import pytest
import torch

from nbcli.errors import ConfigError
from nbcli.precision import autocast
from nbcli.train.config import build_config
from nbcli.train.runtime import (Runtime, all_reduce_sum, model_flops_utilisation, peak_flops,
                                 resolve_device, setup_runtime, wrap_model)


def test_resolve_device() -> None:
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="--device cuda: CUDA is not available"):
            resolve_device("cuda")


def test_single_process_runtime_and_dtype() -> None:
    rt = setup_runtime(build_config("tiny", device="cpu", dtype="float32"))
    assert (rt.rank, rt.world, rt.is_main, rt.amp_dtype) == (0, 1, True, None)
    assert setup_runtime(build_config("tiny", device="cpu", dtype="bfloat16")).amp_dtype == torch.bfloat16
    assert setup_runtime(build_config("tiny", device="cpu", dtype="auto")).amp_dtype is None


def test_autocast_follows_the_runtime() -> None:
    """Training's forwards run under nbcli.precision.autocast with the runtime's dtype (one helper
    for nb train, eval and generate)."""
    x = torch.randn(4, 4)
    rt = Runtime(torch.device("cpu"), amp_dtype=torch.bfloat16)
    with autocast(rt.device, rt.amp_dtype):
        assert (x @ x).dtype == torch.bfloat16
    rt = Runtime(torch.device("cpu"))
    with autocast(rt.device, rt.amp_dtype):
        assert (x @ x).dtype == torch.float32


def test_one_process_needs_no_wrapper_nor_reduction() -> None:
    model = torch.nn.Linear(2, 2)
    rt = Runtime(torch.device("cpu"))
    assert wrap_model(model, build_config("tiny", device="cpu"), rt) is model
    values = torch.tensor([1.0, 2.0])
    assert all_reduce_sum(values, rt) is values and values.tolist() == [1.0, 2.0]


def test_mfu_is_achieved_over_peak_flops() -> None:
    assert peak_flops(torch.device("cpu")) is None
    # 1e9 FLOPs/token x 1000 tokens in 2 s = 5e11 FLOP/s, against 2 ranks x 1e12 peak: 25%.
    assert model_flops_utilisation(1e9, 1000, 2.0, 1e12, 2) == pytest.approx(0.25)
