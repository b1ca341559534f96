"""The seven generalization splits as declarative specs: `splits/<split>.json`, loaded and
validated at start. Each holds `name`, `description`, `partition` + `test_fraction` (how
images are dealt) and `rule` (`vprom.splits.rules.RULE_TYPES`); a malformed file is refused
naming the file and the field.
"""

from __future__ import annotations

import json
from pathlib import Path

from vprom.splits.rules import RULE_TYPES, SplitRules, SplitSpec, held_out_design

from vprom.domain import COUNTS, SPLITS, ElementType
from vprom.errors import VpromError

SPEC_DIR = Path(__file__).resolve().parent
ATTRIBUTE_TYPES = (ElementType.OBJECT_ATTRIBUTE.value, ElementType.HUMAN_ATTRIBUTE.value)
OBJECT_RELATIONS = ("and", "or", "union")


def load_rules(folder: str | Path | None = None) -> SplitRules:
    """The split rules of the spec files in `folder` (default: this package's seven)."""
    specs = load_split_specs(folder)
    return SplitRules(specs, held_out_design(specs))


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
