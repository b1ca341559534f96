"""Outputs never replace what vprom did not write, nor one of the command's own inputs
(issue 20, rows 1-4): each refusal comes before any work, names the path and says what to do."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from tests.dataset_fixture import (
    build_records,
    write_dataset,
    write_images,
    write_pools,
)
from vprom.app.cli import main


def tree(folder: Path) -> dict[str, str]:
    """Every file under `folder` with the sha256 of its bytes."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("outputs")
    crops, matrices = build_records(1)
    dataset = write_dataset(folder / "d.h5", crops, matrices)
    vg = write_images(folder / "vg", crops)
    (vg / "objects.json").write_text("[]")
    return dataset, vg


def refused(argv: list[str], capsys, *words: str) -> None:
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    for word in words:
        assert word in err, err


def test_export_onto_its_vg_folder_is_refused_and_the_folder_kept(data, capsys):
    """Row 1: `export --format npz --vg vg --out vg` deleted the whole VG folder."""
    dataset, vg = data
    before = tree(vg)
    refused(["export", str(dataset), "--format", "npz", "--vg", str(vg), "--out", str(vg)],
            capsys, str(vg), "input of this command")
    refused(["export", str(dataset), "--format", "npz", "--vg", str(vg), "--out",
             str(vg / "npz")], capsys, "inside the input folder")
    assert tree(vg) == before


def test_export_onto_a_folder_of_the_users_is_refused(data, tmp_path, capsys):
    """Row 2: `export --format original --out notes` deleted notes/todo.txt."""
    dataset, vg = data
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "todo.txt").write_text("buy milk")
    for fmt in ("original", "npz"):
        refused(["export", str(dataset), "--format", fmt, "--vg", str(vg), "--out", str(notes)],
                capsys, str(notes), "not written by vprom", "move it away")
    assert tree(notes) == {"todo.txt": hashlib.sha256(b"buy milk").hexdigest()}


def test_an_export_replaces_its_own_earlier_export(data, tmp_path, capsys):
    dataset, vg = data
    for fmt, out in (("npz", tmp_path / "npz"), ("original", tmp_path / "release"),
                     ("jsonl", tmp_path / "d.jsonl")):
        for _ in range(2):
            assert main(["export", str(dataset), "--format", fmt, "--vg", str(vg), "--out",
                         str(out), "--size", "16"]) == 0, capsys.readouterr().err
    # but not another format's: the npz folder is not an original release
    refused(["export", str(dataset), "--format", "original", "--vg", str(vg), "--out",
             str(tmp_path / "npz")], capsys, "a vprom export-npz output")


def test_export_onto_its_own_dataset_is_refused(data, tmp_path, capsys):
    """Row 3: `export d.h5 --format jsonl --out d.h5` overwrote the data set."""
    dataset, _ = data
    copy = tmp_path / "d.h5"
    copy.write_bytes(dataset.read_bytes())
    link = tmp_path / "link.jsonl"
    link.symlink_to(copy)
    for out in (copy, link):
        refused(["export", str(copy), "--format", "jsonl", "--out", str(out)], capsys,
                str(out), "input of this command")
    assert copy.read_bytes() == dataset.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.h5", "link.jsonl"]


def test_generate_onto_its_pools_is_refused(tmp_path, capsys):
    """Row 4: `generate p.h5 --out p.h5` replaced the pools by the data set."""
    pools = write_pools(tmp_path / "p.h5", images=50)
    before = pools.read_bytes()
    refused(["generate", str(pools), "--out", str(pools)], capsys, "input of this command")
    assert pools.read_bytes() == before


@pytest.mark.parametrize("command", ["generate", "merge"])
def test_a_dataset_is_not_written_over_a_file_vprom_did_not_write(tmp_path, capsys, command):
    pools = write_pools(tmp_path / "p.h5", images=50)
    mine = tmp_path / "thesis.h5"
    mine.write_bytes(b"my own work")
    refused([command, str(pools), "--out", str(mine)], capsys, "thesis.h5",
            "not written by vprom")
    assert mine.read_bytes() == b"my own work"


