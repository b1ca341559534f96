"""The Wilson score interval of a binomial proportion (the baselines' reports and verify's
checks): unlike the normal approximation, it stays in [0, 1] and holds for small groups.

`clustered_interval` is Wilson's at Kish's effective sample size for outcomes that come in
correlated clusters: a test set's problems share crops, and a model scores a crop alike in
every problem that shows it (the demo's context-blind control: design effect 16).
"""

from __future__ import annotations

import math

import numpy as np

#: The standard normal's 97.5% quantile: two-sided 95% intervals.
Z95 = 1.959963984540054


def wilson_interval(successes: float, n: float) -> tuple[float, float]:
    """The Wilson score interval of `successes` in `n` trials ((0, 1) when n = 0)."""
    z = Z95
    if n <= 0:
        return 0.0, 1.0
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def design_effect(outcomes: np.ndarray, clusters: np.ndarray) -> float:
    """The variance of the mean of 0/1 `outcomes` clustered by `clusters` (the cluster-robust
    CR1 estimate) over the binomial variance, at least 1 (1 when every outcome is alike)."""
    y = np.asarray(outcomes, dtype=np.float64)
    n, p = len(y), float(y.mean()) if len(y) else 0.0
    _, group = np.unique(np.asarray(clusters), return_inverse=True)
    g = int(group.max()) + 1 if n else 0
    if g < 2 or p * (1 - p) == 0:
        return 1.0
    # a mean's cluster-robust variance is one sum: statsmodels' OLS on a constant with
    # cov_type="cluster" gives the same, but is not worth a dependency for it
    sums = np.bincount(group.reshape(-1), weights=y - p)
    clustered = g / (g - 1) * float(np.sum(sums ** 2)) / (n * n)
    return max(1.0, clustered / (p * (1 - p) / n))


def clustered_interval(outcomes: np.ndarray, clusters: np.ndarray) -> tuple[float, float, float]:
    """(low, high, design effect): the Wilson interval of the 0/1 `outcomes`' mean at the
    effective sample size n / design effect."""
    deff = design_effect(outcomes, clusters)
    n = len(outcomes) / deff
    low, high = wilson_interval(float(np.sum(outcomes)) / deff, n) if n else (0.0, 1.0)
    return low, high, deff
