"""`vprom synth`: a Visual Genome in miniature, in VG's own files, layout and schema.

The corpus exists so that the whole pipeline (`vprom mine` → generate → extract → train)
can run, and be tested, on any machine without the 15 GB download: `vprom mine` reads it
through exactly the code path it uses for the real Visual Genome. It is *not* a substitute
for Visual Genome when reporting results.

Output folder (VG's v1.2/v1.4 names and schemas):

    image_data.json           [{width, url, height, image_id, coco_id, flickr_id}]
    objects.json              [{image_id, objects: [{synsets, h, object_id, merged_object_ids,
                                                     names, w, y, x}], image_url}]      (v1.4)
    attributes.json           [{image_id, attributes: [{synsets, h, object_id, names, w,
                                                        [attributes], y, x}]}]          (v1.2)
    region_descriptions.json  [{regions: [{region_id, width, height, image_id, phrase, y, x}],
                                id}]
    VG_100K/<image_id>.jpg
    synth_truth.json          not VG: the injected noise and the pools the miner must recover

Algorithm. Image i (id i+1) is planned and drawn from its own generator
`numpy.random.default_rng([seed, i])`, so images are independent: a process pool renders
them in any order and the files are byte-identical to a one-process run. Each 384×288 image
is a 3×2 grid of cells over a two-band background with clutter; each used cell holds one
*entity*:

- an object with 1–2 object attributes of different super-attributes (attributes drawn
  uniformly over all elements, then a category that can show them: plant conditions on trees
  and flowers, "parked" on cars, ...), rendered on separate visual channels
  (`mining.synth_render` documents the label → rendering table);
- a person with 2 human attributes of super-attributes drawn uniformly (so no pool's crops
  carry a fixed set of other labels, and every person crop has as many); it is named man,
  woman, boy or girl by its gender and age labels, or "person" (always without a gender
  label, half the time with one, so the name does not mark the gender pool);
- a count group: N = 1..10 alike glyphs in one region box, described "seven red balls" /
  "7 balls";
- a plain object (no attributes).

Noise, in proportions a miner must survive, is layered on top and every case is recorded in
`synth_truth.json["noise"]` with the ids it touched: synonyms, plurals, upper case and stray
spaces in names, attributes and phrases; objects with no `attributes` key or `attributes:
null`; boxes reaching outside the image; objects and regions under 100 px; two-colour
(impure) objects; semantic attributes (open, empty); phrases with numbers that are not
counts ("five o'clock", "a 10 years old boy", "number 7"); v1.4 merged duplicates (a second
attributes.json record whose id is in the survivor's `merged_object_ids`); excluded
background objects (sky, road, water, ground, wall, grass), some with attributes.

The expected pools are derived while planning, under the miner's rules (box clipped to the
image, both sides >= 100 px; excluded objects feed no pool; a super-attribute contributes a
crop only with exactly one attribute; semantic attributes ignored; merged duplicates fold
into their survivor; counts only from phrases that state a count of an object).
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image

from mining import synth_render as R
from vprom.errors import VpromError
from vprom.io import atomic_dir, sha256_file
from vprom.records import COUNTS, MIN_SIDE

WIDTH, HEIGHT = 384, 288
COLS, ROWS = 3, 2
CELL_W, CELL_H = WIDTH // COLS, HEIGHT // ROWS
HORIZON = HEIGHT // 2
JPEG_QUALITY = 90
URL = "https://cs.stanford.edu/people/rak248/VG_100K/{}.jpg"
TRUTH = "synth_truth.json"
FILES = ("image_data.json", "objects.json", "attributes.json", "region_descriptions.json")

# --- the labels the corpus renders (all must be in the miner's vocabulary) -------------
OBJECT_ATTRIBUTES: dict[str, tuple[str, ...]] = {
    "color": ("red", "green", "blue", "yellow", "orange", "purple", "pink", "white", "black",
              "brown", "gray"),
    "material": tuple(R.MATERIALS),
    "scene": ("sunny", "cloudy", "snowy", "rainy", "foggy"),
    "plant condition": ("leafy", "bare", "dry", "blooming", "dead"),
    "action": ("parked", "flying", "hanging", "floating"),
    "shape": ("round", "square", "rectangular", "triangular", "curved"),
    "texture": ("striped", "spotted", "checkered", "plaid", "smooth", "furry"),
}
HUMAN_ATTRIBUTES: dict[str, tuple[str, ...]] = {
    "age": ("young", "old"),
    "hair style": ("bald", "curly", "blond"),
    "clothing style": ("casual", "formal", "sleeveless"),
    "gender": ("male", "female"),
    "action": ("standing", "sitting", "walking", "running"),
    "clothing color": ("red", "blue", "green", "white", "black", "yellow"),
}
OBJECTS: tuple[str, ...] = tuple(R.GLYPHS)
EXCLUDED_OBJECTS = ("sky", "road", "water", "ground", "wall", "grass")
SEMANTIC_ATTRIBUTES = ("open", "empty")
CONTAINERS = ("box", "cup", "bag", "bottle", "book", "bowl", "umbrella", "vase")
#: Which categories can show an attribute (absent: any category).
CAN_SHOW = {
    **{p: ("tree", "flower") for p in OBJECT_ATTRIBUTES["plant condition"]},
    "parked": ("car", "truck", "bicycle"), "flying": ("bird", "kite", "airplane"),
    "hanging": ("lamp", "sign", "clock", "bag", "hat", "flag"),
    "floating": ("ball", "bottle", "box", "book", "boat", "surfboard"),
}
#: Super-attributes drawn on the same channel cannot be combined on one object.
CONFLICTS = {
    "material": {"color", "texture", "plant condition"},
    "plant condition": {"color", "material", "texture", "action"},
    "color": {"material", "plant condition"},
    "texture": {"material", "plant condition"},
    "action": {"plant condition"},
}
COUNT_COLORS = ("red", "green", "blue", "yellow", "orange", "purple", "pink", "brown", "black")
NUMBER_WORDS = ("one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")
ALL_OBJECT_ATTRIBUTES = tuple((s, a) for s, attrs in OBJECT_ATTRIBUTES.items() for a in attrs)

#: Variants a miner must map back (checked against the vocabulary at start).
NAME_VARIANTS = {"dog": ("puppy",), "car": ("automobile", "sedan"), "tree": ("palm tree",),
                 "bird": ("pigeon",), "cat": ("kitten",), "flower": ("rose",)}
ATTRIBUTE_VARIANTS = {"gray": ("grey",), "wooden": ("wood",), "spotted": ("polka dot",),
                      "bare": ("leafless",), "round": ("circular",), "hanging": ("hung",),
                      "cloudy": ("overcast",), "furry": ("fuzzy",), "metal": ("metallic",),
                      "foggy": ("misty",), "old": ("elderly",), "blond": ("blonde",),
                      "sitting": ("seated",)}

#: Human attributes of every person (of distinct super-attributes).
HUMAN_LABELS = 2

#: Entity kinds (weights) and noise probabilities. Noise probabilities apply where the noise
#: can occur: a name variant only to categories that have one, outside-image boxes only to
#: entities in an edge cell, semantic attributes only to containers, non-count phrases only
#: to clocks, signs and young people.
KIND_WEIGHTS = {"attribute_object": 0.5, "person": 0.25, "count": 0.17, "plain_object": 0.08}
P = {
    "second_attribute": 0.35, "name_variant": 0.16, "plural_name": 0.06, "case_space": 0.08,
    "attribute_variant": 0.24, "attribute_case_space": 0.04, "impure": 0.04, "semantic": 0.25,
    "small": 0.05, "outside": 0.1, "merged": 0.04, "non_count_phrase": 0.5, "count_glyph_objects": 0.4,
    "sky": 0.5, "ground": 0.5, "excluded_attributes": 0.4, "null_attributes": 0.5,
    "person_name": 0.5,
}

NOISE_EFFECTS = {
    "name_variant": "kept: synonym/subtype mapped to its category",
    "plural_name": "kept: plural mapped to its singular",
    "case_space": "kept: upper case and stray spaces normalised",
    "attribute_variant": "kept: attribute spelling/synonym mapped to its canonical label",
    "no_attributes_key": "kept in the object pool; no attribute crop",
    "null_attributes": "kept in the object pool; no attribute crop",
    "outside_image": "kept: box clipped to the image (still >= 100 px)",
    "small_object": "dropped from every pool (a side under 100 px)",
    "small_region": "dropped: count region with a side under 100 px",
    "impure_color": "dropped from the color pool (two colours); kept in the object pool",
    "semantic_attribute": "attribute ignored (excluded); the object's other crops kept",
    "merged_duplicate": "folded into the survivor (its merged_object_ids): no crop of its own",
    "excluded_object": "dropped from every pool (background object)",
    "non_count_number": "no count crop: the number is not a count",
}


#: The miner's rules the expected pools assume (written into synth_truth.json).
RULES = [
    "boxes are clipped to the image; a box with a side under min_side px feeds no pool",
    "an object whose name is excluded (sky, road, water, ground, wall, grass) feeds no pool",
    "an object whose canonical name is a category gives one crop to the object pool",
    "person words (man, woman, boy, girl, person) take the human attribute table, other "
    "objects the object attribute table",
    "a super-attribute gives a crop only when the object has exactly one attribute of it "
    "(two colours: impure, no colour crop)",
    "excluded (semantic) attributes such as open and empty are ignored",
    "an attributes.json record whose id is in a survivor's merged_object_ids folds into the "
    "survivor (same labels here), giving no crop of its own",
    "a region gives a count crop when its phrase states a count 1-10 of an object; numbers "
    "in times, ages and labels are not counts",
]


# --- per-image planning ---------------------------------------------------------------
@dataclass
class _Image:
    """Everything one image contributes: its four VG records, truth and pixels."""

    image_id: int
    objects: list = field(default_factory=list)  # objects.json entries
    attributes: list = field(default_factory=list)  # attributes.json entries
    regions: list = field(default_factory=list)
    expected: list = field(default_factory=list)  # (element_type, super_attribute, element, id)
    noise: dict = field(default_factory=dict)  # kind -> [ids]
    next_id: int = 1

    def new_id(self) -> int:
        i = self.image_id * 1000 + self.next_id
        self.next_id += 1
        return i

    def note(self, kind: str, source_id: int) -> None:
        self.noise.setdefault(kind, []).append(source_id)


def _pick(rng: np.random.Generator, seq):
    return seq[int(rng.integers(len(seq)))]


def _plural(noun: str) -> str:
    return noun + ("es" if noun.endswith(("x", "s", "ch", "sh")) else "s")


def _messy(rng: np.random.Generator, text: str) -> str:
    """Upper case and stray spaces, as annotators typed them."""
    style = int(rng.integers(3))
    text = text.upper() if style == 0 else text.title() if style == 1 else text
    return " " * int(rng.integers(0, 3)) + text.replace(" ", "  ") + " " * int(rng.integers(1, 3))


def _synset(name: str) -> list[str]:
    return [name.replace(" ", "_") + ".n.01"]


def _obj_record(oid: int, names: list[str], synsets: list[str], box, merged=()) -> dict:
    x, y, w, h = box
    return {"synsets": synsets, "h": h, "object_id": oid, "merged_object_ids": list(merged),
            "names": names, "w": w, "y": y, "x": x}


def _attr_record(oid: int, names, synsets, box, attributes, attributes_mode="list") -> dict:
    x, y, w, h = box
    rec = {"synsets": synsets, "h": h, "object_id": oid, "names": names, "w": w}
    if attributes_mode == "null":
        rec["attributes"] = None
    elif attributes_mode == "list":
        rec["attributes"] = attributes
    rec["y"], rec["x"] = y, x
    return rec


def _region(img: _Image, phrase: str, box) -> int:
    rid = img.new_id()
    x, y, w, h = box
    img.regions.append({"region_id": rid, "width": w, "height": h, "image_id": img.image_id,
                        "phrase": phrase, "y": y, "x": x})
    return rid


def _cell_box(rng, col: int, row: int, size: tuple[int, int]) -> tuple[int, int, int, int]:
    w, h = size
    x0, y0 = col * CELL_W, row * CELL_H
    return (x0 + int(rng.integers(0, CELL_W - w + 1)), y0 + int(rng.integers(0, CELL_H - h + 1)), w, h)


def _entity_size(rng, small: bool, tall: bool = False) -> tuple[int, int]:
    lo_h = 124 if tall else 104
    w, h = int(rng.integers(104, CELL_W - 3)), int(rng.integers(lo_h, CELL_H - 5))
    if small:  # the same thing farther away: both sides scaled, the shorter under MIN_SIDE
        f = rng.uniform(0.45, 0.95 * (MIN_SIDE - 1) / min(w, h))
        w, h = int(w * f), int(h * f)
    return w, h


def _annotated_box(rng, img: _Image, box, col: int, row: int, oid: int,
                   small: bool = False) -> tuple[int, int, int, int]:
    """The box written to the files: sometimes stretched past the image edge (VG has those).

    Only boxes of full size are stretched: stretching a small one to the edge would make its
    clipped box large enough to keep, and blur what the noise is testing.
    """
    x, y, w, h = box
    edges = [e for e, ok in (("l", col == 0), ("r", col == COLS - 1), ("t", row == 0),
                             ("b", row == ROWS - 1)) if ok]
    if small or not edges or rng.random() >= P["outside"]:
        return box
    edge = _pick(rng, edges)
    d = int(rng.integers(3, 25))
    if edge == "l":
        x, w = -d, w + x + d
    elif edge == "r":
        w = WIDTH - x + d
    elif edge == "t":
        y, h = -d, h + y + d
    else:
        h = HEIGHT - y + d
    img.note("outside_image", oid)
    return (x, y, w, h)


def _choose_object_attributes(rng) -> tuple[str, dict[str, str]]:
    """A category and its attributes {super_attribute: attribute}, every channel compatible."""
    sup, attr = ALL_OBJECT_ATTRIBUTES[int(rng.integers(len(ALL_OBJECT_ATTRIBUTES)))]
    category = _pick(rng, CAN_SHOW.get(attr, OBJECTS))
    attrs = {sup: attr}
    if rng.random() < P["second_attribute"]:
        options = [(s, a) for s, a in ALL_OBJECT_ATTRIBUTES
                   if s != sup and s not in CONFLICTS.get(sup, ()) and
                   category in CAN_SHOW.get(a, OBJECTS)]
        if options:
            s2, a2 = options[int(rng.integers(len(options)))]
            attrs[s2] = a2
    return category, attrs


def _plan_attribute_object(rng, img: _Image, im: Image.Image, col: int, row: int) -> None:
    category, attrs, impure = _sample_attribute_object(rng)
    small = rng.random() < P["small"]
    box = _cell_box(rng, col, row, _entity_size(rng, small))
    oid = img.new_id()
    number, phrase = _number_phrase(rng, category)
    R.draw_object(im, box, category, attrs, rng, number if category == "sign" else None)
    labels = [x for a in attrs.values() for x in (a if isinstance(a, tuple) else (a,))]
    raw_attrs = [_attribute_text(rng, img, a, oid) for a in labels]
    if category in CONTAINERS and rng.random() < P["semantic"]:
        raw_attrs.insert(int(rng.integers(len(raw_attrs) + 1)), _pick(rng, SEMANTIC_ATTRIBUTES))
        img.note("semantic_attribute", oid)
    name = _name_text(rng, img, category, oid)
    abox = _annotated_box(rng, img, box, col, row, oid, small)
    _add_object(rng, img, oid, name, category, abox, raw_attrs)
    if small:
        img.note("small_object", oid)
    else:
        img.expected.append(("object", "", category, oid))
        img.expected.extend(("object_attribute", s, a, oid) for s, a in attrs.items()
                            if not isinstance(a, tuple))
        if impure:
            img.note("impure_color", oid)
    if phrase is None:
        _region(img, _describe(rng, labels[:1], name), abox)
    else:
        img.note("non_count_number", _region(img, phrase, abox))


def _sample_attribute_object(rng) -> tuple[str, dict, bool]:
    """(category, {super_attribute: attribute or a colour pair}, impure)."""
    if rng.random() < P["impure"]:
        category = _pick(rng, [c for c in OBJECTS if c not in ("tree", "flower")])
        pair = tuple(str(c) for c in rng.choice(OBJECT_ATTRIBUTES["color"], 2, replace=False))
        return category, {"color": pair}, True
    return (*_choose_object_attributes(rng), False)


def _number_phrase(rng, category: str) -> tuple[int | None, str | None]:
    """A number on a clock or sign and its description: "five o'clock", "number 7"."""
    if category not in ("clock", "sign") or rng.random() >= P["non_count_phrase"]:
        return None, None
    number = int(rng.integers(COUNTS[0], COUNTS[-1] + 1))
    word = NUMBER_WORDS[number - 1] if rng.random() < 0.5 else str(number)
    return number, f"{word} o'clock" if category == "clock" else f"number {word}"


def _add_object(rng, img: _Image, oid: int, name: str, category: str, box, raw_attrs) -> None:
    """The object's records; sometimes with a v1.4 merged duplicate in attributes.json."""
    merged = []
    if rng.random() < P["merged"]:
        merged.append(img.new_id())
        img.note("merged_duplicate", merged[0])
    img.objects.append(_obj_record(oid, [name], _synset(category), box, merged))
    img.attributes.append(_attr_record(oid, [name], _synset(category), box, raw_attrs))
    for dup in merged:  # v1.2 attributes.json still lists the duplicate that v1.4 merged
        jitter = rng.integers(-2, 3, 4).tolist()
        dbox = tuple(a + b for a, b in zip(box, jitter))
        img.attributes.append(_attr_record(dup, [name], _synset(category), dbox, list(raw_attrs)))


