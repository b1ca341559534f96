"""Matrix generation: sample V-PROM matrices from the element pools, prove each, assign splits.

The algorithm, in three layers:

1. **Plan** (`make_plan`, global, from (scale, seed) only). Table 1's mix (45,000 matrices
   each of object attributes, human attributes and objects, 100,000 of counts, times
   `scale`) is divided equally among the relations of each element type and then among
   *groups*: which elements a matrix may show, chosen so that it lies wholly on one side of
   every split. Two thirds of each (element type, relation) are "train-side" groups (e.g.
   counts all odd, all in 1-5, or anything; attributes of super-attributes that no split
   holds out; objects of a third no split holds out for that relation) and one third
   "test-side" groups (counts all even or all in 6-10; held-out super-attributes and
   relation x super-attribute pairs; the held-out object thirds). The plan also fixes, per
   matrix index, the neutral side (exactly 1/3 test within each group, so the neutral split
   has one distribution) and the answer position (exactly uniform over 0..7).

2. **Cells.** Visual Genome images are dealt by hash of (seed, image id) to a side of two
   partitions: `neutral` (test 1/3) and `held_out` (test 1/3, shared by the six held-out
   splits). A matrix draws all 16 crops from the images of one cell (neutral side x
   held-out side): its neutral side from the plan, its held-out side from its group. No
   region can then sit on both sides of any split (see `splits.assign`).

3. **One matrix** (`generate_matrices`, pure, from `Draws(seed, index)` only). The group's
   relation rule (`vprom.relations`) samples the 9 elements; one crop is drawn for each
   panel (never the same region twice in a matrix); the solver turns the 8 context crops'
   label masks into the mask Z of every element that would complete row 3 under ANY reading
   (`vprom.solver.completion_mask`); the 7 distractors are crops of other elements whose
   label masks miss Z entirely (and, in the first `STRICT_TRIES` attempts, whose element
   no other candidate carries, as the answer's is carried by no distractor) — elements of
   the context first (so "the candidate seen in the context" is no shortcut), then the
   matrix's other elements. Attribute matrices take them in a symmetric super-attribute
   profile (`_profile`): m candidates from the matrix's super-attribute (answer included)
   and m from each of 8/m - 1 others, m in 8, 4, 2, 1, so "the candidates' commonest
   super-attribute" is no shortcut; the other super-attributes are drawn with weights
   (`_fill_weights`, from the plan alone) that make each super-attribute's elements the
   answer about once in 8 candidacies. The solver check `valid == [answer]` runs on the
   assembled matrix. What fails is resampled from the same stream (at most `MAX_TRIES`
   times, then a VpromError naming the group). Crop reuse is balanced by drawing uniformly
   among the crops of an element in the cell — a per-matrix choice, so shards stay
   identical to the single run (global least-used counters would not be).

`generate` is the file edge: POOLS.h5 in, DATASET.h5 (+ manifest JSON beside it) out;
`merge_shards` joins the DATASET.h5 files of `--shard K/N` runs into the single run's file.
"""

from __future__ import annotations

import itertools
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

import h5py
import numpy as np

from vprom.errors import VpromError
from vprom.io import atomic_path, make_manifest, manifest_path, sha256_file, write_json
from vprom.records import (COUNTS, LABEL_SEPARATOR, N_CANDIDATES, N_CONTEXT, RELATIONS_OF, SPLITS,
                           TABLE1, ElementType, Matrix, Relation)
from vprom.relations import RULES, Progression
from vprom.sampling import Draws, image_test_side, object_third
from vprom.solver import Universe, completion_mask
from vprom.tables import STR, CropTable, MatrixTable, open_h5, read_crops, set_manifest

#: An element may appear in a matrix's context only with this many crops in the cell.
MIN_CONTEXT_CROPS = 3
#: Resampling attempts per matrix before generation gives up with a VpromError.
MAX_TRIES = 40
#: The first attempts keep every candidate's element off all other candidates (`_Taker`);
#: later ones only keep the completions off the distractors (a super-attribute that every
#: crop carries, e.g. a person's action, cannot have exclusive labels).
STRICT_TRIES = 12
#: Share of every (element type, relation) planned on the train side of the held-out splits.
TRAIN_SIDE_SHARE = 2 / 3
CELL_NAMES = ("neutral-train/held-out-train", "neutral-train/held-out-test",
              "neutral-test/held-out-train", "neutral-test/held-out-test")


@dataclass(frozen=True)
class HeldOutDesign:
    """What the split specs hold out, as generation needs it (built by splits.assign)."""

    neutral_partition: str
    neutral_test_fraction: float
    held_partition: str
    held_test_fraction: float
    count_train_sets: tuple[tuple[int, ...], ...]
    count_test_sets: tuple[tuple[int, ...], ...]
    held_super_attributes: Mapping[str, tuple[str, ...]]  # element type -> super-attributes
    held_pairs: Mapping[str, Mapping[str, tuple[str, ...]]]  # type -> relation -> s.-attrs
    object_test_thirds: Mapping[str, tuple[int, ...]]  # relation -> thirds


