"""The 7 distractors of an answer-first matrix: crops of other elements whose label masks miss
Z (every element completing row 3), the context's elements first (so "seen in the context" is
no shortcut). Attribute matrices take them in a symmetric profile (`_profile`): m candidates
of the matrix's super-attribute and m of each of 8/m - 1 others (so "the commonest
super-attribute" is no shortcut), filler blocks drawn by `fill_weights` or `candidate_blocks`.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np

from vprom.domain import N_CANDIDATES, ElementType, Relation
from vprom.generation.relations import RULES, mask_of
from vprom.generation.draws import Draws

#: Crops of one element tried before a distractor moves on to the next element.
CROP_TRIES = 4
#: Candidates per super-attribute in a symmetric profile: m of each of 8 / m super-attributes.
BLOCKS = (8, 4, 2, 1)


@dataclass
class Option:
    super_attribute: str
    context: list[int]  # element ids the relation may show (>= MIN_CONTEXT_CROPS crops)
    same: list[int]  # element ids of the super-attribute usable as candidates
    fill: list[int]  # other element ids usable as candidates
    # the fill by super-attribute: (name, element ids, their bit mask), sorted by name
    fill_sas: list[tuple[str, list[int], int]] = field(default_factory=list)


def _in_random_order(draws: Draws, pool: list[int]):
    """The pool's elements in random order; big pools by rejection (8 are rarely needed)."""
    if len(pool) <= 24:
        return draws.shuffled(pool)
    u, n = draws.uniform, len(pool)
    return (pool[int(u() * n)] for _ in range(4 * n))  # repeats are skipped by the caller


def distractors(draws: Draws, option: Option, context_ids: list[int], z: int,
                 used: set[int], crops_of, masks, region, weight: dict[str, float],
                 answer_row: int, strict: bool, mixing: dict | None = None):
    """7 crops of distinct elements outside z whose labels carry nothing in z."""
    take = _Taker(draws, z, used, crops_of, masks, region, answer_row, strict)
    same = itertools.chain(draws.shuffled(context_ids), _in_random_order(draws, option.same))
    if not option.super_attribute:
        return take.out if take(same, N_CANDIDATES - 1) else None
    blocks = _profile(draws, option, z, weight, (mixing or {}).get(option.super_attribute))
    if blocks is None:
        return None
    own, others = blocks
    if not take(same, own - 1):
        return None
    for elements, k in others:
        if not take(_in_random_order(draws, elements), k):
            return None
    return take.out


class _Taker:
    """Draws crops of distinct elements outside z, no region twice, into `out`. `strict`:
    no candidate carries another's element (else the answer, whose element no distractor
    carries, would stand out); not strict: only z is kept off."""

    def __init__(self, draws, z, used, crops_of, masks, region, answer_row, strict=True):
        self.u, self.used = draws.uniform, used
        self.crops_of, self.masks, self.region = crops_of, masks, region
        self.out: list[int] = []
        self.seen: set[int] = set()
        self.strict = strict
        self.elements = z  # the candidates' elements (and all of z), as a mask
        self.carried = masks[answer_row] if strict else 0  # what some candidate carries

    def __call__(self, elements, k: int) -> bool:
        """Append crops of `k` more elements taken in `elements`' order; False if short."""
        u, used, region, masks = self.u, self.used, self.region, self.masks
        got = 0
        for e in elements:
            if got == k:
                break
            bit = 1 << e
            if e in self.seen or (self.elements | self.carried) & bit:
                continue
            self.seen.add(e)
            crops = self.crops_of.get(e)
            if crops is None:
                continue
            for _ in range(CROP_TRIES):
                r = crops[int(u() * len(crops))]
                if not masks[r] & self.elements and region[r] not in used:
                    used.add(region[r])
                    self.out.append(r)
                    if self.strict:
                        self.elements |= bit
                        self.carried |= masks[r]
                    got += 1
                    break
        return got == k


def _profile(draws: Draws, option: Option, z: int, weight: dict[str, float], plan=None):
    """(candidates of the matrix's super-attribute s incl. the answer, [(elements, k)]): the
    largest m in BLOCKS that s and 8/m - 1 others fill outside z, the `plan`'s size first."""
    own = (mask_of(option.same) & ~z).bit_count() + 1  # the answer is in z
    avail = [(ids, (mask & ~z).bit_count(), sa) for sa, ids, mask in option.fill_sas]
    order = BLOCKS
    if plan is not None and own >= plan.native:
        first = plan.native  # the plan's size first, even where s could fill a larger one
        if plan.down and draws.uniform() < plan.down:
            first = plan.native // 2
        order = (first,) + tuple(m for m in BLOCKS if m != first)
    for m in order:
        need = N_CANDIDATES // m - 1
        if own < m:
            continue
        if plan is not None and m in plan.sets:
            fillers = _planned_fillers(draws, plan.sets[m], avail, m)
            if fillers is not None:
                return m, [(ids, m) for ids in fillers]
        able = [(ids, weight.get(sa, 1.0)) for ids, n, sa in avail if n >= m]
        if len(able) >= need:
            return m, [(ids, m) for ids in _weighted_distinct(draws, able, need)]
    return _uneven_profile(draws, own, avail)


