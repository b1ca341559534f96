"""What the synthetic corpus shows and how it lies: `data/spec.json` (labels, noise, palette)
and `data/glyphs.json` (52 silhouettes, one per category of `OBJECTS`), validated at import.
An attribute goes only on a category that can show it (`can_show`), never with one sharing its
channel (`conflicts`); noise comes in proportions a miner must survive. msgspec checks shapes
and types, `_check` the names one table takes from another; a bad file stops with one line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import msgspec
from vprom.mining import vocab

from vprom.domain import COUNTS, MIN_SIDE
from vprom.errors import VpromError

DATA_DIR = Path(__file__).resolve().parent / "data"

Labels = tuple[str, ...]
_Channel = Annotated[int, msgspec.Meta(ge=0, le=255)]
RGB = tuple[_Channel, _Channel, _Channel]
_Probability = Annotated[float, msgspec.Meta(ge=0, le=1)]
_Weight = Annotated[float, msgspec.Meta(gt=0)]
Part = tuple[str | int | float | tuple[tuple[float, float], ...], ...]
# what follows each kind of part (n: a number, p: (x, y) points); "hole_" kinds cut it out
_PART_ARGS = {"ellipse": "nnnn", "rect": "nnnn", "pie": "nnnnnn", "arc": "nnnnnnn",
              "poly": "p", "line": "pn"}


class _Table(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    pass


class Noise(_Table):
    """The probability of each noise where it can occur."""

    second_attribute: _Probability
    name_variant: _Probability
    plural_name: _Probability
    case_space: _Probability
    attribute_variant: _Probability
    attribute_case_space: _Probability
    impure: _Probability
    semantic: _Probability
    small: _Probability
    outside: _Probability
    merged: _Probability
    non_count_phrase: _Probability
    count_glyph_objects: _Probability
    sky: _Probability
    ground: _Probability
    excluded_attributes: _Probability
    null_attributes: _Probability
    person_name: _Probability


class KindWeights(_Table):
    """How often each kind of entity fills a cell (relative weights)."""

    attribute_object: _Weight
    person: _Weight
    count: _Weight
    plain_object: _Weight


class CorpusSpec(_Table):
    """`data/spec.json`; its `_about` says what each table means."""

    object_attributes: dict[str, Labels]
    human_attributes: dict[str, Labels]
    excluded_objects: Labels
    semantic_attributes: Labels
    containers: Labels
    can_show: dict[str, Labels]
    conflicts: dict[str, frozenset[str]]
    count_colors: Labels
    number_words: Labels
    name_variants: dict[str, Labels]
    attribute_variants: dict[str, Labels]
    human_labels: int
    base_labels: int
    kind_weights: KindWeights
    noise: Noise
    noise_effects: dict[str, str]
    miner_rules: Labels
    colors: dict[str, RGB]
    uncolored: RGB
    skin: RGB
    outline: RGB
    materials: dict[str, tuple[RGB, RGB, str | None]]
    skies: dict[str, RGB]
    about: Labels = msgspec.field(default=(), name="_about")


class _Glyphs(_Table):
    glyphs: dict[str, tuple[Part, ...]]
    about: Labels = msgspec.field(default=(), name="_about")


def _decode(path: Path, kind):
    try:
        return msgspec.json.decode(path.read_bytes(), type=kind)
    except OSError as e:
        raise VpromError(f"{path}: cannot read it ({e.strerror}); reinstall vprom") from None
    except msgspec.ValidationError as e:
        raise VpromError(f"{path}: {e}; fix the file") from None
    except msgspec.DecodeError as e:
        raise VpromError(f"{path}: not valid JSON ({e}); fix the file") from None


def _check_glyphs(path: Path, glyphs: dict[str, tuple[Part, ...]]) -> None:
    for name, parts in glyphs.items():
        for part in parts:
            kind = str(part[0]).removeprefix("hole_") if part else ""
            args = "".join("p" if isinstance(a, tuple) else "s" if isinstance(a, str) else "n"
                           for a in part[1:])
            if _PART_ARGS.get(kind) != args:
                raise VpromError(f"{path}: glyph {name!r} has the malformed part {list(part)}; "
                                 "write it in one of the forms its '_about' lists")


def _check(path: Path, spec: CorpusSpec, objects: Labels) -> None:
    """Every name one table takes from another is there, and the counts fit."""
    labels = {a for table in (spec.object_attributes, spec.human_attributes)
              for values in table.values() for a in values}
    references = [  # (names, where they are used, the table that must hold them)
        (vocab.OBJECT_SUPER_ATTRIBUTES, "the paper's super-attributes", "object_attributes",
         spec.object_attributes),
        (vocab.HUMAN_SUPER_ATTRIBUTES, "the paper's super-attributes", "human_attributes",
         spec.human_attributes),
        ([c for cs in spec.can_show.values() for c in cs] + [*spec.containers, *spec.name_variants],
         "can_show, containers and name_variants", "the categories of glyphs.json", objects),
        ([*spec.can_show, *spec.attribute_variants], "can_show and attribute_variants",
         "the attribute labels", labels),
        ([s for k, v in spec.conflicts.items() for s in (k, *v)], "conflicts",
         "the paper's object super-attributes", vocab.OBJECT_SUPER_ATTRIBUTES),
        (spec.object_attributes.get("color", ()) + spec.count_colors
         + spec.human_attributes.get("clothing color", ()), "the colour labels", "colors",
         spec.colors),
        (spec.object_attributes.get("material", ()), "the material labels", "materials",
         spec.materials),
    ]
    for names, used, table, known in references:
        missing = sorted(set(names) - set(known))
        if missing:
            raise VpromError(f"{path}: {missing[0]!r} of {used} is missing from {table}; add it "
                             "there or fix the name")
    if len(spec.number_words) != len(COUNTS):
        raise VpromError(f"{path}: number_words must spell the counts {COUNTS[0]}-{COUNTS[-1]}")
    if not 1 <= spec.base_labels <= spec.human_labels <= len(vocab.HUMAN_SUPER_ATTRIBUTES):
        raise VpromError(f"{path}: 1 <= base_labels <= human_labels <= "
                         f"{len(vocab.HUMAN_SUPER_ATTRIBUTES)} must hold")


def _filled(path: Path, text: str) -> str:
    """`text` with {min_side}, {first_count} and {last_count} filled in."""
    try:
        return text.format(min_side=MIN_SIDE, first_count=COUNTS[0], last_count=COUNTS[-1])
    except (KeyError, IndexError, ValueError) as e:
        raise VpromError(f"{path}: {text!r} holds a placeholder other than {{min_side}}, "
                         f"{{first_count}} and {{last_count}} ({e!r}); fix it") from None


def load_corpus_spec(folder: Path = DATA_DIR) -> tuple[CorpusSpec, dict[str, tuple[Part, ...]]]:
    """The validated `spec.json` (placeholders filled in) and glyphs of `folder`."""
    glyphs = _decode(folder / "glyphs.json", _Glyphs).glyphs
    _check_glyphs(folder / "glyphs.json", glyphs)
    path = folder / "spec.json"
    spec = _decode(path, CorpusSpec)
    _check(path, spec, tuple(glyphs))
    texts = {"noise_effects": {k: _filled(path, v) for k, v in spec.noise_effects.items()},
             "miner_rules": tuple(_filled(path, rule) for rule in spec.miner_rules)}
    return msgspec.structs.replace(spec, **texts), glyphs


SPEC, GLYPHS = load_corpus_spec()
OBJECTS: Labels = tuple(GLYPHS)
ALL_OBJECT_ATTRIBUTES = tuple((s, a) for s, attrs in SPEC.object_attributes.items() for a in attrs)


def plural(noun: str) -> str:
    """The plural an annotator writes ("boxes", "dogs"); the vocabulary must map it back."""
    return noun + ("es" if noun.endswith(("x", "s", "ch", "sh")) else "s")


def check_vocabulary() -> None:
    """Refuse to write a corpus whose labels the miner's vocabulary would not recover."""
    v = vocab.load_vocabulary()
    problems = []
    for table, labels in ((v.object_attributes, SPEC.object_attributes),
                          (v.human_attributes, SPEC.human_attributes)):
        for sup, attrs in labels.items():
            problems += [f"attribute {a!r} ({sup})" for a in attrs if table.get(a) != sup]
    problems += [f"object {o!r}" for o in OBJECTS if o not in v.objects]
    problems += [f"person word {p!r}" for p in ("man", "woman", "boy", "girl", "person")
                 if p not in v.person_words]
    problems += [f"excluded object {o!r}" for o in SPEC.excluded_objects
                 if o not in v.excluded_objects]
    problems += [f"semantic attribute {a!r}" for a in SPEC.semantic_attributes
                 if a not in v.excluded_attributes]
    for canon, variants in (*SPEC.name_variants.items(), *SPEC.attribute_variants.items(),
                            *((o, (plural(o),)) for o in OBJECTS)):
        problems += [f"variant {x!r} -> {canon!r}" for x in variants if v.canonical(x) != canon]
    if problems:
        raise VpromError("mining/data vocabulary lacks labels the synthetic corpus renders: "
                         + "; ".join(problems) + " — restore those entries in mining/data/*.json")
