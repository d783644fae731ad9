"""Reading run directories without torch: the ALC formula."""

from __future__ import annotations

import pytest

from nbcli.train.runs import area_under_curve


def test_alc_is_the_normalised_trapezoid() -> None:
    assert area_under_curve([(0, 4.0), (10, 2.0), (30, 1.0)]) == pytest.approx((10 * 3 + 20 * 1.5) / 30)
    assert area_under_curve([(5, 3.0)]) == 3.0