def _planned_fillers(draws: Draws, sets, avail, m: int):
    """The elements of a filler set drawn from `sets` among those that can fill m here."""
    ids_of = {sa: ids for ids, n, sa in avail if n >= m}
    able = [(s, q) for s, q in sets if all(sa in ids_of for sa in s)]
    if not able:
        return None
    s = able[draws.weighted([q for _, q in able])][0]
    return [ids_of[sa] for sa in s]


def static_block(option: Option, relation: Relation) -> int | None:
    """`_profile`'s block size for `option` when every crop has one label (None: no fit)."""
    own = len(option.same) - (RULES[relation].completing_elements - 1)
    for m in BLOCKS:
        able = sum(1 for _, ids, _ in option.fill_sas if len(ids) >= m)
        if own >= m and able >= N_CANDIDATES // m - 1:
            return m
    return None


def _weighted_distinct(draws: Draws, items: list[tuple[object, float]], k: int) -> list:
    items = list(items)
    return [items.pop(draws.weighted([w for _, w in items]))[0] for _ in range(k)]


def fill_weights(samplers: dict, matrices_of: dict) -> dict[ElementType, dict[str, float]]:
    """Per element type, a weight per super-attribute for filler blocks such that t's A_t
    matrices (m_t candidates of t each) get (8 - m_t) * A_t filler candidates of t elsewhere,
    so an element is as often right as wrong: a damped multiplicative fixed point."""
    terms: dict[ElementType, list] = {}
    need: dict[ElementType, dict[str, float]] = {}
    for key, sampler in samplers.items():
        etype = sampler.group.element_type
        for option in sampler.options:
            m = static_block(option, sampler.group.relation) if option.super_attribute else None
            if m is None:  # objects, counts; an uneven profile is left to chance
                continue
            n = matrices_of.get(key, 0) * len(option.context) / sampler.cumulative[-1]
            able = [sa for sa, ids, _ in option.fill_sas if len(ids) >= m]
            d = need.setdefault(etype, {})
            d[option.super_attribute] = d.get(option.super_attribute, 0.0) + n * (N_CANDIDATES - m)
            terms.setdefault(etype, []).append((n, m, N_CANDIDATES // m - 1, able))
    out = {}
    for etype, rows in terms.items():
        target = need[etype]
        names = sorted({sa for *_, able in rows for sa in able} | set(target))
        w = {sa: 1.0 for sa in names}
        for _ in range(60):
            got = dict.fromkeys(names, 0.0)
            for n, m, k, able in rows:
                if not able:
                    continue
                total = sum(w[sa] for sa in able)
                for sa in able:
                    got[sa] += n * m * min(1.0, k * w[sa] / total)
            for sa in names:
                ratio = (target.get(sa, 0.0) + 1e-3) / (got[sa] + 1e-3)
                w[sa] = min(1e3, max(1e-3, w[sa] * ratio ** 0.5))
            # only ratios matter: keep the geometric mean at 1 so no weight drifts to a bound
            mean = float(np.exp(np.mean(np.log(list(w.values())))))
            w = {sa: min(1e3, max(1e-3, x / mean)) for sa, x in w.items()}
        out[etype] = w
    return out


def _uneven_profile(draws: Draws, own: int, avail):
    """No symmetric profile fits: most candidates in blocks of the answer's block size."""
    best, best_score = None, 0
    order = draws.distinct(range(len(avail)), len(avail))
    for b in range(1, min(own, N_CANDIDATES) + 1):
        able = [k for k in order if avail[k][1] >= b]
        for j in range(min(len(able), N_CANDIDATES // b - 1), -1, -1):
            rest = N_CANDIDATES - b * (1 + j)
            spare = [k for k in order if k not in able[:j] and avail[k][1] >= rest != b]
            if rest and not spare:
                continue
            score = b * (1 + j)
            if score > best_score:
                blocks = [(avail[k][0], b) for k in able[:j]]
                blocks += [(avail[spare[0]][0], rest)] if rest else []
                best, best_score = (b, blocks), score
            break
    return best