# ---------------------------------------------------------------- the plan

@dataclass(frozen=True)
class Group:
    """A kind of matrix: element type, relation, which elements it may show, held-out side.

    `name` is one of: counts "any" / "c:1,3,5,7,9" (those counts only); attributes "train",
    "held_sa", "held_pair"; objects "third:K".
    """

    element_type: ElementType
    relation: Relation
    name: str
    held_side: int  # 0: train side of the held-out splits, 1: test side
    weight: float  # share of its (element type, relation)


def plan_groups(design: HeldOutDesign) -> list[Group]:
    groups = []
    for etype in ElementType:
        for relation in RELATIONS_OF[etype]:
            for name, side, weight in _groups_of(etype, relation, design):
                groups.append(Group(etype, relation, name, side, weight))
    return groups


def _share(names: list[str], side: int, total: float) -> list[tuple[str, int, float]]:
    return [(n, side, total / len(names)) for n in names]


def _groups_of(etype: ElementType, relation: Relation, design: HeldOutDesign):
    train, test = TRAIN_SIDE_SHARE, 1 - TRAIN_SIDE_SHARE
    if etype is ElementType.COUNT:
        # half the train side is unconstrained; the rest mirrors the test groups, so that
        # odd and even (low and high) counts answer equally often
        constrained = [_counts_name(s) for s in design.count_train_sets]
        out = [("any", 0, train / 2 if constrained else train)]
        out += _share(constrained, 0, train / 2) if constrained else []
        tests = [_counts_name(s) for s in design.count_test_sets]
        return out + (_share(tests, 1, test) if tests else [])
    if etype is ElementType.OBJECT:
        held = set(design.object_test_thirds.get(relation.value, ()))
        free = [f"third:{k}" for k in range(3) if k not in held]
        if not free:
            raise VpromError(f"split specs hold out every object third for {relation.value}; "
                             "no object matrix of it could train")
        return _share(free, 0, train if held else 1.0) + (
            _share([f"third:{k}" for k in sorted(held)], 1, test) if held else [])
    tests = []
    if design.held_super_attributes.get(etype.value):
        tests.append("held_sa")
    if design.held_pairs.get(etype.value, {}).get(relation.value):
        tests.append("held_pair")
    return [("train", 0, train if tests else 1.0)] + _share(tests, 1, test)


def _counts_name(values: Sequence[int]) -> str:
    return "c:" + ",".join(str(v) for v in sorted(values))


def _apportion(total: int, weights: Sequence[float]) -> list[int]:
    """Integers summing to `total` in proportion to `weights` (largest remainder)."""
    w = np.asarray(weights, dtype=float)
    exact = total * w / w.sum()
    out = np.floor(exact).astype(int)
    for k in np.argsort(-(exact - out), kind="stable")[: total - out.sum()]:
        out[k] += 1
    return out.tolist()


@dataclass
class Plan:
    """Per matrix index: its group, neutral side and answer position (all fixed by seed)."""

    scale: float
    seed: int
    design: HeldOutDesign
    groups: list[Group]
    quotas: list[int]
    group_of: np.ndarray  # int16 per matrix
    neutral_side: np.ndarray  # int8 per matrix
    answer: np.ndarray  # int8 per matrix

    def __len__(self) -> int:
        return len(self.group_of)


def make_plan(scale: float, seed: int, design: HeldOutDesign) -> Plan:
    if not scale > 0:
        raise VpromError(f"--scale must be positive, got {scale}")
    groups = plan_groups(design)
    quotas = [0] * len(groups)
    for etype, n in TABLE1.items():
        per_relation = _apportion(int(round(n * scale)), [1.0] * len(RELATIONS_OF[etype]))
        for relation, n_rel in zip(RELATIONS_OF[etype], per_relation):
            mine = [k for k, g in enumerate(groups)
                    if g.element_type is etype and g.relation is relation]
            for k, q in zip(mine, _apportion(n_rel, [groups[k].weight for k in mine])):
                quotas[k] = q
    rng = np.random.default_rng([seed, 0x504C414E])  # the plan's own stream ("PLAN")
    group_of = rng.permutation(np.repeat(np.arange(len(groups), dtype=np.int16), quotas))
    neutral = np.zeros(len(group_of), dtype=np.int8)
    for g in range(len(groups)):
        where = np.flatnonzero(group_of == g)
        k = int(round(len(where) * design.neutral_test_fraction))
        neutral[rng.permutation(where)[:k]] = 1
    answer = rng.permutation(np.arange(len(group_of)) % N_CANDIDATES).astype(np.int8)
    return Plan(scale, seed, design, groups, quotas, group_of, neutral, answer)


# ---------------------------------------------------------------- the pools, indexed

