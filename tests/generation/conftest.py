"""Tiny element pools for the generation tests, built in memory with `CropTable`.

Every element has `CROPS_PER_ELEMENT` crops on distinct images; labels are realistic enough
to matter: an attribute crop also names its object and, often, an attribute of another
super-attribute (a red crop may also be wooden), so the solver has real work to do. A person
crop is named man, woman, boy, girl or person, and `VOCABULARY` says what those names imply
(a man is male and adult), so the known-value rule and the implied labels are exercised.
"""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest

from vprom.generation.labels import LabelVocabulary
from vprom.manifest import make_manifest
from vprom.tables import CropTable, set_manifest

OBJECT_ATTRIBUTES = {
    "color": ["red", "blue", "green", "yellow", "white"],
    "material": ["wooden", "metal", "glass", "plastic"],
    "scene": ["sunny", "cloudy", "snowy", "grassy"],
    "plant condition": ["leafy", "bare", "dry"],
    "action": ["parked", "flying", "hanging", "floating"],
    "shape": ["round", "square", "oval"],
    "texture": ["striped", "spotted", "smooth", "furry"],
}
HUMAN_ATTRIBUTES = {  # Visual Genome's sizes: 4, 7, 6, 2, 9 and 10 values
    "age": ["young", "old", "adult", "teenage"],
    "hair style": ["bald", "curly", "blond", "brunette", "wavy", "braided", "spiky"],
    "clothing style": ["casual", "formal", "sleeveless", "short-sleeved", "long-sleeved",
                       "shirtless"],
    "gender": ["male", "female"],
    "action": ["standing", "sitting", "walking", "running", "jumping", "skiing", "surfing",
               "skateboarding", "crouching"],
    "clothing color": ["pink", "purple", "orange", "gray", "red", "blue", "green", "white",
                       "black", "yellow"],
}
OBJECTS = [f"thing{k:02d}" for k in range(48)]
NOUNS = ["bowl", "cow", "sheep", "cup"]
PERSONS = ["man", "woman", "boy", "girl", "person"]
IMPLIED = {"man": ["male", "adult"], "woman": ["female", "adult"], "boy": ["male", "young"],
           "girl": ["female", "young"]}
CROPS_PER_ELEMENT = 80
#: What the tiny pools were "mined" with (POOLS.h5's `vocabulary` group).
VOCABULARY = LabelVocabulary(
    frozenset(OBJECTS),
    {"object_attribute": {a: sa for sa, v in OBJECT_ATTRIBUTES.items() for a in v},
     "human_attribute": {a: sa for sa, v in HUMAN_ATTRIBUTES.items() for a in v}},
    {k: tuple(v) for k, v in IMPLIED.items()})


def tiny_crops(crops_per_element: int = CROPS_PER_ELEMENT, seed: int = 7,
               drop: tuple[str, ...] = ()) -> CropTable:
    """A pool with every element type; `drop` leaves out the named elements."""
    rng = np.random.default_rng(seed)
    cols: dict[str, list] = {k: [] for k in ("crop_id", "image_id", "x", "y", "w", "h",
                                             "element_type", "element", "super_attribute",
                                             "source_id", "phrase", "labels")}

    def add(etype, element, sa, labels, phrase=""):
        n = len(cols["crop_id"])
        cols["crop_id"].append(1000 + n)
        cols["image_id"].append(int(rng.integers(1, 40_000)))
        cols["x"].append(int(rng.integers(0, 50)))
        cols["y"].append(int(rng.integers(0, 50)))
        cols["w"].append(100 + int(rng.integers(0, 100)))
        cols["h"].append(100 + int(rng.integers(0, 100)))
        cols["element_type"].append(etype)
        cols["element"].append(element)
        cols["super_attribute"].append(sa)
        cols["source_id"].append(50_000 + n)
        cols["phrase"].append(phrase)
        cols["labels"].append("|".join(dict.fromkeys(labels)))

    def attributes(etype, table, nouns, extra, per_element):
        for sa, names in table.items():
            others = [s for s in table if s != sa]
            for a in names:
                if a in drop:
                    continue
                for _ in range(per_element):
                    labels = [a, str(rng.choice(nouns))]
                    # co-occurring attributes of other super-attributes
                    for s in rng.choice(others, int(rng.integers(0, extra + 1)), replace=False):
                        labels.append(str(rng.choice(table[str(s)])))
                    add(etype, a, sa, labels)

    attributes("object_attribute", OBJECT_ATTRIBUTES, OBJECTS, 1, crops_per_element)
    # people carry more labels and crops: the candidates of a human matrix must carry known
    # values of each other's super-attributes, and an Or matrix over the 9 actions needs
    # every action in the thinnest cell (a ninth of the images)
    attributes("human_attribute", HUMAN_ATTRIBUTES, PERSONS, 2, 2 * crops_per_element)
    for obj in OBJECTS:
        if obj in drop:
            continue
        for _ in range(crops_per_element):
            labels = [obj, "red"] if rng.random() < 0.3 else [obj]
            if rng.random() < 0.1:  # a second name for the same region
                labels.append(OBJECTS[int(rng.integers(len(OBJECTS)))])
            add("object", obj, "", labels)
    for count in range(1, 11):
        if str(count) in drop:
            continue
        for _ in range(crops_per_element):
            noun = str(rng.choice(NOUNS))
            add("count", str(count), "", [str(count), noun], phrase=f"{count} {noun}s")
    return CropTable(**cols)


def write_pools(path: Path, crops: CropTable, vocabulary: LabelVocabulary | None = VOCABULARY
                ) -> Path:
    with h5py.File(path, "w") as h5:
        crops.write(h5.create_group("crops"))
        if vocabulary is not None:
            vocabulary.write(h5.create_group("vocabulary"))
        set_manifest(h5, make_manifest("pools", config={"test": True}))
    return path


#: A scale giving a few hundred matrices (235,000 * 0.0015 = 352).
SMALL_SCALE = 0.0015


@pytest.fixture(scope="session")
def crops() -> CropTable:
    return tiny_crops()


@pytest.fixture(scope="session")
def pools_file(tmp_path_factory, crops) -> Path:
    return write_pools(tmp_path_factory.mktemp("pools") / "pools.h5", crops)


@pytest.fixture(scope="session")
def small_dataset(crops):
    from vprom.generation.generate import generate_dataset
    from vprom.splits import load_rules

    return generate_dataset(crops, load_rules(), scale=SMALL_SCALE, seed=3,
                            vocabulary=VOCABULARY)
