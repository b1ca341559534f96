"""`vprom show`: a readable PNG of one matrix, with and without its answer."""

from __future__ import annotations

import pytest
from PIL import Image

from tests.dataset_fixture import build_records, write_dataset, write_images
from vprom.app import cli
from vprom.app.show import (
    FRAME,
    GREEN,
    TILE,
    Shown,
    answer_lines,
    canvas_size,
    show,
    tile_positions,
)
from vprom.errors import VpromError
from vprom.images import letterbox


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    root = tmp_path_factory.mktemp("show")
    crops, matrices = build_records(1, seed=2)
    return write_dataset(root / "d.h5", crops, matrices), write_images(root / "vg", crops), \
        matrices


def test_png_of_the_expected_size(small, tmp_path):
    dataset, vg, _ = small
    out = show(dataset, 3, vg, tmp_path / "m.png").out
    with Image.open(out) as im:
        assert im.format == "PNG" and im.size == canvas_size(False)
    with Image.open(show(dataset, 3, vg, tmp_path / "a.png", answer=True).out) as im:
        assert im.size == canvas_size(True)
        assert canvas_size(True)[1] > canvas_size(False)[1]


def test_answer_is_framed_in_green_and_only_in_answer_mode(small, tmp_path):
    dataset, vg, matrices = small
    m = matrices[5]
    x, y = tile_positions()[9 + m.answer]
    other = tile_positions()[9 + (m.answer + 1) % 8]
    with Image.open(show(dataset, m.id, vg, tmp_path / "a.png", answer=True).out) as im:
        im = im.convert("RGB")
        assert im.getpixel((x - FRAME // 2 - 1, y + TILE // 2)) == GREEN
        assert im.getpixel((other[0] - FRAME // 2 - 1, other[1] + TILE // 2)) != GREEN
    with Image.open(show(dataset, m.id, vg, tmp_path / "q.png").out) as im:
        assert im.convert("RGB").getpixel((x - FRAME // 2 - 1, y + TILE // 2)) != GREEN


def test_tiles_show_the_crops(small, tmp_path):
    """Each panel tile holds its crop: the fixture paints each crop in its own colour."""
    dataset, vg, matrices = small
    m = matrices[0]
    with Image.open(show(dataset, m.id, vg, tmp_path / "m.png").out) as im:
        im = im.convert("RGB")
        x, y = tile_positions()[0]
        r, g, b = im.getpixel((x + 4, y + TILE // 2))
        crop_id = m.panels[0]
        expected = (40 + (crop_id * 53) % 180, 90 + (crop_id * 29) % 140, 160)
        assert max(abs(r - expected[0]), abs(g - expected[1]), abs(b - expected[2])) < 12


def test_letterbox_keeps_aspect():
    wide = Image.new("RGB", (400, 100), (255, 0, 0))
    tile = letterbox(wide, TILE)
    assert tile.size == (TILE, TILE)
    assert tile.getpixel((TILE // 2, TILE // 2)) == (255, 0, 0)
    assert tile.getpixel((TILE // 2, 5)) != (255, 0, 0)  # the band above the crop


def test_unknown_id_names_the_valid_range(small, tmp_path):
    dataset, vg, matrices = small
    with pytest.raises(VpromError, match=rf"no matrix with id 999.*ids 0\.\.{len(matrices) - 1}"):
        show(dataset, 999, vg, tmp_path / "x.png")
    assert not (tmp_path / "x.png").exists()


def test_count_caption_numbers_each_candidate():
    """A count matrix's candidates read "1: 9   2: 7", not "1 9  2 7"."""
    elements = ["1", "2", "3", "2", "3", "4", "5", "6", "1", "9", "7", "3", "7", "2", "10", "4"]
    m = Shown(id=4, relation="progression", element_type="count", super_attribute="",
              answer=6, elements=elements, image_ids=[1] * 16, boxes=[(0, 0, 9, 9)] * 16)
    lines = answer_lines(m)
    assert lines[0] == "answer: candidate 7 (10)"
    assert lines[-2:] == ["candidates   1: 1   2: 9   3: 7   4: 3",
                          "candidates   5: 7   6: 2   7: 10   8: 4"]


def test_cli(small, tmp_path, capsys):
    dataset, vg, matrices = small
    assert cli.main(["show", str(dataset), "--id", "1", "--vg", str(vg), "--out",
                     str(tmp_path / "c.png"), "--answer"]) == 0
    assert (tmp_path / "c.png").is_file()
    said = capsys.readouterr().out  # what was written, where
    m = matrices[1]
    assert said.startswith(f"wrote {tmp_path / 'c.png'} (") and f"matrix {m.id}, " in said
    assert f"answer marked: candidate {m.answer + 1}" in said
    (tmp_path / "folder.png").mkdir()  # --out is checked before any work
    with pytest.raises(SystemExit) as stop:
        cli.main(["show", str(dataset), "--id", "1", "--vg", str(vg), "--out",
                  str(tmp_path / "folder.png")])
    assert stop.value.code == 2 and "is a folder" in capsys.readouterr().err
    assert cli.main(["show", str(dataset), "--id", "1", "--vg", str(tmp_path / "none"),
                     "--out", str(tmp_path / "d.png")]) == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "no such folder" in err


@pytest.mark.parametrize("name", ["m.jpg", "m.jpeg", "m"])
def test_an_out_that_is_not_named_png_is_refused_before_any_work(small, tmp_path, capsys, name):
    dataset, vg, _ = small
    assert cli.main(["show", str(dataset), "--id", "1", "--vg", str(vg), "--out",
                     str(tmp_path / name)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "show writes a PNG picture; name the file *.png" in err
    assert list(tmp_path.iterdir()) == []
