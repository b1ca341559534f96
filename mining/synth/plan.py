"""Planning one image of the synthetic corpus: what is where, its VG records, and what the
miner must recover. Image i (id i+1) comes from `default_rng([seed, i])`: a 3×2 grid over a
two-band background, each used cell holding an entity of a kind drawn by `kind_weights`. Its
planner draws it, writes its records, injects and notes noise, and lists the expected crops
(full size: both sides >= `FULL_SIDE`; small: a side under `MIN_SIDE`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import msgspec
import numpy as np
from PIL import Image
from vprom.mining.synth.objects import background, draw_count, draw_object
from vprom.mining.synth.paint import muted
from vprom.mining.synth.people import draw_person
from vprom.mining.synth.spec import ALL_OBJECT_ATTRIBUTES, OBJECTS, SPEC, plural

from vprom.domain import COUNTS, MIN_SIDE

WIDTH, HEIGHT = 384, 288
COLS, ROWS = 3, 2
CELL_W, CELL_H = WIDTH // COLS, HEIGHT // ROWS
HORIZON = HEIGHT // 2
FULL_SIDE = MIN_SIDE + 4


@dataclass
class _Image:
    """Everything one image contributes: its VG records and truth."""

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

    def add_object(self, oid: int, name: str, category: str, box, attributes,
                   mode: str = "list", merged=()) -> None:
        """The object's records in objects.json and attributes.json (`mode`: see `_attr_record`)."""
        x, y, w, h = box
        self.objects.append({"synsets": _synset(category), "h": h, "object_id": oid,
                             "merged_object_ids": list(merged), "names": [name], "w": w,
                             "y": y, "x": x})
        self.attributes.append(_attr_record(oid, name, category, box, attributes, mode))


def _pick(rng: np.random.Generator, seq):
    return seq[int(rng.integers(len(seq)))]


def _messy(rng: np.random.Generator, text: str) -> str:
    """Upper case and stray spaces, as annotators typed them."""
    style = int(rng.integers(3))
    text = text.upper() if style == 0 else text.title() if style == 1 else text
    return " " * int(rng.integers(0, 3)) + text.replace(" ", "  ") + " " * int(rng.integers(1, 3))


def _synset(name: str) -> list[str]:
    return [name.replace(" ", "_") + ".n.01"]


def _attr_record(oid: int, name: str, category: str, box, attributes, mode="list") -> dict:
    """attributes.json's record; `mode` "list", "null" or "missing" attributes."""
    x, y, w, h = box
    rec = {"synsets": _synset(category), "h": h, "object_id": oid, "names": [name], "w": w}
    if mode == "null":
        rec["attributes"] = None
    elif mode == "list":
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
    lo_h = FULL_SIDE + 20 if tall else FULL_SIDE  # a person is taller than wide
    w, h = int(rng.integers(FULL_SIDE, CELL_W - 3)), int(rng.integers(lo_h, CELL_H - 5))
    if small:  # the same thing farther away: both sides scaled, the shorter under MIN_SIDE
        f = rng.uniform(0.45, 0.95 * (MIN_SIDE - 1) / min(w, h))
        w, h = int(w * f), int(h * f)
    return w, h


def _annotated_box(rng, img: _Image, box, col: int, row: int, oid: int,
                   small: bool = False) -> tuple[int, int, int, int]:
    """The box written: sometimes past the image edge, never a small one (clipped, it would fit)."""
    x, y, w, h = box
    edges = [e for e, ok in (("l", col == 0), ("r", col == COLS - 1), ("t", row == 0),
                             ("b", row == ROWS - 1)) if ok]
    if small or not edges or rng.random() >= SPEC.noise.outside:
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


def _sample_attribute_object(rng) -> tuple[str, dict, bool]:
    """(category, {super_attribute: attribute, or a colour pair}, impure), channels compatible."""
    if rng.random() < SPEC.noise.impure:
        category = _pick(rng, [c for c in OBJECTS if c not in ("tree", "flower")])
        pair = tuple(str(c) for c in rng.choice(SPEC.object_attributes["color"], 2, replace=False))
        return category, {"color": pair}, True
    sup, attr = ALL_OBJECT_ATTRIBUTES[int(rng.integers(len(ALL_OBJECT_ATTRIBUTES)))]
    category = _pick(rng, SPEC.can_show.get(attr, OBJECTS))
    attrs = {sup: attr}
    if rng.random() < SPEC.noise.second_attribute:
        options = [(s, a) for s, a in ALL_OBJECT_ATTRIBUTES
                   if s != sup and s not in SPEC.conflicts.get(sup, ()) and
                   category in SPEC.can_show.get(a, OBJECTS)]
        if options:
            s2, a2 = options[int(rng.integers(len(options)))]
            attrs[s2] = a2
    return category, attrs, False