def _attribute_text(rng, img: _Image, attr: str, oid: int) -> str:
    if attr in ATTRIBUTE_VARIANTS and rng.random() < P["attribute_variant"]:
        img.note("attribute_variant", oid)
        return _pick(rng, ATTRIBUTE_VARIANTS[attr])
    if rng.random() < P["attribute_case_space"]:
        img.note("case_space", oid)
        return _messy(rng, attr)
    return attr


def _name_text(rng, img: _Image, name: str, oid: int) -> str:
    u = rng.random()
    if name in NAME_VARIANTS and u < P["name_variant"]:
        img.note("name_variant", oid)
        return _pick(rng, NAME_VARIANTS[name])
    if u > 1 - P["plural_name"]:
        img.note("plural_name", oid)
        return _plural(name)
    if rng.random() < P["case_space"]:
        img.note("case_space", oid)
        return _messy(rng, name)
    return name


def _describe(rng, labels, name: str) -> str:
    """A non-count region description (no number words)."""
    name = name.strip().lower()
    if not labels:
        return _pick(rng, (f"a {name}", f"the {name} here", f"{name} in the picture"))
    return _pick(rng, (f"a {labels[0]} {name}", f"the {name} is {labels[0]}", f"{labels[0]} {name}"))


def _plan_person(rng, img: _Image, im: Image.Image, col: int, row: int) -> None:
    # Two super-attributes drawn uniformly, so that a crop of one pool carries no fixed set of
    # labels from the others: were every person to carry an action, the distractors of an
    # action matrix would share the other actions and the answer's would be the one label no
    # other candidate carries. The number is fixed because distractors are picked to avoid
    # each other's elements, which favours crops with few labels: with a varying number the
    # answer would stand out by carrying more.
    supers = list(HUMAN_ATTRIBUTES)
    chosen = sorted(rng.choice(len(supers), HUMAN_LABELS, replace=False).tolist())
    attrs = {supers[i]: _pick(rng, HUMAN_ATTRIBUTES[supers[i]]) for i in chosen}
    small = rng.random() < P["small"]
    box = _cell_box(rng, col, row, _entity_size(rng, small, tall=True))
    R.draw_person(im, box, attrs, rng)
    name = _person_name(rng, attrs)
    oid = img.new_id()
    raw_attrs = [_attribute_text(rng, img, a, oid) for a in attrs.values()]
    shown = name
    if rng.random() < P["case_space"]:
        img.note("case_space", oid)
        shown = _messy(rng, name)
    abox = _annotated_box(rng, img, box, col, row, oid, small)
    img.objects.append(_obj_record(oid, [shown], _synset(name), abox))
    img.attributes.append(_attr_record(oid, [shown], _synset(name), abox, raw_attrs))
    if small:
        img.note("small_object", oid)
    else:
        img.expected.extend(("human_attribute", s, a, oid) for s, a in attrs.items())
    if attrs.get("age") == "young" and rng.random() < P["non_count_phrase"]:
        n = int(rng.integers(5, 11))
        word = NUMBER_WORDS[n - 1] if rng.random() < 0.5 else str(n)
        img.note("non_count_number", _region(img, f"a {word} years old {name}", abox))
    elif "action" in attrs:
        _region(img, _pick(rng, (f"the {name} is {attrs['action']}", f"a {name} {attrs['action']}")), abox)
    else:
        _region(img, _describe(rng, [], name), abox)


