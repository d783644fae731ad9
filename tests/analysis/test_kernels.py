"""nbcli.analysis.kernels: where probe-bias's algebra runs (numpy on the CPU, torch on a torch device)
and its block kernels, checked against plain numpy on random blocks in both namespaces."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from nbcli.analysis import kernels

DEVICES = ["cpu", torch.device("cpu")]  # numpy's path, and torch's (an accelerator's code) on the CPU


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 40), st.integers(1, 12), st.sampled_from([np.float32, np.float64]),
       st.sampled_from(DEVICES))
def test_kernels_equal_numpy(seed: int, rows: int, d: int, dtype: type, device: object) -> None:
    rng = np.random.default_rng(seed)
    x_np = rng.normal(size=(rows, d)).astype(dtype)
    x = kernels.on_device(x_np, device)
    assert isinstance(x, np.ndarray) == (device == "cpu")
    tol = {"rtol": 1e-5, "atol": 1e-5} if dtype == np.float32 else {"rtol": 1e-12, "atol": 1e-12}
    gram = kernels.to_numpy(kernels.gram_block(x))
    assert gram.dtype == dtype
    assert np.array_equal(gram, gram.T) or device != "cpu"  # numpy's a.T @ a is syrk: symmetric bit for bit
    np.testing.assert_allclose(gram, x_np.astype(np.float64).T @ x_np.astype(np.float64), **tol)
    y = x_np.copy()
    y_dev = kernels.on_device(y, device)
    assert kernels.exp_(y_dev) is y_dev
    np.testing.assert_allclose(kernels.to_numpy(y_dev), np.exp(x_np), **tol)
    out = kernels.on_device(np.empty_like(x_np), device)
    a = kernels.on_device(x_np[0].copy(), device)
    assert kernels.subtract(a, x, out=out) is out
    np.testing.assert_allclose(kernels.to_numpy(out), x_np[0] - x_np, **tol)
    np.testing.assert_allclose(kernels.to_numpy(kernels.outer(a, a)), np.outer(x_np[0], x_np[0]), **tol)
    if not isinstance(x, np.ndarray):
        strided = x.clone().T  # not contiguous: exp written back in place
        assert kernels.exp_(strided) is strided
        np.testing.assert_allclose(strided.numpy(), np.exp(x_np.T), **tol)


@pytest.mark.parametrize("device", DEVICES)
def test_eigh_matches_numpy(device: object) -> None:
    a = np.random.default_rng(0).normal(size=(30, 7))
    m = a.T @ a
    values, vectors = (kernels.to_numpy(v) for v in kernels.eigh(kernels.on_device(m, device)))
    np.testing.assert_allclose(values, np.linalg.eigvalsh(m), rtol=1e-12)
    np.testing.assert_allclose(vectors @ np.diag(values) @ vectors.T, m, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(kernels.to_numpy(kernels.eigvalsh(kernels.on_device(m, device))), values, rtol=1e-12)
    # the mean of the two triangles is what is decomposed
    skew = m + np.triu(np.full_like(m, 0.5), 1) - np.tril(np.full_like(m, 0.5), -1)
    np.testing.assert_allclose(kernels.to_numpy(kernels.eigvalsh(kernels.on_device(skew, device))), values, rtol=1e-12)


def test_namespaces_and_workers() -> None:
    assert kernels.namespace("cpu") is kernels.numpy_namespace()
    assert kernels.namespace_of(np.zeros(2)) is kernels.numpy_namespace()
    assert kernels.namespace(torch.device("cpu")).__name__ == "array_api_compat.torch"
    with pytest.raises(ValueError, match="cuda"):
        kernels.namespace("cuda")
    assert kernels.pass_workers("cpu", 3) == 3 and kernels.pass_workers(torch.device("cpu"), 3) == 3
    assert kernels.pass_workers(torch.device("cuda"), 3) == 1 and kernels.is_accelerator(torch.device("cuda"))
    assert not kernels.is_accelerator("cpu") and not kernels.is_accelerator(torch.device("cpu"))


def test_accelerator_possible_reads_the_drivers_device_files(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []
    monkeypatch.setattr(kernels.os.path, "exists", lambda path: seen.append(path) or path == "/dev/kfd")
    assert kernels.accelerator_possible()
    monkeypatch.setattr(kernels.os.path, "exists", lambda path: False)
    assert not kernels.accelerator_possible()
    assert "/dev/nvidiactl" in seen


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


def test_cpu_threads_never_imports_torch() -> None:
    code = ("import sys\nfrom nbcli.threads import cpu_threads\nwith cpu_threads(1):\n    pass\n"
            "assert 'torch' not in sys.modules, 'torch imported'\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
