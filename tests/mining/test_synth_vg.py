"""The synthetic corpus read the way three real Visual Genome readers read a VG folder.

Each test re-states one reader's reading contract in our own code — the keys it indexes,
the files it joins and what must agree between them — and runs it over a synthetic corpus:

- the official python driver (ranjaykrishna/visual_genome_python_driver,
  `visual_genome/local.py` and `utils.py`): `get_all_image_data`,
  `get_all_region_descriptions`, `get_all_qas`, `save_scene_graphs_by_id` +
  `get_scene_graph(s)` with `init_synsets`;
- the Hugging Face `visual_genome` loading script (huggingface/datasets
  datasets/visual_genome/visual_genome.py, in `datasets` 2.2-2.5 and on the Hub after):
  `_split_generators` (which zip each config downloads, `annotations_url`, and which file in
  it it opens, `_get_decompressed_filename_from_url`), `_generate_examples` and its per-config
  normalisers and features, for every config at the newest version it registers
  (`region_descriptions_v1.2.0`, `question_answers_v1.2.0`, `attributes_v1.2.0`,
  `objects_v1.2.0` and `relationships_v1.2.0`), over `vprom synth --zips`' download/; a value
  must hold exactly its feature's keys, as `datasets`' encoder walks both with `zip_dict`;
- bottom-up-attention's `data/genome/setup_vg.py` (`AddAttrsToSceneGraphs` of the old driver,
  then `build_vocabs_and_xml`).

Not re-stated (see docs/release-layout.md): the driver's `parse_graph_local` over the
attributes that `add_attrs_to_scene_graphs` merges in (it indexes `attributes` on every
attributes.json object, which VG itself leaves out on some). The Hugging Face
relationships feature `synsets` is declared a string where VG, the driver and this corpus
have a list: `datasets` encodes it with `str()` (the list's repr), which is accepted here.
"""

from __future__ import annotations

import json
import re
import zipfile
from pathlib import Path

import pytest

from vprom.mining import synth
from vprom.mining.synth import vg as synth_vg

N_IMAGES = 60