class PoolIndex:
    """The pools prepared for sampling: per crop its label mask (in its element type's
    universe), region id and cell; per element type and cell the crops of each element."""

    def __init__(self, crops: CropTable, seed: int, design: HeldOutDesign,
                 source: str = "pools") -> None:
        self.crops, self.source = crops, source
        n = len(crops)
        nside = image_test_side(seed, design.neutral_partition, crops.image_id,
                                design.neutral_test_fraction)
        hside = image_test_side(seed, design.held_partition, crops.image_id,
                                design.held_test_fraction)
        self.neutral_side = nside.tolist()
        self.held_side = hside.tolist()
        cell = (nside * 2 + hside).tolist()
        self.region = _regions(crops).tolist()
        self.crop_id = crops.crop_id.tolist()
        self.element = crops.element.tolist()
        self.masks = [0] * n
        self.universe: dict[ElementType, Universe] = {}
        self.super_attribute: dict[ElementType, dict[int, str]] = {}
        # cells[etype][cell][element id] -> crop rows
        self.cells: dict[ElementType, list[dict[int, list[int]]]] = {}
        etypes = crops.element_type
        for etype in ElementType:
            rows = np.flatnonzero(etypes == etype.value)
            if len(rows):
                self._index_type(etype, rows, cell)

    def _index_type(self, etype: ElementType, rows: np.ndarray, cell: list[int]) -> None:
        crops = self.crops
        elements = crops.element[rows].tolist()
        universe = Universe(etype, set(elements))
        ids = universe.ids
        for e in set(elements) - set(ids):
            raise VpromError(f"{self.source}: {etype.value} crop element '{e}' is not a count "
                             "1..10; re-mine the pools")
        cells: list[dict[int, list[int]]] = [{}, {}, {}, {}]
        sa: dict[int, str] = {}
        labels, supers = crops.labels, crops.super_attribute
        by_text: dict[str, int] = {}  # label lists repeat a lot ("5|cows")
        for r, e in zip(rows.tolist(), elements):
            i = ids[e]
            text = labels[r]
            m = by_text.get(text)
            if m is None:
                m = by_text[text] = universe.mask(text.split(LABEL_SEPARATOR))
            # a crop always carries its own element, whatever its label list says
            self.masks[r] = m | (1 << i)
            cells[cell[r]].setdefault(i, []).append(r)
            sa.setdefault(i, supers[r])
        self.universe[etype] = universe
        self.super_attribute[etype] = sa
        self.cells[etype] = cells


def _regions(crops: CropTable) -> np.ndarray:
    """One id per distinct image region (image id and box): crops of one region share it."""
    cols = (crops.h, crops.w, crops.y, crops.x, crops.image_id)
    order = np.lexsort(cols)
    change = np.zeros(len(order), dtype=bool)
    for c in cols:
        s = c[order]
        change[1:] |= s[1:] != s[:-1]
    region = np.empty(len(order), dtype=np.int64)
    region[order] = np.cumsum(change)
    return region


# ---------------------------------------------------------------- groups made concrete

@dataclass
class _Option:
    super_attribute: str
    context: list[int]  # element ids the relation may show (>= MIN_CONTEXT_CROPS crops)
    same: list[int]  # element ids of the super-attribute usable as candidates
    fill: list[int]  # other element ids usable as candidates
    # the fill by super-attribute: (name, element ids, their bit mask), sorted by name
    fill_sas: list[tuple[str, list[int], int]] = field(default_factory=list)

    @property
    def same_mask(self) -> int:
        return _mask_of(self.same)


def _mask_of(ids) -> int:
    out = 0
    for i in ids:
        out |= 1 << i
    return out


@dataclass
class _Sampler:
    """One (group, cell): everything needed to sample its matrices fast."""

    group: Group
    cell: int
    options: list[_Option]
    cumulative: list[float]
    crops_of: dict[int, list[int]]
    label: str = field(default="")
    skipped: list[str] = field(default_factory=list)  # super-attributes too small for it
    # attributes: how likely each other super-attribute is to fill a block of candidates
    fill_weight: dict[str, float] = field(default_factory=dict)

    def pick(self, draws: Draws) -> _Option:
        u = draws.uniform() * self.cumulative[-1]
        for option, c in zip(self.options, self.cumulative):
            if u < c:
                return option
        return self.options[-1]


