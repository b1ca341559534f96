"""`vprom export --format npz`: per-problem files that PGM/RAVEN-style loaders glob and read.

The loaders' side (SRAN, SCL and the like, for PGM): `glob(folder/*_<part>_*.npz)`, then per
file `np.load(path)` (no allow_pickle) and `data["image"]`, `data["target"]`,
`data["meta_target"]`. Re-stated here over a real synthetic build and round-tripped against
DATASET.h5 and the VG images.
"""

from __future__ import annotations

import glob

import numpy as np
import pytest

from vprom.generation.export import export
from vprom.generation.export.npz import META_TARGET_NAMES, panel_tile
from tests.generation.synthetic_build import synthetic_build  # noqa: F401 (fixture)
from vprom.errors import VpromError
from vprom.images import ImageIndex, load_crop
from vprom.domain import SPLITS
from vprom.tables import SPLIT_PARTS, read_crop_table, read_matrix_table


@pytest.fixture(scope="module")
def exported(synthetic_build, tmp_path_factory):
    dataset, vg = synthetic_build
    out = tmp_path_factory.mktemp("npz") / "held"
    summary = export(dataset, "npz", out, vg_dir=vg, split="held_out_objects", size=48,
                     style="color")
    return out, dataset, vg, summary


def test_each_part_globs_to_exactly_its_problems(exported):
    out, dataset, _, summary = exported
    m = read_matrix_table(dataset)
    for part in SPLIT_PARTS:
        files = sorted(glob.glob(str(out / f"*_{part}_*.npz")))
        assert sorted(int(f.rsplit("_", 1)[1][:-4]) for f in files) == sorted(
            int(i) for i in m.splits["held_out_objects"][part])
        assert len(glob.glob(str(out / f"*{part}*.npz"))) == len(files) == summary.counts[part]
    excluded = len(m) - sum(summary.counts[p] for p in SPLIT_PARTS)
    assert excluded > 0  # held-out splits exclude matrices; none of them is written
    assert len(list(out.glob("*.npz"))) == summary.counts["problems"] == len(m) - excluded


def test_npz_round_trips(exported):
    out, dataset, vg, _ = exported
    crops, m = read_crop_table(dataset), read_matrix_table(dataset)
    row_of = {int(c): r for r, c in enumerate(crops.crop_id)}
    index = ImageIndex(vg)
    files = sorted(out.glob("*.npz"))
    for path in files:
        with np.load(path) as data:  # no allow_pickle: every array is plain
            i = int(np.flatnonzero(m.id == int(data["id"]))[0])
            image = data["image"]
            assert image.shape == (16, 48, 48, 3) and image.dtype == np.uint8
            assert int(data["target"]) == int(m.answer[i]) and 0 <= data["target"] < 8
            one_hot = data["meta_target"]
            assert one_hot.shape == (8,) and one_hot.sum() == 2
            assert [str(n) for n in data["meta_target_names"]] == list(META_TARGET_NAMES)
            assert {META_TARGET_NAMES[k] for k in np.flatnonzero(one_hot)} == {
                m.relation[i], m.element_type[i]}
            assert np.flatnonzero(one_hot[:4])[0] < 4 <= np.flatnonzero(one_hot[4:])[0] + 4
            assert str(data["relation"]) == m.relation[i]
            assert str(data["element_type"]) == m.element_type[i]
            assert str(data["super_attribute"]) == m.super_attribute[i]
            assert data["panels"].tolist() == m.panels[i].tolist()
            assert data["elements"].tolist() == m.elements[i].tolist()
            if path in files[::40]:  # the pixels: each panel is its crop, resized
                for k, crop_id in enumerate(m.panels[i]):
                    r = row_of[int(crop_id)]
                    crop = load_crop(index.path(crops.image_id[r]),
                                     (crops.x[r], crops.y[r], crops.w[r], crops.h[r]))
                    assert np.array_equal(image[k], panel_tile(crop, 48))


def test_summary_and_readme(exported):
    out, _, _, summary = exported
    text = str(summary)
    assert text.startswith(f"wrote {out}: ") and "split held_out_objects" in text
    assert "48x48 panels" in text
    assert (out / "README.txt").is_file() and (out / "manifest.json").is_file()
    assert not (out / ".tiles.u8").exists()


def test_no_split_name_holds_a_part_name():
    """Else `*_train_*` would also match another part's files."""
    assert not any(part in split for split in SPLITS for part in SPLIT_PARTS)


def test_default_size_and_unknown_split(tmp_path):
    from tests.dataset_fixture import build_records, write_dataset, write_images

    crops, matrices = build_records(1, seed=6)
    dataset = write_dataset(tmp_path / "d.h5", crops, matrices)
    vg = write_images(tmp_path / "vg", crops)
    summary = export(dataset, "npz", tmp_path / "out", vg_dir=vg, style="color")
    first = sorted((tmp_path / "out").glob("*.npz"))[0]
    assert first.name.startswith("vprom_neutral_")
    with np.load(first) as data:
        assert data["image"].shape == (16, 160, 160, 3)
    assert summary.counts["split"] == "neutral"
    with pytest.raises(VpromError, match="no split 'nope'.*neutral"):
        export(dataset, "npz", tmp_path / "other", vg_dir=vg, split="nope")
    assert not (tmp_path / "other").exists()