@pytest.fixture(scope="module")
def vg(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("synth_vg") / "vg"
    synth.write_corpus(out, images=N_IMAGES, seed=4, zips=True)
    return out


def load(vg: Path, name: str):
    with open(vg / name, encoding="utf-8") as f:
        return json.load(f)


# --- the official python driver -----------------------------------------------------------
def driver_images(vg: Path) -> dict[int, tuple]:
    """`get_all_image_data`: id ("id", else "image_id"), url, width, height, coco_id,
    flickr_id, each indexed (a missing key is a KeyError)."""
    out = {}
    for rec in load(vg, "image_data.json"):
        image_id = rec["id"] if "id" in rec else rec["image_id"]
        out[image_id] = (rec["url"], rec["width"], rec["height"], rec["coco_id"],
                         rec["flickr_id"])
    return out


def test_driver_image_data_has_integer_and_null_outside_ids(vg):
    images = driver_images(vg)
    assert len(images) == N_IMAGES
    for key in (3, 4):  # coco_id, flickr_id: VG has both integers and nulls
        values = [v[key] for v in images.values()]
        assert all(v is None or type(v) is int for v in values)
        assert {v is None for v in values} == {True, False}
    assert any(v[4] > 2**31 for v in images.values() if v[4] is not None)  # int64 territory


def test_driver_reads_region_descriptions(vg):
    """`get_all_region_descriptions`: image_map[image['id']]; the region id key is chosen on
    regions[0] (so no image may have an empty list); id, phrase and box of every region."""
    images = driver_images(vg)
    records = load(vg, "region_descriptions.json")
    for image in records:
        regions = image["regions"]
        assert regions, f"image {image['id']}: an empty region list breaks the driver"
        assert image["id"] in images
        key = "region_id" if "region_id" in regions[0] else "id"
        for info in regions:
            assert (type(info[key]) is int and isinstance(info["phrase"], str)
                    and all(type(info[k]) is int for k in ("x", "y", "width", "height")))


def test_driver_reads_question_answers(vg):
    """`get_all_qas`: image['qas']; per QA qa_id, image_map[image_id], question, answer;
    `question_objects`/`answer_objects` (if present) need synset name and definition."""
    images = driver_images(vg)
    asked = 0
    for image in load(vg, "question_answers.json"):
        for info in image["qas"]:
            assert info["image_id"] in images and type(info["qa_id"]) is int
            assert info["question"].endswith("?") and info["answer"]
            for key in ("question_objects", "answer_objects"):
                for qo in info.get(key, ()):
                    assert {"synset_name", "synset_definition", "entity_idx_start",
                            "entity_idx_end", "entity_name"} <= set(qo)
            asked += 1
    assert asked == load(vg, synth.TRUTH)["vg"]["question_answers"] > 0


def driver_scene_graph(by_id: Path, image_id: int, synsets: dict) -> tuple[dict, list]:
    """`get_scene_graph` -> `parse_graph_local` -> `init_synsets`, as the driver does it."""
    data = json.loads((by_id / f"{image_id}.json").read_text(encoding="utf-8"))
    objects = {}
    for obj in data["objects"]:  # map_object: object_id -> id, attributes out, w/h renamed
        obj = dict(obj)
        oid = obj.pop("object_id")
        obj.pop("attributes", None)
        obj["width"], obj["height"] = obj.pop("w"), obj.pop("h")
        # models.Object(**obj) takes exactly these keyword arguments
        assert set(obj) == {"x", "y", "width", "height", "names", "synsets"}, obj
        objects[oid] = obj
    relationships = []
    for rel in data["relationships"]:
        assert rel["subject_id"] in objects and rel["object_id"] in objects  # else skipped
        relationships.append((rel["relationship_id"], rel["subject_id"], rel["predicate"],
                              rel["object_id"], rel["synsets"]))
    for obj in objects.values():  # init_synsets: every synset name must be in synsets.json
        obj["synsets"] = [synsets[s] for s in obj["synsets"]]
    for rel in relationships:
        assert all(s in synsets for s in rel[4])
    return objects, relationships


def test_driver_reads_scene_graphs_and_synsets(vg, tmp_path):
    images = driver_images(vg)
    by_id = tmp_path / "by-id"  # save_scene_graphs_by_id: one file per sg['image_id']
    by_id.mkdir()
    for sg in load(vg, "scene_graphs.json"):
        (by_id / f"{sg['image_id']}.json").write_text(json.dumps(sg), encoding="utf-8")
    synsets = {s["synset_name"]: s["synset_definition"] for s in load(vg, synth_vg.SYNSETS)}
    objects = {o["object_id"]: o for rec in load(vg, "objects.json") for o in rec["objects"]}
    n_rels = 0
    for fname in sorted(p.name for p in by_id.iterdir()):  # get_scene_graphs
        image_id = int(fname.split(".")[0])
        assert image_id in images
        got, rels = driver_scene_graph(by_id, image_id, synsets)
        for oid, obj in got.items():  # the scene graph agrees with objects.json
            o = objects[oid]
            assert (obj["x"], obj["y"], obj["width"], obj["height"], obj["names"]) == (
                o["x"], o["y"], o["w"], o["h"], o["names"])
            assert len(obj["synsets"]) == len(o["synsets"])
        n_rels += len(rels)
    assert len(list(by_id.iterdir())) == N_IMAGES
    assert n_rels == load(vg, synth.TRUTH)["vg"]["relationships"] > 0


# --- the Hugging Face visual_genome loader --------------------------------------------------
URL_PATTERN = re.compile(r"https://cs\.stanford\.edu/people/rak248/(VG_100K(?:_2)?)/([0-9]+\.jpg)")
INT32, INT64, STRING = (-2**31, 2**31 - 1), (-2**63, 2**63 - 1), str
ANY_AS_STRING = "str(value)"  # Value("string") encodes any value with str()
BOX = {"object_id": INT32, "x": INT32, "y": INT32, "w": INT32, "h": INT32, "names": [STRING],
       "synsets": [STRING]}
#: The features of each config at its latest version (objects/relationships: 1.2.0, the
#: newest the script builds; it declares 1.4.0 but registers no such config), in our terms:
#: an int range, str, a list [type] or a dict.
FEATURES = {
    "region_descriptions": {"regions": [{"region_id": INT32, "image_id": INT32,
                                         "phrase": STRING, "x": INT32, "y": INT32,
                                         "width": INT32, "height": INT32}]},
    "question_answers": {"qas": [{"qa_id": INT32, "image_id": INT32, "question": STRING,
                                  "answer": STRING, "a_objects": [BOX], "q_objects": [BOX]}]},
    "objects": {"objects": [BOX]},
    "attributes": {"attributes": [{**BOX, "attributes": [STRING]}]},
    "relationships": {"relationships": [{"relationship_id": INT32, "predicate": STRING,
                                         "synsets": ANY_AS_STRING, "subject": BOX,
                                         "object": BOX}]},
}
#: _LATEST_VERSIONS: a config at its latest version reads the unversioned zip
LATEST = {"region_descriptions": "1.2.0", "objects": "1.4.0", "attributes": "1.2.0",
          "relationships": "1.4.0", "question_answers": "1.2.0"}
IMAGE_ZIPS = {"images.zip": "VG_100K", "images2.zip": "VG_100K_2"}  # _BASE_IMAGE_URLS
IMAGE_FEATURES = {"image_id": INT32, "url": STRING, "width": INT32, "height": INT32,
                  "coco_id": INT64, "flickr_id": INT64}
NULLABLE = {"coco_id", "flickr_id", "synsets", "attributes"}


def annotations_zip(config: str, version: str = "1.2.0") -> str:
    """`annotations_url`'s file name."""
    if version == LATEST[config]:
        return f"{config}.json.zip"
    major, minor = version.split(".")[:2]
    return f"{config}_v{major}{'' if minor == '0' else '_' + minor}.json.zip"


def opened(download: Path, zip_name: str):
    """The JSON `_split_generators` opens in an extracted zip: its name less `.zip` and
    less any `_v<major>[_<minor>]` (objects_v1_2.json.zip: objects.json)."""
    member = re.sub(r"_v[0-9]+(?:_[0-9]+)?\.json$", ".json", zip_name[:-4])
    with zipfile.ZipFile(download / zip_name) as archive:
        return json.loads(archive.read(member))


def hf_normalise(config: str, annotation: dict) -> None:
    """The script's per-config normaliser: ids renamed, absent synsets/attributes -> None,
    a relationship object's single `name` -> `names`."""
    if config == "region_descriptions":
        for region in annotation["regions"]:
            if "id" in region:
                region["region_id"] = region.pop("id")
    items = {"objects": "objects", "attributes": "attributes"}.get(config)
    if items:
        for obj in annotation[items]:
            if "id" in obj:
                obj["object_id"] = obj.pop("id")
            obj.setdefault("synsets", None)
            if config == "attributes":
                obj.setdefault("attributes", None)
    if config == "relationships":
        for rel in annotation["relationships"]:
            for obj in (rel["subject"], rel["object"]):
                if "name" in obj:
                    obj["names"] = [obj.pop("name")]
                obj.setdefault("synsets", None)


def encodes(value, feature, key: str = "") -> bool:
    """Whether `value` fits a feature: a dict must hold exactly the declared keys (`datasets`
    walks a value and its feature with `zip_dict`, a KeyError on a key the feature lacks:
    the `KeyError: 'merged_object_ids'` of v1.4 files read as v1.2), an absent key or null
    is allowed only where VG has nulls."""
    if value is None:
        return key in NULLABLE
    if isinstance(feature, dict):
        return (isinstance(value, dict) and set(value) <= set(feature)
                and all(encodes(value.get(k), f, k) for k, f in feature.items()))
    if isinstance(feature, list):
        return isinstance(value, list) and all(encodes(v, feature[0]) for v in value)
    if feature is STRING:
        return isinstance(value, str)
    if feature == ANY_AS_STRING:
        return True
    return type(value) is int and feature[0] <= value <= feature[1]


@pytest.mark.parametrize("config", sorted(FEATURES))
def test_hugging_face_loader_reads_every_config(vg, config):
    """`_generate_examples`: the annotation file and image_data.json zipped record by record
    (same length; ids and urls must agree), then each example encoded with the features,
    its image found in the extracted image zip."""
    download = vg / synth_vg.DOWNLOAD
    metadata = opened(download, "image_data.json.zip")
    annotations = opened(download, annotations_zip(config))
    images = {}
    for name, folder in IMAGE_ZIPS.items():
        with zipfile.ZipFile(download / name) as archive:
            images[folder] = set(archive.namelist())
    assert len(metadata) == len(annotations)
    for meta, annotation in zip(metadata, annotations):
        if "id" in meta:
            meta["image_id"] = meta.pop("id")
        if "id" in annotation:
            assert meta["image_id"] == annotation.pop("id")
        else:
            assert meta["image_id"] == annotation.pop("image_id")
        if "image_url" in annotation:
            assert meta["url"] == annotation.pop("image_url")
        elif "url" in annotation:
            assert meta["url"] == annotation["url"]
        hf_normalise(config, annotation)
        match = URL_PATTERN.fullmatch(meta["url"])  # _get_local_image_path asserts a match
        assert match is not None, meta["url"]
        assert f"{match[1]}/{match[2]}" in images[match[1]]
        assert encodes(meta, IMAGE_FEATURES) and encodes(annotation, FEATURES[config]), (
            config, meta["image_id"])


def test_zips_hold_the_corpus_files_as_vg_serves_them(vg):
    """One member each (a v1.2 zip under the unversioned name), byte for byte the corpus's
    file; the image zips hold their folders; fixed dates, so a seed gives the same zips."""
    download = vg / synth_vg.DOWNLOAD
    for name, (member, source) in synth_vg.ZIPS.items():
        with zipfile.ZipFile(download / name) as archive:
            assert archive.namelist() == [member]
            assert archive.read(member) == (vg / source).read_bytes()
    for name, folder in IMAGE_ZIPS.items():
        with zipfile.ZipFile(download / name) as archive:
            assert sorted(archive.namelist()) == sorted(
                f"{folder}/{p.name}" for p in (vg / folder).iterdir())
            assert {i.date_time for i in archive.infolist()} == {(1980, 1, 1, 0, 0, 0)}


# --- bottom-up-attention's data/genome/setup_vg.py -----------------------------------------
def add_attrs_to_scene_graphs(vg: Path) -> list[dict]:
    """The old driver's `AddAttrsToSceneGraphs`: each attributes.json object becomes one
    scene-graph attribute {..., 'attribute': object, 'attribute_id': n} of its image."""
    graphs = {sg["image_id"]: sg for sg in load(vg, "scene_graphs.json")}
    count = 0
    for image in load(vg, "attributes.json"):
        merged = []
        for attribute in image["attributes"]:
            entry = {k: v for k, v in image.items() if k != "attributes"}
            entry["attribute"], entry["attribute_id"] = attribute, count
            merged.append(entry)
            count += 1
        graphs[image["image_id"]]["attributes"] = merged  # KeyError: image not in the graphs
    return list(graphs.values())


def test_bottom_up_setup_vg_builds_an_annotation_per_image(vg):
    """`build_vocabs_and_xml`: attributes[0] of each merged attribute (errors skipped),
    predicates, names[0] of every object; image_data by image_id, the folder and file name
    from the url's last two parts, coco/flickr ids, size; boxes and ids of objects and
    relationships."""
    metadata = {rec["image_id"]: rec for rec in load(vg, "image_data.json")}
    for sg in add_attrs_to_scene_graphs(vg):
        meta = metadata[sg["image_id"]]
        folder, filename = meta["url"].split("/")[-2:]
        assert (vg / folder / filename).is_file()
        assert {"coco_id", "flickr_id", "width", "height"} <= set(meta)  # indexed for the xml
        ids = set()
        for obj in sg["objects"]:
            assert obj["names"][0].strip()
            assert all(type(obj[k]) is int for k in ("object_id", "x", "y", "w", "h"))
            ids.add(obj["object_id"])
        for attr in sg["attributes"]:
            assert type(attr["attribute"]["object_id"]) is int
        for rel in sg["relationships"]:
            assert rel["predicate"] in synth_vg.PREDICATES
            assert rel["subject_id"] in ids and rel["object_id"] in ids
    attributed = [a for sg in add_attrs_to_scene_graphs(vg) for a in sg["attributes"]
                  if (a["attribute"].get("attributes") or [None])[0]]
    assert attributed  # the vocabulary of attributes is not empty


# --- consistency with the mined files and the truth ------------------------------------------
def test_new_files_agree_with_objects_and_attributes(vg):
    objects = {o["object_id"]: o for rec in load(vg, "objects.json") for o in rec["objects"]}
    attributes = {o["object_id"]: o for rec in load(vg, "attributes.json")
                  for o in rec["attributes"]}
    for rec in load(vg, "relationships.json"):
        for rel in rec["relationships"]:
            subject, obj = rel["subject"], rel["object"]
            assert subject["name"] == objects[subject["object_id"]]["names"][0]
            assert obj["names"] == objects[obj["object_id"]]["names"]
            assert rel["synsets"] == [synth_vg.PREDICATES[rel["predicate"]]]
    for sg in load(vg, "scene_graphs.json"):
        for obj in sg["objects"]:
            assert obj.get("attributes") == (attributes[obj["object_id"]].get("attributes")
                                             or None)
    for rec in load(vg, "question_answers.json"):
        for qa in rec["qas"]:
            (asked,) = qa["q_objects"]
            said = [a.strip().lower() for a in attributes[asked["object_id"]]["attributes"]]
            assert qa["answer"][:-1].lower() in said


def test_truth_records_the_vg_files(vg):
    truth = load(vg, synth.TRUTH)
    second = sorted(int(p.stem) for p in (vg / "VG_100K_2").iterdir())
    assert truth["vg"]["VG_100K_2"] == second and 0 < len(second) < N_IMAGES
    images = {rec["image_id"]: rec for rec in load(vg, "image_data.json")}
    for key in ("coco_id", "flickr_id"):
        assert truth["vg"][key] == sorted(i for i, r in images.items() if r[key] is not None)
    assert truth["vg"]["synsets"] == len(load(vg, synth_vg.SYNSETS))
    assert set(truth["outputs"]) == set(synth.ALL_FILES) | {"VG_100K*/*.jpg"}
    objects = {o["object_id"]: o for rec in load(vg, "objects.json") for o in rec["objects"]}
    attributes = {o["object_id"]: o for rec in load(vg, "attributes.json")
                  for o in rec["attributes"]}
    for oid in truth["noise"]["no_synset"]["ids"]:
        assert objects[oid]["synsets"] == [] == attributes.get(oid, {"synsets": []})["synsets"]
    for oid in truth["noise"]["two_names"]["ids"]:
        assert len(objects[oid]["names"]) == 2 == len(attributes[oid]["names"])
    singles = set(objects) - set(truth["noise"]["two_names"]["ids"])
    assert all(len(objects[o]["names"]) == 1 for o in singles)


def test_v1_2_files_are_the_v1_4_records_without_merged_ids(vg):
    """objects.json / relationships.json keep VG's v1.4 layout; the _v1_2 files drop the one
    key v1.4 added, record for record."""
    for new, old in (("objects_v1_2.json", "objects.json"),
                     ("relationships_v1_2.json", "relationships.json")):
        v12, v14 = load(vg, new), load(vg, old)
        assert len(v12) == len(v14)
        text = json.dumps(v14)
        assert "merged_object_ids" in text and "merged_object_ids" not in json.dumps(v12)
    for a, b in zip(load(vg, "objects_v1_2.json"), load(vg, "objects.json")):
        assert a["objects"] == [{k: v for k, v in o.items() if k != "merged_object_ids"}
                                for o in b["objects"]]
        assert a["image_url"] == b["image_url"] and a["image_id"] == b["image_id"]
