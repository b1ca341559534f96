"""Candidate profiles whose set T of super-attributes does not tell the answer's block:
`mixing_plans` makes every member of every T the answer's block equally often, per element
type and relation over the whole plan. For block sizes 4 and 2, each row (sampler, answer
super-attribute A) starts uniform over its filler sets S, each scaled by sqrt(g(T) / c(T, A)),
T = S + A, c(T, A) being T's matrices answered in A and g(T) their geometric mean. Rows able
to fill twice the block step down in the smallest share of `SHARES` that lets it balance.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np

from vprom.generation.candidates import static_block
from vprom.domain import N_CANDIDATES
from vprom.generation.relations import RULES

#: the block sizes balanced here, each with the block size its extra matrices step down from
STEP_FROM = {2: 4, 4: 8}
#: fewer than 8 + NEAR elements outside the static completions: planned in blocks of 4
NEAR = 1
#: flows this close to balanced (a share of the block size's matrices) are balanced
TOLERANCE = 0.005
#: rounds of the scaling over which the imbalance must fall by 5%, or the scaling stops
STALL = 25
#: the step-down shares the scaling starts from, smallest first
SHARES = (0.0, 0.05, 0.25, 1.0)


@dataclass
class Plan:
    """A row's profiles: blocks of native / 2 first with probability `down`; `sets`: fillers."""

    native: int
    down: float = 0.0
    sets: dict[int, list[tuple[tuple[str, ...], float]]] = field(default_factory=dict)


@dataclass
class _Row:
    key: tuple
    sa: str
    n: float  # the row's expected matrices
    native: int  # the block size its super-attribute fills
    fillers: dict[int, list[str]]  # per block size, the super-attributes able to fill it


def mixing_plans(samplers: dict, matrices_of: dict) -> dict[tuple, dict[str, Plan]]:
    """Per sampler key, a `Plan` per super-attribute, balanced per (element type, relation)."""
    parts: dict[tuple, list[_Row]] = {}
    for key, sampler in samplers.items():
        group = sampler.group
        for option in sampler.options:
            native = static_block(option, group.relation) if option.super_attribute else None
            if native not in (2, 4, 8):
                continue
            own = len(option.same) - (RULES[group.relation].completing_elements - 1)
            if native == N_CANDIDATES and own < N_CANDIDATES + NEAR and any(
                    len(ids) >= 4 for _, ids, _ in option.fill_sas):
                native = 4  # one more label in a context reading leaves fewer than 8
            n = matrices_of.get(key, 0) * len(option.context) / sampler.cumulative[-1]
            fillers = {m: sorted(sa for sa, ids, _ in option.fill_sas if len(ids) >= m)
                       for m in STEP_FROM}
            parts.setdefault((group.element_type, group.relation), []).append(
                _Row(key, option.super_attribute, n, native, fillers))
    out: dict[tuple, dict[str, Plan]] = {}
    for part in parts.values():
        plans = [Plan(r.native) for r in part]
        for m in (2, 4):  # 2 first: its extra matrices come out of 4's own
            down, sets = _world(part, m, [p.down for p in plans])
            for r, plan, d, row_sets in zip(part, plans, down, sets):
                if r.native == STEP_FROM[m]:
                    plan.down = d
                if row_sets:
                    plan.sets[m] = row_sets
        for row, plan in zip(part, plans):
            out.setdefault(row.key, {})[row.sa] = plan
    return out


