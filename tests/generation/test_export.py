"""`vprom export`: JSON lines that round-trip, and the original release's folder layout."""

from __future__ import annotations

import json
import os

import h5py
import numpy as np
import pytest
from PIL import Image

from generation.export import export, matrix_of
from tests.dataset_fixture import build_records, write_dataset, write_images
from vprom.app import cli
from vprom.errors import VpromError
from vprom.records import SPLITS
from vprom.tables import read_crop_table, read_matrix_table


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    root = tmp_path_factory.mktemp("export")
    crops, matrices = build_records(1, seed=4)
    return write_dataset(root / "d.h5", crops, matrices), write_images(root / "vg", crops), \
        crops, matrices


def read_jsonl(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def test_jsonl_round_trip(small, tmp_path):
    dataset, _, crops, matrices = small
    records = read_jsonl(export(dataset, "jsonl", tmp_path / "d.jsonl"))
    assert len(records) == len(matrices)
    table = read_matrix_table(dataset)
    parts = table.parts_of()
    for i, record in enumerate(records):
        assert matrix_of(record) == table.row(i, parts) == matrices[i]
        assert record["answer_label"] == record["answer"] + 9
        assert set(record["splits"]) == set(SPLITS)


def test_jsonl_panels_carry_full_provenance(small, tmp_path):
    dataset, _, crops, _ = small
    by_id = {c.crop_id: c for c in crops}
    records = read_jsonl(export(dataset, "jsonl", tmp_path / "d.jsonl"))
    with h5py.File(dataset) as h5:
        elements = h5["matrices/elements"].asstr()[()]
        panels = h5["matrices/panels"][()]
    for i, record in enumerate(records):
        assert [p["crop_id"] for p in record["panels"]] == panels[i].tolist()
        assert [p["element"] for p in record["panels"]] == elements[i].tolist()
        for p in record["panels"]:
            c = by_id[p["crop_id"]]
            assert p["image_id"] == c.image_id and p["box"] == list(c.box)
            assert p["source_id"] == c.source_id and p["phrase"] == c.phrase
            assert p["labels"] == list(c.labels)
    counts = [r for r in records if r["element_type"] == "count"]
    assert counts and all(p["phrase"].endswith("apples") for r in counts for p in r["panels"])


def test_jsonl_is_deterministic_and_has_a_manifest(small, tmp_path):
    dataset = small[0]
    a = export(dataset, "jsonl", tmp_path / "a.jsonl").read_bytes()
    assert export(dataset, "jsonl", tmp_path / "b.jsonl").read_bytes() == a
    manifest = json.loads((tmp_path / "a.jsonl.manifest.json").read_text())
    assert manifest["kind"] == "export-jsonl" and manifest["counts"]["matrices"] == 26 // 2


def test_original_layout(small, tmp_path):
    dataset, vg, crops, matrices = small
    out = export(dataset, "original", tmp_path / "orig", vg_dir=vg)
    problems = sorted(p.name for p in (out / "problems").iterdir())
    assert problems == [f"{m.id:06d}" for m in matrices]
    by_id = {c.crop_id: c for c in crops}
    for m in matrices:
        folder = out / "problems" / f"{m.id:06d}"
        assert sorted(p.name for p in folder.iterdir()) == sorted(
            [f"{k}.jpg" for k in range(1, 17)] + ["label.txt", "meta.json"])
        assert (folder / "label.txt").read_text() == f"{m.answer + 9}\n"
        meta = json.loads((folder / "meta.json").read_text())
        assert meta["answer_label"] == m.answer + 9 and meta["crop_ids"] == list(m.panels)
        for k, crop_id in enumerate(m.panels):
            with Image.open(folder / f"{k + 1}.jpg") as im:
                assert im.size == (by_id[crop_id].w, by_id[crop_id].h)
    neutral = {p: (out / "splits" / "neutral" / f"{p}.txt").read_text().split()
               for p in ("train", "val", "test")}
    for m in matrices:
        part = m.part("neutral")
        assert (f"{m.id:06d}" in neutral[part]) and all(
            f"{m.id:06d}" not in ids for p, ids in neutral.items() if p != part)
    assert not (out / "crops").exists() and not (out / ".crops").exists()
    assert json.loads((out / "manifest.json").read_text())["kind"] == "export-original"


def test_original_answer_panel_shows_the_answer_crop(small, tmp_path):
    """The file named by label.txt is the answer crop's pixels (the fixture colours crops)."""
    dataset, vg, _, matrices = small
    out = export(dataset, "original", tmp_path / "orig", vg_dir=vg)
    m = matrices[7]
    folder = out / "problems" / f"{m.id:06d}"
    label = int((folder / "label.txt").read_text())
    crop_id = m.panels[label - 1]
    with Image.open(folder / f"{label}.jpg") as im:
        r, g, b = im.convert("RGB").getpixel((2, im.height // 2))
    expected = (40 + (crop_id * 53) % 180, 90 + (crop_id * 29) % 140, 160)
    assert max(abs(r - expected[0]), abs(g - expected[1]), abs(b - expected[2])) < 12


def test_symlink_mode_writes_each_crop_once(small, tmp_path):
    dataset, vg, crops, matrices = small
    copied = export(dataset, "original", tmp_path / "copy", vg_dir=vg)
    linked = export(dataset, "original", tmp_path / "link", vg_dir=vg, symlink=True)
    assert len(list((linked / "crops").iterdir())) == len({p for m in matrices for p in m.panels})
    for m in matrices[:4]:
        for k in range(1, 17):
            link = linked / "problems" / f"{m.id:06d}" / f"{k}.jpg"
            assert link.is_symlink() and not os.path.isabs(os.readlink(link))
            assert os.readlink(link) == f"../../crops/{m.panels[k - 1]}.jpg"
            assert link.read_bytes() == (copied / link.relative_to(linked)).read_bytes()


def test_original_needs_images(small, tmp_path):
    dataset, _, crops, _ = small
    with pytest.raises(VpromError, match="--vg"):
        export(dataset, "original", tmp_path / "o")
    # an image missing from the VG folder: a clear error, and no half-written output
    partial = tmp_path / "vg"
    write_images(partial, [c for c in crops if c.image_id != crops[-1].image_id])
    with pytest.raises(VpromError, match=f"image {crops[-1].image_id} is not under"):
        export(dataset, "original", tmp_path / "o", vg_dir=partial)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["vg"]


def test_cli(small, tmp_path, capsys):
    dataset, vg, _, matrices = small
    assert cli.main(["export", str(dataset), "--format", "jsonl", "--out",
                     str(tmp_path / "x.jsonl")]) == 0
    assert len(read_jsonl(tmp_path / "x.jsonl")) == len(matrices)
    assert cli.main(["export", str(dataset), "--format", "original", "--out",
                     str(tmp_path / "o"), "--vg", str(vg), "--symlink"]) == 0
    assert (tmp_path / "o" / "crops").is_dir()
    assert cli.main(["export", str(dataset), "--format", "original", "--out",
                     str(tmp_path / "p")]) == 1
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_export_refuses_a_dataset_with_unknown_crops(small, tmp_path):
    dataset = small[0]
    bad = tmp_path / "bad.h5"
    bad.write_bytes(dataset.read_bytes())
    with h5py.File(bad, "a") as h5:
        panels = h5["matrices/panels"][()]
        panels[2, 3] = 123_456
        del h5["matrices/panels"]
        h5["matrices/panels"] = panels
    with pytest.raises(VpromError, match="matrix 2 shows a crop that is not in crops"):
        export(bad, "jsonl", tmp_path / "bad.jsonl")
    assert not (tmp_path / "bad.jsonl").exists()
    assert len(read_crop_table(dataset)) == 13 * 16
    assert np.all(read_matrix_table(dataset).answer < 8)
