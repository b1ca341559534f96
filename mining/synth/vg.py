"""The rest of Visual Genome for the synthetic corpus, for tools pointed at a VG folder (the
official driver, the Hugging Face loader, `setup_vg.py`): image folders, outside ids, two noted
quirks (`no_synset`, `two_names`), scene graphs, relationships, QAs, v1.2 files, synsets and
the download zips. Its own generator, `default_rng([seed, index, META_STREAM])`, keeps the
mined files and pools independent of it.
"""

from __future__ import annotations

import itertools
import zipfile
from pathlib import Path

import numpy as np
from vprom.mining.synth.spec import OBJECTS, SPEC, plural

META_STREAM = 1
FOLDERS = ("VG_100K", "VG_100K_2")
URL = "https://cs.stanford.edu/people/rak248/{}/{}.jpg"
P_META = {"second_folder": 0.4, "coco_id": 0.5, "flickr_id": 0.9, "no_synset": 0.08,
          "two_names": 0.12}
COCO_BASE, FLICKR_BASE = 100_000, 8_000_000_000
# above the planner's object and region ids (image_id * 1000 + k)
RELATIONSHIP_BASE, QA_BASE = 500, 800
PREDICATES = {"left of": "left.r.01", "right of": "right.r.01", "above": "above.r.01",
              "below": "below.r.01"}
FILES = ("scene_graphs.json", "relationships.json", "question_answers.json",
         "objects_v1_2.json", "relationships_v1_2.json")
SYNSETS = "synsets.json"
# zip -> (member, corpus file); a v1.2 zip holds the unversioned name, as Hugging Face expects
ZIPS = {**{f"{stem}.json.zip": (f"{stem}.json",) * 2 for stem in (
            "image_data", "objects", "attributes", "region_descriptions", "relationships",
            "question_answers")},
        **{f"{stem}_v1_2.json.zip": (f"{stem}.json", f"{stem}_v1_2.json")
           for stem in ("objects", "relationships")}}
IMAGE_ZIPS = {"images.zip": "VG_100K", "images2.zip": "VG_100K_2"}
DOWNLOAD = "download"


def decorate(seed: int, index: int, img) -> tuple[str, int | None, int | None]:
    """Image `index`'s (folder, coco id, flickr id); VG's quirks put on its records, and noted."""
    rng = np.random.default_rng([seed, index, META_STREAM])
    iid = img.image_id
    meta = (FOLDERS[int(rng.random() < P_META["second_folder"])],
            COCO_BASE + 3 * iid if rng.random() < P_META["coco_id"] else None,
            FLICKR_BASE + 7919 * iid if rng.random() < P_META["flickr_id"] else None)
    in_attributes = {a["object_id"]: a for a in img.attributes}
    for obj in img.objects:
        records = [r for r in (obj, in_attributes.get(obj["object_id"])) if r is not None]
        # the planner gives every object one synset: "palm_tree.n.01" for a palm tree
        category = obj["synsets"][0].removesuffix(".n.01").replace("_", " ")
        if category in OBJECTS and rng.random() < P_META["two_names"]:
            options = [n for n in (category, plural(category), *SPEC.name_variants.get(category, ()))
                       if n not in obj["names"]]
            second = options[int(rng.integers(len(options)))]
            for record in records:
                record["names"] = [*record["names"], second]
            img.note("two_names", obj["object_id"])
        if rng.random() < P_META["no_synset"]:
            for record in records:
                record["synsets"] = []
            img.note("no_synset", obj["object_id"])
    return meta


def _predicate(subject: dict, obj: dict) -> str:
    """Where the subject's box centre lies from the object's: its larger offset decides."""
    dx = (subject["x"] + subject["w"] / 2) - (obj["x"] + obj["w"] / 2)
    dy = (subject["y"] + subject["h"] / 2) - (obj["y"] + obj["h"] / 2)
    if abs(dx) >= abs(dy):
        return "left of" if dx < 0 else "right of"
    return "above" if dy < 0 else "below"


def _box(obj: dict) -> dict:
    return {"h": obj["h"], "object_id": obj["object_id"], "synsets": obj["synsets"],
            "w": obj["w"], "y": obj["y"], "x": obj["x"]}


def relationships(img) -> list[tuple[int, str, dict, dict]]:
    """(relationship id, predicate, subject, object) between consecutive objects."""
    return [(img.image_id * 1000 + RELATIONSHIP_BASE + k, _predicate(a, b), a, b)
            for k, (a, b) in enumerate(itertools.pairwise(img.objects))]


