"""What the split specs mean, and `assign`, the one pure function that puts matrices in
train / test / excluded in every split.

Images are dealt to a partition's sides by a 64-bit hash of (seed, partition, image id), object
categories to thirds by a hash of the name. A spec's rule gives each matrix its natural part; a
natural "train" showing a label its split bans (`TrainBan`) is excluded, and a matrix keeps its
part only when all 16 images lie on that side. Validation ids are the train ids of least hash.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache

import numpy as np

from vprom.domain import N_CONTEXT, VAL_SIZE, ElementType
from vprom.errors import VpromError
from vprom.tables import string_codes

_MASK64 = (1 << 64) - 1
RULE_TYPES = ("random", "counts", "super_attributes", "relation_super_attributes",
              "object_thirds")
ALL_RELATIONS = ("and", "or", "union", "progression")


def _mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser on uint64 arrays (wrapping arithmetic is intended)."""
    x = x.astype(np.uint64, copy=True)
    with np.errstate(over="ignore"):
        x ^= x >> np.uint64(30)
        x *= np.uint64(0xBF58476D1CE4E5B9)
        x ^= x >> np.uint64(27)
        x *= np.uint64(0x94D049BB133111EB)
        x ^= x >> np.uint64(31)
    return x


@cache
def _salt(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "little")


def hash_unit(seed: int, name: str, keys) -> np.ndarray:
    """A uniform-looking float in [0, 1) per key, fixed by (seed, name, key)."""
    keys = np.asarray(keys, dtype=np.int64).astype(np.uint64)
    base = _mix64(np.array([(_salt(name) ^ (int(seed) & _MASK64))], dtype=np.uint64))
    h = _mix64(keys ^ base[0])
    return (h >> np.uint64(11)).astype(np.float64) / float(1 << 53)


def image_test_side(seed: int, partition: str, image_ids, test_fraction: float) -> np.ndarray:
    """1 where an image lies on the test side of `partition`, else 0 (int8 array)."""
    return (hash_unit(seed, "partition:" + partition, image_ids) < test_fraction).astype(np.int8)


@cache
def object_third(category: str) -> int:
    """The fixed third (0, 1 or 2) of an object category: sha256 of its name, mod 3."""
    return _salt("vprom-object-third:" + category) % 3


def image_sides(rules: SplitRules, seed: int, image_ids) -> dict[str, np.ndarray]:
    """partition -> the side (0 train, 1 test) of every image id, in the ids' shape."""
    ids = np.asarray(image_ids, dtype=np.int64)
    return {partition: image_test_side(seed, partition, ids.ravel(), fraction).reshape(ids.shape)
            for partition, fraction in rules.partitions.items()}


@dataclass(frozen=True)
class SplitSpec:
    name: str
    description: str
    partition: str
    test_fraction: float
    rule: dict = field(hash=False)

    @property
    def rule_type(self) -> str:
        return self.rule["type"]


@dataclass(frozen=True)
class TrainBan:
    """What a held-out split's train/val matrices may not show: super-attributes per label
    table, object thirds per relation."""

    super_attributes: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    object_thirds: Mapping[str, tuple[int, ...]] = field(default_factory=dict)


class ConceptTable:
    """Per crop its concepts as bits: (table, super-attribute) pairs and categories' thirds."""

    def __init__(self, concepts) -> None:
        index: dict[tuple, int] = {}  # concept sets repeat a lot between crops: each once
        self.which = np.fromiter((index.setdefault(key, len(index)) for key in concepts),
                                 dtype=np.int64, count=len(concepts))
        self.column: dict[tuple[str, str], int] = {}
        pairs, thirds = ([], []), ([], [])  # (distinct set, column) of each bit
        for k, (categories, label_super_attributes) in enumerate(index):
            for pair in label_super_attributes:
                pairs[0].append(k)
                pairs[1].append(self.column.setdefault(pair, len(self.column)))
            for category in categories:
                thirds[0].append(k)
                thirds[1].append(object_third(category))
        self.pairs = _bit_rows(len(index), len(self.column), pairs)
        self.thirds = _bit_rows(len(index), 3, thirds)

    def banned(self, ban: TrainBan, relation: str) -> np.ndarray:
        """Per crop: whether it shows, in a matrix of `relation`, a label `ban` holds out."""
        pairs = [self.column[(table, sa)] for table, sas in ban.super_attributes.items()
                 for sa in sas if (table, sa) in self.column]
        thirds = sorted({0, 1, 2} & set(ban.object_thirds.get(relation) or ()))
        return (self.pairs[:, pairs].any(axis=1) | self.thirds[:, thirds].any(axis=1)
                )[self.which]

    def bits(self, bans: Mapping[str, TrainBan]) -> np.ndarray:
        """Per crop, the (split, relation) pairs whose ban it shows, as bits (`ban_bit`)."""
        out = np.zeros(len(self.which), dtype=np.int64)
        for name, ban in bans.items():
            for relation in ALL_RELATIONS:
                out[self.banned(ban, relation)] |= ban_bit(bans, name, relation)
        return out


