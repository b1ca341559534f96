"""Tiny, hand-checkable DATASET.h5 files (and matching VG image folders) for the tests of
verify, audit, stats, show and export.

Every panel gets its own crop (so no image region is shared between matrices), every crop
carries only the label of the element it shows, and every matrix is valid by construction:

    and          (a a a) (b b b) (c c ?)      answer c
    or           (a b a) (c d d) (e f ?)      answer e; f is never a candidate
    union        (a b c) (b c a) (c a ?)      answer b
    progression  (s s+d s+2d) ... (u u+d ?)   answer u+2d (counts only)

Splits follow `fixture_assign`, a small rule set in the paper's spirit; a `bias` argument
builds deliberately flawed data sets for the audit tests.
"""

from __future__ import annotations

import dataclasses
from dataclasses import replace
from pathlib import Path

import h5py
import numpy as np
from PIL import Image, ImageDraw, ImageFont

from vprom.manifest import make_manifest
from vprom.domain import (
    LABEL_SEPARATOR,
    N_CANDIDATES,
    RELATIONS_OF,
    SPLITS,
    Crop,
    ElementType,
    Matrix,
    Relation,
)
from vprom.tables import MATRIX_COLUMNS, SPLIT_PARTS, CropTable, MatrixTable, set_manifest

OBJECT_ATTRIBUTES = {
    "color": ["red", "blue", "green", "yellow", "white", "black", "brown", "gray", "orange",
              "pink", "purple"],
    "material": ["wooden", "metal", "glass", "plastic", "stone", "brick", "leather", "paper",
                 "concrete", "ceramic"],
    "shape": ["round", "square", "rectangular", "triangular", "oval", "curved", "circular",
              "pointy", "flat", "tall"],
}
HUMAN_ATTRIBUTES = {
    "age": ["young", "old", "adult", "child", "baby", "elderly", "teenage", "toddler",
            "middle-aged", "senior"],
    "action": ["standing", "sitting", "walking", "running", "smiling", "talking", "playing",
               "eating", "holding", "looking"],
}
OBJECTS = ["dog", "cat", "car", "bus", "chair", "table", "cup", "bottle", "horse", "bench",
           "clock", "lamp", "bicycle", "umbrella"]
COUNTS = [str(n) for n in range(1, 11)]
COUNT_WORDS = ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"]
HELD_OBJECTS = {"dog", "bus", "cup", "clock"}
HELD_RELATION_ATTRIBUTE = {("and", "color"), ("or", "material"), ("union", "age")}
IMAGE_SIZE = (320, 240)
CROPS_PER_IMAGE = 4


def _pools(element_type: ElementType) -> dict[str, list[str]]:
    """super-attribute ('' for objects and counts) -> its elements."""
    return {ElementType.OBJECT_ATTRIBUTE: OBJECT_ATTRIBUTES,
            ElementType.HUMAN_ATTRIBUTE: HUMAN_ATTRIBUTES,
            ElementType.OBJECT: {"": OBJECTS}, ElementType.COUNT: {"": COUNTS}}[element_type]


def _rows(relation: Relation, chosen: list[str], rng: np.random.Generator):
    """8 context elements, the answer, and elements a distractor must not show."""
    a, b, c, d, e, f = chosen[:6]
    if relation is Relation.AND:
        return [a, a, a, b, b, b, c, c], c, {c}
    if relation is Relation.OR:
        return [a, b, a, c, d, d, e, f], e, {e, f}
    return [a, b, c, b, c, a, c, a], b, {a, b, c}


def _progression(rng: np.random.Generator) -> tuple[list[str], str]:
    step = int(rng.integers(1, 3))
    starts = rng.choice(np.arange(1, 11 - 2 * step), 3, replace=False)
    context = [str(s + k * step) for s in starts for k in range(3)][:8]
    return context, str(int(starts[2]) + 2 * step)


