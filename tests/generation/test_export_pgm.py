"""`vprom export --format npz` (PGM style, the default), read the way PGM-family loaders
read it (RAVEN's style: test_export_raven.py). Facts from their sources, re-stated in our own code:

- SRAN, `SRAN/utility/PGMdataset_utility.py`, class `PGMdataset(root_dir, dataset_type,
  ...)`: `glob(join(root_dir, "*.npz"))` kept where `dataset_type in basename(f)`; per
  file `np.load(path)` (no allow_pickle), `data["image"].reshape(16, 160, 160)`,
  `data["target"]`, `data["meta_target"]` (an int8 one is cast to uint8); with `shuffle`,
  `np.where(indices == target)[0][0]` over the 8 candidates; each panel resized as a 2-D
  array.
- WReN-PyTorch (Fen9/WReN), `utility/dataset_utility.py`, class `dataset`:
  `glob(join(root_dir, "*", "*.npz"))` kept where `dataset_type in f` (the whole path),
  then the same three keys and reshape; `torch.tensor(target, dtype=torch.long)`.
- DeepMind PGM (its README and TFDS's `abstract_reasoning` builder): files
  `PGM_<regime>_<part>_<id>.npz` in one folder per regime, the part read as
  `name.split("_")[2]`; `image` reshaped to (16, 160, 160[, 1]) uint8; `meta_target` (12,)
  int64; `relation_structure_encoded` (4, 12) int64; `relation_structure` a (k, 3) bytes
  array; meta_target is the OR of the encoded rows.
"""

from __future__ import annotations

import glob
import os
import re

import numpy as np
import pytest
import torch

from vprom.generation.export import export
from vprom.generation.export.npz import panel_tile
from vprom.generation.export.npz import SLOT_NAMES, regime
from tests.generation.synthetic_build import synthetic_build  # noqa: F401 (fixture)
from vprom.images import ImageIndex, load_crop
from vprom.domain import SPLITS
from vprom.tables import SPLIT_PARTS, read_crop_table, read_matrix_table

SPLIT = "held_out_objects"
PGM_NAME = re.compile(r"^PGM_([^_]+)_(train|val|test)_(\d+)\.npz$")


@pytest.fixture(scope="module")
def exported(synthetic_build, tmp_path_factory):
    dataset, vg = synthetic_build
    out = tmp_path_factory.mktemp("pgm") / "pgm"
    summary = export(dataset, "npz", out, vg_dir=vg, split=SPLIT)  # default style, size
    return out, dataset, vg, summary


# --- the loaders, re-stated ---------------------------------------------------------------
def sran_items(root_dir: str, dataset_type: str):
    files = [f for f in glob.glob(os.path.join(root_dir, "*.npz"))
             if dataset_type in os.path.basename(f)]
    for path in files:
        data = np.load(path)
        image = data["image"].reshape(16, 160, 160)
        target = data["target"]
        meta_target = data["meta_target"]
        if meta_target.dtype == np.int8:
            meta_target = meta_target.astype(np.uint8)
        indices = np.arange(8)
        np.random.default_rng(0).shuffle(indices)  # its shuffle branch
        shuffled = np.where(indices == target)[0][0]
        assert np.array_equal(image[8:][indices][shuffled], image[8 + int(target)])
        yield path, image, int(target), meta_target


def wren_items(root_dir: str, dataset_type: str):
    files = [f for f in glob.glob(os.path.join(root_dir, "*", "*.npz")) if dataset_type in f]
    for path in files:
        data = np.load(path)
        image = data["image"].reshape(16, 160, 160)
        target = torch.tensor(data["target"], dtype=torch.long)
        meta_target = torch.tensor(data["meta_target"], dtype=torch.float32)
        yield path, image, int(target), meta_target


def pgm_part(file_name: str) -> str:
    """TFDS's abstract_reasoning: the part is the name's third `_` field."""
    return file_name.split("_")[2]


# --- the tests ------------------------------------------------------------------------
def test_pgm_file_naming(exported):
    out, dataset, _, summary = exported
    m = read_matrix_table(dataset)
    folder = out / regime(SPLIT)
    assert regime(SPLIT) == "held.out.objects" and folder.is_dir()
    for split in SPLITS:
        assert "_" not in regime(split)
    names = sorted(p.name for p in folder.iterdir())
    assert len(names) == summary.counts["problems"] > 0
    for part in SPLIT_PARTS:
        ids = sorted(int(PGM_NAME.match(n).group(3)) for n in names if pgm_part(n) == part)
        assert ids == sorted(int(i) for i in m.splits[SPLIT][part])
    for n in names:
        match = PGM_NAME.match(n)
        assert match and match.group(1) == regime(SPLIT)


