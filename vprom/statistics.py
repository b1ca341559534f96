"""The Wilson score interval of a binomial proportion (the baselines' reports and verify's
checks): unlike the normal approximation, it stays in [0, 1] and holds for small groups."""

from __future__ import annotations

import math

#: The standard normal's 97.5% quantile: two-sided 95% intervals.
Z95 = 1.959963984540054


def wilson_interval(successes: float, n: int) -> tuple[float, float]:
    """The Wilson score interval of `successes` in `n` trials ((0, 1) when n = 0)."""
    z = Z95
    if n <= 0:
        return 0.0, 1.0
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)
