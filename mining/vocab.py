"""Curated vocabularies (the JSON files under `mining/data/`) and label normalisation.
`load_vocabulary` reads and validates the tables, naming the file and the label it refuses.
`Vocabulary.canonical` maps a raw VG name to its canonical label: an alias wins, a known label
stays, a regular plural loses its ending only when the singular is known ("glass" keeps its s).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from vprom.errors import VpromError

DATA_DIR = Path(__file__).resolve().parent / "data"

OBJECT_SUPER_ATTRIBUTES = ("color", "material", "scene", "plant condition", "action", "shape",
                           "texture")
HUMAN_SUPER_ATTRIBUTES = ("age", "hair style", "clothing style", "gender", "action",
                          "clothing color")

# anything but a word character, whitespace, a hyphen or an apostrophe splits words; so does _
_PUNCT = re.compile(r"[^\w\s'\-]|_")
_QUOTES = str.maketrans({"\u2019": "'", "\u2018": "'", "`": "'", "\u2010": "-", "\u2013": "-"})


def normalize(label: str) -> str:
    """Lower-case, replace punctuation by spaces, collapse whitespace; hyphens and apostrophes
    survive only inside a word ("t-shirt", "man's"; "'red'" -> "red"); "" when nothing is left."""
    text = _PUNCT.sub(" ", label.translate(_QUOTES).lower())
    words = (word.strip("-'") for word in text.split())
    return " ".join(word for word in words if word)


def _plural_stems(label: str):
    """Singular candidates of a regular plural, most specific ending first."""
    if label.endswith("ies") and len(label) > 4:
        yield label[:-3] + "y"
    if label.endswith("es") and len(label) > 3:
        yield label[:-2]
    if label.endswith("s") and not label.endswith("ss") and len(label) > 2:
        yield label[:-1]


@dataclass(frozen=True)
class Vocabulary:
    """The validated vocabularies; build one with `load_vocabulary`."""

    object_attributes: Mapping[str, str]   # canonical attribute -> super-attribute
    human_attributes: Mapping[str, str]    # canonical attribute -> super-attribute
    objects: frozenset[str]                # object categories (canonical)
    person_words: frozenset[str]
    excluded_objects: frozenset[str]
    excluded_attributes: frozenset[str]
    aliases: Mapping[str, str]             # normalized variant -> canonical
    # canonical person word / category -> the human-attribute values it implies
    implied_labels: Mapping[str, tuple[str, ...]]
    known: frozenset[str]                  # every canonical label of every table
    _cache: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def canonical(self, label: str) -> str:
        """The canonical label of a raw name; unknown names come back normalised."""
        result = self._cache.get(label)
        if result is None:
            result = self._cache[label] = self._resolve(normalize(label))
        return result

    def _resolve(self, label: str) -> str:
        for candidate in (label, *_plural_stems(label)):
            if candidate in self.aliases:
                return self.aliases[candidate]
            if candidate in self.known:
                return candidate
        return label


def load_vocabulary(folder: Path | None = None) -> Vocabulary:
    """Read and validate the vocabulary files of `folder` (default: mining/data, cached)."""
    return _default() if folder is None else _load(Path(folder))


def _load(folder: Path) -> Vocabulary:
    object_attributes = _attribute_table(folder / "object_attributes.json",
                                         OBJECT_SUPER_ATTRIBUTES)
    human_attributes = _attribute_table(folder / "human_attributes.json", HUMAN_SUPER_ATTRIBUTES)
    objects = _label_set(folder / "objects.json", "objects")
    person_words = _label_set(folder / "person_words.json", "person_words")
    excluded_objects, excluded_attributes = _excluded(folder / "excluded.json")
    _check_disjoint(folder, objects, person_words, excluded_objects,
                    object_attributes, human_attributes, excluded_attributes)
    known = frozenset().union(object_attributes, human_attributes, objects, person_words,
                              excluded_objects, excluded_attributes)
    aliases = _aliases(folder / "aliases.json", known)
    implied = _implied(folder / "implied_labels.json", objects | person_words, human_attributes)
    return Vocabulary(object_attributes, human_attributes, objects, person_words,
                      excluded_objects, excluded_attributes, aliases, implied, known)


_default = functools.cache(functools.partial(_load, DATA_DIR))


def read_table(path: Path) -> dict:
    """A JSON object, refusing duplicate keys (json.load would silently keep the last)."""
    def no_duplicates(pairs):
        keys = [k for k, _ in pairs]
        for k in keys:
            if keys.count(k) > 1:
                raise VpromError(f"{path}: key {k!r} appears twice; keep one")
        return dict(pairs)

    try:
        data = json.loads(path.read_text(encoding="utf-8"), object_pairs_hook=no_duplicates)
    except FileNotFoundError:
        raise VpromError(f"{path}: vocabulary file missing; restore it from mining/data") from None
    except json.JSONDecodeError as e:
        raise VpromError(f"{path}: not valid JSON ({e}); fix the file") from None
    if not isinstance(data, dict):
        raise VpromError(f"{path}: expected a JSON object at the top level")
    return {k: v for k, v in data.items() if not k.startswith("_")}   # "_about": comments


def _labels(path: Path, where: str, values) -> list[str]:
    """A list of labels, each non-empty, normalised and listed once."""
    if not isinstance(values, list):
        raise VpromError(f"{path}: {where!r} must be a list of labels")
    seen: set[str] = set()
    for label in values:
        if not isinstance(label, str) or not label.strip():
            raise VpromError(f"{path}: empty or non-text label {label!r} in {where!r}; remove it")
        if normalize(label) != label:
            raise VpromError(f"{path}: label {label!r} in {where!r} is not normalised; "
                             f"write it as {normalize(label)!r}")
        if label in seen:
            raise VpromError(f"{path}: duplicate label {label!r} in {where!r}; list it once")
        seen.add(label)
    return values


def _attribute_table(path: Path, allowed: tuple[str, ...]) -> dict[str, str]:
    data = read_table(path)
    unknown = [name for name in data if name not in allowed]
    if unknown:
        raise VpromError(f"{path}: super-attribute {unknown[0]!r} is not one of the paper's "
                         f"{list(allowed)}; rename it")
    missing = [name for name in allowed if name not in data]
    if missing:
        raise VpromError(f"{path}: super-attribute {missing[0]!r} is missing; add it")
    table: dict[str, str] = {}
    for super_attribute in allowed:
        for attribute in _labels(path, super_attribute, data[super_attribute]):
            if attribute in table:
                raise VpromError(f"{path}: attribute {attribute!r} is in both {table[attribute]!r} "
                                 f"and {super_attribute!r}; keep it in one super-attribute")
            table[attribute] = super_attribute
    return table


def _label_set(path: Path, key: str) -> frozenset[str]:
    data = read_table(path)
    if key not in data:
        raise VpromError(f"{path}: expected a key {key!r} holding a list of labels")
    return frozenset(_labels(path, key, data[key]))


def _excluded(path: Path) -> tuple[frozenset[str], frozenset[str]]:
    """Excluded objects and attributes: {"objects": {reason: [...]}, "attributes": {...}}."""
    data = read_table(path)
    reasons = data.get("reasons", {})
    sets = []
    for kind in ("objects", "attributes"):
        groups = data.get(kind)
        if not isinstance(groups, dict):
            raise VpromError(f"{path}: expected {kind!r}: {{reason: [labels]}}")
        labels: list[str] = []
        for reason, values in groups.items():
            if reason not in reasons:
                raise VpromError(f"{path}: reason {reason!r} of {kind!r} is not explained "
                                 "under 'reasons'; add a sentence for it")
            labels += _labels(path, f"{kind}/{reason}", values)
        _labels(path, kind, labels)   # the same label under two reasons is a duplicate too
        sets.append(frozenset(labels))
    return sets[0], sets[1]


def _check_disjoint(folder, objects, person_words, excluded_objects,
                    object_attributes, human_attributes, excluded_attributes) -> None:
    checks = [
        (objects & excluded_objects, "excluded.json",
         "is an excluded object and a category in objects.json"),
        (objects & person_words, "person_words.json",
         "is a person word and a category in objects.json"),
        (person_words & excluded_objects, "excluded.json",
         "is an excluded object and a person word"),
        (excluded_attributes & (object_attributes.keys() | human_attributes.keys()),
         "excluded.json", "is an excluded attribute and listed in an attribute table"),
    ]
    for clash, file, what in checks:
        if clash:
            raise VpromError(f"{folder / file}: label {min(clash)!r} {what}; "
                             "remove it from one")


def _implied(path: Path, names: frozenset[str],
             human_attributes: Mapping[str, str]) -> dict[str, tuple[str, ...]]:
    """{"implied": {person word or category: [human attribute, ...]}}, all canonical."""
    table = read_table(path).get("implied")
    if not isinstance(table, dict):
        raise VpromError(f"{path}: expected a key 'implied' holding {{name: [human attribute, "
                         "...]}}")
    out: dict[str, tuple[str, ...]] = {}
    for name, values in table.items():
        _labels(path, "implied", [name])
        if name not in names:
            raise VpromError(f"{path}: {name!r} is neither a person word nor an object category "
                             "(written canonically); add it to person_words.json or fix the name")
        for value in _labels(path, f"implied/{name}", values):
            if value not in human_attributes:
                raise VpromError(f"{path}: {name!r} implies {value!r}, which is not in "
                                 "human_attributes.json; use a human attribute")
        if not values:
            raise VpromError(f"{path}: {name!r} implies nothing; remove it or list its values")
        out[name] = tuple(values)
    return out


def _aliases(path: Path, known: frozenset[str]) -> dict[str, str]:
    """Merge the alias groups and resolve chains to their canonical end."""
    raw: dict[str, str] = {}
    for group, pairs in read_table(path).items():
        if not isinstance(pairs, dict):
            raise VpromError(f"{path}: group {group!r} must be an object {{variant: canonical}}")
        for variant, target in pairs.items():
            _labels(path, group, [variant])
            _labels(path, group, [target])
            if variant in raw:
                raise VpromError(f"{path}: alias {variant!r} is listed twice; keep one")
            if variant in known:
                raise VpromError(f"{path}: alias variant {variant!r} is itself a canonical label; "
                                 "remove the alias or the label")
            raw[variant] = target
    return {variant: _resolve_chain(path, variant, raw, known) for variant in raw}


def _resolve_chain(path: Path, variant: str, raw: dict[str, str], known: frozenset[str]) -> str:
    chain = [variant]
    label = raw[variant]
    while label not in known:
        if label in chain:
            raise VpromError(f"{path}: alias cycle {' -> '.join(chain + [label])}; "
                             "point the variants at one canonical label")
        if label not in raw:
            raise VpromError(f"{path}: alias {' -> '.join(chain + [label])} does not end at a "
                             "canonical label; add the label to a vocabulary or fix the alias")
        chain.append(label)
        label = raw[label]
    return label