def _make_sampler(pool: PoolIndex, design: HeldOutDesign, group: Group, cell: int) -> _Sampler:
    etype, rule = group.element_type, RULES[group.relation]
    where = f"{etype.value} pool of {pool.source}, {CELL_NAMES[cell]} images"
    label = f"{etype.value} {group.relation.value} matrices of group '{group.name}'"
    if etype not in pool.cells:
        raise VpromError(f"{pool.source}: no {etype.value} crops; {label} need them — mine "
                         "more images or check the pool file")
    crops_of = pool.cells[etype][cell]
    universe = pool.universe[etype]
    enough = {i for i, rows in crops_of.items() if len(rows) >= MIN_CONTEXT_CROPS}
    usable = set(crops_of)
    sa_of = pool.super_attribute[etype]
    if etype is ElementType.COUNT:
        allowed = (set(COUNTS) if group.name == "any"
                   else {int(v) for v in group.name[2:].split(",")})
        options = [_Option("", sorted(allowed & enough), sorted(usable), [])]
    elif etype is ElementType.OBJECT:
        third = int(group.name.split(":")[1])
        mine = {i for i in universe.names if object_third(universe.names[i]) == third}
        options = [_Option("", sorted(mine & enough), sorted(mine & usable), [])]
    else:
        options = _attribute_options(group, design, sa_of, enough, usable)
    need_context = rule.min_elements
    good = [o for o in options if len(o.context) >= need_context
            and (group.relation is not Relation.PROGRESSION or Progression.feasible(o.context))]
    if not good:
        have = ", ".join(f"'{o.super_attribute}' {len(o.context)}" if o.super_attribute
                         else str(len(o.context)) for o in options) or "none"
        raise VpromError(
            f"{where}: {label} need {need_context} elements with >= {MIN_CONTEXT_CROPS} crops "
            f"each{' forming a progression' if group.relation is Relation.PROGRESSION else ''};"
            f" have {have} (short by {need_context - max([len(o.context) for o in options], default=0)}"
            f"{' or no progression fits' if group.relation is Relation.PROGRESSION else ''})"
            " — mine more images or lower --scale")
    need_candidates = N_CANDIDATES - 1 + rule.completing_elements
    for o in good:
        have = len(set(o.same) | set(o.fill))
        if have < need_candidates:
            sa = f" super-attribute '{o.super_attribute}'" if o.super_attribute else ""
            raise VpromError(f"{where}:{sa} {label} need {need_candidates} distinct elements "
                             f"with crops for the candidates; have {have} (short by "
                             f"{need_candidates - have}) — mine more images or lower --scale")
    # a super-attribute whose candidates cannot form a symmetric profile (or on a
    # 2-attribute one: its other attribute completes the row too) is left out of the
    # relation, unless the group has no other (then `_uneven_profile` does its best)
    symmetric = [o for o in good
                 if not o.super_attribute or _static_block(o, group.relation) is not None]
    good = symmetric or good
    cumulative = np.cumsum([len(o.context) for o in good]).tolist()
    skipped = sorted(o.super_attribute for o in options if o not in good)
    return _Sampler(group, cell, good, cumulative, crops_of, label=f"{label} on {where}",
                    skipped=skipped)


def _attribute_options(group: Group, design: HeldOutDesign, sa_of: dict[int, str],
                       enough: set[int], usable: set[int]) -> list[_Option]:
    etype, relation = group.element_type.value, group.relation.value
    held_sas = set(design.held_super_attributes.get(etype, ()))
    pair_sas = set(design.held_pairs.get(etype, {}).get(relation, ()))
    every_sa = sorted(set(sa_of.values()))
    if group.name == "held_sa":
        chosen, fill_sas = [s for s in every_sa if s in held_sas], set(every_sa)
    elif group.name == "held_pair":
        chosen, fill_sas = [s for s in every_sa if s in pair_sas], set(every_sa)
    else:
        # train side: no held-out super-attribute may show, not even as a distractor
        chosen = [s for s in every_sa if s not in held_sas and s not in pair_sas]
        fill_sas = set(every_sa) - held_sas
    options = []
    for sa in chosen:
        members = {i for i, s in sa_of.items() if s == sa}
        fill = {i for i in usable if sa_of[i] in fill_sas and sa_of[i] != sa}
        by_sa: dict[str, list[int]] = {}
        for i in sorted(fill):
            by_sa.setdefault(sa_of[i], []).append(i)
        options.append(_Option(sa, sorted(members & enough), sorted(members & usable),
                               sorted(fill), [(t, ids, _mask_of(ids))
                                              for t, ids in sorted(by_sa.items())]))
    return options


# ---------------------------------------------------------------- one matrix

def _sample_matrix(s: _Sampler, draws: Draws, answer_pos: int, masks: list[int],
                   region: list[int]) -> tuple[str, list[int]] | None:
    """(super-attribute, 16 crop rows with the answer at `answer_pos`), or None."""
    etype, rule, crops_of = s.group.element_type, RULES[s.group.relation], s.crops_of
    for attempt in range(MAX_TRIES):
        option = s.pick(draws)
        ids = rule.sample(draws, option.context)
        rows = _context_crops(draws, ids, crops_of, region)
        if rows is None:
            continue
        z = completion_mask(etype, [masks[r] for r in rows[:N_CONTEXT]])
        if not masks[rows[N_CONTEXT]] & z:
            continue
        used = {region[r] for r in rows}
        context_ids = list(dict.fromkeys(ids[:N_CONTEXT]))
        wrong = _distractors(draws, option, context_ids, z, used, crops_of, masks, region,
                             s.fill_weight, rows[N_CONTEXT], attempt < STRICT_TRIES)
        if wrong is None:
            continue
        draws.shuffle(wrong)
        candidates = wrong[:answer_pos] + [rows[N_CONTEXT]] + wrong[answer_pos:]
        # the solver check on the assembled matrix: exactly the answer completes it
        if [k for k in range(N_CANDIDATES) if masks[candidates[k]] & z] != [answer_pos]:
            continue
        return option.super_attribute, rows[:N_CONTEXT] + candidates
    return None


