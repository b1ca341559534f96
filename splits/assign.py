"""The seven generalization splits: declarative specs (splits/*.json) and one pure assignment.

Each `<split>.json` holds `name`, `description` (the rule in words, as docs/generation.md
states it), `partition` + `test_fraction` (how Visual Genome images are dealt to sides) and `rule`:

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
panel; `train_ban(spec)` states them as a `vprom.splitting.TrainBan`, which generation uses
to draw train-side matrices that need no exclusion and `vprom verify` to count violations.
Relation x super-attribute pairs stay a rule on the matrix's own super-attribute: every
person shows an age, so "no Or matrix shows an age" could not be met, and a pair holds out a
relation applied to a super-attribute, which a matrix about another one does not exercise.

`assign` first computes this *natural* part from the matrix alone, then holds it against the
images: every panel's image has a side in the spec's partition (`vprom.sampling.
image_test_side`); the matrix gets its natural part only when all 16 images lie on that
side, else "excluded". So no image region is ever on both the train and the test side of a
split, whichever relation or element reaches it. Validation sets are chosen afterwards
from each split's train part (`choose_val`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

import numpy as np

from vprom.errors import VpromError
from vprom.records import COUNTS, N_CONTEXT, SPLITS, VAL_SIZE, ElementType, Matrix
from vprom.sampling import object_third, val_ids
from vprom.splitting import HeldOutDesign, PanelInfo, TrainBan

SPEC_DIR = Path(__file__).resolve().parent
RULE_TYPES = ("random", "counts", "super_attributes", "relation_super_attributes",
              "object_thirds")
ATTRIBUTE_TYPES = (ElementType.OBJECT_ATTRIBUTE.value, ElementType.HUMAN_ATTRIBUTE.value)
OBJECT_RELATIONS = ("and", "or", "union")
ALL_RELATIONS = ("and", "or", "union", "progression")


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
class SplitRules:
    """The loaded specs as generation and verification take them (`vprom.splitting`)."""

    specs: Mapping[str, SplitSpec]
    design: HeldOutDesign

    @property
    def partitions(self) -> dict[str, float]:
        return {s.partition: s.test_fraction for s in self.specs.values()}

    def assign(self, matrix: Matrix, panels: PanelInfo) -> dict[str, str]:
        return assign(matrix, panels, self.specs, self.design.train_bans)

    def choose_val(self, train_ids, seed: int, split: str,
                   scale: float) -> tuple[np.ndarray, np.ndarray]:
        return choose_val(train_ids, seed, split, scale)


def load_rules(folder: str | Path | None = None) -> SplitRules:
    """The split rules of the spec files in `folder` (default: this package's seven)."""
    specs = load_split_specs(folder)
    return SplitRules(specs, held_out_design(specs))


# ---------------------------------------------------------------- loading and validation

def load_split_specs(folder: str | Path | None = None) -> dict[str, SplitSpec]:
    """Read and validate every `<split>.json` in `folder` (default: this package)."""
    folder = Path(folder) if folder is not None else SPEC_DIR
    specs = {}
    for path in sorted(folder.glob("*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as e:
            raise VpromError(f"{path}: not a readable JSON split spec ({e})") from None
        spec = _spec(path, data)
        specs[spec.name] = spec
    missing = [s for s in SPLITS if s not in specs]
    if missing:
        raise VpromError(f"{folder}: no spec for split(s) {missing}; each split needs "
                         "<name>.json")
    fractions = {}
    for spec in specs.values():
        if fractions.setdefault(spec.partition, spec.test_fraction) != spec.test_fraction:
            raise VpromError(f"{folder}/{spec.name}.json: partition '{spec.partition}' has "
                             f"test_fraction {spec.test_fraction} here but "
                             f"{fractions[spec.partition]} in another spec; make them equal")
    return {s: specs[s] for s in SPLITS}


def _spec(path: Path, data) -> SplitSpec:
    def bad(what: str):
        return VpromError(f"{path}: {what}")

    if not isinstance(data, dict):
        raise bad("must hold a JSON object")
    for key in ("name", "description", "partition", "test_fraction", "rule"):
        if key not in data:
            raise bad(f"missing field '{key}'")
    name = data["name"]
    if name not in SPLITS or path.stem != name:
        raise bad(f"name '{name}' must be one of {list(SPLITS)} and match the file name")
    f = data["test_fraction"]
    if not isinstance(f, (int, float)) or not 0 < f < 1:
        raise bad(f"test_fraction {f!r} must be a number in (0, 1)")
    rule = data["rule"]
    if not isinstance(rule, dict) or rule.get("type") not in RULE_TYPES:
        raise bad(f"rule.type must be one of {list(RULE_TYPES)}")
    _check_rule(rule, bad)
    return SplitSpec(name=name, description=str(data["description"]),
                     partition=str(data["partition"]), test_fraction=float(f), rule=rule)


def _check_rule(rule: dict, bad) -> None:
    kind = rule["type"]
    if kind == "counts":
        train, test = set(rule.get("train", [])), set(rule.get("test", []))
        if not train or not test or train & test or not train | test <= set(COUNTS):
            raise bad("counts rule needs disjoint non-empty 'train' and 'test' lists of 1..10")
    elif kind == "super_attributes":
        test = rule.get("test")
        if not isinstance(test, dict) or not set(test) <= set(ATTRIBUTE_TYPES) or not all(
                isinstance(v, list) and v for v in test.values()):
            raise bad(f"super_attributes rule needs 'test': {{element type: [super-attributes]}}"
                      f" with element types from {list(ATTRIBUTE_TYPES)}")
    elif kind == "relation_super_attributes":
        test = rule.get("test")
        if not isinstance(test, dict) or not set(test) <= set(ATTRIBUTE_TYPES):
            raise bad("relation_super_attributes rule needs 'test': {element type: "
                      "{relation: super-attribute}}")
        for etype, pairs in test.items():
            if not isinstance(pairs, dict) or not set(pairs) <= set(OBJECT_RELATIONS):
                raise bad(f"{etype}: pairs must map relations {list(OBJECT_RELATIONS)} to a "
                          "super-attribute")
            if len(set(pairs.values())) != len(pairs):
                raise bad(f"{etype}: each relation needs a different super-attribute")
    elif kind == "object_thirds":
        test = rule.get("test")
        if not isinstance(test, dict) or not set(test) <= set(OBJECT_RELATIONS) or not all(
                t in (0, 1, 2) for t in test.values()):
            raise bad("object_thirds rule needs 'test': {relation: third 0, 1 or 2}")
        if not isinstance(rule.get("every_relation", False), bool):
            raise bad("object_thirds rule: 'every_relation' must be true or false")


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

def assign(matrix: Matrix, panels: PanelInfo, specs: Mapping[str, SplitSpec],
           bans: Mapping[str, TrainBan] | None = None) -> dict[str, str]:
    """split -> "train" | "test" | "excluded" (validation is chosen later from train)."""
    out = {}
    for name, spec in specs.items():
        sides = set(panels.sides[spec.partition])
        if len(sides) != 1:
            out[name] = "excluded"  # cannot happen for generated matrices; kept for safety
            continue
        side = "test" if sides.pop() else "train"
        if spec.rule_type == "random":
            natural = side
        else:
            ban = (bans or {}).get(name) if bans is not None else train_ban(spec)
            natural = _natural_part(spec.rule, matrix, panels)
            if natural == "train" and ban is not None and shows_banned(ban, matrix, panels):
                natural = "excluded"
        out[name] = natural if natural == side else "excluded"
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


def _natural_part(rule: dict, m: Matrix, panels: PanelInfo) -> str:
    kind, etype = rule["type"], m.element_type.value
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
        pair = rule["test"].get(etype, {}).get(m.relation.value)
        return "test" if pair is not None and pair == m.super_attribute else "train"
    if kind == "object_thirds":
        third = rule["test"].get(m.relation.value)
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
    return np.setdiff1d(train_ids, val), val
