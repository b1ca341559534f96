"""The synthetic corpus: deterministic, in VG's schema, recoverable by the miner, and drawn
so that each crop shows its label."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from vprom.mining import synth
from vprom.mining.synth.objects import glyph_mask, solid_glyph_mask
from vprom.mining.synth.people import draw_person
from vprom.mining.synth.plan import render_image
from vprom.mining.synth.spec import DATA_DIR, OBJECTS, SPEC, load_corpus_spec
from vprom.mining.vocab import load_vocabulary

from tests.photo_fixture import check_vg_schema, crop_pixels
from vprom.domain import COUNTS, MIN_SIDE
from vprom.errors import VpromError

N_IMAGES = 120  # small, yet every element of every pool appears (checked below)


def _hashes(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("synth") / "vg"
    synth.write_corpus(out, images=N_IMAGES, seed=0)
    return out


@pytest.fixture(scope="module")
def truth(corpus) -> dict:
    return json.loads((corpus / synth.TRUTH).read_text())


@pytest.fixture(scope="module")
def annotations(corpus) -> dict:
    """source id -> (image id, box, names, attributes or None, phrase)."""
    out = {}
    attrs = {o["object_id"]: o.get("attributes")
             for rec in json.loads((corpus / "attributes.json").read_text())
             for o in rec["attributes"]}
    for rec in json.loads((corpus / "objects.json").read_text()):
        for o in rec["objects"]:
            out[o["object_id"]] = (rec["image_id"], (o["x"], o["y"], o["w"], o["h"]),
                                   o["names"], attrs.get(o["object_id"]), None)
    for rec in json.loads((corpus / "attributes.json").read_text()):  # merged duplicates
        for o in rec["attributes"]:
            out.setdefault(o["object_id"], (rec["image_id"], (o["x"], o["y"], o["w"], o["h"]),
                                            o["names"], o.get("attributes"), None))
    for rec in json.loads((corpus / "region_descriptions.json").read_text()):
        for r in rec["regions"]:
            out[r["region_id"]] = (rec["id"], (r["x"], r["y"], r["width"], r["height"]), [],
                                   None, r["phrase"])
    return out


# --- determinism ----------------------------------------------------------------------
def test_same_seed_same_bytes_and_other_seed_differs(corpus, tmp_path):
    synth.write_corpus(tmp_path / "again", images=N_IMAGES, seed=0)
    synth.write_corpus(tmp_path / "other", images=N_IMAGES, seed=1)
    first = _hashes(corpus)
    assert len(first) == N_IMAGES + len(synth.ALL_FILES) + 2  # + synth_truth, manifest.json
    assert _hashes(tmp_path / "again") == first
    other = _hashes(tmp_path / "other")
    # the seed also moves images between VG_100K and VG_100K_2
    assert {Path(n).name for n in other} == {Path(n).name for n in first}
    differ = [name for name in first if name in other and other[name] != first[name]]
    # every annotation file, the truth and every image differ (synsets.json lists the
    # synsets both corpora name, which may well be the same)
    assert set(differ) >= set(synth.PER_IMAGE_FILES) | {synth.TRUTH}
    images = [n for n in first if n.endswith(".jpg")]
    assert all(n not in other or n in differ for n in images)


def test_two_workers_write_the_same_bytes(tmp_path):
    synth.write_corpus(tmp_path / "one", images=40, seed=3, workers=1)
    synth.write_corpus(tmp_path / "two", images=40, seed=3, workers=2)
    assert _hashes(tmp_path / "one") == _hashes(tmp_path / "two")


def test_image_depends_only_on_seed_and_index():
    a, _ = render_image(7, 5)
    b, _ = render_image(7, 5)
    c, _ = render_image(7, 6)
    assert a == b and a.objects != c.objects


# --- files and truth ------------------------------------------------------------------
def test_files_match_visual_genome_schema(corpus):
    assert check_vg_schema(corpus) == []


def test_truth_covers_every_element_of_every_pool(truth):
    pools = truth["pools"]
    for element_type, table in (("object_attribute", SPEC.object_attributes),
                                ("human_attribute", SPEC.human_attributes)):
        assert set(pools[element_type]) == set(table)
        for sup, elements in table.items():
            assert set(pools[element_type][sup]) == set(elements), (element_type, sup)
    assert set(pools["object"][""]) == set(OBJECTS)
    assert set(pools["count"][""]) == {str(n) for n in COUNTS}
    for et, sups in truth["pool_sources"].items():
        for sup, elements in sups.items():
            for element, ids in elements.items():
                assert pools[et][sup][element] == len(ids) > 0


def test_truth_records_every_kind_of_noise(truth, annotations):
    assert set(truth["noise"]) == set(SPEC.noise_effects)
    for kind, entry in truth["noise"].items():
        assert entry["ids"] and entry["effect"] == SPEC.noise_effects[kind]
        assert set(entry["ids"]) <= set(annotations), kind


def test_noise_is_in_the_files(truth, annotations):
    noise = {k: v["ids"] for k, v in truth["noise"].items()}
    width, height = truth["image_size"]
    for oid in noise["outside_image"]:
        x, y, w, h = annotations[oid][1]
        assert x < 0 or y < 0 or x + w > width or y + h > height
    for oid in noise["small_object"]:
        assert min(annotations[oid][1][2:]) < MIN_SIDE
    for oid in noise["null_attributes"]:
        assert annotations[oid][3] is None
    vocab = load_vocabulary()
    for oid in noise["impure_color"]:
        colors = {vocab.canonical(a) for a in annotations[oid][3]} & set(SPEC.colors)
        assert len(colors) == 2
    for oid in noise["semantic_attribute"]:
        assert set(annotations[oid][3]) & set(SPEC.semantic_attributes)
    for oid in noise["excluded_object"]:
        assert annotations[oid][2][0] in SPEC.excluded_objects
    phrases = [annotations[rid][4] for rid in noise["non_count_number"]]
    assert any("o'clock" in p for p in phrases) and any("number" in p for p in phrases)
    assert any("years old" in p for p in phrases)


def test_merged_duplicates_are_listed_by_their_survivor(corpus, truth):
    survivors = {m: o["object_id"] for rec in json.loads((corpus / "objects.json").read_text())
                 for o in rec["objects"] for m in o["merged_object_ids"]}
    in_attributes = {o["object_id"] for rec in json.loads((corpus / "attributes.json").read_text())
                     for o in rec["attributes"]}
    dups = truth["noise"]["merged_duplicate"]["ids"]
    assert set(dups) == set(survivors) and set(dups) <= in_attributes


def test_write_corpus_refuses_a_foreign_folder_and_bad_sizes(tmp_path):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "thesis.tex").write_text("keep me")
    with pytest.raises(VpromError, match="not a synthetic corpus"):
        synth.write_corpus(tmp_path / "mine", images=2)
    assert (tmp_path / "mine" / "thesis.tex").read_text() == "keep me"
    with pytest.raises(VpromError, match="at least one image"):
        synth.write_corpus(tmp_path / "x", images=0)


def test_rewriting_a_corpus_replaces_it(tmp_path):
    synth.write_corpus(tmp_path / "vg", images=3, seed=0)
    summary = synth.write_corpus(tmp_path / "vg", images=2, seed=0)
    assert len(list((tmp_path / "vg" / "VG_100K").iterdir())) == 2
    assert summary.images == 2 and "2 images" in str(summary)


def test_cli_synth_prints_the_summary(tmp_path, capsys):
    from vprom.app.cli import main

    assert main(["synth", "--out", str(tmp_path / "vg"), "--images", "4", "--seed", "2"]) == 0
    assert "4 images" in capsys.readouterr().out
    assert check_vg_schema(tmp_path / "vg") == []


# --- the miner recovers the truth -----------------------------------------------------
@pytest.fixture(scope="module")
def mined(corpus, tmp_path_factory):
    pools = pytest.importorskip("vprom.mining.pools")
    from vprom.tables import read_crop_table

    out = tmp_path_factory.mktemp("mined") / "pools.h5"
    pools.mine(corpus, out, min_side=MIN_SIDE, workers=1)
    return read_crop_table(out, "POOLS.h5")


def _sources(crops) -> dict:
    got: dict = {}
    for et, sup, el, sid in zip(crops.element_type, crops.super_attribute, crops.element,
                                crops.source_id):
        got.setdefault(et, {}).setdefault(sup, {}).setdefault(el, []).append(int(sid))
    return {et: {s: {e: sorted(ids) for e, ids in els.items()} for s, els in sups.items()}
            for et, sups in got.items()}


def test_miner_recovers_every_pool_exactly(mined, truth):
    expected = {et: {s: {e: sorted(ids) for e, ids in els.items()} for s, els in sups.items()}
                for et, sups in truth["pool_sources"].items()}
    assert _sources(mined) == expected


def test_miner_removes_exactly_the_injected_noise(mined, truth):
    noise = {k: set(v["ids"]) for k, v in truth["noise"].items()}
    by_source: dict = {}
    for et, sup, el, sid in zip(mined.element_type, mined.super_attribute, mined.element,
                                mined.source_id):
        by_source.setdefault(int(sid), set()).add((et, sup, el))
    for kind in ("small_object", "small_region", "excluded_object", "merged_duplicate",
                 "non_count_number"):
        assert not noise[kind] & set(by_source), kind
    for oid in noise["impure_color"]:
        assert {sup for _, sup, _ in by_source[oid]} == {""}  # the object crop only
    for kind in ("no_attributes_key", "null_attributes"):
        assert all({et for et, _, _ in by_source[oid]} == {"object"} for oid in noise[kind]), kind
    for kind in ("name_variant", "plural_name", "case_space", "attribute_variant", "outside_image",
                 "semantic_attribute", "no_synset", "two_names"):  # normalised or clipped, and kept
        kept = noise[kind] - noise["small_object"] - noise["excluded_object"]
        assert kept and all(oid in by_source for oid in kept), kind
    elements = set(mined.element)
    assert not elements & set(SPEC.semantic_attributes)


# --- the pixels show the labels ---------------------------------------------------------
def _components(mask: np.ndarray, min_area: int = 1) -> int:
    from skimage.measure import label

    labels = label(mask, connectivity=2)
    areas = np.bincount(labels.ravel())[1:]
    return int((areas >= min_area).sum())


@pytest.mark.parametrize("category", OBJECTS)
def test_every_glyph_is_one_connected_silhouette(category):
    pytest.importorskip("skimage")
    for w, h in ((110, 110), (70, 90)):
        assert _components(np.asarray(glyph_mask(category, w, h)) > 127) == 1
    for side in (18, 24, 30):
        assert _components(np.asarray(solid_glyph_mask(category, side, side)) > 127) == 1


@pytest.mark.parametrize("file,edit,message", [
    ("spec.json", lambda d: d["noise"].update(small=1.5),
     r"spec.json: Expected `float` <= 1.0 - at `\$.noise.small`"),
    ("spec.json", lambda d: d["can_show"].update(parked=["car", "rocket"]),
     r"spec.json: 'rocket' of can_show, containers and name_variants is missing from the cat"),
    ("spec.json", lambda d: d["object_attributes"].pop("color"),
     r"spec.json: 'color' of the paper's super-attributes is missing from object_attributes"),
    ("spec.json", lambda d: d["noise_effects"].update(small_object="under {side} px"),
     r"spec.json: 'under {side} px' holds a placeholder other than"),
    ("glyphs.json", lambda d: d["glyphs"]["ball"].append(["ellipse", 0.1, 0.2]),
     r"glyphs.json: glyph 'ball' has the malformed part \['ellipse', 0.1, 0.2\]"),
    ("glyphs.json", lambda d: d.update(glyph={}),
     r"glyphs.json: Object contains unknown field `glyph`"),
    ("glyphs.json", None, r"glyphs.json: not valid JSON"),
])
def test_a_malformed_corpus_spec_is_refused_naming_file_and_entry(tmp_path, file, edit, message):
    for name in ("spec.json", "glyphs.json"):
        (tmp_path / name).write_bytes((DATA_DIR / name).read_bytes())
    data = json.loads((tmp_path / file).read_text())
    if edit is not None:
        edit(data)
    (tmp_path / file).write_text("{" if edit is None else json.dumps(data))
    with pytest.raises(VpromError, match=message):
        load_corpus_spec(tmp_path)


def test_every_object_third_has_enough_categories():
    # held-out-objects matrices draw all 8+ candidates of a matrix from one third
    from vprom.splits.rules import object_third

    thirds = [sum(object_third(o) == t for o in OBJECTS) for t in range(3)]
    assert min(thirds) >= 14, thirds
    assert len(set(OBJECTS)) == len(OBJECTS) >= 52
    assert set(OBJECTS) <= load_vocabulary().objects


def test_glyphs_are_pairwise_distinct():
    masks = {c: np.asarray(glyph_mask(c, 64, 64)) > 127 for c in OBJECTS}
    names = sorted(masks)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            iou = (masks[a] & masks[b]).sum() / (masks[a] | masks[b]).sum()
            assert iou < 0.92, (a, b, iou)


SHAPES = set(SPEC.object_attributes["shape"])
HUES = {"red": (345, 15), "orange": (15, 40), "yellow": (40, 70), "green": (90, 160),
        "blue": (200, 250), "purple": (260, 300)}


def _hue_degrees(pixels: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    hsv = np.asarray(Image.fromarray(pixels).convert("HSV")).reshape(-1, 3).astype(float)
    return hsv[:, 0] * 360 / 256, hsv[:, 1] / 255, hsv[:, 2] / 255


def _in_range(h: np.ndarray, lo: float, hi: float) -> np.ndarray:
    return (h >= lo) & (h < hi) if lo < hi else (h >= lo) | (h < hi)


def _single_label_crops(truth, annotations, element_type, sup, element, limit=8):
    ids = truth["pool_sources"][element_type][sup][element]
    # the element alone, or with a shape outline (dark lines: no other hue in the box)
    return [annotations[i] for i in ids
            if annotations[i][3] == [element] or (len(annotations[i][3]) == 2 and element in
                                                   annotations[i][3] and
                                                   set(annotations[i][3]) & SHAPES)][:limit]


@pytest.mark.parametrize("color", sorted(HUES))
def test_colour_crops_are_dominated_by_their_hue(corpus, truth, annotations, color):
    crops = _single_label_crops(truth, annotations, "object_attribute", "color", color)
    assert crops
    for image_id, box, *_ in crops:
        hue, sat, val = _hue_degrees(crop_pixels(corpus, image_id, box))
        vivid = hue[(sat > 0.45) & (val > 0.35)]
        assert len(vivid) > 0.03 * len(hue)  # thin glyphs (chair, kite) cover little
        shares = {c: _in_range(vivid, *r).mean() for c, r in HUES.items()}
        assert max(shares, key=shares.get) == color and shares[color] > 0.6, shares


@pytest.mark.parametrize("color,test", [
    ("white", lambda s, v: (s < 0.08) & (v > 0.95)),  # backgrounds stay under 0.93
    ("black", lambda s, v: v < 0.15),  # backgrounds and outlines stay above 0.25
])
def test_achromatic_crops_show_their_colour(corpus, truth, annotations, color, test):
    crops = _single_label_crops(truth, annotations, "object_attribute", "color", color)
    assert crops
    for image_id, box, *_ in crops:
        _, sat, val = _hue_degrees(crop_pixels(corpus, image_id, box))
        assert test(sat, val).mean() > 0.03


def test_count_crops_show_that_many_things(corpus, truth, annotations):
    pytest.importorskip("skimage")
    checked = 0
    for n, ids in truth["pool_sources"]["count"][""].items():
        for rid in ids[:4]:
            image_id, box, *_ = annotations[rid]
            pixels = crop_pixels(corpus, image_id, box).astype(int)
            mat = np.median(pixels.reshape(-1, 3), axis=0)
            foreground = np.abs(pixels - mat).max(axis=2) > 50
            assert _components(foreground, min_area=12) == int(n), (rid, n)
            checked += 1
    assert checked >= 20


def test_blond_people_have_yellow_hair_and_bald_ones_none(corpus, truth, annotations):
    def yellow_top(item):
        image_id, box, *_ = item
        pixels = crop_pixels(corpus, image_id, box)
        hue, sat, val = _hue_degrees(pixels)
        return (_in_range(hue, 40, 70) & (sat > 0.45) & (val > 0.6)).mean()

    hair = truth["pool_sources"]["human_attribute"]["hair style"]
    no_shirt_colour = {i for i in hair["blond"] + hair["bald"]
                       if not set(annotations[i][3]) & {"yellow"}}
    blond = [yellow_top(annotations[i]) for i in hair["blond"] if i in no_shirt_colour]
    bald = [yellow_top(annotations[i]) for i in hair["bald"] if i in no_shirt_colour]
    assert blond and bald
    assert min(blond) > 0.01 and max(bald) < 0.005


def test_people_carry_sparse_labels_and_names_do_not_mark_the_gender_pool(truth, annotations):
    pools = truth["pool_sources"]["human_attribute"]
    people = {i for elements in pools.values() for ids in elements.values() for i in ids}
    # every person crop carries the same number of human labels, so none stands out by it
    assert {len(annotations[i][3]) for i in people} == {SPEC.human_labels}
    # no super-attribute is on every person (an action on all made the answer's the odd one)
    for super_attribute, elements in pools.items():
        carriers = {i for ids in elements.values() for i in ids}
        assert 0.3 < len(carriers) / len(people) < 0.7, super_attribute
    gendered = {i for ids in pools["gender"].values() for i in ids}
    names = {i: " ".join(annotations[i][2][0].split()).lower() for i in people}
    # every figure shows a gender, so names are drawn alike with or without a gender label:
    # "person" (implies nothing) about as often in the gender pool as outside it
    assert set(names.values()) == {"man", "woman", "boy", "girl", "person"}
    share = [sum(names[i] == "person" for i in group) / len(group)
             for group in (gendered, people - gendered)]
    assert 0.1 < share[0] < 0.45 and 0.1 < share[1] < 0.45
    # a gender label and the name agree (a man is male)
    male = set(pools["gender"]["male"])
    assert not {i for i in male if names[i] in ("woman", "girl")}


def test_a_person_without_an_action_label_is_not_drawn_standing():
    def figure(attrs):
        im = Image.new("RGB", (80, 160), (200, 220, 200))
        draw_person(im, (5, 5, 70, 150), attrs)
        return np.asarray(im).astype(int)

    # the unlabelled pose (hands on the hips) is none of the four actions
    for action in SPEC.human_attributes["action"]:
        assert (np.abs(figure({}) - figure({"action": action})).max(axis=2) > 40).sum() > 30, action


def test_sunny_and_rainy_backgrounds(corpus, truth, annotations):
    scene = truth["pool_sources"]["object_attribute"]["scene"]
    for image_id, box, *_ in (annotations[i] for i in scene["sunny"][:5]):
        hue, sat, _ = _hue_degrees(crop_pixels(corpus, image_id, box))
        assert (_in_range(hue, 190, 230) & (sat > 0.3)).mean() > 0.25  # blue sky
    for image_id, box, *_ in (annotations[i] for i in scene["rainy"][:5]):
        _, _, val = _hue_degrees(crop_pixels(corpus, image_id, box))
        assert np.median(val) < 0.45  # dark slate
