"""The real-photograph VG fixture: VG's schema, and the miner keeps exactly the expected crops."""

from __future__ import annotations

import numpy as np
import pytest

from tests.photo_fixture import (
    EXPECTED_CROPS,
    PHOTOS,
    check_vg_schema,
    crop_pixels,
    photo_crops,
    write_photo_vg,
)

pytest.importorskip("skimage")


@pytest.fixture(scope="module")
def photo_vg(tmp_path_factory):
    return write_photo_vg(tmp_path_factory.mktemp("photo_vg"))


def test_photo_folder_matches_vg_schema(photo_vg):
    assert check_vg_schema(photo_vg) == []


def test_schema_checker_reports_a_wrong_type(photo_vg, tmp_path):
    import json
    import shutil

    bad = shutil.copytree(photo_vg, tmp_path / "bad")
    records = json.loads((bad / "objects.json").read_text())
    records[0]["objects"][0]["w"] = "350"
    (bad / "objects.json").write_text(json.dumps(records))
    errors = check_vg_schema(bad)
    assert len(errors) == 1 and "w='350'" in errors[0]


def test_photos_are_real_photographs(photo_vg):
    # real photos have many distinct colours; a flat synthetic drawing has few
    for image_id in PHOTOS:
        rgb = crop_pixels(photo_vg, image_id, (0, 0, 10_000, 10_000)).reshape(-1, 3).astype(int)
        assert len(np.unique(rgb[:, 0] << 16 | rgb[:, 1] << 8 | rgb[:, 2])) > 5000


def test_photo_crops_one_per_annotated_object(photo_vg):
    table = photo_crops(photo_vg)
    n_objects = sum(len(objs) for _, objs, _ in PHOTOS.values())
    assert len(table) == n_objects
    assert list(table.crop_id) == list(range(n_objects))
    cat = table.row(int(np.flatnonzero(table.source_id == 301)[0]))
    assert (cat.image_id, cat.box, cat.element) == (3, (0, 0, 451, 300), "cat")
    assert set(cat.labels) == {"cat", "brown", "striped"}
    assert (table.w > 0).all() and (table.h > 0).all()


def test_miner_keeps_exactly_the_expected_crops(photo_vg, tmp_path):
    pools = pytest.importorskip("vprom.mining.pools")
    from vprom.tables import read_crop_table

    pools.mine(photo_vg, tmp_path / "pools.h5", min_side=100, workers=1)
    crops = read_crop_table(tmp_path / "pools.h5", "POOLS.h5")
    got = sorted(zip(crops.element_type, crops.super_attribute, crops.element,
                     (int(s) for s in crops.source_id)))
    assert got == EXPECTED_CROPS
