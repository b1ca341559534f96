"""The split logic, in one place: how images are dealt, what each split holds out, and the
one pure function that assigns a matrix to train / test / excluded in every split.

The `splits` stage holds the seven declarative spec files and their loader
(`splits.specs.load_rules`); everything those specs MEAN is here, on the ground floor, so that
generation and verification (which stand beside `splits` and may not import it) use the same
code through the `SplitRules` the top floor hands them.

Images. `image_test_side` deals Visual Genome images to the train or test side of a
*partition* by a 64-bit hash of (seed, partition name, image id): the same image always lands
on the same side, whatever pool or matrix uses it, which is what keeps every region of a
split's test set out of its training set. The neutral split has its own partition; the six
held-out splits share one. `object_third` puts each object category in one of three fixed
thirds by a hash of its name alone, for the held-out-object splits.

Rules (`SplitSpec.rule`, one per spec file):

  random                     the matrix goes where its images are (neutral)
  counts                     count matrices: context + answer all in `train` -> train, all in
                             `test` -> test, otherwise excluded; other element types train
  super_attributes           attribute matrices of a `test` super-attribute -> test; any
                             other matrix trains only when none of its 16 panels carries a
                             label (explicit or implied) of a test super-attribute
  relation_super_attributes  attribute matrices whose (relation, super-attribute) is a test
                             pair -> test, others train
  object_thirds              object matrices of relation r all of whose 16 panels show r's
                             test third -> test; any other matrix of relation r trains only
                             when none of its panels carries a category of that third among
                             all its labels; with `"every_relation": true` the ban holds for
                             matrices of every relation (progression included)

The strict rules ("no panel carries a held-out label") read `PanelInfo.categories` and
`PanelInfo.label_super_attributes`, which the caller classifies from every label of every
panel; `train_ban(spec)` states them as a `TrainBan`, which generation uses to draw
train-side matrices that need no exclusion and `vprom verify` to count violations.
Relation x super-attribute pairs stay a rule on the matrix's own super-attribute: every
person shows an age, so "no Or matrix shows an age" could not be met, and a pair holds out a
relation applied to a super-attribute, which a matrix about another one does not exercise.
`HeldOutDesign` sums the specs up as generation must plan for them.

`assign` first computes this *natural* part from the matrix alone, then holds it against the
images: the matrix gets its natural part only when all 16 images lie on that side of the
spec's partition, else "excluded". So no image region is ever on both the train and the test
side of a split, whichever relation or element reaches it. Validation sets are chosen
afterwards from each split's train part (`choose_val`), by a hash of (seed, split, matrix
id): the choice depends only on the set of training ids, so merging shards reproduces the
single run's choice.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from typing import Iterable, Mapping

import numpy as np

from vprom.errors import VpromError
from vprom.domain import N_CONTEXT, VAL_SIZE, ElementType, Matrix
from vprom.tables import string_codes

_MASK64 = (1 << 64) - 1
RULE_TYPES = ("random", "counts", "super_attributes", "relation_super_attributes",
              "object_thirds")
ALL_RELATIONS = ("and", "or", "union", "progression")


# ---------------------------------------------------------------- images and categories

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


@lru_cache(maxsize=None)
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


@lru_cache(maxsize=None)
def object_third(category: str) -> int:
    """The fixed third (0, 1 or 2) of an object category: sha256 of its name, mod 3."""
    return _salt("vprom-object-third:" + category) % 3


def val_ids(train_ids, seed: int, split: str, size: int) -> np.ndarray:
    """The `size` training ids with the smallest hash of (seed, split, id), sorted."""
    train_ids = np.asarray(train_ids, dtype=np.int64)
    if size <= 0 or len(train_ids) == 0:
        return np.zeros(0, dtype=np.int64)
    keys = hash_unit(seed, "val:" + split, train_ids)
    order = np.lexsort((train_ids, keys))  # ties broken by id, so the choice is total
    return np.sort(train_ids[order[:size]])


def image_sides(rules: SplitRules, seed: int, image_ids) -> dict[str, np.ndarray]:
    """partition -> the side (0 train, 1 test) of every image id, in the ids' shape."""
    ids = np.asarray(image_ids, dtype=np.int64)
    return {partition: image_test_side(seed, partition, ids.ravel(), fraction).reshape(ids.shape)
            for partition, fraction in rules.partitions.items()}