def test_sran_reads_every_part(exported):
    out, dataset, vg, summary = exported
    m = read_matrix_table(dataset)
    answer = dict(zip(m.id.tolist(), m.answer.tolist()))
    for part in SPLIT_PARTS:
        items = list(sran_items(str(out / regime(SPLIT)), part))
        assert len(items) == summary.counts[part] > 0
        for path, image, target, meta_target in items:
            mid = int(PGM_NAME.match(os.path.basename(path)).group(3))
            assert image.dtype == np.uint8 and target == answer[mid]
            assert meta_target.shape == (12,)


def test_images_are_the_crops_in_gray(exported):
    out, dataset, vg, _ = exported
    crops, m = read_crop_table(dataset), read_matrix_table(dataset)
    row_of = {int(c): r for r, c in enumerate(crops.crop_id)}
    index = ImageIndex(vg)
    for path in sorted((out / regime(SPLIT)).glob("*.npz"))[:3]:
        with np.load(path) as data:
            assert data["image"].shape == (16, 160, 160)
            i = int(np.flatnonzero(m.id == int(data["id"]))[0])
            for k in (0, 8 + int(m.answer[i])):
                r = row_of[int(m.panels[i, k])]
                crop = load_crop(index.path(crops.image_id[r]),
                                 (crops.x[r], crops.y[r], crops.w[r], crops.h[r]))
                assert np.array_equal(data["image"][k], panel_tile(crop, 160, "L"))


def test_meta_targets_in_pgm_shapes(exported):
    out, dataset, _, _ = exported
    m = read_matrix_table(dataset)
    for path in (out / regime(SPLIT)).glob("*.npz"):
        with np.load(path) as data:
            i = int(np.flatnonzero(m.id == int(data["id"]))[0])
            encoded = data["relation_structure_encoded"]
            assert encoded.shape == (4, 12) and encoded.dtype == np.int64
            assert data["meta_target"].shape == (12,) and data["meta_target"].dtype == np.int64
            assert np.array_equal(data["meta_target"], encoded.max(axis=0))
            assert encoded[1:].sum() == 0 and encoded[0].sum() == 2
            on = {SLOT_NAMES[k] for k in np.flatnonzero(encoded[0])}
            assert on == {m.relation[i], m.element_type[i]}
            structure = data["relation_structure"]
            assert structure.shape == (1, 3) and structure.dtype.kind == "S"
            assert structure[0, 2].decode() == m.relation[i]


def test_pgm_relation_slots_keep_pgm_meanings():
    """PGM's slots 7-11: progression, XOR, OR, AND, consistent_union."""
    assert SLOT_NAMES[7:] == ("progression", "(unused)", "or", "and", "union")


def test_wren_reads_from_the_export_root(exported, monkeypatch):
    """They test the part's name against the whole path, so the root's own path must not
    hold `train`, `val` or `test` (pytest's temporary folders do): read it as `.`."""
    out, dataset, _, summary = exported
    m = read_matrix_table(dataset)
    answer = dict(zip(m.id.tolist(), m.answer.tolist()))
    monkeypatch.chdir(out)
    if "test" in str(out):  # the trap, under pytest's own temporary folders
        assert len(list(wren_items(str(out), "test"))) == summary.counts["problems"]
    for part in SPLIT_PARTS:
        wren = list(wren_items(".", part))
        assert len(wren) == summary.counts[part]
        for path, _, target, _ in wren:
            assert target == answer[int(PGM_NAME.match(os.path.basename(path)).group(3))]


def test_color_style_unchanged_layout(synthetic_build, tmp_path):
    dataset, vg = synthetic_build
    summary = export(dataset, "npz", tmp_path / "c", vg_dir=vg, split="neutral", size=16,
                     style="color")
    assert summary.counts["style"] == "color"
    names = [p.name for p in (tmp_path / "c").glob("*.npz")]
    assert names and all(n.startswith("vprom_neutral_") for n in names)
    with np.load(tmp_path / "c" / names[0]) as data:
        assert data["image"].shape == (16, 16, 16, 3) and data["meta_target"].shape == (8,)