def scene_graph(img, rels) -> dict:
    """scene_graphs.json's record: objects (with their attributes) and relationships by id."""
    attrs = {a["object_id"]: a.get("attributes") for a in img.attributes}
    objects = []
    for o in img.objects:
        rec = {"synsets": o["synsets"], "h": o["h"], "object_id": o["object_id"],
               "names": o["names"], "w": o["w"]}
        if attrs.get(o["object_id"]):
            rec["attributes"] = attrs[o["object_id"]]
        rec["y"], rec["x"] = o["y"], o["x"]
        objects.append(rec)
    return {"relationships": [{"synsets": [PREDICATES[p]], "predicate": p, "relationship_id": rid,
                               "object_id": b["object_id"], "subject_id": a["object_id"]}
                              for rid, p, a, b in rels],
            "image_id": img.image_id, "objects": objects}


def relationship_records(img, rels) -> dict:
    """relationships.json's record (v1.4: full subject and object, with merged ids)."""
    out = []
    for rid, p, a, b in rels:
        subject = {"name": a["names"][0], **_box(a), "merged_object_ids": a["merged_object_ids"]}
        obj = {**_box(b), "merged_object_ids": b["merged_object_ids"], "names": b["names"]}
        out.append({"predicate": p, "object": obj, "relationship_id": rid,
                    "synsets": [PREDICATES[p]], "subject": subject})
    return {"relationships": out, "image_id": img.image_id}


def without_merged(record):
    """A v1.4 record in v1.2's layout: v1.4 added `merged_object_ids` (at any depth), no more."""
    if isinstance(record, list):
        return [without_merged(item) for item in record]
    if isinstance(record, dict):
        return {k: without_merged(v) for k, v in record.items() if k != "merged_object_ids"}
    return record


def question_answers(img) -> dict:
    """question_answers.json's record: "What does the X look like?" for attributed objects."""
    attrs = {a["object_id"]: a.get("attributes") for a in img.attributes}
    qas = []
    for o in img.objects:
        said = [a.strip().lower() for a in attrs.get(o["object_id"]) or () if a.strip()]
        if not said:
            continue
        name = o["names"][0].strip().lower()
        subject = {"object_id": o["object_id"], "x": o["x"], "y": o["y"], "w": o["w"],
                   "h": o["h"], "names": o["names"], "synsets": o["synsets"]}
        qas.append({"a_objects": [], "question": f"What does the {name} look like?",
                    "image_id": img.image_id, "qa_id": img.image_id * 1000 + QA_BASE + len(qas),
                    "answer": said[0].capitalize() + ".", "q_objects": [subject]})
    return {"id": img.image_id, "qas": qas}


def synset_names(img, rels) -> set[str]:
    """Every synset the image's objects and relationships name."""
    names = {s for o in img.objects for s in o["synsets"]}
    names |= {s for a in img.attributes for s in a["synsets"]}
    return names | {PREDICATES[p] for _, p, _, _ in rels}


def synset_records(names: set[str]) -> list[dict]:
    """synsets.json: one {synset_name, synset_definition} per synset, sorted by name."""
    out = []
    for name in sorted(names):
        word, pos = name.split(".")[0].replace("_", " "), name.split(".")[1]
        article = "an" if word[0] in "aeiou" else "a"
        what = (f"{article} {word} as the synthetic corpus draws it" if pos == "n" else
                f"the spatial relation '{word}' between two boxes")
        out.append({"synset_definition": what, "synset_name": name})
    return out


def _add(archive: zipfile.ZipFile, member: str, path: Path, method: int) -> None:
    """One member at a fixed date, so same corpus, same zip bytes."""
    info = zipfile.ZipInfo(member, date_time=(1980, 1, 1, 0, 0, 0))
    info.compress_type = method
    archive.writestr(info, path.read_bytes())


def write_zips(folder: Path) -> None:
    """`folder/download/`: the corpus's files zipped as VG serves them (`ZIPS`, `IMAGE_ZIPS`)."""
    out = folder / DOWNLOAD
    out.mkdir()
    for name, (member, source) in ZIPS.items():
        with zipfile.ZipFile(out / name, "w") as archive:
            _add(archive, member, folder / source, zipfile.ZIP_DEFLATED)
    for name, images in IMAGE_ZIPS.items():
        with zipfile.ZipFile(out / name, "w") as archive:  # JPEGs do not deflate
            for path in sorted((folder / images).iterdir(), key=lambda p: int(p.stem)):
                _add(archive, f"{images}/{path.name}", path, zipfile.ZIP_STORED)