def _plan_attribute_object(rng, img: _Image, im: Image.Image, col: int, row: int) -> None:
    category, attrs, impure = _sample_attribute_object(rng)
    small = rng.random() < SPEC.noise.small
    box = _cell_box(rng, col, row, _entity_size(rng, small))
    oid = img.new_id()
    number, phrase = _number_phrase(rng, category)
    draw_object(im, box, category, attrs, rng, number if category == "sign" else None)
    labels = [x for a in attrs.values() for x in (a if isinstance(a, tuple) else (a,))]
    raw_attrs = [_attribute_text(rng, img, a, oid) for a in labels]
    if category in SPEC.containers and rng.random() < SPEC.noise.semantic:
        raw_attrs.insert(int(rng.integers(len(raw_attrs) + 1)),
                         _pick(rng, SPEC.semantic_attributes))
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


def _number_phrase(rng, category: str) -> tuple[int | None, str | None]:
    """A number on a clock or sign and its description: "five o'clock", "number 7"."""
    if category not in ("clock", "sign") or rng.random() >= SPEC.noise.non_count_phrase:
        return None, None
    number = int(rng.integers(COUNTS[0], COUNTS[-1] + 1))
    word = SPEC.number_words[number - 1] if rng.random() < 0.5 else str(number)
    return number, f"{word} o'clock" if category == "clock" else f"number {word}"


def _add_object(rng, img: _Image, oid: int, name: str, category: str, box, raw_attrs) -> None:
    """The object's records; sometimes with a v1.4 merged duplicate in attributes.json."""
    merged = []
    if rng.random() < SPEC.noise.merged:
        merged.append(img.new_id())
        img.note("merged_duplicate", merged[0])
    img.add_object(oid, name, category, box, raw_attrs, merged=merged)
    for dup in merged:  # v1.2 attributes.json still lists the duplicate that v1.4 merged
        jitter = rng.integers(-2, 3, 4).tolist()
        dbox = tuple(a + b for a, b in zip(box, jitter))
        img.attributes.append(_attr_record(dup, name, category, dbox, list(raw_attrs)))


def _attribute_text(rng, img: _Image, attr: str, oid: int) -> str:
    if attr in SPEC.attribute_variants and rng.random() < SPEC.noise.attribute_variant:
        img.note("attribute_variant", oid)
        return _pick(rng, SPEC.attribute_variants[attr])
    if rng.random() < SPEC.noise.attribute_case_space:
        img.note("case_space", oid)
        return _messy(rng, attr)
    return attr


def _name_text(rng, img: _Image, name: str, oid: int) -> str:
    u = rng.random()
    if name in SPEC.name_variants and u < SPEC.noise.name_variant:
        img.note("name_variant", oid)
        return _pick(rng, SPEC.name_variants[name])
    if u > 1 - SPEC.noise.plural_name:
        img.note("plural_name", oid)
        return plural(name)
    if rng.random() < SPEC.noise.case_space:
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
    # A fixed number of uniformly drawn super-attributes, so no pool's crops carry a fixed set
    # of other labels; the labels past `base_labels`, a drawn gender and the name use `aux`.
    supers = list(SPEC.human_attributes)
    chosen = sorted(rng.choice(len(supers), SPEC.base_labels, replace=False).tolist())
    base = {supers[i]: _pick(rng, SPEC.human_attributes[supers[i]]) for i in chosen}
    oid = img.new_id()
    aux = np.random.default_rng([img.image_id, oid, 0x5045])
    rest = [i for i in range(len(supers)) if i not in chosen]
    more = sorted(aux.choice(rest, SPEC.human_labels - SPEC.base_labels, replace=False).tolist())
    extra = {supers[i]: _pick(aux, SPEC.human_attributes[supers[i]]) for i in more}
    attrs = {s: v for s in supers for v in (base.get(s, extra.get(s)),) if v is not None}
    shown_attrs = {"gender": _pick(aux, SPEC.human_attributes["gender"]), **attrs}
    small = rng.random() < SPEC.noise.small
    box = _cell_box(rng, col, row, _entity_size(rng, small, tall=True))
    draw_person(im, box, shown_attrs)
    name = _person_name(rng if "gender" in base else aux, shown_attrs)
    raw_attrs = ([_attribute_text(rng, img, a, oid) for a in base.values()]
                 + [_attribute_text(aux, img, a, oid) for a in extra.values()])
    shown = name
    if rng.random() < SPEC.noise.case_space:
        img.note("case_space", oid)
        shown = _messy(rng, name)
    abox = _annotated_box(rng, img, box, col, row, oid, small)
    img.add_object(oid, shown, name, abox, raw_attrs)
    if small:
        img.note("small_object", oid)
    else:
        img.expected.extend(("human_attribute", s, a, oid) for s, a in attrs.items())
    if base.get("age") == "young" and rng.random() < SPEC.noise.non_count_phrase:
        n = int(rng.integers(5, COUNTS[-1] + 1))  # an age that reads like a count
        word = SPEC.number_words[n - 1] if rng.random() < 0.5 else str(n)
        img.note("non_count_number", _region(img, f"a {word} years old {name}", abox))
    elif "action" in base:
        action = base["action"]
        _region(img, _pick(rng, (f"the {name} is {action}", f"a {name} {action}")), abox)
    else:
        _region(img, _describe(rng, [], name), abox)