def _bit_rows(n: int, width: int, bits: tuple[list, list]) -> np.ndarray:
    out = np.zeros((n, width), dtype=bool)
    out[np.asarray(bits[0], dtype=np.int64), np.asarray(bits[1], dtype=np.int64)] = True
    return out


def ban_bit(bans: Mapping[str, TrainBan], split: str, relation: str) -> int:
    """The bit of (split, relation) in `ConceptTable.bits`: by the split's place in `bans`."""
    k, j = list(bans).index(split), ALL_RELATIONS.index(relation)
    return 1 << (k * len(ALL_RELATIONS) + j)


@dataclass(frozen=True)
class HeldOutDesign:
    """What the split specs hold out, as generation must plan for it."""

    neutral_partition: str
    neutral_test_fraction: float
    held_partition: str
    held_test_fraction: float
    count_train_sets: tuple[tuple[int, ...], ...]
    count_test_sets: tuple[tuple[int, ...], ...]
    held_super_attributes: Mapping[str, tuple[str, ...]]  # element type -> super-attributes
    held_pairs: Mapping[str, Mapping[str, tuple[str, ...]]]  # type -> relation -> s.-attrs
    object_test_thirds: Mapping[str, tuple[int, ...]]  # relation -> thirds
    #: held-out split -> what its training and validation matrices may not show at all
    train_bans: Mapping[str, TrainBan] = field(default_factory=dict)

    def train_side_ban(self, relation: str) -> TrainBan:
        """Every split's ban for `relation` at once: what trains in every split may not show."""
        sas: dict[str, set] = {}
        thirds: set[int] = set()
        for ban in self.train_bans.values():
            for table, names in ban.super_attributes.items():
                sas.setdefault(table, set()).update(names)
            thirds.update(ban.object_thirds.get(relation, ()))
        return TrainBan({t: tuple(sorted(v)) for t, v in sorted(sas.items())},
                        {relation: tuple(sorted(thirds))} if thirds else {})


def held_out_design(specs: Mapping[str, SplitSpec]) -> HeldOutDesign:
    """What generation must plan for so every split gets large train and test sets."""
    random = [s for s in specs.values() if s.rule_type == "random"]
    held = [s for s in specs.values() if s.rule_type != "random"]
    if len(random) != 1 or len({s.partition for s in held}) != 1 or (
            random[0].partition == held[0].partition):
        raise VpromError("split specs: expected one 'random' split with its own partition and "
                         "every other split sharing one other partition")
    count_train, count_test = [], []
    bans = {s.name: ban for s in held if (ban := train_ban(s)) is not None}
    held_sas: dict[str, set] = {}
    pairs: dict[str, dict[str, set]] = {}
    thirds: dict[str, set] = {}
    for s in held:
        rule = s.rule
        if s.rule_type == "counts":
            count_train.append(tuple(sorted(rule["train"])))
            count_test.append(tuple(sorted(rule["test"])))
        elif s.rule_type == "super_attributes":
            for etype, sas in rule["test"].items():
                held_sas.setdefault(etype, set()).update(sas)
        elif s.rule_type == "relation_super_attributes":
            for etype, by_relation in rule["test"].items():
                for relation, sa in by_relation.items():
                    pairs.setdefault(etype, {}).setdefault(relation, set()).add(sa)
        elif s.rule_type == "object_thirds":
            for relation, third in rule["test"].items():
                thirds.setdefault(relation, set()).add(third)
    return HeldOutDesign(
        neutral_partition=random[0].partition, neutral_test_fraction=random[0].test_fraction,
        held_partition=held[0].partition, held_test_fraction=held[0].test_fraction,
        count_train_sets=tuple(count_train), count_test_sets=tuple(count_test),
        held_super_attributes={k: tuple(sorted(v)) for k, v in sorted(held_sas.items())},
        held_pairs={k: {r: tuple(sorted(v)) for r, v in sorted(d.items())}
                    for k, d in sorted(pairs.items())},
        object_test_thirds={r: tuple(sorted(v)) for r, v in sorted(thirds.items())},
        train_bans=bans,
    )


def train_ban(spec: SplitSpec) -> TrainBan | None:
    """What a held-out split's train/val matrices may not show (None: only their elements)."""
    rule = spec.rule
    if spec.rule_type == "super_attributes":
        return TrainBan(super_attributes={t: tuple(sorted(v)) for t, v in rule["test"].items()})
    if spec.rule_type == "object_thirds":
        thirds = {r: (t,) for r, t in rule["test"].items()}
        if rule.get("every_relation"):
            every = tuple(sorted(set(rule["test"].values())))
            thirds = {r: thirds.get(r, every) for r in ALL_RELATIONS}
        return TrainBan(object_thirds=thirds)
    return None


