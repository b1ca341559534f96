"""Count candidates whose set S (8 of the 10 counts) says nothing about the answer (RAVEN's
answer-set flaw, fixed): S is drawn after the context and answer a from q_k(S | a, F) per
sampler k, F the other completing values, so that all count matrices of one relation and
neutral side have P(answer = v | S) = 1/8 for every v in S. With answer laws P_k(a, F) and
matrices π_k, iterative proportional fitting solves Σ_k π_k P_k(a, F) q_k(S | a, F) = t(S).
"""

from __future__ import annotations

import itertools

import numpy as np

from vprom.domain import COUNTS, N_CANDIDATES, Relation
from vprom.generation.draws import Draws
from vprom.generation.relations import Progression

#: every candidate set: the 8-subsets of 1..10, as bit masks over the count values
SETS = [sum(1 << v for v in s) for s in itertools.combinations(COUNTS, N_CANDIDATES)]
#: IPF sweeps; after them the residual max |P(a | S) - 1/8| is 2e-5 on the VG-sized plan
SWEEPS = 400
#: crops of one count tried before the attempt gives up (regions already used in the matrix)
CROP_TRIES = 8


def answer_law(relation: Relation, allowed) -> dict[tuple[int, int], float]:
    """P(answer, forced-out mask) of the relation's rule on single-count crops of `allowed`."""
    values = sorted(set(allowed))
    if relation is Relation.OR:
        pairs = [(a, b) for a in values for b in values if a != b]
        return {(a, 1 << b): 1 / len(pairs) for a, b in pairs}
    if relation is Relation.PROGRESSION:
        ends = Progression.ends(values)
        return {(a, 0): 1 / len(ends) for a in ends}
    return {(a, 0): 1 / len(values) for a in values}


def absent_tables(samplers: dict, matrices_of: dict) -> dict:
    """Per count sampler key, q(S | a, F): (answer, forced-out mask) -> (candidate sets as
    masks, cumulative weights); solved per relation and neutral side."""
    mixes: dict[tuple[Relation, int], list] = {}
    for key, s in samplers.items():
        if s.group.element_type.value != "count" or not matrices_of.get(key):
            continue
        option = s.options[0]
        usable = sum(1 << v for v in option.same if v in COUNTS)
        mixes.setdefault((s.group.relation, key[1] // 2), []).append(
            (key, matrices_of[key], answer_law(s.group.relation, option.context), usable))
    out = {}
    for members in mixes.values():
        out.update(_solve(members))
    return out


def _solve(members) -> dict:
    sets = np.array(SETS, dtype=np.int64)
    holds = np.array([[(s >> v) & 1 for v in range(max(COUNTS) + 1)] for s in SETS], bool)
    rows = []  # (key, answer, forced, weight π P(a, F), feasible sets as a boolean row)
    for key, n, law, usable in members:
        for (a, forced), p in sorted(law.items()):
            ok = holds[:, a] & ((sets & forced) == 0) & ((sets & ~usable) == 0)
            if ok.any():
                rows.append((key, a, forced, n * p, ok))
    if not rows:
        return {}
    feasible = np.array([ok for *_, ok in rows], dtype=float)  # R x |SETS|
    answer = np.eye(holds.shape[1])[[a for _, a, *_ in rows]]  # R x 11, one-hot
    weight = np.array([w for _, _, _, w, _ in rows])
    q = feasible / feasible.sum(axis=1, keepdims=True)
    for _ in range(SWEEPS):
        mix = (weight[:, None] * q).T @ answer  # |SETS| x 11: M(S, a)
        present = mix.sum(axis=1) / N_CANDIDATES  # t(S): the mean over S's 8 values
        ratio = np.where(mix > 0, present[:, None] / np.maximum(mix, 1e-300), 1.0)
        q = q * (ratio @ answer.T).T
        q /= q.sum(axis=1, keepdims=True)
    out: dict = {}
    for (key, a, forced, _, ok), qr in zip(rows, q):
        j = np.flatnonzero(ok)
        out.setdefault(key, {})[a, forced] = ([int(sets[k]) for k in j],
                                              np.cumsum(qr[j]).tolist())
    return out


def count_distractors(draws: Draws, table: dict, answer: int, z: int,
                      used: set[int], crops_of, masks, region) -> list[int] | None:
    """7 crops of a drawn candidate set's other counts, carrying no other candidate nor Z."""
    row = table.get((answer, z & ~(1 << answer)))
    if row is None:
        return None
    chosen = row[0][draws.by_cumulative(row[1])]
    out = []
    for v in COUNTS:
        if v == answer or not (chosen >> v) & 1:
            continue
        crops = crops_of.get(v, ())
        for _ in range(CROP_TRIES if crops else 0):
            r = crops[int(draws.uniform() * len(crops))]
            if masks[r] & (chosen | z) == 1 << v and region[r] not in used:
                used.add(region[r])
                out.append(r)
                break
        else:
            return None
    return out
