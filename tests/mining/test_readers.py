"""The streaming VG readers: every schema variant, zip packing, hashing and clear errors."""

from __future__ import annotations

import json
import zipfile

import pytest

from vprom.errors import VpromError
from vprom.files import sha256_file
from vprom.mining import readers
from vprom.mining.readers import Object, Region

from .conftest import CORPUS, corpus, write_vg

KEYS = {"objects": "objects", "attributes": "attributes", "region_descriptions": "regions"}


def _read(path, stem=None):
    """Every `ImageItems` of a file, read by the streaming reader, and its Source."""
    stem = stem or path.name.split(".")[0]
    with readers.Source(path) as source:
        return list(readers.images(source, KEYS[stem])), source


def test_locate_prefers_plain_json_then_zip_then_newest_version(tmp_path):
    write_vg(tmp_path, {"objects": [], "attributes_v1_0": [], "attributes_v1_2": []},
             zipped=("objects",))
    assert readers.locate(tmp_path, "objects").name == "objects.json.zip"
    assert readers.locate(tmp_path, "attributes").name == "attributes_v1_2.json"
    write_vg(tmp_path, {"objects": []})
    assert readers.locate(tmp_path, "objects").name == "objects.json"


def test_locate_names_both_forms_when_missing(tmp_path):
    with pytest.raises(VpromError, match=r"neither region_descriptions\.json nor "
                                         r"region_descriptions\.json\.zip"):
        readers.locate(tmp_path, "region_descriptions")
    with pytest.raises(VpromError, match="no such folder"):
        readers.locate(tmp_path / "nope", "objects")


def test_image_data_accepts_image_id_and_id(vg_dir):
    sizes, sha = readers.image_sizes(vg_dir / "image_data.json")
    assert sizes == {1: (800, 600), 2: (500, 400), 3: (640, 480)}
    assert sha == sha256_file(vg_dir / "image_data.json")


def test_objects_handle_id_name_and_missing_synsets(vg_dir):
    images, _ = _read(vg_dir / "objects.json")
    assert [i.image_id for i in images] == [1, 2, 3, 4]
    assert [i.index for i in images] == [0, 1, 2, 3]
    by_id = {o.object_id: o for o in images[0].items}
    assert by_id[101].names == ["Shirt "] and by_id[101].merged_object_ids == [150]
    assert by_id[102].names == ["car"] and (by_id[102].w, by_id[102].h) == (150, 120)  # "name"
    assert by_id[109].names == ["bench."]  # "id" instead of "object_id"
    assert not by_id[109].attributes and not by_id[109].merged_object_ids
    assert images[2].items == []


def test_v10_object_names_key(tmp_path):
    records = [{"id": 7, "attributes": [{"id": 70, "object_names": ["clock"], "x": 1, "y": 2,
                                         "w": 3, "h": 4, "attributes": ["green"]}]}]
    write_vg(tmp_path, {"attributes": records})
    (image,), _ = _read(tmp_path / "attributes.json")
    assert image.image_id == 7
    assert image.items == [Object(70, 1, 2, 3, 4, ["clock"], ["green"], [])]


def test_attributes_missing_null_or_one_string(vg_dir, tmp_path):
    images, _ = _read(vg_dir / "attributes.json")
    first = {o.object_id: o.attributes for o in images[0].items}
    assert not first[105]  # no "attributes" key
    assert first[102] == ["red", "Blue", "wood"]
    assert not {o.object_id: o.attributes for o in images[1].items}[201]  # null
    records = [{"image_id": 1, "attributes": [{"object_id": 2, "x": 0, "y": 0, "w": 1, "h": 1,
                                               "names": ["a"], "attributes": "red"}]}]
    write_vg(tmp_path, {"attributes": records})
    (image,), _ = _read(tmp_path / "attributes.json")
    assert image.items[0].attributes == ["red"]


def test_regions_use_width_height_and_top_level_id(vg_dir):
    images, _ = _read(vg_dir / "region_descriptions.json")
    assert [i.image_id for i in images] == [1, 2, 3, 4]
    assert images[0].items[0] == Region(1001, "three dogs on the grass", 0, 0, 300, 300)


def test_zip_member_streams_like_the_plain_file(tmp_path):
    plain = write_vg(tmp_path / "plain")
    packed = write_vg(tmp_path / "zip", zipped=tuple(CORPUS))
    for stem in KEYS:
        a, _ = _read(plain / f"{stem}.json")
        b, _ = _read(readers.locate(packed, stem), stem)
        assert [i[:3] for i in a] == [i[:3] for i in b]


