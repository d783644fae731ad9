"""The few block kernels of `nb probe-bias`'s passes (nbcli.analysis.geometry, nbcli.probes), on
torch tensors of any device. On the CPU they run through numpy on the same memory (no copy), whose
kernels measured faster than torch's on the 2-core AMD EPYC machine nb is benchmarked on
(Zen 3: AVX2, no AVX-512), one thread, for a 50,257 x 768 float32 matrix in row blocks:

* x^T x: numpy's a.T @ a is BLAS syrk, half the products of the general matmul torch runs
  (0.34 vs 0.66 CPU s in float32, 0.67 vs 1.28 s in float64);
* x @ m: OpenBLAS sgemm 1.22 vs torch's (MKL) 1.6-1.8 CPU s per 768 x 1,536 product;
* exp in place: 0.015 vs 0.048 CPU s per 10,922 x 1,536 block.

The eigendecompositions (`eigh`, `eigvalsh`) run through numpy's LAPACK on the CPU too. On CUDA
they are the plain torch operations. The thread count is the caller's (`nbcli.threads.cpu_threads`, `nb
probe-bias --threads`). While a pass runs on the CPU (`pass_threads`), torch's
own operations (elementwise, memory-bound) keep to one thread, so its OpenMP threads do not spin
against numpy's BLAS threads in the same process: with both pools on 2 cores the full GPT-2-size
report took 10.3 CPU s instead of 5.4.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import numpy as np
import torch


@contextlib.contextmanager
def pass_threads(device: torch.device) -> Iterator[None]:
    """One torch thread for the duration of a pass on the CPU (restored afterwards)."""
    saved = torch.get_num_threads()
    if device.type != "cpu" or saved == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(saved)


def pass_workers(device: torch.device, threads: int) -> int:
    """Worker threads of a pass over W's blocks: `threads` on the CPU (`nbcli.analysis.passes`), one
    on an accelerator (its kernels are already parallel)."""
    return max(1, threads) if device.type == "cpu" else 1


def gram_block(x: torch.Tensor) -> torch.Tensor:
    """x^T x of a [rows, d] block, in x's dtype (syrk through numpy on the CPU)."""
    if x.device.type == "cpu":
        a = np.ascontiguousarray(x.numpy())
        return torch.from_numpy(a.T @ a)
    return x.T @ x


def matmul(x: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """x @ m (through numpy's BLAS on the CPU)."""
    if x.device.type == "cpu":
        return torch.from_numpy(np.matmul(x.numpy(), m.numpy()))
    return x @ m


def exp_(x: torch.Tensor) -> torch.Tensor:
    """exp(x) in place, returned (numpy's vectorised exp on the CPU)."""
    if x.device.type == "cpu" and x.is_contiguous():
        a = x.numpy()
        np.exp(a, out=a)
        return x
    return x.exp_()


def eigh(matrix: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Eigenvalues (ascending) and orthonormal eigenvectors of a symmetric float64 matrix (its upper
    triangle read as the symmetrised mean). On the CPU through numpy's LAPACK (OpenBLAS dsyevd):
    d = 2,048 on one thread took 3.2 CPU s against torch's (MKL) 3.7 s on the benchmark machine."""
    m = (matrix + matrix.T) / 2
    if m.device.type == "cpu":
        values, vectors = np.linalg.eigh(m.numpy())
        return torch.from_numpy(values), torch.from_numpy(vectors)
    return torch.linalg.eigh(m)


def eigvalsh(matrix: torch.Tensor) -> torch.Tensor:
    """Eigenvalues (ascending) of a symmetric float64 matrix (numpy's LAPACK on the CPU, as `eigh`)."""
    m = (matrix + matrix.T) / 2
    if m.device.type == "cpu":
        return torch.from_numpy(np.linalg.eigvalsh(m.numpy()))
    return torch.linalg.eigvalsh(m)
