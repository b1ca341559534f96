"""Count candidates whose set S (8 of the 10 counts) says nothing about the answer (RAVEN's
answer-set flaw, fixed). Each count sampler k draws its answer a, the answer's forced-out
partner F (Or's other completing value) and S together, from a table r_k(a, F, S) solved so that
over all count matrices of one relation and neutral side P(answer = v | S) = 1/8 for every v
in S; the context is then drawn for that answer (`Sampler.sample`).

The tables start from the rule's own answer law times a uniform S and are balanced by
iterative proportional fitting: scale every (S, a) cell to the mean of S's cells, then give
each (a, F) its rule's probability again. Where that cannot balance a side (most of its
samplers never answer some count that the sets must show), the sweeps run again keeping only
each sampler's total, so the full-range sampler answers those counts more often.
"""

from __future__ import annotations

import itertools

import numpy as np

from vprom.domain import COUNTS, N_CANDIDATES, Relation
from vprom.generation.draws import Draws
from vprom.generation.relations import Progression

#: every candidate set: the 8-subsets of 1..10, as bit masks over the count values
SETS = [sum(1 << v for v in s) for s in itertools.combinations(COUNTS, N_CANDIDATES)]
#: the mask of every count value
ALL_COUNTS = sum(1 << v for v in COUNTS)
#: IPF sweeps; after them the residual max |P(a | S) - 1/8| is below 1e-4 on the VG-sized plan
SWEEPS = 400
#: the residual above which the rule's own answer law is given up for a balancing one
TOLERANCE = 1e-4
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


def count_tables(samplers: dict, matrices_of: dict) -> dict:
    """Per count sampler key, its table: ([(answer, forced-out mask, candidate set mask)],
    cumulative weights); solved per relation and neutral side."""
    mixes: dict[tuple[Relation, int], list] = {}
    for key, s in samplers.items():
        if s.group.element_type.value != "count" or not matrices_of.get(key):
            continue
        option = s.options[0]
        # a value is usable with a crop showing no other count: it fits beside any set
        usable = sum(1 << v for v in COUNTS if any(
            s.masks[r] & ALL_COUNTS == 1 << v for r in s.crops_of.get(v, ())))
        mixes.setdefault((s.group.relation, key[1] // 2), []).append(
            (key, matrices_of[key], answer_law(s.group.relation, option.context), usable))
    out = {}
    for members in mixes.values():
        out.update(_solve(members))
    return out


def _solve(members) -> dict:
    sets = np.array(SETS, dtype=np.int64)
    holds = np.array([[(s >> v) & 1 for v in range(max(COUNTS) + 1)] for s in SETS], bool)
    rows = []  # (sampler's index, answer, forced, P(a, F), feasible sets as a boolean row)
    for k, (_, _, law, usable) in enumerate(members):
        for (a, forced), p in sorted(law.items()):
            ok = holds[:, a] & ((sets & forced) == 0) & ((sets & ~usable) == 0)
            if ok.any():
                rows.append((k, a, forced, p, ok))
    if not rows:
        return {}
    sampler = np.array([k for k, *_ in rows])
    matrices = np.array([n for _, n, *_ in members], dtype=float)[sampler]
    answer = np.eye(holds.shape[1])[[a for _, a, *_ in rows]]  # R x 11, one-hot
    feasible = np.array([ok for *_, ok in rows], dtype=float)  # R x |SETS|
    law = np.array([p for *_, p, _ in rows])
    law /= np.bincount(sampler, law)[sampler]  # the law of the (answer, F) with a feasible S

    def rule_law(r):  # each (answer, F) as often as the rule draws it
        return r * (law / r.sum(axis=1))[:, None]

    def sampler_law(r):  # only each sampler's total fixed: the answer law may move
        return r / np.bincount(sampler, r.sum(axis=1))[sampler][:, None]

    for normalise in (rule_law, sampler_law):  # the second only where the first cannot
        r = rule_law(feasible)
        for _ in range(SWEEPS):
            mix = (matrices[:, None] * r).T @ answer  # |SETS| x 11: M(S, a)
            present = mix.sum(axis=1) / N_CANDIDATES  # the mean over S's 8 values
            ratio = np.where(mix > 0, present[:, None] / np.maximum(mix, 1e-300), 1.0)
            r = normalise(r * (ratio @ answer.T).T)
        if residual(r, matrices, answer, holds) < TOLERANCE:
            break
    out: dict = {}
    for k, (key, *_) in enumerate(members):
        cells = [(j, s) for j in np.flatnonzero(sampler == k) for s in np.flatnonzero(r[j])]
        if cells:
            out[key] = ([(rows[j][1], rows[j][2], int(sets[s])) for j, s in cells],
                        np.cumsum([r[j, s] for j, s in cells]).tolist())
    return out


def residual(r, matrices, answer, holds) -> float:
    """max over S and a in S of |P(answer = a | S) - 1/8| under the table r."""
    mix = (matrices[:, None] * r).T @ answer
    total = mix.sum(axis=1, keepdims=True)
    share = np.divide(mix, total, out=np.full_like(mix, 1 / N_CANDIDATES), where=total > 0)
    return float(np.abs(share - 1 / N_CANDIDATES)[holds].max())


def count_distractors(draws: Draws, answer: int, chosen: int, z: int, used: set[int],
                      crops_of, masks, region) -> list[int] | None:
    """7 crops of the candidate set's other counts, each showing no other candidate nor Z."""
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


def count_context(draws: Draws, rule, answer: int, forced: int, elements) -> list[int]:
    """The 9 elements of a count matrix under `rule` ending on `answer` (Or: the partner is
    `forced`'s value), drawn as the rule's `sample` draws them given that answer."""
    if rule.relation is Relation.OR:
        context = rule.context(draws, answer, elements, partner=forced.bit_length() - 1)
    elif rule.relation is Relation.PROGRESSION:
        context = rule.context(draws, answer, elements)
    else:  # And and Union: the other rows' elements, distinct where the counts allow
        others = [e for e in elements if e != answer]
        pair = (draws.distinct(others, 2) if len(elements) >= 3
                else [draws.pick(elements) for _ in range(2)])
        context = rule.context(draws, answer, elements, others=pair)
    return context + [answer]
