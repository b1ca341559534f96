"""L-BFGS for the label probe: the minimum of a smooth convex loss in a few dozen evaluations.

The label probe's loss (`audit.fit_set_probe`) is a conditional logit with an L2 penalty:
convex, so it has one minimum, and the probe is that minimum. Plain gradient steps reach it
in a couple of hundred evaluations; L-BFGS, which builds a curvature estimate from its last
`MEMORY` steps, in 50-110 (the verify bench at scale 1), and in 16-32 on weights scaled by
the Hessian's diagonal (`audit.start_scale`). Every product is an elementwise
sum in numpy (pairwise, in a fixed order), not BLAS, so the result does not depend on the
machine's thread count.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

#: curvature pairs kept; evaluations at most; halvings of a step at most; stop when the loss
#: fell by less than `RTOL` of itself over the last `WINDOW` iterations
MEMORY, MAX_EVALUATIONS, HALVINGS, RTOL, WINDOW = 10, 300, 40, 1e-7, 5


def _dot(a: np.ndarray, b: np.ndarray) -> float:
    return float((a * b).sum())


def _direction(g: np.ndarray, pairs: list[tuple[np.ndarray, np.ndarray, float]]) -> np.ndarray:
    """-H g by the two-loop recursion over `pairs` (s, y, 1 / y·s), oldest first."""
    q, alphas = g.copy(), []
    for s, y, rho in reversed(pairs):
        alpha = rho * _dot(s, q)
        q -= alpha * y
        alphas.append(alpha)
    if pairs:
        s, y, _ = pairs[-1]
        q *= _dot(s, y) / _dot(y, y)
    for (s, y, rho), alpha in zip(pairs, reversed(alphas)):
        q += s * (alpha - rho * _dot(y, q))
    return -q


def minimise(loss_grad: Callable[[np.ndarray], tuple[float, np.ndarray]],
             x: np.ndarray) -> np.ndarray:
    """The x that minimises `loss_grad`'s loss (it returns (loss, gradient)), from `x`:
    L-BFGS with a backtracking line search that halves the step until the loss falls by at
    least 1e-4 of the slope (Armijo); it stops when the loss fell by less than `RTOL` of
    itself over `WINDOW` iterations, when `HALVINGS` halvings find no lower loss, or after
    about `MAX_EVALUATIONS` evaluations."""
    f, g = loss_grad(x)
    pairs: list[tuple[np.ndarray, np.ndarray, float]] = []
    history, evaluations = [f], 1
    while evaluations < MAX_EVALUATIONS and np.abs(g).max() > 0:
        d = _direction(g, pairs)
        slope = _dot(g, d)
        if slope >= 0:  # rounding spoilt the curvature estimate: start it again
            pairs, d, slope = [], -g, -_dot(g, g)
        step = 1.0 if pairs else min(1.0, 1.0 / float(np.abs(g).sum()))
        for _ in range(HALVINGS):
            f_new, g_new = loss_grad(x + step * d)
            evaluations += 1
            if f_new <= f + 1e-4 * step * slope:
                break
            step /= 2
        else:
            return x  # no step lowers the loss: x is the minimum to the floats' precision
        s, y = step * d, g_new - g
        if _dot(s, y) > 0:  # always, for a convex loss, but for rounding
            pairs = (pairs + [(s, y, 1.0 / _dot(s, y))])[-MEMORY:]
        x, f, g = x + s, f_new, g_new
        history.append(f)
        if len(history) > WINDOW and history[-WINDOW - 1] - f <= RTOL * abs(f):
            break
    return x