def _person_name(rng, attrs: dict[str, str]) -> str:
    """man, woman, boy, girl by the figure's gender (and youth), or "person".

    A gendered figure is still called "person" half the time, so that the gendered names are
    not the mark of the gender pool (its crops would be the only ones not named "person").
    """
    gender, young = attrs.get("gender"), attrs.get("age") == "young"
    if gender is None or rng.random() < P["person_name"]:
        return "person"
    return {"male": "boy" if young else "man", "female": "girl" if young else "woman"}[gender]


def _plan_count(rng, img: _Image, im: Image.Image, col: int, row: int) -> None:
    n = int(rng.integers(COUNTS[0], COUNTS[-1] + 1))
    category = _pick(rng, OBJECTS)
    color = _pick(rng, COUNT_COLORS)
    small = rng.random() < P["small"]
    size = (int(rng.integers(108, CELL_W - 3)), int(rng.integers(104, CELL_H - 5)))
    if small:
        size = (int(rng.integers(70, 97)), int(rng.integers(60, 97)))
    box = _cell_box(rng, col, row, size)
    # a plain mat far from the glyph colour, so that every glyph stands out (and counts)
    mats = (R.muted(rng, 195, 235), R.muted(rng, 60, 100))
    mat = max(mats, key=lambda m: max(abs(a - b) for a, b in zip(m, R.COLORS[color])))
    glyphs = R.draw_count(im, box, category, R.COLORS[color], n, mat, rng)
    word = NUMBER_WORDS[n - 1] if rng.random() < 0.6 else str(n)
    noun = category if n == 1 else _plural(category)
    phrase = f"{word} {color} {noun}" if rng.random() < 0.5 else f"{word} {noun}"
    if rng.random() < P["case_space"]:
        phrase = _messy(rng, phrase)
    rid = _region(img, phrase, box)
    if small:
        img.note("small_region", rid)
    else:
        img.expected.append(("count", "", str(n), rid))
    if rng.random() < P["count_glyph_objects"]:  # annotators also boxed the little ones
        for gbox in glyphs:
            oid = img.new_id()
            img.objects.append(_obj_record(oid, [category], _synset(category), gbox))
            img.attributes.append(_attr_record(oid, [category], _synset(category), gbox, [color]))
            img.note("small_object", oid)


