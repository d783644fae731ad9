"""nbcli.analysis.rank_one: the eigenvalues after a rank-one change, against LAPACK's eigvalsh of the
changed matrix on random inputs (ties, clusters, zero and tiny components, both signs, any scale)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from nbcli.analysis import rank_one
from nbcli.analysis.rank_one import rank_one_eigenvalues, secular_roots

#: The absolute error allowed, in units of eps (|d|_max + |rho| |z|^2): a backward-stable eigensolver's.
ULPS = 64


def _tolerance(d: np.ndarray, z: np.ndarray, rho: float) -> float:
    return ULPS * np.finfo(np.float64).eps * max(float(np.abs(d).max(initial=0.0)), abs(rho) * float(z @ z), 1e-300)


@st.composite
def problems(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, float]:
    n = draw(st.integers(1, 24))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    kind = draw(st.sampled_from(["spread", "ties", "cluster", "sparse"]))
    if kind == "ties":
        d = rng.choice([-1.0, 0.0, 2.0], n)
    elif kind == "cluster":
        d = 1.0 + rng.standard_normal(n) * 10.0 ** draw(st.integers(-12, -6))
    else:
        d = rng.standard_normal(n) * 10.0 ** draw(st.integers(-3, 3))
    z = rng.standard_normal(n)
    if kind == "sparse":
        z[rng.random(n) < 0.4] = 0.0
        z[rng.random(n) < 0.3] *= 1e-12
    rho = draw(st.sampled_from([-1.0, 1.0])) * 10.0 ** draw(st.floats(-6, 6))
    return np.sort(d), z, rho


@settings(max_examples=300, deadline=None)
@given(problems())
def test_roots_are_the_eigenvalues_of_the_changed_matrix(problem: tuple[np.ndarray, np.ndarray, float]) -> None:
    d, z, rho = problem
    expected = np.linalg.eigvalsh(np.diag(d) + rho * np.outer(z, z))
    got = secular_roots(d, z, rho)
    assert got.shape == expected.shape and np.all(np.diff(got) >= 0)
    assert np.max(np.abs(got - expected)) <= _tolerance(d, z, rho)


def test_no_change_leaves_the_spectrum() -> None:
    d = np.array([-2.0, 0.5, 0.5, 3.0])
    assert np.array_equal(secular_roots(d, np.zeros(4), 5.0), d)
    assert np.array_equal(secular_roots(d, np.ones(4), 0.0), d)
    assert secular_roots(np.empty(0), np.empty(0), 1.0).shape == (0,)


@pytest.mark.parametrize("namespace", ["numpy", "torch"])
def test_a_scatter_from_its_gram_matrix(namespace: str) -> None:
    """U = G - n m m^T from G's eigendecomposition, with a mean that dominates G (as in language
    models' embeddings): the spectrum eigvalsh gives for U itself, on numpy and on torch."""
    rng = np.random.default_rng(3)
    rows, width = 400, 60
    w = rng.standard_normal((rows, width)) * np.linspace(0.1, 3.0, width) + 5.0 * rng.standard_normal(width)
    mean = w.mean(axis=0)
    gram = w.T @ w
    values, vectors = np.linalg.eigh(gram)
    expected = np.linalg.eigvalsh((w - mean).T @ (w - mean))
    if namespace == "torch":
        got = rank_one_eigenvalues(*(torch.from_numpy(a) for a in (values, vectors, mean)), -rows).numpy()
    else:
        got = rank_one_eigenvalues(values, vectors, mean, -rows)
    assert np.max(np.abs(got - expected)) <= 1e-12 * np.abs(gram).max()
    assert np.allclose(got, expected, rtol=1e-10, atol=0)  # U is well conditioned: every eigenvalue to 1e-10


@pytest.mark.parametrize("device", ["cpu", torch.device("cpu")])
@pytest.mark.parametrize("mean, spread, shortcut", [(0.8, 1.0, True), (100.0, 1e-3, False)])
def test_whitening_spectra_equal_their_own_decompositions(device: object, mean: float, spread: float,
                                                          shortcut: bool) -> None:
    """solve_whitening with the partition function (the spectra from W^T W's and the whitened Gram
    matrix's decompositions, rank one apart) against without it (eigvalsh of each matrix); a mean
    1e5 times the rows' spread (W^T W 1e11 times their scatter) takes eigvalsh instead: the secular
    equation's roots would lose ~8e-5 there."""
    from nbcli.analysis import geometry
    from nbcli.analysis.geometry import RowMoments, solve_whitening
    from nbcli.analysis.kernels import to_numpy

    rng = np.random.default_rng(7)
    w = (rng.standard_normal((900, 48)) * np.geomspace(2.0, 0.05, 48) * spread + mean * rng.standard_normal(48))
    weights = rng.zipf(1.3, 900).astype(np.float64)
    moments = RowMoments(48, device, weights / weights.sum())
    moments.update(0, w.astype(np.float32))
    sums = moments.moments()
    calls: list[bool] = []

    def keeps_digits(*args: object) -> bool:
        calls.append(rank_one.keeps_digits(*args))
        return calls[-1]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(geometry, "keeps_digits", keeps_digits)
        basis, shortcut_spectra, _ = solve_whitening(sums, partition=True, gram_basis=True)
    none, direct, _ = solve_whitening(sums, partition=False)
    assert basis is not None and none is None and shortcut_spectra is not None and direct is not None
    assert calls[0] is shortcut  # the uniform spectrum: from W^T W's decomposition, or not with that mean
    for name in ("uniform_spectrum", "whitened_uniform_spectrum"):
        got, expected = to_numpy(getattr(shortcut_spectra, name)), to_numpy(getattr(direct, name))
        assert np.allclose(got, expected, rtol=1e-9, atol=1e-12 * np.abs(expected).max()), name
