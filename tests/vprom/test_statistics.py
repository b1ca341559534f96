"""The Wilson interval against textbook values."""

from __future__ import annotations

import pytest

from vprom.statistics import wilson_interval


@pytest.mark.parametrize("k, n, low, high", [
    (5, 10, 0.2366, 0.7634),  # textbook values
    (0, 10, 0.0, 0.2775),
    (10, 10, 0.7225, 1.0),
    (50, 100, 0.4038, 0.5962),
    (0, 20, 0.0, 0.1611),
])
def test_wilson_interval_matches_known_values(k, n, low, high):
    assert wilson_interval(k, n) == pytest.approx((low, high), abs=1e-4)


def test_wilson_interval_contains_the_estimate_and_shrinks_with_n():
    widths = []
    for n in (10, 100, 1000):
        low, high = wilson_interval(n // 2, n)
        assert low < 0.5 < high
        widths.append(high - low)
    assert widths[0] > widths[1] > widths[2]
    assert wilson_interval(0, 0) == (0.0, 1.0)
