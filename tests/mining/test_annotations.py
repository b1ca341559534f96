"""What `mine` does with annotations no real image has: an absurd image
size is refused with its record named; empty, negative or outside boxes and repeated object
ids are dropped and counted in the pools report and its summary, never silently."""

from __future__ import annotations

import json

import pytest

from tests.mining.conftest import IMAGE_DATA, OBJECTS, _obj, corpus, write_vg
from vprom.app.cli import main
from vprom.errors import VpromError
from vprom.mining.pools import mine


@pytest.mark.parametrize("width", [10**12, 0, -5, 70_000])
def test_an_absurd_image_size_is_refused_with_its_record(tmp_path, width):
    images = [dict(r) for r in IMAGE_DATA]
    images[1]["width"] = width
    vg = write_vg(tmp_path / "vg", corpus(image_data=images))
    with pytest.raises(VpromError, match=rf"image 2 \(record #1\) is {width}x400 px, which no "
                                         "JPEG can be"):
        mine(vg, tmp_path / "pools.h5", workers=1)
    assert not (tmp_path / "pools.h5").exists()


def test_repeated_ids_and_bad_boxes_are_dropped_and_counted(tmp_path, capsys):
    objects = json.loads(json.dumps(OBJECTS))
    objects[1]["objects"] += [_obj(201, ["horse"], 50, 50, 200, 200),  # id 201 again
                              _obj(203, ["car"], -400, -400, 100, 100)]  # wholly outside
    vg = write_vg(tmp_path / "vg", corpus(objects=objects))
    assert main(["mine", "--vg", str(vg), "--out", str(tmp_path / "pools.h5"),
                 "--workers", "1"]) == 0
    summary = capsys.readouterr().out
    assert "duplicate id 1" in summary and "outside image 2" in summary, summary
    report = json.loads((tmp_path / "pools.h5.report.json").read_text())
    assert report["objects"]["duplicate_id"] == 1
    assert "object id repeated within its image" in (tmp_path / "pools.h5.report.md").read_text()