def _plan_plain(rng, img: _Image, im: Image.Image, col: int, row: int) -> None:
    category = _pick(rng, OBJECTS)
    box = _cell_box(rng, col, row, _entity_size(rng, False))
    R.draw_object(im, box, category, {}, rng)
    oid = img.new_id()
    mode = "null" if rng.random() < P["null_attributes"] else "missing"
    img.note("null_attributes" if mode == "null" else "no_attributes_key", oid)
    name = _name_text(rng, img, category, oid)
    abox = _annotated_box(rng, img, box, col, row, oid)
    img.objects.append(_obj_record(oid, [name], _synset(category), abox))
    img.attributes.append(_attr_record(oid, [name], _synset(category), abox, None, mode))
    img.expected.append(("object", "", category, oid))
    _region(img, _describe(rng, [], name), abox)


def _plan_background(rng, img: _Image) -> None:
    """The excluded stuff every photo has: sky above the horizon, ground below."""
    bands = (("sky", (0, 0, WIDTH, HORIZON), ("blue", "cloudy", "gray")),
             (_pick(rng, EXCLUDED_OBJECTS[1:]), (0, HORIZON, WIDTH, HEIGHT - HORIZON),
              ("gray", "green", "brown", "wooden")))
    for (name, box, attrs), p in zip(bands, (P["sky"], P["ground"])):
        if rng.random() >= p:
            continue
        oid = img.new_id()
        raw = [_pick(rng, attrs)] if rng.random() < P["excluded_attributes"] else []
        img.objects.append(_obj_record(oid, [name], _synset(name), box))
        img.attributes.append(_attr_record(oid, [name], _synset(name), box, raw,
                                           "list" if raw else "missing"))
        img.note("excluded_object", oid)


