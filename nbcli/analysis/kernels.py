"""Where `nb probe-bias`'s algebra runs, and its few block kernels (nbcli.analysis.geometry,
nbcli.probes): numpy on the CPU, torch on an accelerator, one code for both through the array API
standard (`array_api_compat`, the maintained adapter scikit-learn and SciPy use: numpy and torch
behind one namespace, so the statistics are written once).

A device is "cpu" (numpy: torch is never imported, ~3 s of a GPT-2-size probe's start-up) or a
`torch.device` (torch's namespace; `torch.device("cpu")` runs the torch code on the CPU, which the
tests use to check the accelerator's path without one). On the CPU numpy's kernels also measured
faster than torch's on the 2-core AMD EPYC machine nb is benchmarked on (Zen 3: AVX2, no AVX-512),
one thread, for a 50,257 x 768 float32 matrix in row blocks:

* x^T x: numpy's a.T @ a is BLAS syrk, half the products of the general matmul torch runs
  (0.34 vs 0.66 CPU s in float32, 0.67 vs 1.28 s in float64);
* x @ m: OpenBLAS sgemm 1.22 vs torch's (MKL) 1.6-1.8 CPU s per 768 x 1,536 product;
* exp in place: 0.015 vs 0.048 CPU s per 10,922 x 1,536 block;
* the eigendecompositions: dsyevd at d = 2,048 on one thread 3.2 CPU s against torch's 3.7 s.

The thread count is the caller's (`nbcli.threads.cpu_threads`, `nb probe-bias --threads`).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from nbcli.array_ops import namespace_of, numpy_namespace

#: Where the algebra runs: "cpu" (numpy) or a torch.device.
Device = Any
#: An array of the device's namespace: a numpy array or a torch tensor.
Array = Any

#: Device files whose absence means no CUDA (or ROCm, whose torch also says "cuda") device can be
#: visible to this process: NVIDIA's driver, AMD's KFD, WSL's GPU paravirtualisation.
GPU_DEVICE_FILES = ("/dev/nvidiactl", "/dev/nvidia0", "/proc/driver/nvidia/version", "/dev/kfd", "/dev/dxg")


def accelerator_possible() -> bool:
    """False when no GPU driver's device file exists: CUDA cannot be available, and "auto" is the CPU
    without importing torch to ask."""
    return any(os.path.exists(path) for path in GPU_DEVICE_FILES)


def is_numpy(device: Device) -> bool:
    """The CPU's numpy path ("cpu"), as against a torch device."""
    return isinstance(device, str)


def namespace(device: Device) -> Any:
    """The array API namespace of `device`: numpy's for "cpu", torch's for a torch.device."""
    if is_numpy(device):
        if device != "cpu":
            raise ValueError(f"device {device!r}: expected 'cpu' or a torch.device")
        return numpy_namespace()
    import array_api_compat.torch as xp

    return xp


def on_device(array: np.ndarray, device: Device, dtype: Any = None) -> Array:
    """A numpy array as an array of `device` (no copy on the numpy path unless `dtype` asks for one)."""
    if is_numpy(device):
        return array if dtype is None else np.asarray(array, dtype=dtype)
    import torch

    tensor = torch.from_numpy(np.ascontiguousarray(array))
    return tensor.to(device=device, dtype=None if dtype is None else getattr(torch, np.dtype(dtype).name))


def to_numpy(x: Array) -> np.ndarray:
    """An array of any device as a numpy array (copied from an accelerator)."""
    return x if isinstance(x, np.ndarray) else x.detach().cpu().numpy()


def is_accelerator(device: Device) -> bool:
    """True for a torch device that is not the CPU (its kernels are already parallel)."""
    return not is_numpy(device) and device.type != "cpu"


def pass_workers(device: Device, threads: int) -> int:
    """Worker threads of a pass over W's blocks: `threads` on the CPU (`nbcli.analysis.passes`), one
    on an accelerator."""
    return 1 if is_accelerator(device) else max(1, threads)


def outer(a: Array, b: Array) -> Array:
    """a b^T of two vectors, any namespace."""
    return a[:, None] * b[None, :]


def gram_block(x: Array) -> Array:
    """x^T x of a [rows, d] block, in x's dtype (numpy's a.T @ a is BLAS syrk)."""
    if isinstance(x, np.ndarray):
        a = np.ascontiguousarray(x)
        return a.T @ a
    return x.T @ x


def subtract(a: Array, b: Array, out: Array) -> Array:
    """a - b written into `out` (no new array), returned."""
    if isinstance(out, np.ndarray):
        return np.subtract(a, b, out=out)
    import torch

    return torch.sub(a, b, out=out)


def divide(a: Array, b: Array, out: Array) -> Array:
    """a / b written into `out` (no new array), returned."""
    if isinstance(out, np.ndarray):
        return np.divide(a, b, out=out)
    import torch

    return torch.div(a, b, out=out)


def exp_(x: Array) -> Array:
    """exp(x) in place, returned."""
    if isinstance(x, np.ndarray):
        return np.exp(x, out=x)
    return x.exp_()


def _symmetrised(matrix: Array) -> tuple[Any, Array]:
    xp = namespace_of(matrix)
    m = xp.astype(matrix, xp.float64)
    return xp, (m + m.T) / 2


def eigh(matrix: Array) -> tuple[Array, Array]:
    """Eigenvalues (ascending) and orthonormal eigenvectors of a symmetric matrix in float64 (its
    upper and lower triangles read as their mean): LAPACK dsyevd through numpy on the CPU."""
    xp, m = _symmetrised(matrix)
    values, vectors = xp.linalg.eigh(m)
    return values, vectors


def eigvalsh(matrix: Array) -> Array:
    """Eigenvalues (ascending) of a symmetric matrix in float64 (as `eigh`)."""
    xp, m = _symmetrised(matrix)
    return xp.linalg.eigvalsh(m)
