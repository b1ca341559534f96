"""A tiny Visual Genome folder made of real photographs, for tests that need real pixels.

The photographs ship inside wheels the test extra already installs: scikit-image's
`astronaut`, `coffee`, `chelsea` and `rocket`, and matplotlib's `grace_hopper.jpg`. Each gets
hand-drawn boxes and labels (`PHOTOS`) written in Visual Genome's own files and schema, so
`mining.pools.mine` reads the folder exactly like the real thing. The annotations include a
few cases the miner must handle on real data: boxes under 100 px, a part (eye) and a
background object (sky), two-colour (impure) flags, an object whose attributes key is
missing, a count phrase and a non-count phrase.

`EXPECTED_CROPS` lists what the miner must produce from it; `photo_crops` builds one object
crop per annotated object (whatever its size) for feature-extraction tests;
`check_vg_schema` validates any VG-format folder (this one or the synthetic corpus).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from PIL import Image

from vprom.domain import Crop
from tests.dataset_fixture import crop_table
from vprom.tables import CropTable

URL = "https://cs.stanford.edu/people/rak248/VG_100K/{}.jpg"

# image id -> (source, objects [(object_id, name, (x, y, w, h), attributes or None)],
#              regions [(region_id, phrase, (x, y, w, h))])
PHOTOS: dict[int, tuple[str, list, list]] = {
    1: ("skimage:astronaut", [
        (101, "woman", (20, 10, 350, 502), ["female", "smiling"]),
        (102, "flag", (0, 0, 100, 512), ["red", "white"]),            # impure colour
        (103, "helmet", (275, 340, 237, 172), ["black", "round"]),
        (104, "patch", (135, 345, 75, 80), ["purple"]),               # under 100 px
    ], [(151, "a woman in an orange space suit", (20, 10, 350, 502))]),
    2: ("skimage:coffee", [
        (201, "cup", (170, 15, 250, 290), ["white"]),
        (202, "saucer", (75, 90, 405, 300), ["red"]),
        (203, "spoon", (320, 65, 105, 265), ["metal"]),
        (204, "table", (0, 0, 600, 400), ["wooden"]),
    ], [(251, "a cup of coffee on a saucer", (75, 15, 405, 375))]),
    3: ("skimage:chelsea", [
        (301, "cat", (0, 0, 451, 300), ["brown", "striped"]),
        (302, "eye", (135, 85, 70, 65), ["green"]),                   # a part, and small
    ], [(351, "one brown cat", (0, 0, 451, 300))]),
    4: ("skimage:rocket", [
        (401, "rocket", (300, 125, 45, 285), ["white"]),              # 45 px wide
        (402, "tower", (0, 0, 100, 427), ["metal"]),
        (403, "sky", (0, 0, 640, 350), ["blue"]),                     # background object
    ], [(451, "four towers", (0, 0, 640, 427)),
        (452, "launch at five o'clock", (0, 0, 640, 427))]),
    5: ("matplotlib:grace_hopper.jpg", [
        (501, "woman", (20, 20, 490, 580), ["old", "female", "formal"]),
        (502, "hat", (150, 20, 225, 130), None),                      # no attributes key
        (503, "flag", (0, 0, 150, 560), ["red", "white", "blue"]),    # impure colour
    ], [(551, "an old woman in a navy uniform", (20, 20, 490, 580))]),
}

#: (element_type, super_attribute, element, source_id) the miner must produce, no more.
EXPECTED_CROPS = sorted([
    ("human_attribute", "gender", "female", 101),
    ("object", "", "flag", 102),
    ("object", "", "helmet", 103),
    ("object_attribute", "color", "black", 103),
    ("object_attribute", "shape", "round", 103),
    ("object", "", "cup", 201),
    ("object_attribute", "color", "white", 201),
    ("object", "", "saucer", 202),
    ("object_attribute", "color", "red", 202),
    ("object", "", "spoon", 203),
    ("object_attribute", "material", "metal", 203),
    ("object", "", "table", 204),
    ("object_attribute", "material", "wooden", 204),
    ("object", "", "cat", 301),
    ("object_attribute", "color", "brown", 301),
    ("object_attribute", "texture", "striped", 301),
    ("count", "", "1", 351),
    ("object", "", "tower", 402),
    ("object_attribute", "material", "metal", 402),
    ("count", "", "4", 451),
    ("human_attribute", "age", "old", 501),
    ("human_attribute", "gender", "female", 501),
    ("human_attribute", "clothing style", "formal", 501),
    ("object", "", "hat", 502),
    ("object", "", "flag", 503),
])


def _photo(source: str) -> Image.Image:
    kind, name = source.split(":")
    if kind == "skimage":
        import skimage.data

        return Image.fromarray(getattr(skimage.data, name)()).convert("RGB")
    import matplotlib.cbook

    with matplotlib.cbook.get_sample_data(name) as f:
        return Image.open(f).convert("RGB")


def write_photo_vg(out: Path) -> Path:
    """Write the five-photo VG folder at `out` (created) and return it."""
    out = Path(out)
    (out / "VG_100K").mkdir(parents=True, exist_ok=True)
    image_data, objects, attributes, regions = [], [], [], []
    for image_id, (source, objs, regs) in PHOTOS.items():
        im = _photo(source)
        im.save(out / "VG_100K" / f"{image_id}.jpg", "JPEG", quality=92)
        image_data.append({"width": im.width, "url": URL.format(image_id), "height": im.height,
                           "image_id": image_id, "coco_id": None, "flickr_id": None})
        objects.append({"image_id": image_id, "objects": [
            {"synsets": [f"{name.replace(' ', '_')}.n.01"], "h": h, "object_id": oid,
             "merged_object_ids": [], "names": [name], "w": w, "y": y, "x": x}
            for oid, name, (x, y, w, h), _ in objs], "image_url": URL.format(image_id)})
        attributes.append({"image_id": image_id, "attributes": [
            {"synsets": [f"{name.replace(' ', '_')}.n.01"], "h": h, "object_id": oid,
             "names": [name], "w": w, **({} if attrs is None else {"attributes": attrs}),
             "y": y, "x": x}
            for oid, name, (x, y, w, h), attrs in objs]})
        regions.append({"regions": [
            {"region_id": rid, "width": w, "height": h, "image_id": image_id, "phrase": phrase,
             "y": y, "x": x} for rid, phrase, (x, y, w, h) in regs], "id": image_id})
    for name, records in (("image_data", image_data), ("objects", objects),
                          ("attributes", attributes), ("region_descriptions", regions)):
        (out / f"{name}.json").write_text(json.dumps(records), encoding="utf-8")
    return out


def photo_crops(vg_dir: Path) -> CropTable:
    """One object crop per annotated object of a VG folder (boxes clipped to the image)."""
    vg_dir = Path(vg_dir)
    sizes = {r["image_id"]: (r["width"], r["height"])
             for r in json.loads((vg_dir / "image_data.json").read_text(encoding="utf-8"))}
    attrs = {o["object_id"]: o.get("attributes") or []
             for rec in json.loads((vg_dir / "attributes.json").read_text(encoding="utf-8"))
             for o in rec["attributes"]}
    crops = []
    for rec in json.loads((vg_dir / "objects.json").read_text(encoding="utf-8")):
        width, height = sizes[rec["image_id"]]
        for o in rec["objects"]:
            x0, y0 = max(0, o["x"]), max(0, o["y"])
            x1, y1 = min(width, o["x"] + o["w"]), min(height, o["y"] + o["h"])
            crops.append(Crop(crop_id=len(crops), image_id=rec["image_id"], x=x0, y=y0,
                              w=x1 - x0, h=y1 - y0, element_type="object",
                              element=o["names"][0], source_id=o["object_id"],
                              labels=tuple(sorted({*o["names"], *attrs.get(o["object_id"], [])}))))
    return crop_table(crops)


# --- schema ---------------------------------------------------------------------------
INT, STR, NULL_INT = "int", "str", "int|null"
SCHEMA = {
    "image_data.json": {"width": INT, "url": STR, "height": INT, "image_id": INT,
                        "coco_id": NULL_INT, "flickr_id": NULL_INT},
    "objects.json": {"image_id": INT, "objects": list, "image_url": STR},
    "attributes.json": {"image_id": INT, "attributes": list},
    "region_descriptions.json": {"regions": list, "id": INT},
}
OBJECT = {"synsets": [STR], "h": INT, "object_id": INT, "merged_object_ids": [INT],
          "names": [STR], "w": INT, "y": INT, "x": INT}
ATTRIBUTE_OBJECT = {"synsets": [STR], "h": INT, "object_id": INT, "names": [STR], "w": INT,
                    "y": INT, "x": INT}  # + optional "attributes": [str] or null
REGION = {"region_id": INT, "width": INT, "height": INT, "image_id": INT, "phrase": STR,
          "y": INT, "x": INT}


def _ok(value, kind) -> bool:
    if isinstance(kind, list):
        return isinstance(value, list) and all(_ok(v, kind[0]) for v in value)
    if kind is list:
        return isinstance(value, list)
    if kind == INT:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == NULL_INT:
        return value is None or _ok(value, INT)
    return isinstance(value, str)


def _check_record(record: dict, schema: dict, where: str, optional=()) -> list[str]:
    errors = []
    keys = set(record) - set(optional)
    if keys != set(schema):
        errors.append(f"{where}: keys {sorted(record)} != {sorted(schema)}")
    for key, kind in schema.items():
        if key in record and not _ok(record[key], kind):
            errors.append(f"{where}: {key}={record[key]!r} is not {kind}")
    return errors


def check_vg_schema(vg_dir: Path) -> list[str]:
    """Every problem found in a VG-format folder (empty list: it matches VG's schema).

    Checks each file's record keys and value types, that the four files list the same
    images in the same order, that object ids are unique and regions name their image, and
    that every image has a JPEG of the size image_data.json states, in the folder its url
    names.
    """
    vg_dir = Path(vg_dir)
    data = {name: json.loads((vg_dir / name).read_text(encoding="utf-8")) for name in SCHEMA}
    errors = []
    for name, records in data.items():
        if not isinstance(records, list):
            errors.append(f"{name}: top level is not a JSON array")
            continue
        for i, rec in enumerate(records):
            errors += _check_record(rec, SCHEMA[name], f"{name}[{i}]")
    ids = [r["image_id"] for r in data["image_data.json"]]
    for name, key in (("objects.json", "image_id"), ("attributes.json", "image_id"),
                      ("region_descriptions.json", "id")):
        if [r[key] for r in data[name]] != ids:
            errors.append(f"{name}: images differ from image_data.json (ids or order)")
    seen: set[int] = set()
    for rec in data["objects.json"]:
        for o in rec["objects"]:
            errors += _check_record(o, OBJECT, f"objects.json image {rec['image_id']}")
            if o["object_id"] in seen:
                errors.append(f"objects.json: object id {o['object_id']} repeated")
            seen.add(o["object_id"])
    for rec in data["attributes.json"]:
        for o in rec["attributes"]:
            where = f"attributes.json image {rec['image_id']} object {o.get('object_id')}"
            errors += _check_record(o, ATTRIBUTE_OBJECT, where, optional=("attributes",))
            if "attributes" in o and o["attributes"] is not None and not _ok(o["attributes"], [STR]):
                errors.append(f"{where}: attributes {o['attributes']!r} is not a list of str")
    for rec in data["region_descriptions.json"]:
        for r in rec["regions"]:
            errors += _check_record(r, REGION, f"region_descriptions.json image {rec['id']}")
            if r.get("image_id") != rec["id"]:
                errors.append(f"region {r.get('region_id')}: image_id {r.get('image_id')} != {rec['id']}")
    for rec in data["image_data.json"]:
        # VG's url names the folder the image ships in (VG_100K or VG_100K_2)
        folder, name = rec["url"].split("/")[-2:]
        path = vg_dir / folder / name
        if folder not in ("VG_100K", "VG_100K_2") or name != f"{rec['image_id']}.jpg":
            errors.append(f"image {rec['image_id']}: url {rec['url']} names no VG image file")
            continue
        if not path.is_file():
            errors.append(f"{path}: missing")
            continue
        with Image.open(path) as im:
            if im.size != (rec["width"], rec["height"]) or im.format != "JPEG":
                errors.append(f"{path}: {im.format} {im.size}, image_data says "
                              f"{(rec['width'], rec['height'])}")
    return errors


def crop_pixels(vg_dir: Path, image_id: int, box) -> np.ndarray:
    """The RGB pixels (H×W×3 uint8) of a box of one image, clipped to the image."""
    from vprom.images import IMAGE_FOLDERS, load_crop

    paths = [Path(vg_dir) / folder / f"{image_id}.jpg" for folder in IMAGE_FOLDERS]
    path = next((p for p in paths if p.is_file()), paths[0])
    return np.asarray(load_crop(path, tuple(box)))