PLANNERS = {"attribute_object": _plan_attribute_object, "person": _plan_person,
            "count": _plan_count, "plain_object": _plan_plain}
_KINDS = tuple(KIND_WEIGHTS)
_KIND_P = np.array([KIND_WEIGHTS[k] for k in _KINDS]) / sum(KIND_WEIGHTS.values())


def render_image(seed: int, index: int) -> tuple[_Image, Image.Image]:
    """Plan and draw image `index` from its own generator (independent of every other)."""
    rng = np.random.default_rng([seed, index])
    img = _Image(image_id=index + 1)
    im = R.background(WIDTH, HEIGHT, HORIZON, rng)
    _plan_background(rng, img)
    cells = rng.permutation(COLS * ROWS)[: int(rng.integers(4, COLS * ROWS + 1))]
    for cell in cells:
        kind = _KINDS[int(rng.choice(len(_KINDS), p=_KIND_P))]
        PLANNERS[kind](rng, img, im, int(cell) % COLS, int(cell) // COLS)
    return img, im


# --- writing --------------------------------------------------------------------------
def _dumps(obj) -> str:
    # VG's files are plain json.dump output: ", " and ": " separators, no indentation
    return json.dumps(obj, ensure_ascii=False)


def _render_to(args) -> tuple:
    """Worker: draw one image, save its JPEG, return its four records and its truth."""
    seed, index, folder = args
    img, im = render_image(seed, index)
    im.save(Path(folder) / f"{img.image_id}.jpg", "JPEG", quality=JPEG_QUALITY)
    iid = img.image_id
    records = (
        _dumps({"width": WIDTH, "url": URL.format(iid), "height": HEIGHT, "image_id": iid,
                "coco_id": None, "flickr_id": None}),
        _dumps({"image_id": iid, "objects": img.objects, "image_url": URL.format(iid)}),
        _dumps({"image_id": iid, "attributes": img.attributes}),
        _dumps({"regions": img.regions, "id": iid}),
    )
    return records, img.expected, img.noise, len(img.objects), len(img.regions)


@dataclass
class SynthSummary:
    """What `write_corpus` wrote, printable."""

    out: Path
    images: int
    objects: int
    regions: int
    pools: dict  # element_type -> super_attribute -> element -> crops
    noise: dict  # kind -> number of ids touched
    seconds: float

    def __str__(self) -> str:
        lines = [f"synthetic Visual Genome corpus: {self.out}",
                 f"  {self.images} images, {self.objects} objects, {self.regions} regions "
                 f"({self.seconds:.1f} s, {self.images / max(self.seconds, 1e-9):.0f} images/s)"]
        for et, supers in self.pools.items():
            crops = [n for els in supers.values() for n in els.values()]
            lines.append(f"  expected pool {et}: {len(crops)} elements, {sum(crops)} crops "
                         f"(min {min(crops) if crops else 0} per element)")
        lines.append("  noise injected: " + ", ".join(f"{k} {v}" for k, v in sorted(self.noise.items())))
        return "\n".join(lines)


def write_corpus(out: Path, images: int = 2000, seed: int = 0, workers: int = 1) -> SynthSummary:
    """Write the corpus of `images` images to folder `out` (replaced only when complete)."""
    out = Path(out)
    if images < 1:
        raise VpromError(f"--images {images}: need at least one image")
    if workers < 1:
        raise VpromError(f"--workers {workers}: need at least one process")
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not (out / TRUTH).exists())):
        raise VpromError(f"{out}: exists and is not a synthetic corpus (no {TRUTH}); "
                         "choose an empty or new folder")
    check_vocabulary()
    start = time.perf_counter()
    with atomic_dir(out) as tmp:
        folder = tmp / "VG_100K"
        folder.mkdir()
        totals = _write_files(tmp, folder, images, seed, workers)
        truth = _truth(tmp, images, seed, *totals[:2])
        (tmp / TRUTH).write_text(json.dumps(truth, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return SynthSummary(out, images, totals[2], totals[3], truth["pools"],
                        {k: len(v["ids"]) for k, v in truth["noise"].items()},
                        time.perf_counter() - start)


def _write_files(tmp: Path, folder: Path, images: int, seed: int, workers: int):
    from tqdm import tqdm

    handles = [open(tmp / name, "w", encoding="utf-8") for name in FILES]
    expected, noise = [], {}
    n_objects = n_regions = 0
    jobs = ((seed, i, str(folder)) for i in range(images))
    pool = multiprocessing.get_context("spawn").Pool(workers) if workers > 1 else None
    try:
        results = pool.imap(_render_to, jobs, chunksize=16) if pool else map(_render_to, jobs)
        for i, (records, exp, img_noise, n_obj, n_reg) in enumerate(
                tqdm(results, total=images, desc="synth", unit="img", disable=None)):
            for f, rec in zip(handles, records):
                f.write(("[" if i == 0 else ", ") + rec)
            expected.extend(exp)
            for kind, ids in img_noise.items():
                noise.setdefault(kind, []).extend(ids)
            n_objects += n_obj
            n_regions += n_reg
        for f in handles:
            f.write("]")
    finally:
        for f in handles:
            f.close()
        if pool:
            pool.close()
            pool.join()
    return expected, noise, n_objects, n_regions


def _truth(tmp: Path, images: int, seed: int, expected: list, noise: dict) -> dict:
    from vprom import __version__

    pools: dict = {}
    sources: dict = {}
    for et, sup, el, sid in expected:
        pools.setdefault(et, {}).setdefault(sup, Counter())[el] += 1
        sources.setdefault(et, {}).setdefault(sup, {}).setdefault(el, []).append(sid)
    jpegs = hashlib.sha256()
    for p in sorted((tmp / "VG_100K").iterdir(), key=lambda p: int(p.stem)):
        jpegs.update(p.read_bytes())
    return {
        "format": "vprom-synth-truth", "format_version": 1, "vprom_version": __version__,
        "seed": seed, "images": images, "min_side": MIN_SIDE, "image_size": [WIDTH, HEIGHT],
        "rules": RULES,
        "pools": {et: {s: dict(sorted(c.items())) for s, c in sorted(sup.items())}
                  for et, sup in sorted(pools.items())},
        "pool_sources": sources,
        "noise": {k: {"effect": NOISE_EFFECTS[k], "ids": sorted(v)} for k, v in sorted(noise.items())},
        "outputs": {**{name: sha256_file(tmp / name) for name in FILES},
                    "VG_100K/*.jpg": jpegs.hexdigest()},
    }


def check_vocabulary() -> None:
    """Refuse to write a corpus whose labels the miner's vocabulary would not recover."""
    from mining.vocab import load_vocabulary

    v = load_vocabulary()
    problems = []
    for table, labels in ((v.object_attributes, OBJECT_ATTRIBUTES), (v.human_attributes, HUMAN_ATTRIBUTES)):
        for sup, attrs in labels.items():
            problems += [f"attribute {a!r} ({sup})" for a in attrs if table.get(a) != sup]
    problems += [f"object {o!r}" for o in OBJECTS if o not in v.objects]
    problems += [f"person word {p!r}" for p in ("man", "woman", "boy", "girl", "person")
                 if p not in v.person_words]
    problems += [f"excluded object {o!r}" for o in EXCLUDED_OBJECTS if o not in v.excluded_objects]
    problems += [f"semantic attribute {a!r}" for a in SEMANTIC_ATTRIBUTES if a not in v.excluded_attributes]
    for canon, variants in (*NAME_VARIANTS.items(), *ATTRIBUTE_VARIANTS.items(),
                            *((o, (_plural(o),)) for o in OBJECTS)):
        problems += [f"variant {x!r} -> {canon!r}" for x in variants if v.canonical(x) != canon]
    if problems:
        raise VpromError("mining/data vocabulary lacks labels the synthetic corpus renders: "
                         + "; ".join(problems) + " — restore those entries in mining/data/*.json")
