"""The few statistics the audits and the reports need, in the standard library only.

- `chi2_sf`: the upper tail of a χ² distribution, from the regularized upper incomplete
  gamma function Q(k/2, χ²/2) (a series below a + 1, Lentz's continued fraction above).
- `wilson_interval`: the Wilson score interval of a binomial proportion, which stays inside
  [0, 1] and is honest for small groups and for proportions near 0 or 1, unlike the normal
  approximation.
"""

from __future__ import annotations

import math

#: The standard normal's 97.5% quantile: two-sided 95% intervals.
Z95 = 1.959963984540054


def regularized_gamma_q(a: float, x: float) -> float:
    """Q(a, x) = Γ(a, x) / Γ(a): the upper tail of a gamma(a) variable at x."""
    if x <= 0:
        return 1.0
    if x < a + 1:  # the series for P converges fast here
        term = total = 1.0 / a
        n = a
        for _ in range(10_000):
            n += 1
            term *= x / n
            total += term
            if abs(term) < abs(total) * 1e-15:
                break
        return max(0.0, 1.0 - total * math.exp(-x + a * math.log(x) - math.lgamma(a)))
    # Lentz's continued fraction for Q, which converges fast for x >= a + 1
    tiny = 1e-300
    b = x + 1 - a
    c = 1 / tiny
    d = 1 / b
    h = d
    for i in range(1, 10_000):
        an = -i * (i - a)
        b += 2
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1 / d
        delta = d * c
        h *= delta
        if abs(delta - 1) < 1e-15:
            break
    return min(1.0, math.exp(-x + a * math.log(x) - math.lgamma(a)) * h)


def chi2_sf(statistic: float, dof: int) -> float:
    """P(χ²_dof >= statistic)."""
    return regularized_gamma_q(dof / 2.0, statistic / 2.0)


def wilson_interval(successes: float, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of `successes` in `n` trials ((0, 1) when n = 0)."""
    if n <= 0:
        return 0.0, 1.0
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)