def _context_crops(draws: Draws, ids: list[int], crops_of: dict[int, list[int]],
                   region: list[int]) -> list[int] | None:
    """One crop per context panel and the answer, no region twice."""
    u = draws.uniform
    rows, used = [], set()
    for e in ids:
        crops = crops_of[e]
        for _ in range(8):
            r = crops[int(u() * len(crops))]
            if region[r] not in used:
                break
        else:
            return None
        used.add(region[r])
        rows.append(r)
    return rows


def _in_random_order(draws: Draws, pool: list[int]):
    """The pool's elements in random order; big pools by rejection (we rarely need 8)."""
    if len(pool) <= 24:
        return draws.shuffled(pool)
    u, n = draws.uniform, len(pool)
    return (pool[int(u() * n)] for _ in range(4 * n))  # repeats are skipped by the caller


def _distractors(draws: Draws, option: _Option, context_ids: list[int], z: int,
                 used: set[int], crops_of, masks, region, weight: dict[str, float],
                 answer_row: int, strict: bool):
    """7 crops of distinct elements outside z whose labels carry nothing in z.

    Objects and counts: elements of the context first, then the rest of the matrix's
    elements. Attributes: a symmetric super-attribute profile (see `_profile`).
    """
    take = _Taker(draws, z, used, crops_of, masks, region, answer_row, strict)
    same = itertools.chain(draws.shuffled(context_ids), _in_random_order(draws, option.same))
    if not option.super_attribute:
        return take.out if take(same, N_CANDIDATES - 1) else None
    blocks = _profile(draws, option, z, weight)
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
    """Draws crops of distinct elements outside z, no region twice, into `out`.

    `strict`: every candidate's own element is carried by no other candidate. The answer's
    element is never on a distractor (z), so a distractor's element must not be on the
    answer or another distractor either, else "the candidate whose element no other
    candidate shows" would single out the answer. Not strict: only z is kept off.
    """

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


#: Crops of one element tried before a distractor moves on to the next element.
CROP_TRIES = 4


#: Candidates per super-attribute in a symmetric profile: m of each of 8 / m super-attributes.
BLOCKS = (8, 4, 2, 1)


def _profile(draws: Draws, option: _Option, z: int, weight: dict[str, float]):
    """(candidates from the matrix's super-attribute incl. the answer, [(elements, k)]).

    Symmetric when it can be: with m the largest block size in BLOCKS that the matrix's
    super-attribute s and 8/m - 1 other super-attributes can each fill with m elements
    outside z, every super-attribute among the candidates shows exactly m of them, so the
    candidates' super-attribute counts say nothing about which one is the answer (otherwise
    a small s, e.g. gender, makes the answer's super-attribute the candidates' majority).
    The other super-attributes are drawn among those able to fill a block, in proportion to
    `weight` (see `_fill_weights`: it makes every element about as often right as wrong).
    """
    own = (option.same_mask & ~z).bit_count() + 1  # the answer is in z
    avail = [(ids, (mask & ~z).bit_count(), sa) for sa, ids, mask in option.fill_sas]
    for m in BLOCKS:
        need = N_CANDIDATES // m - 1
        if own < m:
            continue
        able = [(ids, weight.get(sa, 1.0)) for ids, n, sa in avail if n >= m]
        if len(able) >= need:
            return m, [(ids, m) for ids in _weighted_distinct(draws, able, need)]
    return _uneven_profile(draws, own, avail)


def _static_block(option: _Option, relation: Relation) -> int | None:
    """The block size `_profile` would choose for `option` when every crop has one label
    (the completions are then the answer, and for or the row's other element); None when
    no symmetric profile fits."""
    own = len(option.same) - (RULES[relation].completing_elements - 1)
    for m in BLOCKS:
        able = sum(1 for _, ids, _ in option.fill_sas if len(ids) >= m)
        if own >= m and able >= N_CANDIDATES // m - 1:
            return m
    return None


def _weighted_distinct(draws: Draws, items: list[tuple[object, float]], k: int) -> list:
    """k distinct items, each next one drawn in proportion to its weight among the rest."""
    items = list(items)
    out = []
    for _ in range(k):
        u = draws.uniform() * sum(w for _, w in items)
        j = 0
        while j < len(items) - 1 and u >= items[j][1]:
            u -= items[j][1]
            j += 1
        out.append(items.pop(j)[0])
    return out


def _fill_weights(samplers: dict, matrices_of: dict) -> dict[ElementType, dict[str, float]]:
    """Per element type, a weight per super-attribute for choosing filler blocks.

    An element is as often right as wrong (answer 1 time in 8 candidacies) when the
    matrices of super-attribute t (A_t of them, showing m_t of t's elements each) receive
    (8 - m_t) * A_t filler candidates from other matrices. The weights solve that balance
    for the plan's expected mix (matrices per group and cell, options in proportion to their
    context elements, single-label readings) by a damped multiplicative fixed point. A
    function of the plan and the pool only, so shards stay equal to the single run.
    """
    terms: dict[ElementType, list] = {}
    need: dict[ElementType, dict[str, float]] = {}
    for key, sampler in samplers.items():
        etype = sampler.group.element_type
        for option in sampler.options:
            m = _static_block(option, sampler.group.relation) if option.super_attribute else None
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
    """No symmetric profile fits (e.g. or on a 2-attribute super-attribute, whose other
    attribute completes the row too): make the answer's block size b shared by as many
    candidates as possible (b of s, b of each of j others, the rest from one more)."""
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