def _candidates(answer: str, pool: list[str], forbidden: set[str], rng, bias: str | None,
                answer_pos: int) -> list[str]:
    others = [e for e in pool if e not in forbidden]
    if bias == "odd":  # the distractors come in repeated pairs; the answer is the odd one
        picks = list(rng.choice(others, 3, replace=False))
        distractors = [picks[0], picks[0], picks[1], picks[1], picks[2], picks[2], picks[2]]
    elif bias == "mode":  # the answer's element is repeated among the candidates
        picks = list(rng.choice(others, 5, replace=False))
        distractors = [answer, answer] + picks
    else:
        distractors = list(rng.choice(others, N_CANDIDATES - 1, replace=False))
    distractors = [distractors[k] for k in rng.permutation(len(distractors))]
    return distractors[:answer_pos] + [answer] + distractors[answer_pos:]


def _matrix_elements(element_type: ElementType, relation: Relation, rng, bias, answer_pos):
    pools = _pools(element_type)
    super_attribute = sorted(pools)[int(rng.integers(len(pools)))]
    pool = pools[super_attribute]
    if relation is Relation.PROGRESSION:
        context, answer = _progression(rng)
        forbidden = {answer}
    else:
        chosen = [str(x) for x in rng.choice(pool, 6, replace=False)]
        context, answer, forbidden = _rows(relation, chosen, rng)
    return super_attribute, context + _candidates(answer, pool, forbidden, rng, bias,
                                                  answer_pos)


def fixture_assign(matrix: Matrix) -> dict[str, str]:
    """A small deterministic split rule set (train / test / excluded) in the paper's spirit."""
    t = matrix.element_type.value
    answer = matrix.elements[8 + matrix.answer]
    attribute = t in ("object_attribute", "human_attribute")
    out = {"neutral": "test" if matrix.id % 3 == 2 else "train"}
    out["interpolation"] = ("excluded" if t != "count" else
                            "train" if int(answer) % 2 else "test")
    out["extrapolation"] = ("excluded" if t != "count" else
                            "train" if int(answer) <= 5 else "test")
    out["held_out_attributes"] = ("excluded" if not attribute else "test" if
                                  matrix.super_attribute in ("shape", "texture", "action")
                                  else "train")
    out["held_out_objects"] = ("excluded" if t != "object" else
                               "test" if answer in HELD_OBJECTS else "train")
    out["held_out_relation_attribute_pairs"] = (
        "excluded" if not attribute else "test" if
        (matrix.relation.value, matrix.super_attribute) in HELD_RELATION_ATTRIBUTE else "train")
    out["held_out_relation_object_pairs"] = (
        "excluded" if t != "object" else
        "test" if (OBJECTS.index(answer) + len(matrix.relation.value)) % 3 == 0 else "train")
    return out


def _with_val(parts: dict[str, str], matrix_id: int) -> dict[str, str]:
    """Every 5th matrix on a train side is held out as validation."""
    return {s: ("val" if p == "train" and matrix_id % 5 == 0 else p) for s, p in parts.items()}


def build_records(n_per_relation: int = 2, seed: int = 0, bias: str | None = None,
                  element_types=tuple(ElementType)) -> tuple[list[Crop], list[Matrix]]:
    """Crops and matrices: `n_per_relation` matrices per element type × relation.

    bias: None (sound), 'position' (answer always candidate 1), 'odd' (answer is the odd one
    out), 'mode' (answer's element repeated), 'labels' (only answer crops carry 3 labels).
    """
    rng = np.random.default_rng(seed)
    crops: list[Crop] = []
    matrices: list[Matrix] = []
    for element_type in element_types:
        for relation in RELATIONS_OF[element_type]:
            for _ in range(n_per_relation):
                mid = len(matrices)
                answer = 0 if bias == "position" else int(rng.integers(N_CANDIDATES))
                sa, elements = _matrix_elements(element_type, relation, rng, bias, answer)
                panels = []
                for k, element in enumerate(elements):
                    crop = _crop(len(crops), element_type, element, sa,
                                 extra=(bias == "labels" and k == 8 + answer), rng=rng)
                    crops.append(crop)
                    panels.append(crop.crop_id)
                m = Matrix(mid, relation, element_type,
                           sa if element_type in (ElementType.OBJECT_ATTRIBUTE,
                                                  ElementType.HUMAN_ATTRIBUTE) else "",
                           tuple(panels), tuple(elements), answer)
                matrices.append(replace(m, splits=_with_val(fixture_assign(m), mid)))
    return crops, matrices


