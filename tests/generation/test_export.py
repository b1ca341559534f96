"""`vprom export`: JSON lines that round-trip; the command line of every format (the original
layout's clients: test_export_release.py; npz: test_export_npz.py)."""

from __future__ import annotations

import json

import h5py
import numpy as np
import pytest

from vprom.generation.export import export
from tests.dataset_fixture import build_records, write_dataset, write_images
from vprom.app import cli
from vprom.errors import VpromError
from vprom.domain import SPLITS, Matrix
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
    records = read_jsonl(export(dataset, "jsonl", tmp_path / "d.jsonl").out)
    assert len(records) == len(matrices)
    table = read_matrix_table(dataset)
    parts = table.parts_of()
    for i, record in enumerate(records):
        matrix = Matrix(**{k: record[k] for k in ("id", "relation", "element_type",
                                                  "super_attribute", "answer", "splits")},
                        panels=[p["crop_id"] for p in record["panels"]],
                        elements=[p["element"] for p in record["panels"]])
        assert matrix == table.row(i, parts) == matrices[i]
        assert record["answer_label"] == record["answer"] + 9
        assert set(record["splits"]) == set(SPLITS)


def test_jsonl_panels_carry_full_provenance(small, tmp_path):
    dataset, _, crops, _ = small
    by_id = {c.crop_id: c for c in crops}
    records = read_jsonl(export(dataset, "jsonl", tmp_path / "d.jsonl").out)
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
    a = export(dataset, "jsonl", tmp_path / "a.jsonl").out.read_bytes()
    assert export(dataset, "jsonl", tmp_path / "b.jsonl").out.read_bytes() == a
    manifest = json.loads((tmp_path / "a.jsonl.manifest.json").read_text())
    assert manifest["kind"] == "export-jsonl" and manifest["counts"]["matrices"] == 26 // 2


def test_folder_formats_need_images(small, tmp_path):
    dataset, _, crops, _ = small
    for fmt in ("original", "npz"):
        with pytest.raises(VpromError, match="--vg"):
            export(dataset, fmt, tmp_path / "o")
    # an image missing from the VG folder: a clear error, and no half-written output
    partial = tmp_path / "vg"
    write_images(partial, [c for c in crops if c.image_id != crops[-1].image_id])
    for fmt in ("original", "npz"):
        with pytest.raises(VpromError, match=f"image {crops[-1].image_id} is not under"):
            export(dataset, fmt, tmp_path / "o", vg_dir=partial)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["vg"]


def test_cli_prints_what_it_wrote(small, tmp_path, capsys):
    dataset, vg, _, matrices = small
    assert cli.main(["export", str(dataset), "--format", "jsonl", "--out",
                     str(tmp_path / "x.jsonl")]) == 0
    assert len(read_jsonl(tmp_path / "x.jsonl")) == len(matrices)
    assert capsys.readouterr().out == (f"wrote {tmp_path / 'x.jsonl'}: {len(matrices)} "
                                       "matrices as JSON lines\n")
    assert cli.main(["export", str(dataset), "--format", "original", "--out",
                     str(tmp_path / "o"), "--vg", str(vg)]) == 0
    said = capsys.readouterr().out
    assert said.startswith(f"wrote {tmp_path / 'o'}/V-PROM: {len(matrices)} problems in 1 "
                           "bucket (panels: symlinks), ")
    assert "3 label files, 21 split lists" in said
    assert (tmp_path / "o" / "V-PROM" / "crops").is_dir()
    assert cli.main(["export", str(dataset), "--format", "original", "--out",
                     str(tmp_path / "c"), "--vg", str(vg), "--copy"]) == 0
    assert "(panels: copies)" in capsys.readouterr().out
    assert cli.main(["export", str(dataset), "--format", "npz", "--out", str(tmp_path / "n"),
                     "--vg", str(vg), "--size", "32"]) == 0
    assert "split neutral" in capsys.readouterr().out
    assert cli.main(["export", str(dataset), "--format", "original", "--out",
                     str(tmp_path / "p")]) == 1
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


@pytest.mark.parametrize("fmt,existing", [("jsonl", "folder"), ("original", "file"),
                                          ("npz", "file"), ("jsonl", "file under a file")])
def test_cli_checks_out_before_any_work(small, tmp_path, capsys, monkeypatch, fmt, existing):
    """jsonl writes a file, original and npz a folder: a wrong --out is refused at once."""
    dataset, vg, _, _ = small
    keep = tmp_path / ("blocker" if existing == "file under a file" else "out")
    if existing == "folder":
        keep.mkdir()
    else:
        keep.write_text("keep me")
    out = keep / "x.jsonl" if existing == "file under a file" else keep
    import vprom.generation.export

    def no_work(*args, **kwargs):
        raise AssertionError("export ran")

    monkeypatch.setattr(vprom.generation.export, "export", no_work)
    assert cli.main(["export", str(dataset), "--format", fmt, "--out", str(out), "--vg",
                     str(vg)]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("vprom export: error: --out ")
    assert "choose another path" in err
    assert keep.is_dir() if existing == "folder" else keep.read_text() == "keep me"


def test_help_shows_every_layout_with_examples(capsys):
    with pytest.raises(SystemExit):
        cli.main(["export", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for fmt in ("jsonl:", "original:", "npz:"):
        assert fmt in text
    for example in ("--format original --vg data/vg --out build/release",
                    "--format npz --vg data/vg --out build/npz", "--format jsonl --out",
                    "--copy"):
        assert example in text
    assert "Raven_release/<id//5000>/<id>/1..16.jpg" in text and "os.readlink" in text


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
