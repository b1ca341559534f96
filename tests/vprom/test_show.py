"""`vprom show`: a readable PNG of one matrix, with and without its answer."""

from __future__ import annotations

import pytest
from PIL import Image

from tests.dataset_fixture import build_records, write_dataset, write_images
from vprom.app import cli
from vprom.errors import VpromError
from vprom.show import FRAME, GREEN, TILE, canvas_size, letterbox, show, tile_positions


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    root = tmp_path_factory.mktemp("show")
    crops, matrices = build_records(1, seed=2)
    return write_dataset(root / "d.h5", crops, matrices), write_images(root / "vg", crops), \
        matrices


def test_png_of_the_expected_size(small, tmp_path):
    dataset, vg, _ = small
    out = show(dataset, 3, vg, tmp_path / "m.png")
    with Image.open(out) as im:
        assert im.format == "PNG" and im.size == canvas_size(False)
    with Image.open(show(dataset, 3, vg, tmp_path / "a.png", answer=True)) as im:
        assert im.size == canvas_size(True)
        assert canvas_size(True)[1] > canvas_size(False)[1]


def test_answer_is_framed_in_green_and_only_in_answer_mode(small, tmp_path):
    dataset, vg, matrices = small
    m = matrices[5]
    x, y = tile_positions()[9 + m.answer]
    other = tile_positions()[9 + (m.answer + 1) % 8]
    with Image.open(show(dataset, m.id, vg, tmp_path / "a.png", answer=True)) as im:
        im = im.convert("RGB")
        assert im.getpixel((x - FRAME // 2 - 1, y + TILE // 2)) == GREEN
        assert im.getpixel((other[0] - FRAME // 2 - 1, other[1] + TILE // 2)) != GREEN
    with Image.open(show(dataset, m.id, vg, tmp_path / "q.png")) as im:
        assert im.convert("RGB").getpixel((x - FRAME // 2 - 1, y + TILE // 2)) != GREEN


def test_tiles_show_the_crops(small, tmp_path):
    """Each panel tile holds its crop: the fixture paints each crop in its own colour."""
    dataset, vg, matrices = small
    m = matrices[0]
    with Image.open(show(dataset, m.id, vg, tmp_path / "m.png")) as im:
        im = im.convert("RGB")
        x, y = tile_positions()[0]
        r, g, b = im.getpixel((x + 4, y + TILE // 2))
        crop_id = m.panels[0]
        expected = (40 + (crop_id * 53) % 180, 90 + (crop_id * 29) % 140, 160)
        assert max(abs(r - expected[0]), abs(g - expected[1]), abs(b - expected[2])) < 12


def test_letterbox_keeps_aspect():
    wide = Image.new("RGB", (400, 100), (255, 0, 0))
    tile = letterbox(wide)
    assert tile.size == (TILE, TILE)
    assert tile.getpixel((TILE // 2, TILE // 2)) == (255, 0, 0)
    assert tile.getpixel((TILE // 2, 5)) != (255, 0, 0)  # the band above the crop


def test_unknown_id_names_the_valid_range(small, tmp_path):
    dataset, vg, matrices = small
    with pytest.raises(VpromError, match=rf"no matrix with id 999.*ids 0\.\.{len(matrices) - 1}"):
        show(dataset, 999, vg, tmp_path / "x.png")
    assert not (tmp_path / "x.png").exists()


def test_cli(small, tmp_path, capsys):
    dataset, vg, _ = small
    assert cli.main(["show", str(dataset), "--id", "1", "--vg", str(vg), "--out",
                     str(tmp_path / "c.png"), "--answer"]) == 0
    assert (tmp_path / "c.png").is_file()
    assert cli.main(["show", str(dataset), "--id", "1", "--vg", str(tmp_path / "none"),
                     "--out", str(tmp_path / "d.png")]) == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "no such folder" in err