def generate_rows(pool: PoolIndex, plan: Plan, indices: Sequence[int],
                  skipped: dict[str, list[str]] | None = None):
    """Yield (matrix, its 16 crop rows in `pool`) for each index, in order.

    `skipped`, when given, receives per group the super-attributes it could not use (fewer
    attributes with enough crops than its relation needs, or too few for a symmetric
    candidate profile while the group has others), for the manifest.
    """
    indices = list(indices)
    # make every (group, cell) sampler first, so a short pool fails before any work is done
    held = np.array([g.held_side for g in plan.groups], dtype=np.int64)
    # every (group, cell) of the whole plan, not only the shard's: the filler weights are
    # computed from all of them, so a shard samples exactly as the single run does
    every = plan.group_of.astype(np.int64)
    every_cell = plan.neutral_side.astype(np.int64) * 2 + held[every]
    keys, n = np.unique(np.stack([every, every_cell]), axis=1, return_counts=True)
    matrices_of = {(int(g), int(c)): int(k) for (g, c), k in zip(keys.T.tolist(), n.tolist())}
    samplers = {key: _make_sampler(pool, plan.design, plan.groups[key[0]], key[1])
                for key in (sorted(matrices_of) if indices else [])}
    weights = _fill_weights(samplers, matrices_of)
    for sampler in samplers.values():
        sampler.fill_weight = weights.get(sampler.group.element_type, {})
    for sampler in samplers.values():
        if sampler.skipped and skipped is not None:
            g = sampler.group
            key = f"{g.element_type.value} {g.relation.value} {g.name}"
            skipped[key] = sorted(set(skipped.get(key, [])) | set(sampler.skipped))
    masks, region = pool.masks, pool.region
    crop_id, element = pool.crop_id, pool.element
    for i in indices:
        g = int(plan.group_of[i])
        group = plan.groups[g]
        cell = int(plan.neutral_side[i]) * 2 + group.held_side
        sampler = samplers[(g, cell)]
        answer = int(plan.answer[i])
        got = _sample_matrix(sampler, Draws(plan.seed, i), answer, masks, region)
        if got is None:
            raise VpromError(f"matrix {i}: no sound {sampler.label} after {MAX_TRIES} tries "
                             "(too few distinct crops or too many shared labels) — mine more "
                             "images or lower --scale")
        sa, rows = got
        yield Matrix(id=i, relation=group.relation, element_type=group.element_type,
                     super_attribute=sa, panels=[crop_id[r] for r in rows],
                     elements=[element[r] for r in rows], answer=answer), rows


def generate_matrices(pool: PoolIndex, plan: Plan, indices: Sequence[int]) -> list[Matrix]:
    """The matrices with the given indices (pure: same pool, plan and index -> same matrix).

    Build `pool = PoolIndex(crops, seed, design)` and `plan = make_plan(scale, seed, design)`
    with `design = splits.assign.held_out_design(load_split_specs())`. Matrices carry no
    split assignment yet (`generate_dataset` adds it).
    """
    return [m for m, _ in generate_rows(pool, plan, indices)]


# ---------------------------------------------------------------- the dataset, in memory

@dataclass
class Dataset:
    crops: CropTable  # the crops the matrices use, sorted by crop id
    matrices: MatrixTable
    universes: dict[str, list[str]]
    super_attributes: dict[str, dict[str, list[str]]]
    counts: dict


def shard_indices(n: int, shard: tuple[int, int] | None) -> range:
    if shard is None:
        return range(n)
    k, parts = shard
    if not 0 <= k < parts:
        raise VpromError(f"--shard {k}/{parts}: need 0 <= K < N")
    return range(k, n, parts)


