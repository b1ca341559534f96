"""The verdict of `vprom verify`'s bias checks: a test per group, the family judged together.

A bias check scores groups of matrices (an element type, a relation x element type, ...). Each
group tests the null "the candidates carry no information about the answer". Every probe is
fitted on the neutral train part and scored on held-out test matrices (the heuristics and the
position test fit nothing). A test matrix's hit X is the probability that the probe's pick is
the answer: 1 or 0, 1/k for a pick among k tied candidates that hold the answer, any value in
[0, 1] for a blocks pick. Under the null the answer is any of the 8 with probability 1/8 whatever
the probe learned, so E[X] = 1/8 and the test matrices' hits are independent.

The p-value (`tail_p`) bounds P(S >= s) for the sum S of such hits. X in [0, 1] with mean 1/8
is smaller in the convex order than a Bernoulli(1/8) (X = E[B | X] for a B that is 1 with
probability X), so E(S - h)+ <= E(T - h)+ for T ~ Binomial(n, 1/8) and every h, and Markov's
inequality on (S - h)+ gives P(S >= s) <= min over h < s of E(T - h)+ / (s - h) (Bentkus, "On
Hoeffding's inequalities", Ann. Probab. 2004). It needs no tie sizes, draws nothing (a file
gives one p-value) and is valid for any pick rule; on untied hits it is 2 to 2.5 times the
exact binomial tail at verify's group sizes. A hit of exactly 1/8 (an 8-way tie) is left out: the hits left
still have mean 1/8, so the bound holds on them, and a probe that ties all 8 passes. The rate
and 95% Wilson interval are those of all the hits.

The family is every judged group of every bias check of one data set (`decide`): the answer-
position χ² tests, the two heuristics and each probe's groups. Holm's step-down controls the
chance that a data set without tells fails any group at `FAMILY_ALPHA` (1%), whatever the
dependence between groups (they share matrices). A group fails when its adjusted p-value is
below 1% AND its rate is at least chance + `SHORTCUT_MARGIN` (14.5%): noise alone does not
fail a small data set, and a significant excess under 2 points does not fail a large one.
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
    """Bentkus's bound on P(S >= hits) for a sum S of n independent hits in [0, 1] of mean 1/8
    (see the module docstring); the minimum over h lies at an integer 0 <= h < hits, where
    E(T - h)+ = n p P(Binomial(n - 1, p) >= h) - h P(T > h). scipy.special's binomial tails:
    importing scipy.stats costs every `vprom` run half a second."""
    from scipy.special import bdtrc

    h = np.arange(int(np.ceil(hits)))
    if not len(h) or hits <= n * CHANCE:
        return 1.0
    stop_loss = n * CHANCE * bdtrc(h - 1, n - 1, CHANCE) - h * bdtrc(h, n, CHANCE)
    return float(min(1.0, (stop_loss / (hits - h)).min()))


def group_test(hits: np.ndarray, n_train: int | None = None, min_n: int = 50) -> dict:
    """A group's figures from its held-out hits (each 0..1): rate, 95% interval, counts and
    the p-value; judged (p set) when test and train (if given) reach `min_n`. Its verdict
    waits for the family (`decide`)."""
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
    """Holm's step-down adjusted p-values: the i-th smallest times (m - i + 1), made non-
    decreasing, at most 1. (statsmodels has it, but is no dependency for six lines.)"""
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
    """Holm over the family of `checks`' groups; set each group's adjusted p and verdict, and
    each check's status (a check without a judged group is skipped) and problems."""
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