# ---------------------------------------------------------------- what the splits hold out

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
    """What no training or validation matrix of one held-out split may show, on any of its
    16 panels, as any label (explicit or implied), not only as the element it shows.

    `super_attributes`: label table ("object_attribute" / "human_attribute") -> the
    super-attributes whose labels are banned in matrices of every relation.
    `object_thirds`: relation -> the object thirds (`object_third`) whose
    categories are banned in matrices of that relation.
    """

    super_attributes: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    object_thirds: Mapping[str, tuple[int, ...]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # flat forms for `shows_banned`, which runs for every panel of every matrix
        object.__setattr__(self, "_pairs", frozenset(
            (table, sa) for table, sas in self.super_attributes.items() for sa in sas))

    def shows_banned(self, relation: str, categories: Iterable[str],
                     label_super_attributes: Iterable[tuple[str, str]]) -> bool:
        """Whether a panel of a `relation` matrix carrying these categories and attribute
        labels (as (table, super-attribute) pairs) shows something this ban holds out."""
        if self._pairs and not self._pairs.isdisjoint(label_super_attributes):
            return True
        thirds = self.object_thirds.get(relation)
        return bool(thirds) and any(object_third(c) in thirds for c in categories)


class ConceptTable:
    """Per crop its concepts (object categories, attribute (table, super-attribute) pairs, as
    `LabelVocabulary.concepts` gives them), each distinct set once as two rows of bits: the
    pairs it holds and the thirds (`object_third`) its categories fall in. What a ban holds
    out of a crop (`TrainBan.shows_banned`) is then two numpy lookups for all crops at once,
    the same verdicts: a pair the ban holds out is among the crop's, or a category's third is
    among the relation's banned thirds."""

    def __init__(self, concepts, rows=None) -> None:
        """`concepts`: per crop its (categories, pairs); or with `rows` (per crop, an index
        into `concepts`), per row of crops that share them."""
        index: dict[tuple, int] = {}  # concept sets repeat a lot between crops: each once
        self.which = np.fromiter((index.setdefault(key, len(index)) for key in concepts),
                                 dtype=np.int64, count=len(concepts))
        if rows is not None:
            self.which = self.which[np.asarray(rows, dtype=np.int64)]
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
        return self._verdicts(ban, relation)[self.which]

    def bits(self, bans: Mapping[str, TrainBan]) -> np.ndarray:
        """Per crop: `ban_bits`."""
        out = np.zeros(len(self.pairs), dtype=np.int64)
        for name, ban in bans.items():
            for relation in ALL_RELATIONS:
                out[self._verdicts(ban, relation)] |= ban_bit(bans, name, relation)
        return out[self.which]

    def _verdicts(self, ban: TrainBan, relation: str) -> np.ndarray:
        """`ban.shows_banned(relation, *concepts)` for each distinct set of concepts."""
        pairs = [self.column[p] for p in ban._pairs if p in self.column]
        shown = self.pairs[:, pairs].any(axis=1)
        thirds = sorted({0, 1, 2} & set(ban.object_thirds.get(relation) or ()))
        return shown | self.thirds[:, thirds].any(axis=1)


def _bit_rows(n: int, width: int, bits: tuple[list, list]) -> np.ndarray:
    out = np.zeros((n, width), dtype=bool)
    out[np.asarray(bits[0], dtype=np.int64), np.asarray(bits[1], dtype=np.int64)] = True
    return out


def ban_bits(bans: Mapping[str, TrainBan], concepts) -> np.ndarray:
    """Per crop, the (split, relation) pairs for which it shows what the split's ban holds
    out, as bits (`ban_bit`); `concepts` as for `ConceptTable`. OR-ed over a matrix's panels
    they are `PanelInfo.banned`, which spares `assign` the per-panel check."""
    return ConceptTable(concepts).bits(bans)


def ban_bit(bans: Mapping[str, TrainBan], split: str, relation: str) -> int:
    """The bit of (split, relation) in `ban_bits`: by the split's place in `bans`."""
    return _ban_bits_of(tuple(bans))[split, relation]


@lru_cache(maxsize=64)
def _ban_bits_of(splits: tuple[str, ...]) -> dict[tuple[str, str], int]:
    return {(split, relation): 1 << (k * len(ALL_RELATIONS) + j)
            for k, split in enumerate(splits) for j, relation in enumerate(ALL_RELATIONS)}


@dataclass(frozen=True)
class HeldOutDesign:
    """What the split specs hold out, as generation must plan for it (`held_out_design`):
    which counts, super-attributes, relation x super-attribute pairs and object thirds go to
    test, how images are dealt to the two partitions, and per held-out split its `TrainBan`."""

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
        """The union of every split's ban for matrices of `relation`: what a matrix planned on
        the train side of the held-out partition may not show, so it trains in every split."""
        sas: dict[str, set] = {}
        thirds: set[int] = set()
        for ban in self.train_bans.values():
            for table, names in ban.super_attributes.items():
                sas.setdefault(table, set()).update(names)
            thirds.update(ban.object_thirds.get(relation, ()))
        return TrainBan({t: tuple(sorted(v)) for t, v in sorted(sas.items())},
                        {relation: tuple(sorted(thirds))} if thirds else {})


@dataclass(frozen=True)
class PanelInfo:
    """What `assign` needs beyond the matrix: per partition the side (0 train, 1 test) of each
    panel's image, each panel crop's super-attribute ("" for objects and counts), and per panel
    the object categories and attribute (table, super-attribute) pairs among ALL its labels
    (None: not known, the panel's own element stands for its labels)."""

    sides: Mapping[str, tuple[int, ...]]
    super_attributes: tuple[str, ...]
    categories: tuple[frozenset[str], ...] | None = None
    label_super_attributes: tuple[frozenset[tuple[str, str]], ...] | None = None
    #: `ban_bits` of the 16 panels' crops OR-ed together, in place of reading `categories`
    #: and `label_super_attributes` (None: read them)
    banned: int | None = None


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
    """What the training and validation matrices of a held-out split may not show (None: the
    split's rule looks at the matrix's own elements only)."""
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


# ---------------------------------------------------------------- assignment

@dataclass(frozen=True)
class SplitRules:
    """The loaded specs, as generation and verification take them (`splits.specs.load_rules`)."""

    specs: Mapping[str, SplitSpec]
    design: HeldOutDesign

    @classmethod
    def of(cls, specs: Mapping[str, SplitSpec]) -> SplitRules:
        return cls(specs, held_out_design(specs))

    @property
    def partitions(self) -> dict[str, float]:
        """Every partition of images the splits use -> its test fraction."""
        return {s.partition: s.test_fraction for s in self.specs.values()}

    def assign(self, matrix: Matrix, panels: PanelInfo) -> dict[str, str]:
        """split -> "train" | "test" | "excluded" (validation is chosen later from train)."""
        return assign(matrix, panels, self.specs, self.design.train_bans)

    def choose_val(self, train_ids, seed: int, split: str,
                   scale: float) -> tuple[np.ndarray, np.ndarray]:
        """(train, val): the validation ids drawn from a split's training ids."""
        return choose_val(train_ids, seed, split, scale)


def assign(matrix: Matrix, panels: PanelInfo, specs: Mapping[str, SplitSpec],
           bans: Mapping[str, TrainBan] | None = None) -> dict[str, str]:
    """split -> "train" | "test" | "excluded" (validation is chosen later from train)."""
    out = {}
    side_of = {}  # partition -> "train" / "test", or None where the panels straddle it
    for partition, sides in panels.sides.items():
        first = sides[0]
        side_of[partition] = None if sides.count(first) != len(sides) else (
            "test" if first else "train")
    # read once: the enums' `.value` is a property, and this runs for every matrix
    etype, relation = matrix.element_type.value, matrix.relation.value
    bits = _ban_bits_of(tuple(bans)) if panels.banned is not None and bans is not None \
        else None
    for name, spec in specs.items():
        side = side_of[spec.partition]
        if side is None:
            out[name] = "excluded"  # cannot happen for generated matrices; kept for safety
            continue
        if spec.rule_type == "random":
            natural = side
        else:
            ban = bans.get(name) if bans is not None else train_ban(spec)
            natural = _natural_part(spec.rule, matrix, etype, relation)
            if natural == "train" and ban is not None and (
                    panels.banned & bits[name, relation] if bits is not None
                    else shows_banned(ban, matrix, panels)):
                natural = "excluded"
        out[name] = natural if natural == side else "excluded"
    return out


def assign_all(matrices, sides: Mapping[str, np.ndarray], banned: np.ndarray,
               specs: Mapping[str, SplitSpec],
               bans: Mapping[str, TrainBan]) -> dict[str, np.ndarray]:
    """`assign` of every matrix of a table at once, for `vprom verify`: split -> an object
    array of "train" / "test" / "excluded". `matrices` has the columns of a `MatrixTable`
    (`element_type`, `relation`, `super_attribute`, `elements` N×16, `answer`); `sides`:
    partition -> N×16 sides of the panels' images; `banned`: per matrix the `ban_bits` of its
    16 crops OR-ed together. The same rules as `assign`, column by column (a test holds the
    two to the same parts on a generated data set)."""
    table = _RuleColumns(matrices)
    # a matrix whose images straddle a partition is excluded whatever its natural part
    side_of = {partition: np.where(s.all(axis=1), "test",
                                   np.where((s == 0).all(axis=1), "train", "excluded"))
               for partition, s in sides.items()}
    bits = _ban_bits_of(tuple(bans))
    out = {}
    for name, spec in specs.items():
        side = side_of[spec.partition]
        if spec.rule_type == "random":
            natural = side
        else:
            natural = table.natural_parts(spec.rule)
            if bans.get(name) is not None:
                bit = np.zeros(len(natural), dtype=np.int64)
                for r in ALL_RELATIONS:
                    bit[table.relation == r] = bits[name, r]
                natural[(natural == "train") & (banned & bit != 0)] = "excluded"
        out[name] = np.where(natural == side, natural, "excluded").astype(object)
    return out


class _RuleColumns:
    """What the rules read of every matrix (`assign_all`), each column made once."""

    def __init__(self, m) -> None:
        self.m, self.etype = m, m.element_type.astype(str)
        self.relation, self.super_attribute = m.relation.astype(str), m.super_attribute.astype(str)

    @cached_property
    def counts(self) -> tuple[np.ndarray, np.ndarray]:
        """(rows of the count matrices, the counts their context and answer show)."""
        rows = np.flatnonzero(self.etype == ElementType.COUNT.value)
        elements = self.m.elements[rows]
        answer = elements[np.arange(len(rows)), N_CONTEXT + self.m.answer[rows].astype(np.int64)]
        shown = np.concatenate([elements[:, :N_CONTEXT], answer[:, None]], axis=1)
        names, codes = string_codes(shown)
        return rows, np.array([int(e) for e in names], dtype=np.int64)[codes]

    @cached_property
    def thirds(self) -> tuple[np.ndarray, np.ndarray]:
        """(rows of the object matrices all of whose 16 panels show one object third, that
        third)."""
        rows = np.flatnonzero(self.etype == ElementType.OBJECT.value)
        names, codes = string_codes(self.m.elements[rows])
        thirds = np.array([object_third(c) for c in names], dtype=np.int64)[codes]
        one = (thirds == thirds[:, :1]).all(axis=1)
        return rows[one], thirds[one, 0]

    def natural_parts(self, rule: dict) -> np.ndarray:
        """`_natural_part` of every matrix."""
        kind, test = rule["type"], rule.get("test")
        etype, relation, sa = self.etype, self.relation, self.super_attribute
        out = np.full(len(etype), "train", dtype=object)
        if kind == "counts":
            rows, shown = self.counts
            train = np.isin(shown, list(rule["train"])).all(axis=1)
            held = np.isin(shown, list(test)).all(axis=1)
            out[rows] = np.where(train, "train", np.where(held, "test", "excluded"))
        elif kind == "super_attributes":
            for t, sas in test.items():
                out[(etype == t) & np.isin(sa, list(sas))] = "test"
        elif kind == "relation_super_attributes":
            for t, pairs in test.items():
                for r, pair in pairs.items():
                    out[(etype == t) & (relation == r) & (sa == pair)] = "test"
        elif kind == "object_thirds":
            rows, third = self.thirds
            for r, held_third in test.items():
                out[rows[(relation[rows] == r) & (third == held_third)]] = "test"
        else:
            raise VpromError(f"split rule type '{kind}' is unknown; expected one of "
                             f"{list(RULE_TYPES)}")
        return out


def panel_concepts(m: Matrix, panels: PanelInfo):
    """Per panel (categories, attribute (table, super-attribute) pairs) among all its labels;
    without that knowledge in `panels`, the panel's own element stands for its labels."""
    etype = m.element_type.value
    categories = panels.categories
    if categories is None:
        categories = tuple(frozenset({e}) if m.element_type is ElementType.OBJECT else frozenset()
                           for e in m.elements)
    label_sas = panels.label_super_attributes
    if label_sas is None:
        label_sas = tuple(frozenset({(etype, sa)}) if sa else frozenset()
                          for sa in panels.super_attributes)
    return categories, label_sas


def shows_banned(ban: TrainBan, m: Matrix, panels: PanelInfo) -> bool:
    """Whether any of the matrix's 16 panels shows what `ban` holds out of training."""
    categories, label_sas = panel_concepts(m, panels)
    relation = m.relation.value
    return any(ban.shows_banned(relation, c, s) for c, s in zip(categories, label_sas))


def _natural_part(rule: dict, m: Matrix, etype: str, relation: str) -> str:
    """The part `rule` gives matrix `m` (of element type `etype`, relation `relation`)
    before its split's ban."""
    kind = rule["type"]
    if kind == "counts":
        if m.element_type is not ElementType.COUNT:
            return "train"
        shown = {int(e) for e in m.elements[:N_CONTEXT]} | {int(m.elements[N_CONTEXT + m.answer])}
        if shown <= set(rule["train"]):
            return "train"
        return "test" if shown <= set(rule["test"]) else "excluded"
    if kind == "super_attributes":
        # any other matrix trains, unless it shows a held label (`assign` checks the ban)
        return "test" if m.super_attribute in rule["test"].get(etype, ()) else "train"
    if kind == "relation_super_attributes":
        pair = rule["test"].get(etype, {}).get(relation)
        return "test" if pair is not None and pair == m.super_attribute else "train"
    if kind == "object_thirds":
        third = rule["test"].get(relation)
        if m.element_type is ElementType.OBJECT and third is not None and {
                object_third(e) for e in m.elements} == {third}:
            return "test"
        return "train"
    raise VpromError(f"split rule type '{kind}' is unknown; expected one of {list(RULE_TYPES)}")


def val_size(scale: float) -> int:
    """The validation set size of every split: 8,000 at full scale, scaled and rounded."""
    return int(round(VAL_SIZE * scale))


def choose_val(train_ids, seed: int, split: str, scale: float) -> tuple[np.ndarray, np.ndarray]:
    """(train, val): the val ids are `val_size(scale)` of the training ids, fixed by a hash."""
    train_ids = np.asarray(train_ids, dtype=np.int64)
    size = val_size(scale)
    if size >= len(train_ids):
        raise VpromError(f"split {split}: its training set has {len(train_ids)} matrices, too "
                         f"few to hold out {size} for validation; raise --scale")
    val = val_ids(train_ids, seed, split, size)
    if (train_ids[1:] > train_ids[:-1]).all():  # sorted and unique, as generate gives them
        return train_ids[~np.isin(train_ids, val)], val  # `np.setdiff1d`'s, without a sort
    return np.setdiff1d(train_ids, val), val
