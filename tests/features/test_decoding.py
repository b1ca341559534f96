"""The `--decode gpu` path (torchvision decode + torch crop/resize), run on CPU tensors: its
crops against today's Pillow path, its decoder choice and its fallbacks.

Tolerance (documented in docs/features.md), uint8 grey levels per crop:
- where Pillow decodes at full size: mean |difference| <= 0.5 and 99% of values within 5;
- where Pillow uses draft decoding (crop >= 2x the input size): mean <= 2.5 (the DCT's
  1/2-1/8 scaling is a different low-pass filter than antialiased resizing).
"""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from PIL import Image

from vprom.features import crops as crops_module
from vprom.features.crops import (
    clip_boxes,
    crop_resize,
    decode_crops,
    decode_many,
    draft_reduction,
    read_bytes,
    resolve_decoder,
    torch_image,
)
from tests.photo_fixture import photo_crops, write_photo_vg
from vprom.images import ImageIndex


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    vg = write_photo_vg(tmp_path_factory.mktemp("photos") / "vg")
    return ImageIndex(vg), photo_crops(vg)


@pytest.mark.parametrize("size", [224, 112])
def test_torch_crops_equal_pillow_crops_within_the_documented_tolerance(photos, size):
    index, crops = photos
    checked = {1: 0, 2: 0}
    for image_id in sorted(set(crops.image_id.tolist())):
        sel = crops.image_id == image_id
        boxes = np.stack([crops.x[sel], crops.y[sel], crops.w[sel], crops.h[sel]], axis=1)
        pillow, _ = decode_crops(index.paths[image_id], boxes, size)
        image = torch_image(read_bytes(index.paths[image_id]))
        corners, errors = clip_boxes(boxes, image.shape[2], image.shape[1])
        assert errors == [None] * len(boxes)
        ours = crop_resize(image, corners, size).numpy()
        assert ours.shape == pillow.shape and ours.dtype == np.uint8
        for j, (x0, y0, x1, y1) in enumerate(corners):
            diff = np.abs(ours[j].astype(int) - pillow[j])
            draft = draft_reduction(x1 - x0, y1 - y0, size) > 1
            checked[2 if draft else 1] += 1
            if draft:
                assert diff.mean() <= 2.5, (image_id, boxes[j])
            else:
                assert diff.mean() <= 0.5 and np.percentile(diff, 99) <= 5, (image_id, boxes[j])
    assert checked[1] >= 8 and checked[2] >= 1  # both regimes were compared


def test_crop_resize_warps_the_whole_box():
    image = torch.zeros(3, 20, 30, dtype=torch.uint8)
    image[:, 5:15, 10:20] = 200  # the box's inside is uniform: so is every output pixel
    out = crop_resize(image, [(10, 5, 20, 15), (0, 0, 30, 20)], 8)
    assert out.shape == (2, 8, 8, 3) and out.dtype == torch.uint8
    assert torch.all(out[0] == 200)
    assert 0 < out[1].float().mean() < 200
    assert crop_resize(image, [], 8).shape == (0, 8, 8, 3)


def test_auto_decodes_on_the_gpu_only_where_cores_are_short(monkeypatch):
    cpu, gpu = torch.device("cpu"), torch.device("cuda", 0)
    assert resolve_decoder("auto", cpu) == "cpu"
    assert resolve_decoder("gpu", cpu) == "gpu" and resolve_decoder("cpu", gpu) == "cpu"
    monkeypatch.setattr(crops_module, "cores_per_process", lambda: 24)
    assert resolve_decoder("auto", gpu) == "cpu"
    monkeypatch.setattr(crops_module, "cores_per_process", lambda: 16)  # the H100 node measured
    assert resolve_decoder("auto", gpu) == "gpu"


def test_cores_are_shared_among_a_nodes_processes(monkeypatch):
    monkeypatch.setattr(crops_module, "usable_cores", lambda: 64)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")
    assert crops_module.cores_per_process() == 8
    monkeypatch.delenv("LOCAL_WORLD_SIZE")
    assert crops_module.cores_per_process() == 64


def _png_bytes(rgb: np.ndarray) -> torch.Tensor:
    buffer = io.BytesIO()
    Image.fromarray(rgb).save(buffer, format="PNG")
    return torch.frombuffer(bytearray(buffer.getvalue()), dtype=torch.uint8)


def test_a_batch_with_a_bad_file_decodes_the_others(photos):
    index, _ = photos
    good = [read_bytes(index.paths[i]) for i in (1, 2)]
    truncated = good[0][:500].clone()
    rgb = np.arange(4 * 6 * 3, dtype=np.uint8).reshape(4, 6, 3)
    out = decode_many([good[0], truncated, _png_bytes(rgb), good[1]], torch.device("cpu"))
    alone = decode_many([good[0], good[1]], torch.device("cpu"))  # one batched call
    assert torch.equal(out[0], alone[0]) and torch.equal(out[3], alone[1])
    assert isinstance(out[1], Exception)
    assert torch.equal(out[2], torch.from_numpy(rgb).permute(2, 0, 1))  # Pillow's fallback
    assert decode_many([], torch.device("cpu")) == []


def test_a_cmyk_jpeg_falls_back_to_pillow():
    buffer = io.BytesIO()
    Image.new("CMYK", (8, 6), (0, 255, 0, 0)).save(buffer, format="JPEG")
    data = torch.frombuffer(bytearray(buffer.getvalue()), dtype=torch.uint8)
    image = torch_image(data)
    assert image.shape == (3, 6, 8) and image.dtype == torch.uint8