def test_stats_json_and_show_refuse_a_file_of_the_users(data, tmp_path, capsys):
    dataset, vg = data
    paper = tmp_path / "paper.json"
    paper.write_text('{"title": "mine"}')
    refused(["stats", str(dataset), "--json", str(paper)], capsys, "paper.json")
    photo = tmp_path / "photo.png"
    photo.write_bytes(b"\x89PNG\r\n\x1a\nnot vprom's")
    refused(["show", str(dataset), "--id", "0", "--vg", str(vg), "--out", str(photo)], capsys,
            "photo.png")
    assert paper.read_text() == '{"title": "mine"}'
    # their own outputs are replaced
    assert main(["stats", str(dataset), "--json", str(tmp_path / "s.json")]) == 0
    assert main(["stats", str(dataset), "--json", str(tmp_path / "s.json")]) == 0
    for _ in range(2):
        assert main(["show", str(dataset), "--id", "0", "--vg", str(vg), "--out",
                     str(tmp_path / "m.png")]) == 0


def test_build_refuses_a_folder_of_the_users_and_an_output_inside_its_vg(tmp_path, capsys):
    home = tmp_path / "home"
    home.mkdir()
    (home / "cv.pdf").write_text("mine")
    refused(["build", "--synthetic", "--out", str(home)], capsys, "home", "not written by vprom")
    vg = tmp_path / "vg"
    vg.mkdir()
    refused(["build", "--vg", str(vg), "--out", str(vg / "build")], capsys, "inside the input")
    assert tree(home) == {"cv.pdf": hashlib.sha256(b"mine").hexdigest()}


def test_build_and_report_never_take_a_folder_by_the_names_of_its_files(tiny_pair, tmp_path,
                                                                          capsys):
    """Audit item 3: `report --out p2` overwrote p2/report.md, and `build --out p3` deleted
    p3/manifest.json and p3/stats.json: files of the user's that bear names vprom writes."""
    from tests.baselines.conftest import small_config
    from vprom.baselines.train import train

    p2, p3 = tmp_path / "p2", tmp_path / "p3"
    p2.mkdir()
    p3.mkdir()
    (p2 / "report.md").write_text("# my notes")
    (p3 / "manifest.json").write_text('{"project": "mine"}')
    (p3 / "stats.json").write_text('{"mean": 3}')
    before = tree(tmp_path)
    run = train(small_config(*tiny_pair, tmp_path / "runs" / "rn", model="rn", epochs=1))
    assert main(["evaluate", str(run), "--device", "cpu"]) == 0
    refused(["report", str(run), "--out", str(p2)], capsys, str(p2), "not written by vprom")
    refused(["build", "--synthetic", "--out", str(p3)], capsys, str(p3), "not written by vprom")
    assert {k: v for k, v in tree(tmp_path).items() if not k.startswith("runs")} == before
    for _ in range(2):  # a report's own folder is its to rewrite
        assert main(["report", str(run), "--out", str(tmp_path / "report")]) == 0, \
            capsys.readouterr().err


def test_a_symlink_at_the_lock_path_never_clobbers_its_target(data, tmp_path, capsys):
    """Audit item 2: `ln -s ../victim.txt out/.stats.json.lock` made stats write its PID into
    victim.txt, so anyone who could write into a shared output folder could overwrite any
    file of the user's."""
    dataset, _ = data
    victim, out = tmp_path / "victim.txt", tmp_path / "out"
    victim.write_text("a file of the user's")
    out.mkdir()
    (out / ".stats.json.lock").symlink_to("../victim.txt")
    refused(["stats", str(dataset), "--json", str(out / "stats.json")], capsys,
            str(out / ".stats.json.lock"))
    assert victim.read_text() == "a file of the user's"
    assert not (out / "stats.json").exists()
