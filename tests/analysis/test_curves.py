"""Learning curves: ALC (paper 000 sec. 4.2) against hand computations and its properties; the
mean ± standard error over seeds against numpy's own statistics."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from nbcli.analysis.curves import ALC_UPDATES, area_under_curve, mean_curve, mean_standard_error

finite = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False)
steps_strategy = st.lists(st.integers(min_value=0, max_value=50_000), min_size=1, max_size=30, unique=True)


def test_alc_is_the_normalised_trapezoid() -> None:
    assert area_under_curve([(0, 4.0), (10, 2.0), (30, 1.0)]) == pytest.approx((10 * 3 + 20 * 1.5) / 30)
    assert area_under_curve([(5, 3.0)]) == 3.0
    assert area_under_curve([]) is None


def test_alc_over_the_first_updates_by_hand() -> None:
    """Validation BLEU at 0, 1k, 3k and 25k updates, ALC over the first 20k: the value at 20k is
    interpolated between 3k (20) and 25k (30): 20 + 10 * 17/22; then trapezoids / 20k."""
    curve = [(25_000, 30.0), (0, 0.0), (1_000, 10.0), (3_000, 20.0)]  # any order
    at_20k = 20 + 10 * 17_000 / 22_000
    by_hand = (1_000 * (0 + 10) / 2 + 2_000 * (10 + 20) / 2 + 17_000 * (20 + at_20k) / 2) / 20_000
    assert ALC_UPDATES == 20_000
    assert area_under_curve(curve, until=ALC_UPDATES) == pytest.approx(by_hand)
    # evaluated exactly at 20k: nothing interpolated; later points ignored
    assert area_under_curve([(0, 2.0), (20_000, 4.0), (30_000, 100.0)], until=20_000) == pytest.approx(3.0)
    # a curve that stops early is integrated over what it covers; one starting late from its first point
    assert area_under_curve([(0, 2.0), (10_000, 4.0)], until=20_000) == pytest.approx(3.0)
    assert area_under_curve([(5_000, 2.0), (15_000, 4.0)], until=20_000) == pytest.approx(3.0)
    assert area_under_curve([(25_000, 2.0)], until=20_000) is None


@given(st.floats(min_value=-1e6, max_value=1e6, allow_nan=False), steps_strategy,
       st.one_of(st.none(), st.integers(min_value=0, max_value=60_000)))
def test_a_constant_curve_has_its_constant_as_alc(c: float, steps: list[int], until: int | None) -> None:
    got = area_under_curve([(s, c) for s in steps], until=until)
    if until is not None and min(steps) > until:
        assert got is None
    else:
        assert got == pytest.approx(c, rel=1e-9, abs=1e-9)


@given(st.lists(st.tuples(st.integers(min_value=0, max_value=50_000), finite), min_size=1, max_size=30,
                unique_by=lambda p: p[0]),
       st.integers(min_value=0, max_value=60_000))
def test_alc_is_a_mean_between_the_curves_extremes(points: list[tuple[int, float]], until: int) -> None:
    got = area_under_curve(points, until=until)
    inside = [v for s, v in points if s <= until]
    if not inside:
        assert got is None
        return
    values = [v for _, v in points]
    assert got is not None and min(values) - 1e-6 <= got <= max(values) + 1e-6
    assert area_under_curve(points, until=max(s for s, _ in points) + 1) == pytest.approx(area_under_curve(points))


@given(st.lists(st.tuples(st.integers(min_value=0, max_value=50_000), finite), min_size=2, max_size=30,
                unique_by=lambda p: p[0]),
       st.floats(min_value=-100, max_value=100, allow_nan=False), finite)
def test_alc_is_linear_in_the_values(points: list[tuple[int, float]], a: float, b: float) -> None:
    base = area_under_curve(points)
    moved = area_under_curve([(s, a * v + b) for s, v in points])
    assert base is not None and moved == pytest.approx(a * base + b, rel=1e-6, abs=1e-3)


@given(st.lists(finite, max_size=20))
def test_mean_and_standard_error_match_numpy(values: list[float]) -> None:
    mean, se = mean_standard_error(values)
    if not values:
        assert (mean, se) == (None, None)
        return
    assert mean == pytest.approx(float(np.mean(values)), rel=1e-9, abs=1e-6)
    if len(values) == 1:
        assert se is None
    else:
        by_hand = math.sqrt(sum((v - np.mean(values)) ** 2 for v in values) / (len(values) - 1) / len(values))
        assert se == pytest.approx(by_hand, rel=1e-6, abs=1e-6)


def test_mean_curve_over_the_steps_every_seed_evaluated() -> None:
    rng = np.random.default_rng(0)
    runs = [(np.array([0, 10, 20, 30]), rng.normal(size=4)), (np.array([0, 10, 20]), rng.normal(size=3)),
            (np.array([0, 5, 10, 20]), rng.normal(size=4))]
    steps, mean, se = mean_curve(runs)
    assert steps.tolist() == [0, 10, 20]
    table = np.array([[v[list(s).index(t)] for t in (0, 10, 20)] for s, v in runs])
    np.testing.assert_allclose(mean, table.mean(axis=0))
    np.testing.assert_allclose(se, table.std(axis=0, ddof=1) / math.sqrt(3))
    one_steps, one_mean, one_se = mean_curve(runs[:1])
    assert one_steps.tolist() == [0, 10, 20, 30] and np.isnan(one_se).all()
    np.testing.assert_allclose(one_mean, runs[0][1])