def generate_dataset(crops: CropTable, scale: float = 1.0, seed: int = 0,
                     shard: tuple[int, int] | None = None, specs=None,
                     source: str = "pools") -> Dataset:
    """Plan, sample, prove and assign every split, in memory (what `generate` writes)."""
    # splits sits downstream of vprom's data model; the split rules are data it owns
    from splits.assign import assign, choose_val, held_out_design, load_split_specs, PanelInfo

    specs = load_split_specs() if specs is None else specs
    design = held_out_design(specs)
    plan = make_plan(scale, seed, design)
    pool = PoolIndex(crops, seed, design, source=source)
    nside, hside, supers = pool.neutral_side, pool.held_side, crops.super_attribute
    parts: dict[str, dict[str, list[int]]] = {s: {"train": [], "test": []} for s in specs}
    matrices, used, skipped = [], set(), {}
    for m, rows in generate_rows(pool, plan, shard_indices(len(plan), shard), skipped):
        info = PanelInfo(sides={design.neutral_partition: tuple(nside[r] for r in rows),
                                design.held_partition: tuple(hside[r] for r in rows)},
                         super_attributes=tuple(supers[r] for r in rows))
        for split, part in assign(m, info, specs).items():
            if part != "excluded":
                parts[split][part].append(m.id)
        matrices.append(m)
        used.update(rows)
    splits = {}
    for split in specs:
        train = np.asarray(parts[split]["train"], dtype=np.int64)
        if shard is None:
            train, val = choose_val(train, seed, split, scale)
        else:
            val = np.zeros(0, np.int64)  # chosen by merge_shards over all shards' train ids
        splits[split] = {"train": train, "val": val,
                         "test": np.asarray(parts[split]["test"], dtype=np.int64)}
    table = _matrix_table(matrices, splits)
    used_rows = np.asarray(sorted(used), dtype=np.int64)
    used_crops = crops.take(used_rows[np.argsort(crops.crop_id[used_rows], kind="stable")])
    universes = {e.value: sorted(u.ids) for e, u in pool.universe.items()}
    if ElementType.COUNT in pool.universe:
        universes[ElementType.COUNT.value] = sorted(pool.universe[ElementType.COUNT].ids, key=int)
    counts = _counts(table, len(plan), shard is None)
    counts["super_attributes_too_small"] = dict(sorted(skipped.items()))
    return Dataset(used_crops, table, universes, _super_attributes(pool), counts)


def _matrix_table(matrices: list[Matrix], splits: dict) -> MatrixTable:
    return MatrixTable(
        id=[m.id for m in matrices], relation=[m.relation.value for m in matrices],
        element_type=[m.element_type.value for m in matrices],
        super_attribute=[m.super_attribute for m in matrices],
        answer=[m.answer for m in matrices],
        panels=np.array([m.panels for m in matrices], dtype=np.int64).reshape(-1, 16),
        elements=np.array([m.elements for m in matrices], dtype=object).reshape(-1, 16),
        splits=splits)


def _super_attributes(pool: PoolIndex) -> dict[str, dict[str, list[str]]]:
    out = {}
    for etype, sa_of in pool.super_attribute.items():
        names = pool.universe[etype].names
        by_sa: dict[str, list[str]] = {}
        for i, sa in sa_of.items():
            if sa:
                by_sa.setdefault(sa, []).append(names[i])
        if by_sa:
            out[etype.value] = {sa: sorted(v) for sa, v in sorted(by_sa.items())}
    return out


def _counts(table: MatrixTable, planned: int, val_chosen: bool) -> dict:
    by_type: dict[str, dict[str, int]] = {}
    for etype, relation in zip(table.element_type, table.relation):
        d = by_type.setdefault(etype, {})
        d[relation] = d.get(relation, 0) + 1
    return {
        "matrices": len(table),
        "planned_matrices": planned,
        "by_element_type_relation": {k: dict(sorted(v.items())) for k, v in sorted(by_type.items())},
        "splits": {s: {p: int(len(ids)) for p, ids in table.splits[s].items()}
                   for s in SPLITS if s in table.splits},
        "val_chosen": val_chosen,
    }


# ---------------------------------------------------------------- files

@dataclass
class GenerateSummary:
    out: Path
    counts: dict
    seconds: float

    def __str__(self) -> str:
        c = self.counts
        lines = [f"wrote {self.out}: {c['matrices']:,} matrices in {self.seconds:.1f} s"]
        for etype, rel in c["by_element_type_relation"].items():
            lines.append(f"  {etype:17s} " + "  ".join(f"{r} {n:,}" for r, n in rel.items()))
        lines.append(f"  {'split':34s} {'train':>8s} {'val':>7s} {'test':>8s}")
        for s, p in c["splits"].items():
            lines.append(f"  {s:34s} {p['train']:8,d} {p['val']:7,d} {p['test']:8,d}")
        if not c["val_chosen"]:
            lines.append("  (shard: val is chosen when the shards are merged: "
                         "vprom.generate.merge_shards)")
        return "\n".join(lines)


def generate(pools: Path, out: Path, scale: float = 1.0, seed: int = 0,
             shard: tuple[int, int] | None = None) -> GenerateSummary:
    """POOLS.h5 -> DATASET.h5: every matrix proven by the solver, every split assigned."""
    start = time.perf_counter()
    pools, out = Path(pools), Path(out)
    crops = read_crops(pools)
    data = generate_dataset(crops, scale=scale, seed=seed, shard=shard, source=str(pools))
    config = {"scale": scale, "seed": seed, "shard": list(shard) if shard else None,
              "min_context_crops": MIN_CONTEXT_CROPS, "max_tries": MAX_TRIES,
              "table1": {e.value: n for e, n in TABLE1.items()}}
    manifest = make_manifest("dataset", config=config, seed=seed,
                             inputs={pools.name: sha256_file(pools)}, counts=data.counts)
    _write(out, data, manifest)
    return GenerateSummary(out, data.counts, time.perf_counter() - start)