def _world(part: list[_Row], m: int, down: list[float]) -> tuple[list[float], list[list]]:
    """Block size m's balance: per row, the share of its matrices stepping down to m (rows
    of native size 2m; from the smallest of SHARES that balances, then moved by the
    scaling), and its filler sets. A row left with no balanced filler set does not step."""
    best = None
    for share in SHARES:
        stepping = np.array([r.native == STEP_FROM[m] for r in part])
        for _ in range(len(part)):
            mass = np.array([r.n * (1.0 - d) if r.native == m else r.n * share if step
                             else 0.0 for r, d, step in zip(part, down, stepping)])
            cap = np.where(stepping, [r.n for r in part], mass)
            sets, left, mass = balance(part, mass, m, cap)
            dead = [i for i, st in enumerate(sets) if stepping[i] and not st]
            if not dead:
                break
            stepping[dead] = False
        n = np.array([r.n for r in part])
        shares = np.where(stepping & (n > 0), mass / np.maximum(n, 1e-12), 0.0)
        if best is None or left < best[2] - 1e-12:
            best = (shares.tolist(), sets, left)
        if left <= TOLERANCE:
            break
    return best[0], best[1]


def balance(part: list[_Row], mass: np.ndarray, m: int, cap: np.ndarray | None = None,
            rounds: int = 400) -> tuple[list[list], float, np.ndarray]:
    """Each row's filler sets for block size m with their probabilities after the scaling,
    the imbalance left (Σ_T Σ_A |c(T, A) - mean|, plus the matrices of rows without a
    filler set, over 2 Σ mass) and the rows' matrices (a row whose `cap` exceeds its mass
    moves with the scaling, up to the cap)."""
    k = N_CANDIDATES // m - 1
    mass = mass.astype(float).copy()
    cap = mass.copy() if cap is None else cap
    free = cap > mass
    code = {sa: j for j, sa in enumerate(sorted({r.sa for r in part} |
                                                {f for r in part for f in r.fillers.get(m, [])}))}
    entries, shown = [], {}  # entries: (row, filler set, shown set's index)
    for i, r in enumerate(part):
        if cap[i] > 0:
            for s in itertools.combinations(r.fillers.get(m, []), k):
                t = tuple(sorted(code[a] for a in s + (r.sa,)))
                entries.append((i, s, shown.setdefault(t, len(shown))))
    if not entries:
        return [[] for _ in part], 1.0 if mass.sum() > 0 else 0.0, mass
    row = np.array([e[0] for e in entries])
    t_of = np.array([e[2] for e in entries])
    n_sa, n_rows = len(code), len(part)
    cell = t_of * n_sa + np.array([code[part[i].sa] for i in row])  # (T, A) of each entry
    members = np.array(list(shown)) + np.arange(len(shown))[:, None] * n_sa
    p = 1.0 / np.bincount(row, minlength=n_rows)[row]
    left, checkpoint = 0.0, np.inf
    for step in range(rounds):
        flow = np.bincount(cell, weights=mass[row] * p, minlength=len(shown) * n_sa)
        c = flow[members]  # T x (k + 1): each member's matrices of T
        placed = np.bincount(row, weights=p, minlength=n_rows)
        left = float(np.abs(c - c.mean(axis=1, keepdims=True)).sum()
                     + (mass * (1.0 - placed)).sum()) / (2 * max(float(mass.sum()), 1e-12))
        if left <= TOLERANCE / 10:
            break
        if step % STALL == 0:  # stop where the imbalance no longer falls
            if left > 0.95 * checkpoint:
                break
            checkpoint = left
        with np.errstate(divide="ignore"):
            g = np.where((c > 0).all(axis=1), np.exp(np.log(c).mean(axis=1)), 0.0)
        mine = flow[cell]
        ratio = np.where(mine > 0, g[t_of] / np.where(mine > 0, mine, 1.0), 0.0)
        grow = np.sqrt(np.bincount(row, weights=p * ratio, minlength=n_rows))
        mass = np.where(free, np.minimum(cap, mass * grow), mass)
        p = p * np.sqrt(ratio)
        total = np.bincount(row, weights=p, minlength=n_rows)[row]
        p = np.where(total > 0, p / np.where(total > 0, total, 1.0), 0.0)
    sets: list[list] = [[] for _ in part]
    for (i, s, _), q in zip(entries, p.tolist()):
        if q > 0:
            sets[i].append((s, q))
    return sets, left, mass
