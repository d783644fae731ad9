"""nbcli.analysis.kernels: the numpy-backed CPU kernels equal torch's own operations on random blocks."""

from __future__ import annotations

import os

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from nbcli.analysis import kernels


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 40), st.integers(1, 12), st.sampled_from([torch.float32, torch.float64]))
def test_kernels_equal_torch(seed: int, rows: int, d: int, dtype: torch.dtype) -> None:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, d, generator=g, dtype=dtype)
    m = torch.randn(d, 2 * d, generator=g, dtype=dtype)
    tol = {"rtol": 1e-5, "atol": 1e-5} if dtype == torch.float32 else {"rtol": 1e-12, "atol": 1e-12}
    gram = kernels.gram_block(x)
    assert gram.dtype == dtype and torch.equal(gram, gram.T)
    torch.testing.assert_close(gram, x.T @ x, **tol)
    torch.testing.assert_close(kernels.matmul(x, m), x @ m, **tol)
    y = x.clone()
    assert kernels.exp_(y) is y
    torch.testing.assert_close(y, torch.exp(x), **tol)
    strided = x.clone().T  # not contiguous: torch's own in-place exp
    torch.testing.assert_close(kernels.exp_(strided), torch.exp(x.T), **tol)


def test_pass_threads_uses_one_torch_thread_and_restores_the_setting() -> None:
    saved = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with kernels.pass_threads(torch.device("cpu")):
            assert torch.get_num_threads() == 1
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(saved)


def test_eigh_threads_follow_the_idle_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {0, 1, 2, 3}, raising=False)
    monkeypatch.setattr(os, "getloadavg", lambda: (9.0, 9.0, 9.0))
    assert kernels.eigh_threads(4) == 1  # busy: one thread
    monkeypatch.setattr(os, "getloadavg", lambda: (1.0, 1.0, 1.0))  # this process alone
    assert kernels.eigh_threads(8) == 4 and kernels.eigh_threads(2) == 2
    monkeypatch.setattr(os, "getloadavg", lambda: (2.6, 1.0, 1.0))
    assert kernels.eigh_threads(8) == 2
