"""Table 4's transforms against their formulas, computed independently in numpy float64 on random
matrices (paper 002 eq. 1, eq. 2 in Vaswani's form, eq. 3, footnote 6)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from nbcli import ops
from nbcli.errors import ConfigError
from nbcli.vectors.transforms import Positions, parse_transforms, positional_table, transform_chain


def numpy_pe(positions: np.ndarray, d: int) -> np.ndarray:
    """Vaswani et al. sec. 3.5, column by column."""
    out = np.zeros((len(positions), d))
    for j in range(d):
        k = j - j % 2
        angle = positions / 10000 ** (k / d)
        out[:, j] = np.sin(angle) if j % 2 == 0 else np.cos(angle)
    return out


@settings(max_examples=40, deadline=None)
@given(d=st.integers(1, 33), positions=st.lists(st.integers(0, 10000), min_size=1, max_size=20))
def test_sinusoidal_positions_match_vaswani(d: int, positions: list[int]) -> None:
    got = ops.sinusoidal_positions(torch.tensor(positions), d).numpy()
    np.testing.assert_allclose(got, numpy_pe(np.array(positions, dtype=np.float64), d), atol=1e-6)


def test_table_6_positional_encoding_statistics() -> None:
    """Paper 002 table 6's "Pos. Encoding": range [-1, 1], mean 0.131 over max_len 5000 at D = 300."""
    table = ops.sinusoidal_positions(torch.arange(5000), 300).double()
    assert float(table.mean()) == pytest.approx(0.131, abs=5e-4)
    assert float(table.min()) >= -1 and float(table.max()) <= 1


def stats(x: np.ndarray) -> tuple[float, float]:
    return float(x.mean()), float(x.std(ddof=1))


@pytest.mark.parametrize("mode", ["index", "random"])
def test_each_transform_is_its_formula(mode: str) -> None:
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((40, 12)) * 0.4 + 0.05).astype(np.float32)
    n, d = x.shape
    positions = Positions(mode, max_len=64, seed=9)  # type: ignore[arg-type]
    pos = np.arange(n) if mode == "index" else positions.of(n).numpy()
    if mode == "random":
        assert pos.min() >= 0 and pos.max() < 64 and len(set(pos)) > 1
        assert np.array_equal(pos, Positions("random", 64, 9).of(n).numpy())  # seeded: the same draw
    p = numpy_pe(pos.astype(np.float64), d)
    x64 = x.astype(np.float64)
    xavier = math.sqrt(2 / (n + d))
    mean, std = stats(x64)
    expected = {
        "scale-sqrt-d": x64 * math.sqrt(d),
        "xavier-std": (x64 - mean) * xavier / std,
        "pos-enc": x64 + p,
        "pos-enc-scaled": x64 + p * std / xavier,
    }
    for name, want in expected.items():
        (label, got), = transform_chain(torch.from_numpy(x), (name,), positions)
        assert label == name
        np.testing.assert_allclose(got.double().numpy(), want, rtol=2e-5, atol=2e-5)
    chain = transform_chain(torch.from_numpy(x), ("xavier-std", "pos-enc"), positions)
    assert [label for label, _ in chain] == ["xavier-std", "xavier-std,pos-enc"]
    np.testing.assert_allclose(chain[1][1].double().numpy(), expected["xavier-std"] + p, rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(positional_table(n, d, positions).double().numpy(), p, atol=1e-6)


def test_parse_transforms() -> None:
    assert parse_transforms(" scale-sqrt-d, pos-enc ") == ("scale-sqrt-d", "pos-enc")
    assert parse_transforms(None) == () == parse_transforms("")
    with pytest.raises(ConfigError, match="unknown transform 'scale'"):
        parse_transforms("scale")