def _write(out: Path, data: Dataset, manifest: dict) -> None:
    with atomic_path(out) as tmp:
        with h5py.File(tmp, "w") as h5:
            data.crops.write(h5.create_group("crops"))
            data.matrices.write(h5.create_group("matrices"), h5.create_group("splits"))
            vocab = h5.create_group("vocab")
            for etype, names in data.universes.items():
                vocab.create_dataset(etype, data=np.asarray(names, dtype=object), dtype=STR)
            for etype, by_sa in data.super_attributes.items():
                g = vocab.create_group(f"super_attributes/{etype}")
                for sa, names in by_sa.items():
                    g.create_dataset(sa, data=np.asarray(names, dtype=object), dtype=STR)
        # the content hash covers the data only, so storing it in the manifest afterwards
        # leaves it unchanged; `vprom verify` recomputes it to catch later edits
        from vprom.verify import content_hash

        manifest = {**manifest, "outputs": {"content_hash": content_hash(tmp)}}
        with h5py.File(tmp, "r+") as h5:
            set_manifest(h5, manifest)
    # the manifest beside the file also names the finished file's hash
    write_json(manifest_path(out), {**manifest, "outputs": {
        **manifest["outputs"], out.name: sha256_file(out)}})


def merge_shards(shards: Sequence[Path], out: Path) -> GenerateSummary:
    """Join the DATASET.h5 files of `--shard K/N` runs (all N of them) into one DATASET.h5
    equal, row for row, to the single run's; validation sets are chosen here."""
    from splits.assign import choose_val  # see generate_dataset

    start = time.perf_counter()
    manifests, crops, tables, universes, sas = _read_shards(shards)
    config = manifests[0]["config"]
    scale, seed = config["scale"], config["seed"]
    ids = np.concatenate([t.id for t in tables])
    order = np.argsort(ids, kind="stable")
    planned = manifests[0]["counts"]["planned_matrices"]
    if not np.array_equal(ids[order], np.arange(planned)):
        raise VpromError(f"merge_shards: the shards hold {len(ids)} matrices, the run planned "
                         f"{planned}; a shard file is incomplete or repeated")

    def cat(name):
        return np.concatenate([getattr(t, name) for t in tables])[order]

    splits = {}
    for split in SPLITS:
        train = np.sort(np.concatenate([t.splits[split]["train"] for t in tables]))
        train, val = choose_val(train, seed, split, scale)
        test = np.sort(np.concatenate([t.splits[split]["test"] for t in tables]))
        splits[split] = {"train": train, "val": val, "test": test}
    table = MatrixTable(id=cat("id"), relation=cat("relation"), element_type=cat("element_type"),
                        super_attribute=cat("super_attribute"), answer=cat("answer"),
                        panels=cat("panels"), elements=cat("elements"), splits=splits)
    every = CropTable(**{f: np.concatenate([getattr(c, f) for c in crops])
                         for f in CropTable.__dataclass_fields__})
    _, first = np.unique(every.crop_id, return_index=True)  # sorted by crop id, like one run
    counts = _counts(table, planned, True)
    skipped: dict[str, set] = {}
    for m in manifests:
        for key, names in m["counts"].get("super_attributes_too_small", {}).items():
            skipped.setdefault(key, set()).update(names)
    counts["super_attributes_too_small"] = {k: sorted(v) for k, v in sorted(skipped.items())}
    manifest = make_manifest("dataset", config={**config, "shard": None,
                                                "merged_from": len(shards)},
                             seed=seed, inputs=manifests[0]["inputs"], counts=counts)
    _write(Path(out), Dataset(every.take(first), table, universes, sas, counts), manifest)
    return GenerateSummary(Path(out), counts, time.perf_counter() - start)


def _read_shards(shards: Sequence[Path]):
    if not shards:
        raise VpromError("merge_shards: no shard files given")
    manifests, crops, tables = [], [], []
    for path in shards:
        with open_h5(path) as h5:
            if "manifest" not in h5.attrs or "vocab" not in h5:
                raise VpromError(f"{path}: not a DATASET.h5 written by vprom generate --shard")
            manifests.append(json.loads(h5.attrs["manifest"]))
            crops.append(CropTable.read(h5["crops"]))
            tables.append(MatrixTable.read(h5["matrices"], h5["splits"]))
    n = len(shards)
    runs = {(m["config"]["scale"], m["config"]["seed"]) for m in manifests}
    got = sorted(tuple(m["config"].get("shard") or ()) for m in manifests)
    if got != [(k, n) for k in range(n)] or len(runs) != 1:
        raise VpromError(f"merge_shards: expected shards 0/{n}..{n - 1}/{n} of one run (same "
                         f"scale and seed); got {got} — pass every shard of one run once")
    with open_h5(shards[0]) as h5:
        vocab = h5["vocab"]
        universes = {k: vocab[k].asstr()[()].tolist() for k in vocab
                     if isinstance(vocab[k], h5py.Dataset)}
        sas = {etype: {sa: g[sa].asstr()[()].tolist() for sa in g}
               for etype, g in vocab.get("super_attributes", {}).items()}
    return manifests, crops, tables, universes, sas