@dataclass(frozen=True)
class SplitRules:
    """The loaded specs, as generation and verification take them (`splits.specs.load_rules`)."""

    specs: Mapping[str, SplitSpec]
    design: HeldOutDesign

    @property
    def partitions(self) -> dict[str, float]:
        """Every partition of images the splits use -> its test fraction."""
        return {s.partition: s.test_fraction for s in self.specs.values()}


#: the parts `assign` gives, by the codes it works in
PARTS = np.array(["train", "test", "excluded"], dtype=object)
TRAIN, TEST, EXCLUDED = range(3)


def assign(rules: SplitRules, matrices, sides: Mapping[str, np.ndarray],
           banned: np.ndarray) -> dict[str, np.ndarray]:
    """split -> per matrix "train", "test" or "excluded". `sides`: partition -> N×16 image
    sides (`image_sides`); `banned`: per matrix, its crops' `ConceptTable.bits` OR-ed."""
    relation = np.asarray(matrices.relation).astype(str)
    # a matrix whose images straddle a partition is excluded whatever its natural part
    side_of = {partition: np.where(s.all(axis=1), TEST,
                                   np.where((s == 0).all(axis=1), TRAIN, EXCLUDED))
               for partition, s in sides.items()}
    bans = rules.design.train_bans
    out = {}
    for name, spec in rules.specs.items():
        side = side_of[spec.partition]
        natural = side if spec.rule_type == "random" else natural_parts(spec.rule, matrices)
        if name in bans:
            bit = np.zeros(len(natural), dtype=np.int64)
            for r in ALL_RELATIONS:
                bit[relation == r] = ban_bit(bans, name, r)
            natural[(natural == TRAIN) & (banned & bit != 0)] = EXCLUDED
        out[name] = PARTS[np.where(natural == side, natural, EXCLUDED)]
    return out


def natural_parts(rule: dict, m) -> np.ndarray:
    """The part code `rule` gives every matrix of `m`, before its split's ban and its images."""
    kind, test = rule["type"], rule.get("test")
    etype, relation = np.asarray(m.element_type).astype(str), np.asarray(m.relation).astype(str)
    out = np.full(len(etype), TRAIN)
    if kind == "counts":
        rows = np.flatnonzero(etype == ElementType.COUNT.value)
        elements = m.elements[rows]
        answer = elements[np.arange(len(rows)), N_CONTEXT + m.answer[rows].astype(np.int64)]
        names, codes = string_codes(np.concatenate([elements[:, :N_CONTEXT], answer[:, None]],
                                                   axis=1))
        shown = np.array([int(e) for e in names], dtype=np.int64)[codes]
        train = np.isin(shown, list(rule["train"])).all(axis=1)
        held = np.isin(shown, list(test)).all(axis=1)
        out[rows] = np.where(train, TRAIN, np.where(held, TEST, EXCLUDED))
    elif kind == "super_attributes":
        sa = np.asarray(m.super_attribute).astype(str)
        for t, sas in test.items():
            out[(etype == t) & np.isin(sa, list(sas))] = TEST
    elif kind == "relation_super_attributes":
        sa = np.asarray(m.super_attribute).astype(str)
        for t, pairs in test.items():
            for r, pair in pairs.items():
                out[(etype == t) & (relation == r) & (sa == pair)] = TEST
    elif kind == "object_thirds":
        rows = np.flatnonzero(etype == ElementType.OBJECT.value)
        names, codes = string_codes(m.elements[rows])
        thirds = np.array([object_third(c) for c in names], dtype=np.int64)[codes]
        one = (thirds == thirds[:, :1]).all(axis=1)  # all 16 panels in one third
        for r, held_third in test.items():
            out[rows[one & (relation[rows] == r) & (thirds[:, 0] == held_third)]] = TEST
    else:
        raise VpromError(f"split rule type '{kind}' is unknown; expected one of "
                         f"{list(RULE_TYPES)}")
    return out


def val_size(scale: float) -> int:
    """The validation set size of every split: 8,000 at full scale, scaled and rounded."""
    return round(VAL_SIZE * scale)


def choose_val(train_ids, seed: int, split: str, scale: float) -> tuple[np.ndarray, np.ndarray]:
    """(train, val): val, the `val_size(scale)` ids of least hash of (seed, split, id)."""
    train_ids = np.asarray(train_ids, dtype=np.int64)
    size = val_size(scale)
    if size >= len(train_ids):
        raise VpromError(f"split {split}: its training set has {len(train_ids)} matrices, too "
                         f"few to hold out {size} for validation; raise --scale")
    val = np.zeros(0, dtype=np.int64)
    if size > 0:
        keys = hash_unit(seed, "val:" + split, train_ids)
        val = np.sort(train_ids[np.lexsort((train_ids, keys))[:size]])  # ties broken by id
    return np.setdiff1d(train_ids, val), val