def _person_name(rng, attrs: dict[str, str]) -> str:
    """man, woman, boy, girl by gender and youth, or "person"; the same whatever its labels."""
    gender, young = attrs.get("gender"), attrs.get("age") == "young"
    if gender is None or rng.random() < SPEC.noise.person_name:
        return "person"
    return {"male": "boy" if young else "man", "female": "girl" if young else "woman"}[gender]


def _plan_count(rng, img: _Image, im: Image.Image, col: int, row: int) -> None:
    n = int(rng.integers(COUNTS[0], COUNTS[-1] + 1))
    category = _pick(rng, OBJECTS)
    color = _pick(rng, SPEC.count_colors)
    small = rng.random() < SPEC.noise.small
    size = (int(rng.integers(FULL_SIDE + 4, CELL_W - 3)), int(rng.integers(FULL_SIDE, CELL_H - 5)))
    if small:
        size = (int(rng.integers(70, MIN_SIDE - 3)), int(rng.integers(60, MIN_SIDE - 3)))
    box = _cell_box(rng, col, row, size)
    # a plain mat far from the glyph colour, so that every glyph stands out (and counts)
    mats = (muted(rng, 195, 235), muted(rng, 60, 100))
    mat = max(mats, key=lambda m: max(abs(a - b) for a, b in zip(m, SPEC.colors[color])))
    glyphs = draw_count(im, box, category, SPEC.colors[color], n, mat, rng)
    word = SPEC.number_words[n - 1] if rng.random() < 0.6 else str(n)
    noun = category if n == 1 else plural(category)
    phrase = f"{word} {color} {noun}" if rng.random() < 0.5 else f"{word} {noun}"
    if rng.random() < SPEC.noise.case_space:
        phrase = _messy(rng, phrase)
    rid = _region(img, phrase, box)
    if small:
        img.note("small_region", rid)
    else:
        img.expected.append(("count", "", str(n), rid))
    if rng.random() < SPEC.noise.count_glyph_objects:  # annotators also boxed the little ones
        for gbox in glyphs:
            oid = img.new_id()
            img.add_object(oid, category, category, gbox, [color])
            img.note("small_object", oid)


def _plan_plain(rng, img: _Image, im: Image.Image, col: int, row: int) -> None:
    category = _pick(rng, OBJECTS)
    box = _cell_box(rng, col, row, _entity_size(rng, False))
    draw_object(im, box, category, {}, rng)
    oid = img.new_id()
    mode = "null" if rng.random() < SPEC.noise.null_attributes else "missing"
    img.note("null_attributes" if mode == "null" else "no_attributes_key", oid)
    name = _name_text(rng, img, category, oid)
    abox = _annotated_box(rng, img, box, col, row, oid)
    img.add_object(oid, name, category, abox, None, mode)
    img.expected.append(("object", "", category, oid))
    _region(img, _describe(rng, [], name), abox)


def _plan_background(rng, img: _Image) -> None:
    """The excluded stuff every photo has: sky above the horizon, ground below."""
    ground = _pick(rng, [o for o in SPEC.excluded_objects if o != "sky"])
    bands = (("sky", (0, 0, WIDTH, HORIZON), ("blue", "cloudy", "gray")),
             (ground, (0, HORIZON, WIDTH, HEIGHT - HORIZON),
              ("gray", "green", "brown", "wooden")))
    for (name, box, attrs), p in zip(bands, (SPEC.noise.sky, SPEC.noise.ground)):
        if rng.random() >= p:
            continue
        oid = img.new_id()
        raw = [_pick(rng, attrs)] if rng.random() < SPEC.noise.excluded_attributes else []
        img.add_object(oid, name, name, box, raw, "list" if raw else "missing")
        img.note("excluded_object", oid)


PLANNERS = {"attribute_object": _plan_attribute_object, "person": _plan_person,
            "count": _plan_count, "plain_object": _plan_plain}
_KINDS, _WEIGHTS = zip(*msgspec.structs.asdict(SPEC.kind_weights).items())
_KIND_P = np.array(_WEIGHTS) / sum(_WEIGHTS)


def render_image(seed: int, index: int) -> tuple[_Image, Image.Image]:
    """Plan and draw image `index` from its own generator (independent of every other)."""
    rng = np.random.default_rng([seed, index])
    img = _Image(image_id=index + 1)
    im = background(WIDTH, HEIGHT, HORIZON, rng)
    _plan_background(rng, img)
    cells = rng.permutation(COLS * ROWS)[: int(rng.integers(4, COLS * ROWS + 1))]
    for cell in cells:
        kind = _KINDS[int(rng.choice(len(_KINDS), p=_KIND_P))]
        PLANNERS[kind](rng, img, im, int(cell) % COLS, int(cell) // COLS)
    return img, im