def test_zip_with_two_json_members_is_refused(tmp_path):
    with zipfile.ZipFile(tmp_path / "objects.json.zip", "w") as z:
        z.writestr("objects.json", "[]")
        z.writestr("objects_v1_2.json", "[]")
    with pytest.raises(VpromError, match="exactly one .json member"):
        _read(tmp_path / "objects.json.zip")


def test_sha256_is_taken_while_parsing(vg_dir, tmp_path):
    _, source = _read(vg_dir / "region_descriptions.json")
    assert source.sha256 == sha256_file(vg_dir / "region_descriptions.json")
    packed = write_vg(tmp_path / "zip", {"objects": CORPUS["objects"]}, zipped=("objects",))
    _, source = _read(packed / "objects.json.zip")
    assert source.sha256 == sha256_file(packed / "objects.json.zip")


def test_truncated_json_names_file_and_last_record(tmp_path):
    text = json.dumps(CORPUS["objects"])
    write_vg(tmp_path, {"objects": text[: len(text) - 40]})
    with pytest.raises(VpromError) as e:
        _read(tmp_path / "objects.json")
    msg = str(e.value)
    assert "objects.json" in msg and "truncated" in msg
    assert "after image record #2 (image id 3)" in msg and "near byte" in msg


def test_truncated_zip_member_is_a_clear_error(tmp_path):
    text = json.dumps(CORPUS["region_descriptions"])
    write_vg(tmp_path, {"region_descriptions": text[:200]}, zipped=("region_descriptions",))
    with pytest.raises(VpromError, match=r"region_descriptions\.json\.zip: invalid or truncated "
                                         "JSON before the first image record"):
        _read(tmp_path / "region_descriptions.json.zip")


def test_not_an_array_of_records(tmp_path):
    write_vg(tmp_path, {"objects": {"objects": []}, "attributes": [1, 2]})
    with pytest.raises(VpromError, match="holds no image records"):
        _read(tmp_path / "objects.json")
    with pytest.raises(VpromError, match="record #0 is a int"):
        _read(tmp_path / "attributes.json")


def test_missing_box_key_names_file_image_object_and_key(tmp_path):
    files = corpus()
    del files["objects"][1]["objects"][1]["h"]
    write_vg(tmp_path, files)
    with pytest.raises(VpromError) as e:
        _read(tmp_path / "objects.json")
    msg = str(e.value)
    assert "objects.json: image 2, object 202 has no 'h' key" in msg


def test_region_missing_box_key_and_missing_ids(tmp_path):
    files = corpus()
    del files["region_descriptions"][0]["regions"][2]["width"]
    del files["objects"][0]["objects"][0]["object_id"]
    del files["image_data"][1]["id"]
    write_vg(tmp_path, files)
    with pytest.raises(VpromError, match="image 1, region 1003 has no 'width' key"):
        _read(tmp_path / "region_descriptions.json")
    with pytest.raises(VpromError, match="image 1, object #0 has no integer 'object_id'"):
        _read(tmp_path / "objects.json")
    with pytest.raises(VpromError, match="image record #1 has no integer 'image_id'"):
        readers.image_sizes(tmp_path / "image_data.json")


@pytest.mark.parametrize("workers", [1, 2])
def test_an_image_listed_twice_is_refused_naming_both_records(tmp_path, workers):
    from vprom.mining.pools import mine

    files = corpus()
    files["image_data"].append({"width": 1024, "height": 768, "id": 2})  # image 2 again
    write_vg(tmp_path / "vg", files)
    says = (r"image_data\.json: image id 2 is listed twice, in record #1 \(500x400\) and "
            r"record #3 \(1024x768\); each image must appear once")
    with pytest.raises(VpromError, match=says):
        readers.image_sizes(tmp_path / "vg" / "image_data.json")
    with pytest.raises(VpromError, match=says):
        mine(tmp_path / "vg", tmp_path / "pools.h5", workers=workers)
    assert not (tmp_path / "pools.h5").exists()


def test_non_numeric_box(tmp_path):
    files = corpus()
    files["objects"][0]["objects"][2]["x"] = "left"
    write_vg(tmp_path, files)
    with pytest.raises(VpromError, match="image 1, object 103 has a non-numeric box"):
        _read(tmp_path / "objects.json")


def test_float_boxes_are_accepted(tmp_path):
    files = corpus()
    files["objects"][0]["objects"][0].update(x=10.0, w=200.7)
    write_vg(tmp_path, files)
    images, _ = _read(tmp_path / "objects.json")
    assert (images[0].items[0].x, images[0].items[0].w) == (10, 200)