def _crop(i: int, element_type: ElementType, element: str, pool_sa: str, extra: bool,
          rng) -> Crop:
    """Crop i: the i-th of 4 boxes (quadrants) in image i // 4 + 1."""
    w, h = IMAGE_SIZE[0] // 2, IMAGE_SIZE[1] // 2
    q = i % CROPS_PER_IMAGE
    sa = _super_attribute_of(element_type, element) if pool_sa else ""
    phrase = (f"{COUNT_WORDS[int(element) - 1]} apples" if element_type is ElementType.COUNT
              else "")
    labels = (element,) + (("shiny", "big") if extra else ())
    return Crop(crop_id=1000 + i, image_id=i // CROPS_PER_IMAGE + 1, x=(q % 2) * w,
                y=(q // 2) * h, w=w - int(rng.integers(0, 20)), h=h - int(rng.integers(0, 20)),
                element_type=element_type, element=element, super_attribute=sa,
                source_id=5000 + i, phrase=phrase, labels=labels)


def _super_attribute_of(element_type: ElementType, element: str) -> str:
    for sa, elements in _pools(element_type).items():
        if element in elements:
            return sa
    return ""


def crop_table(crops: list[Crop]) -> CropTable:
    """`crops` as the columns of a crops table."""
    cols = {f.name: [getattr(c, f.name) for c in crops] for f in dataclasses.fields(CropTable)}
    cols["labels"] = [LABEL_SEPARATOR.join(labels) for labels in cols["labels"]]
    cols["element_type"] = [t.value for t in cols["element_type"]]
    return CropTable(**cols)


def matrix_table(matrices: list[Matrix]) -> MatrixTable:
    """`matrices` as the columns of a matrices table, with the split parts they record."""
    splits: dict = {}
    for m in matrices:
        for split, part in m.splits:
            parts = splits.setdefault(split, {p: [] for p in SPLIT_PARTS})
            if part in SPLIT_PARTS:
                parts[part].append(m.id)
    columns = {name: [getattr(m, name) for m in matrices] for name in MATRIX_COLUMNS}
    for name in ("relation", "element_type"):
        columns[name] = [value.value for value in columns[name]]
    return MatrixTable(**columns, splits=splits)


def write_dataset(path: Path, crops: list[Crop], matrices: list[Matrix],
                  manifest: bool = True) -> Path:
    """DATASET.h5 in the layout of docs/formats.md, with a manifest recording counts and hash."""
    from vprom.tables import content_hash

    path = Path(path)
    table = matrix_table(matrices)
    for split in SPLITS:  # a split that assigns nothing still has its (empty) group
        table.splits.setdefault(split, {p: np.zeros(0, np.int64) for p in
                                        ("train", "val", "test")})
    with h5py.File(path, "w") as h5:
        crop_table(crops).write(h5.create_group("crops"))
        table.write(h5.create_group("matrices"), h5.create_group("splits"))
    if manifest:
        counts = {"matrices": len(matrices), "crops": len(crops),
                  "splits": {s: {p: len(ids) for p, ids in parts.items()}
                             for s, parts in table.splits.items()}}
        with h5py.File(path, "a") as h5:
            set_manifest(h5, make_manifest("dataset", {"fixture": True}, 0, counts=counts,
                                           outputs={"content_hash": content_hash(path)}))
    return path


def make_dataset(path: Path, n_per_relation: int = 2, seed: int = 0,
                 bias: str | None = None) -> Path:
    crops, matrices = build_records(n_per_relation, seed, bias)
    return write_dataset(path, crops, matrices)


def write_images(vg_dir: Path, crops: list[Crop]) -> Path:
    """VG_100K/<image_id>.jpg for every crop's image, each quadrant naming its element."""
    folder = Path(vg_dir) / "VG_100K"
    folder.mkdir(parents=True, exist_ok=True)
    font = ImageFont.load_default(size=28)
    by_image: dict[int, list[Crop]] = {}
    for c in crops:
        by_image.setdefault(c.image_id, []).append(c)
    for image_id, members in sorted(by_image.items()):
        im = Image.new("RGB", IMAGE_SIZE, (235, 235, 235))
        draw = ImageDraw.Draw(im)
        for c in members:
            shade = (40 + (c.crop_id * 53) % 180, 90 + (c.crop_id * 29) % 140, 160)
            draw.rectangle([c.x, c.y, c.x + c.w - 1, c.y + c.h - 1], fill=shade)
            draw.text((c.x + 8, c.y + c.h // 2 - 14), c.element, fill=(0, 0, 0), font=font)
        im.save(folder / f"{image_id}.jpg", quality=90)
    return Path(vg_dir)


#: Pools for `generation`: every super-attribute the split specs name, 9+ elements each
#: (gender: 2, as in Visual Genome, so distractors must come from other super-attributes).
POOL_OBJECT_ATTRIBUTES = {
    **OBJECT_ATTRIBUTES,
    "scene": ["sunny", "cloudy", "snowy", "rainy", "dark", "bright", "foggy", "indoor",
              "outdoor"],
    "texture": ["smooth", "rough", "furry", "fluffy", "striped", "spotted", "shiny",
                "wrinkled", "bumpy"],
    "action": ["parked", "flying", "moving", "hanging", "floating", "stacked", "open",
               "closed", "lit"],
}
POOL_HUMAN_ATTRIBUTES = {
    **HUMAN_ATTRIBUTES,
    "hair style": ["curly", "bald", "blond", "long-haired", "short-haired", "ponytail",
                   "braided", "spiky", "wavy"],
    "clothing color": ["red-shirt", "blue-shirt", "white-shirt", "black-shirt", "green-shirt",
                       "yellow-shirt", "gray-shirt", "pink-shirt", "orange-shirt"],
    "gender": ["male", "female"],
    "clothing style": ["casual", "formal", "sleeveless", "short-sleeved", "long-sleeved",
                       "shirtless", "hooded", "striped-shirt", "suited"],
}
POOL_OBJECTS = [f"object{k}" for k in range(45)]


def write_pools(path: Path, images: int = 6000, seed: int = 0) -> Path:
    """A POOLS.h5 with one crop of each element type per image (4 quadrants)."""
    rng = np.random.default_rng(seed)
    crops = []

    def add(image_id, element_type, element, sa="", phrase=""):
        q = len(crops) % CROPS_PER_IMAGE
        crops.append(Crop(crop_id=len(crops), image_id=image_id, x=(q % 2) * 200,
                          y=(q // 2) * 200, w=150, h=150, element_type=element_type,
                          element=element, super_attribute=sa, source_id=len(crops) + 1,
                          phrase=phrase, labels=(element,)))

    for image_id in range(1, images + 1):
        for element_type, pools in ((ElementType.OBJECT_ATTRIBUTE, POOL_OBJECT_ATTRIBUTES),
                                    (ElementType.HUMAN_ATTRIBUTE, POOL_HUMAN_ATTRIBUTES)):
            sa = sorted(pools)[int(rng.integers(len(pools)))]
            add(image_id, element_type, pools[sa][int(rng.integers(len(pools[sa])))], sa)
        add(image_id, ElementType.OBJECT, POOL_OBJECTS[int(rng.integers(len(POOL_OBJECTS)))])
        n = int(rng.integers(1, 11))
        add(image_id, ElementType.COUNT, str(n), phrase=f"{COUNT_WORDS[n - 1]} apples")
    with h5py.File(path, "w") as h5:
        crop_table(crops).write(h5.create_group("crops"))
        set_manifest(h5, make_manifest("pools", {"fixture": True}, seed))
    return Path(path)
