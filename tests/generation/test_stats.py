"""`vprom stats`: Table 1, relations and split sizes of a hand-made data set."""

from __future__ import annotations

import json

import pytest

from vprom.generation.verify.stats import PAPER_TABLE1, format_stats, stats, write_stats
from tests.dataset_fixture import build_records, write_dataset
from vprom.app import cli
from vprom.domain import Crop, ElementType, Matrix


def _crop(i, etype, element, image, sa=""):
    return Crop(crop_id=i, image_id=image, x=0, y=0, w=120, h=120, element_type=etype,
                element=element, super_attribute=sa, source_id=i + 1, labels=(element,))


@pytest.fixture(scope="module")
def hand_made(tmp_path_factory):
    """2 object matrices (and, union) over 3 images and 1 count matrix over 2 images."""
    objects = ["dog", "cat", "car", "bus", "cup", "lamp", "bed", "pen", "hat", "box", "key"]
    crops, matrices = [], []
    # and: dog×3, cat×3, car×2 / candidates car + 7 others; images 1..3 by panel
    els = ["dog"] * 3 + ["cat"] * 3 + ["car"] * 2 + ["car"] + objects[3:10]
    for k, e in enumerate(els):
        crops.append(_crop(len(crops), "object", e, image=1 + k % 3))
    matrices.append(Matrix(0, "and", "object", "", [c.crop_id for c in crops[:16]], els, 0,
                           {"neutral": "train", "held_out_objects": "test"}))
    els = ["dog", "cat", "car", "cat", "car", "dog", "car", "dog", "key", "cat"] + objects[3:9]
    for k, e in enumerate(els):
        crops.append(_crop(len(crops), "object", e, image=1 + k % 3))
    matrices.append(Matrix(1, "union", "object", "", [c.crop_id for c in crops[16:32]], els, 1,
                           {"neutral": "test", "held_out_objects": "train"}))
    counts = [str(n) for n in (1, 2, 3, 2, 3, 4, 3, 4, 5, 6, 7, 8, 9, 10, 1, 2)]
    for k, e in enumerate(counts):
        crops.append(_crop(len(crops), "count", e, image=10 + k % 2))
    matrices.append(Matrix(2, "progression", "count", "", [c.crop_id for c in crops[32:48]],
                           counts, 0, {"neutral": "val"}))
    return write_dataset(tmp_path_factory.mktemp("stats") / "hand.h5", crops, matrices)


def test_table1_by_hand(hand_made):
    t = stats(hand_made)["table1"]
    # object panels show dog cat car bus cup lamp bed pen hat box + key (2nd matrix) = 11
    assert t["object"] == {"elements": 11, "images": 3, "matrices": 2}
    assert t["count"] == {"elements": 10, "images": 2, "matrices": 1}
    assert t["object_attribute"] == {"elements": 0, "images": 0, "matrices": 0}
    assert t["total"] == {"elements": 21, "images": 5, "matrices": 3}


def test_relations_and_splits_by_hand(hand_made):
    f = stats(hand_made)
    assert f["relations"]["and"] == {"object_attribute": 0, "human_attribute": 0, "object": 1,
                                     "count": 0}
    assert f["relations"]["union"]["object"] == 1
    assert f["relations"]["progression"] == {"count": 1}
    assert f["splits"]["neutral"] == {"train": 1, "val": 1, "test": 1, "excluded": 0}
    assert f["splits"]["held_out_objects"] == {"train": 1, "val": 0, "test": 1, "excluded": 1}
    assert f["splits"]["interpolation"] == {"train": 0, "val": 0, "test": 0, "excluded": 3}


def test_paper_figures_are_beside_ours(hand_made):
    f = stats(hand_made)
    assert f["paper_table1"]["object"] == {"elements": 346, "images": 82_905, "matrices": 45_000}
    assert f["paper_table1"]["total"]["matrices"] == 235_000
    assert sum(PAPER_TABLE1[t.value]["matrices"] for t in ElementType) == 235_000
    text = format_stats(f)
    assert "objects" in text and "(82,905)" in text and "(235,000)" in text
    assert "held_out_objects" in text


def test_fixture_matrices_per_type(tmp_path):
    crops, matrices = build_records(2, seed=0)
    f = stats(write_dataset(tmp_path / "d.h5", crops, matrices))
    assert {t: r["matrices"] for t, r in f["table1"].items()} == {
        "object_attribute": 6, "human_attribute": 6, "object": 6, "count": 8, "total": 26}
    assert f["crops"] == 26 * 16
    # the fixture's And, Or and Union matrices are solved by recognition alone
    ceiling = f["perception_ceiling"]["by_element_type"]
    assert ceiling["object"] == {"all": 1.0, "and": 1.0, "or": 1.0, "union": 1.0}
    assert "perception-only ceiling" in format_stats(f) and "not a failure" in format_stats(f)


def test_json_written_atomically_and_by_the_cli(hand_made, tmp_path, capsys):
    write_stats(stats(hand_made), tmp_path / "s.json")
    assert json.loads((tmp_path / "s.json").read_text())["table1"]["total"]["matrices"] == 3
    assert cli.main(["stats", str(hand_made), "--json", str(tmp_path / "cli.json")]) == 0
    assert "Table 1" in capsys.readouterr().out
    assert json.loads((tmp_path / "cli.json").read_text())["splits"]["neutral"]["val"] == 1
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
