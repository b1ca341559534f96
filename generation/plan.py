"""Which kind of matrix every index is, fixed by (scale, seed): Table 1's mix divided equally
among each element type's relations, then among *groups* (which elements a matrix may show)
so that a matrix lies wholly on one side of every split (2/3 train-side). The plan also fixes
each matrix's neutral side (1/3 test per group) and answer position (uniform).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Sequence

import numpy as np

from vprom.errors import VpromError
from vprom.generation.pool_index import cell_of
from vprom.domain import N_CANDIDATES, RELATIONS_OF, TABLE1, ElementType, Relation
from vprom.splits.rules import HeldOutDesign

TRAIN_SIDE_SHARE = 2 / 3

class HoldOut(Enum):
    """What an attribute group holds out of training (its value: the group's name)."""

    NOTHING = "train"  # train side: no held-out super-attribute, nor the relation's pair
    SUPER_ATTRIBUTE = "held_sa"  # a held-out super-attribute
    PAIR = "held_pair"  # a held-out (relation, super-attribute) pair


@dataclass(frozen=True)
class Group:
    """A kind of matrix: counts `counts` (empty: any), objects of `third`, or per `hold_out`."""

    element_type: ElementType
    relation: Relation
    held_side: int  # 0: train side of the held-out splits, 1: test side
    weight: float  # share of its (element type, relation)
    counts: tuple[int, ...] = ()
    third: int = -1
    hold_out: HoldOut = HoldOut.NOTHING

    @property
    def name(self) -> str:
        """"any" / "c:1,3,5,7,9", "third:K", "train" / "held_sa" / "held_pair"."""
        if self.element_type is ElementType.COUNT:
            return "c:" + ",".join(str(v) for v in self.counts) if self.counts else "any"
        if self.element_type is ElementType.OBJECT:
            return f"third:{self.third}"
        return self.hold_out.value

    def super_attributes(self, design: HeldOutDesign, every: Sequence[str]
                         ) -> tuple[list[str], list[str]]:
        """(the super-attributes of `every` its matrices ask about, those their panels show):
        test-side, what it holds out and anything; train-side, neither held-out ones nor its
        relation's pairs, and no held-out one."""
        etype, relation = self.element_type.value, self.relation.value
        held = set(design.held_super_attributes.get(etype, ()))
        pairs = set(design.held_pairs.get(etype, {}).get(relation, ()))
        if self.hold_out is HoldOut.SUPER_ATTRIBUTE:
            return [s for s in every if s in held], list(every)
        if self.hold_out is HoldOut.PAIR:
            return [s for s in every if s in pairs], list(every)
        return ([s for s in every if s not in held and s not in pairs],
                [s for s in every if s not in held])


def _share(kinds: list[dict], side: int, total: float) -> list[tuple[dict, int, float]]:
    return [(k, side, total / len(kinds)) for k in kinds]


def _groups_of(etype: ElementType, relation: Relation, design: HeldOutDesign):
    """(Group fields, held-out side, weight) of one (type, relation)."""
    train, test = TRAIN_SIDE_SHARE, 1 - TRAIN_SIDE_SHARE
    if etype is ElementType.COUNT:
        # half the train side is unconstrained; the rest mirrors the test groups, so that
        # odd and even (low and high) counts answer equally often
        constrained = [{"counts": tuple(sorted(s))} for s in design.count_train_sets]
        tests = [{"counts": tuple(sorted(s))} for s in design.count_test_sets]
        return ([({}, 0, train / 2 if constrained else train)]
                + _share(constrained, 0, train / 2) + _share(tests, 1, test))
    if etype is ElementType.OBJECT:
        held = set(design.object_test_thirds.get(relation.value, ()))
        free = [{"third": k} for k in range(3) if k not in held]
        if not free:
            raise VpromError(f"split specs hold out every object third for {relation.value}; "
                             "no object matrix of it could train")
        return (_share(free, 0, train if held else 1.0)
                + _share([{"third": k} for k in sorted(held)], 1, test))
    tests = []
    if design.held_super_attributes.get(etype.value):
        tests.append({"hold_out": HoldOut.SUPER_ATTRIBUTE})
    if design.held_pairs.get(etype.value, {}).get(relation.value):
        tests.append({"hold_out": HoldOut.PAIR})
    return [({}, 0, train if tests else 1.0)] + _share(tests, 1, test)


def _apportion(total: int, weights: Sequence[float]) -> list[int]:
    """Integers summing to `total` in proportion to `weights` (largest remainder)."""
    w = np.asarray(weights, dtype=float)
    exact = total * w / w.sum()
    out = np.floor(exact).astype(int)
    for k in np.argsort(-(exact - out), kind="stable")[: total - out.sum()]:
        out[k] += 1
    return out.tolist()


@dataclass
class MatrixPlan:
    scale: float
    seed: int
    design: HeldOutDesign
    groups: list[Group]
    group_of: np.ndarray  # int16 per matrix
    neutral_side: np.ndarray  # int8 per matrix
    answer: np.ndarray  # int8 per matrix

    def __len__(self) -> int:
        return len(self.group_of)

    def cells(self) -> np.ndarray:
        """Per matrix, the cell its crops come from (`pool_index.cell_of`)."""
        held = np.array([g.held_side for g in self.groups], dtype=np.int64)
        return cell_of(self.neutral_side.astype(np.int64), held[self.group_of.astype(np.int64)])


def make_plan(scale: float, seed: int, design: HeldOutDesign) -> MatrixPlan:
    if not scale > 0:
        raise VpromError(f"--scale must be positive, got {scale}")
    groups = [Group(etype, relation, side, weight, **fields) for etype in ElementType
              for relation in RELATIONS_OF[etype]
              for fields, side, weight in _groups_of(etype, relation, design)]
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
    return MatrixPlan(scale, seed, design, groups, group_of, neutral, answer)

