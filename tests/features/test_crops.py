"""Planning (dedupe, image groups, batches, chunks) and crop pixels (clipping, draft)."""

from __future__ import annotations

import numpy as np
from PIL import Image, JpegImagePlugin

from vprom.features.crops import decode_crops, draft_reduction, batch_layout
from tests.features.conftest import CROP_ROWS, crop_table, write_jpeg
from vprom.images import clip_box

original_jpeg = JpegImagePlugin.JpegImageFile.draft


def test_plan_dedupes_boxes_groups_by_image_and_packs_batches():
    layout = batch_layout(crop_table(CROP_ROWS), batch_size=4, chunk_batches=2)
    assert list(layout.crop_id) == sorted(r[0] for r in CROP_ROWS)
    assert len(layout.unit_image) == len(CROP_ROWS) - 1  # crops 104 and 110 share a box
    row = {int(c): i for i, c in enumerate(layout.crop_id)}
    assert layout.unit_of_row[row[104]] == layout.unit_of_row[row[110]]
    for cid, image, x, y, w, h in CROP_ROWS:
        u = layout.unit_of_row[row[cid]]
        assert layout.unit_image[u] == image and list(layout.unit_box[u]) == [x, y, w, h]
    for start, stop in layout.groups:  # one image per group
        assert len(set(layout.unit_image[start:stop])) == 1
    sizes = [layout.batch_units(b) for b in range(len(layout.batches))]
    assert sizes == [4, 4, 2]
    covered = [u for c in range(len(layout.chunks)) for u in range(*layout.chunk_units(c))]
    assert covered == list(range(len(layout.unit_image)))


def test_batches_are_full_and_images_straddling_a_boundary_are_split():
    rows = [(i, 1 + i // 5, i, 0, 10, 10) for i in range(12)]  # images of 5, 5 and 2 crops
    layout = batch_layout(crop_table(rows), batch_size=3, chunk_batches=2)
    assert layout.groups.tolist() == [[0, 3], [3, 5], [5, 6], [6, 9], [9, 10], [10, 12]]
    assert [b.tolist() for b in layout.batches] == [[0], [1, 2], [3], [4, 5]]
    assert [layout.batch_units(b) for b in range(4)] == [3, 3, 3, 3]
    assert [layout.chunk_units(c) for c in range(2)] == [(0, 6), (6, 12)]


def test_draft_reduction_keeps_both_sides_at_least_the_input_size():
    assert draft_reduction(300, 300, 224) == 1
    assert draft_reduction(448, 1000, 224) == 2
    assert draft_reduction(1000, 900, 224) == 4
    assert draft_reduction(4000, 2000, 224) == 8


def test_boxes_are_clipped_and_empty_ones_reported():
    assert clip_box((-5, 10, 20, 20), 100, 50) == (0, 10, 15, 30)
    assert clip_box((90, 40, 30, 30), 100, 50) == (90, 40, 100, 50)
    assert clip_box((120, 0, 10, 10), 100, 50) is None


def test_crop_pixels_are_the_whole_box_resized(tmp_path):
    path = tmp_path / "a.jpg"
    write_jpeg(path, np.random.default_rng(0))
    boxes = np.array([[10, 5, 60, 50], [80, 60, 40, 40], [200, 200, 5, 5]])
    pixels, errors = decode_crops(path, boxes, 32)
    with Image.open(path) as im:
        im = im.convert("RGB")
        ref0 = np.asarray(im.resize((32, 32), Image.BILINEAR, box=(10, 5, 70, 55)))
        ref1 = np.asarray(im.resize((32, 32), Image.BILINEAR, box=(80, 60, 96, 72)))
        cut0 = np.asarray(im.crop((10, 5, 70, 55)).resize((32, 32), Image.BILINEAR))
    assert np.array_equal(pixels[0], ref0) and np.array_equal(pixels[1], ref1)
    # resizing with a box only differs from crop-then-resize by filtering across the edge
    assert np.abs(pixels[0].astype(int) - cut0).mean() < 2
    assert errors[:2] == [None, None] and "outside" in errors[2]


def test_large_crops_are_decoded_in_draft_mode_close_to_full_decoding(tmp_path, monkeypatch):
    path = tmp_path / "big.jpg"
    write_jpeg(path, np.random.default_rng(1), size=(512, 400))
    calls = []

    def spy(self, mode, size):
        calls.append(size)
        return original_jpeg(self, mode, size)

    monkeypatch.setattr(JpegImagePlugin.JpegImageFile, "draft", spy)
    pixels, _ = decode_crops(path, np.array([[0, 0, 512, 400], [100, 100, 60, 60]]), 64)
    assert calls == [(128, 100)]  # the big box at 1/4; the small one decoded in full
    with Image.open(path) as im:
        full = np.asarray(im.convert("RGB").resize((64, 64), Image.BILINEAR)).astype(int)
    assert np.abs(pixels[0].astype(int) - full).mean() < 6
