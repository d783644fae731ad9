"""nbcli.analysis.kernels: the numpy-backed CPU kernels equal torch's own operations on random blocks."""

from __future__ import annotations

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


def test_cpu_threads_sets_torch_and_blas_threads_and_restores_them() -> None:
    from threadpoolctl import threadpool_info

    from nbcli.threads import cpu_threads

    saved = torch.get_num_threads()
    blas = [pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"]
    with cpu_threads(1):
        assert torch.get_num_threads() == 1
        assert all(pool["num_threads"] == 1 for pool in threadpool_info() if pool["user_api"] == "blas")
    assert torch.get_num_threads() == saved
    assert [pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"] == blas
    with cpu_threads(None):  # None: as they are
        assert torch.get_num_threads() == saved


def test_eigh_matches_torch() -> None:
    g = torch.Generator().manual_seed(0)
    a = torch.randn(30, 7, generator=g, dtype=torch.float64)
    m = a.T @ a
    values, vectors = kernels.eigh(m)
    torch.testing.assert_close(values, torch.linalg.eigvalsh(m))
    torch.testing.assert_close(vectors @ torch.diag(values) @ vectors.T, m)
    torch.testing.assert_close(kernels.eigvalsh(m), values)
