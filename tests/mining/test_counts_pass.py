"""The counts pass: regions in any layout, the first fault named, missing images counted."""

from __future__ import annotations

from pathlib import Path

import pytest

from vprom.errors import VpromError
from vprom.mining import pool_passes, readers
from vprom.mining.vocab import load_vocabulary


def _image(index, regions, image_id=None):
    return {"image_id": index + 1 if image_id is None else image_id, "regions": regions}


def _region(rid, phrase="three dogs", x=0, y=0, w=200, h=200):
    return {"region_id": rid, "phrase": phrase, "x": x, "y": y, "width": w, "height": h,
            "image_id": 0}


def _mine(records, sizes=None):
    path = Path("region_descriptions.json")
    sizes = sizes or {k + 1: (400, 400) for k in range(len(records))}
    images = (readers.image_of(index, record, path, "regions")
              for index, record in enumerate(records))
    return pool_passes.mine_counts(images, sizes, 100, load_vocabulary())


def test_regions_in_other_layouts_are_read_as_the_reader_reads_them():
    plain = [_image(k, [_region(10 * k + j) for j in range(3)]) for k in range(5)]
    odd = [_image(k, [_region(10 * k + j) for j in range(3)]) for k in range(5)]
    odd[1]["regions"][0]["x"] = 0.0                  # a float box: int() as readers do
    odd[2]["regions"][1]["phrase"] = None            # not a string: ""
    del odd[2]["regions"][2]["region_id"]            # the v1.0 key
    odd[2]["regions"][2]["id"] = 22
    odd[3]["regions"][0]["region_id"] = True         # a bool id is not the fast path's int
    a, b = _mine(plain), _mine(odd)
    assert a.stats["regions"]["read"] == b.stats["regions"]["read"] == 15
    assert a.stats["regions"]["counted"] == 15 and b.stats["regions"]["counted"] == 14
    assert a.columns["source_id"].tolist() == [0, 1, 2, 10, 11, 12, 20, 21, 22, 30, 31, 32,
                                               40, 41, 42]
    assert b.columns["source_id"].tolist() == [0, 1, 2, 10, 11, 12, 20, 22, 1, 31, 32, 40, 41,
                                               42]


def test_the_first_fault_in_the_file_is_named():
    records = [_image(k, [_region(10 * k)]) for k in range(6)]
    records[2]["regions"][0]["x"] = "left"            # record 2: a non-numeric box
    records[4] = ["not", "a", "record"]               # record 4: not an object
    with pytest.raises(VpromError, match=r"image 3, region .*non-numeric box"):
        _mine(records)
    records[2]["regions"][0]["x"] = 0
    with pytest.raises(VpromError, match="record #4 is a list"):
        _mine(records)


def test_images_missing_from_image_data_are_counted_not_mined():
    records = [_image(k, [_region(10 * k), _region(10 * k + 1, "a cat")]) for k in range(3)]
    result = _mine(records, sizes={1: (400, 400), 3: (400, 400)})
    counts = result.stats["regions"]
    assert counts["read"] == 6 and counts["missing_image"] == 2
    assert counts["missing_image_records"] == 1 and result.stats["missing_image_ids"] == [2]
    assert result.columns["source_id"].tolist() == [0, 20]
