"""Tiny hand-written Visual Genome annotation folders covering the real files' quirks.

`write_vg(folder, files, zipped=...)` writes any set of records as VG's JSON files (optionally
as the `.json.zip` VG distributes). `CORPUS` is one small corpus exercising every quirk the
readers and the miner must absorb; the comments say which record tests what.
"""

from __future__ import annotations

import copy
import json
import zipfile
from pathlib import Path

import pytest

IMAGE_DATA = [
    {"width": 800, "url": "https://cs.stanford.edu/people/rak248/VG_100K/1.jpg", "height": 600,
     "image_id": 1, "coco_id": None, "flickr_id": 11},
    {"width": 500, "height": 400, "id": 2},  # v1.0 key: "id" instead of "image_id"
    {"width": 640, "height": 480, "image_id": 3},
    # image 4 is annotated below but missing here: its objects/regions are a counted skip
]


def _obj(oid, names, x, y, w, h, **extra):
    return {"synsets": ["x.n.01"], "h": h, "object_id": oid, "names": names, "w": w, "y": y,
            "x": x, **extra}


OBJECTS = [  # objects.json, v1.4 layout (merged_object_ids)
    {"image_id": 1, "image_url": "https://cs.stanford.edu/people/rak248/VG_100K/1.jpg",
     "objects": [
         _obj(101, ["Shirt "], 10, 10, 200, 150, merged_object_ids=[150]),  # upper case, space
         {"h": 120, "object_id": 102, "name": "car", "w": 150, "y": 50, "x": 300},  # "name", no synsets
         _obj(103, ["man"], 100, 200, 120, 300),               # a person: human attributes
         _obj(104, ["sky"], 0, 0, 800, 100),                   # excluded object: no pool at all
         _obj(105, ["dog"], 700, 500, 200, 150),               # partly outside: clipped to 100x100
         _obj(106, ["tree"], 10, 10, 0, 50),                   # zero-size: dropped
         _obj(107, ["tree"], 900, 10, 100, 100),               # outside the image: dropped
         _obj(108, ["Trees"], 400, 300, 99, 200),              # 99 px wide: too small
         {"id": 109, "names": ["bench."], "x": 450, "y": 300, "w": 120, "h": 110},  # "id", punctuation
         _obj(110, ["thingamajig"], 500, 100, 150, 150),       # unknown name
         _obj(111, ["shirts"], 10, 10, 200, 150),              # same box as 101: one region
     ]},
    {"image_id": 2, "objects": [
        _obj(201, ["horse"], 0, 0, 300, 300),
        _obj(202, ["woman"], 250, 100, 200, 250),
    ]},
    {"image_id": 3, "objects": []},
    {"image_id": 4, "objects": [_obj(401, ["car"], 0, 0, 300, 300)]},
]

ATTRIBUTES = [  # attributes.json, v1.2 layout: every object, "attributes" only when it has some
    {"image_id": 1, "attributes": [
        _obj(101, ["shirt"], 10, 10, 200, 150, attributes=["red"]),
        _obj(150, ["shirt"], 12, 10, 198, 150, attributes=["Striped"]),  # merged into 101 in v1.4
        _obj(102, ["car"], 300, 50, 150, 120, attributes=["red", "Blue", "wood"]),  # impure colour
        _obj(103, ["man"], 100, 200, 120, 300, attributes=["young", "standing", "Red"]),
        _obj(104, ["sky"], 0, 0, 800, 100, attributes=["blue"]),
        _obj(105, ["dog"], 700, 500, 200, 150),                # no "attributes" key
        _obj(110, ["thingamajig"], 500, 100, 150, 150, attributes=["shiny!!", "nice"]),
        _obj(111, ["shirts"], 10, 10, 200, 150, attributes=["striped"]),
    ]},
    {"image_id": 2, "attributes": [
        _obj(201, ["horse"], 0, 0, 300, 300, attributes=None),  # "attributes": null
        _obj(202, ["woman"], 250, 100, 200, 250, attributes=["Blond", "old", "young"]),
    ]},
    {"image_id": 3, "attributes": []},
    {"image_id": 4, "attributes": [_obj(401, ["car"], 0, 0, 300, 300, attributes=["red"])]},
]


def _region(rid, image_id, phrase, x, y, w, h):
    return {"region_id": rid, "width": w, "height": h, "image_id": image_id, "phrase": phrase,
            "y": y, "x": x}


REGIONS = [  # region_descriptions.json: top-level "id", boxes as width/height
    {"regions": [
        _region(1001, 1, "three dogs on the grass", 0, 0, 300, 300),      # count 3
        _region(1002, 1, "Five bowls of oatmeal", 10, 10, 50, 50),        # count, too small
        _region(1003, 1, "the clock says five o'clock", 0, 0, 200, 200),  # not a count: time
        _region(1004, 1, "a 10 year old boy", 0, 0, 200, 200),            # not a count: age
        _region(1005, 1, "a red car parked on the street", 0, 0, 200, 200),
        _region(1006, 1, "two horses", 600, 400, 300, 300),               # clipped to 200x200
        _region(1007, 1, "four birds", 0, 0, 0, 100),                     # zero-size
    ], "id": 1},
    {"regions": [_region(2001, 2, "4 zebras in a field", 0, 0, 200, 200)], "id": 2},
    {"regions": [], "id": 3},
    {"regions": [_region(4001, 4, "two cats", 0, 0, 300, 300)], "id": 4},
]

CORPUS = {"image_data": IMAGE_DATA, "objects": OBJECTS, "attributes": ATTRIBUTES,
          "region_descriptions": REGIONS}


def write_vg(folder: Path, files: dict | None = None, zipped: tuple[str, ...] = ()) -> Path:
    """Write `files` ({stem: records}, default CORPUS) as VG's JSON (zipped: those stems)."""
    folder.mkdir(parents=True, exist_ok=True)
    for stem, records in (files or CORPUS).items():
        text = records if isinstance(records, str) else json.dumps(records)
        if stem in zipped:
            with zipfile.ZipFile(folder / f"{stem}.json.zip", "w", zipfile.ZIP_DEFLATED) as z:
                z.writestr(f"{stem}.json", text)
        else:
            (folder / f"{stem}.json").write_text(text, encoding="utf-8")
    return folder


def corpus(**replace) -> dict:
    """A deep copy of CORPUS with some files replaced."""
    files = copy.deepcopy(CORPUS)
    files.update(replace)
    return files


@pytest.fixture
def vg_dir(tmp_path) -> Path:
    return write_vg(tmp_path / "vg")


@pytest.fixture(scope="module")
def mined(tmp_path_factory):
    """The CORPUS mined once (in-process) for the tests that only read the result."""
    from vprom.mining.pools import mine
    from vprom.tables import read_crop_table

    root = tmp_path_factory.mktemp("mined")
    vg = write_vg(root / "vg")
    report = mine(vg, root / "pools.h5", workers=1)
    return report, read_crop_table(root / "pools.h5", "POOLS.h5"), root / "pools.h5"


def plural(word: str) -> str:
    """The regular English plural, for tests that write plural nouns."""
    if word.endswith(("s", "x", "ch", "sh")):
        return word + "es"
    if word.endswith("y") and word[-2] not in "aeiou":
        return word[:-1] + "ies"
    return word + "s"
