"""The verdict of `vprom verify`'s bias checks: a test per group, the family judged together.

Each group (an element type, a relation x element type, ...) tests "the candidates carry no
information about the answer": a held-out matrix's hit (the chance the pick is its answer) has
mean 1/8. `tail_p` bounds the hits' sum's tail by Bentkus's inequality (Ann. Probab. 2004;
8-way ties left out). Holm's step-down over every judged group of a data set keeps the
family-wise error at `FAMILY_ALPHA`; a group fails when its adjusted p is below it AND its rate
is at least chance + `SHORTCUT_MARGIN`.
"""

from __future__ import annotations

import math

import numpy as np

from vprom.domain import CHANCE, SHORTCUT_MARGIN
from vprom.statistics import wilson_interval

#: family-wise error rate of one data set's bias checks
FAMILY_ALPHA = 0.01
#: the smallest rate that fails (with significance): chance plus the practical tolerance
LIMIT = CHANCE + SHORTCUT_MARGIN


def tail_p(hits: float, n: int) -> float:
    """Bentkus's bound on P(S >= hits), S a sum of n independent hits in [0, 1] of mean 1/8:
    min over integers h < hits of E(T - h)+ / (hits - h), T ~ Binomial(n, 1/8)."""
    from scipy.special import bdtrc

    if hits <= n * CHANCE:
        return 1.0
    h = np.arange(int(np.ceil(hits)))
    stop_loss = n * CHANCE * bdtrc(h - 1, n - 1, CHANCE) - h * bdtrc(h, n, CHANCE)
    return float(min(1.0, (stop_loss / (hits - h)).min()))


def group_test(hits: np.ndarray, n_train: int | None = None, min_n: int = 50) -> dict:
    """A group's figures from its held-out hits: rate, 95% interval, counts and p-value (when
    test and train, if given, reach `min_n`); `decide` gives the verdict."""
    hits = np.asarray(hits, dtype=np.float64)
    n = len(hits)
    lo, hi = wilson_interval(float(hits.sum()), n)
    judged = n >= min_n and (n_train is None or n_train >= min_n)
    tested = hits[hits != CHANCE]
    return {"accuracy": float(np.mean(hits)) if n else float("nan"), "ci95": [lo, hi],
            "test": n, "train": n_train, "judged": bool(judged),
            # fsum: exactly rounded, so the order of the hits cannot move the p-value
            "p": tail_p(math.fsum(tested), len(tested)) if judged else None,
            "p_adjusted": None, "failed": False}


def holm(p_values) -> np.ndarray:
    """Holm's step-down adjusted p-values (statsmodels is no dependency for six lines)."""
    p = np.asarray(p_values, dtype=float)
    order = np.argsort(p, kind="stable")
    stepped = np.maximum.accumulate((len(p) - np.arange(len(p))) * p[order])
    out = np.empty_like(p)
    out[order] = np.minimum(stepped, 1.0)
    return out


def family_groups(checks) -> list[tuple[object, str, dict]]:
    """(check, group, figures) of every judged group with a p-value: the family."""
    return [(c, g, f) for c in checks for g, f in c.figures.items()
            if isinstance(f, dict) and f.get("judged") and f.get("p") is not None]


def decide(checks) -> None:
    """Holm over `checks`' groups: each group's adjusted p and verdict, each check's status."""
    members = family_groups(checks)
    adjusted = holm([f["p"] for _, _, f in members])
    for (_, _, f), q in zip(members, adjusted):
        f["p_adjusted"] = float(q)
        f["failed"] = bool(q < FAMILY_ALPHA and f["accuracy"] >= LIMIT)
    for c in {id(c): c for c, _, _ in members}.values():
        c.problems = [f"{g}: {100 * f['accuracy']:.1f}% without the context "
                      f"(95% CI {100 * f['ci95'][0]:.1f}–{100 * f['ci95'][1]:.1f}% on "
                      f"{f['test']:,} matrices; p={f['p']:.2g}, adjusted {f['p_adjusted']:.2g})"
                      for g, f in c.figures.items() if isinstance(f, dict) and f.get("failed")]
        c.status = "fail" if c.problems else "pass"


def format_group(group: str, f: dict) -> str:
    """One report line: rate, interval, n, p, adjusted p and verdict."""
    if not f["test"]:
        return f"{group:30s} no test matrices"
    verdict = ("FAIL" if f["failed"] else "pass") if f["judged"] else "too few to judge"
    p = ("" if f["p"] is None else f"  p={f['p']:.2g}"
         + ("" if f["p_adjusted"] is None else f"  adjusted={f['p_adjusted']:.2g}"))
    return (f"{group:30s} {100 * f['accuracy']:5.1f}%  ({100 * f['ci95'][0]:.1f}–"
            f"{100 * f['ci95'][1]:.1f})  n={f['test']:,}{p}  {verdict}")
