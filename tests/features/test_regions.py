"""`--region roi`: the detector's own per-box computation, against a re-implementation of
Caffe's ROIPooling and of the released res5 written here with plain tensor ops (the geometry
taken from the Caffe layer table in features/data/bottomup_r101.json, not from our module)."""

from __future__ import annotations

import json

import h5py
import numpy as np
import pytest
import torch
from PIL import Image
from torch.nn import functional as F

from vprom.features.bottomup import CAFFE_PIXEL_MEANS_BGR, FROZEN_BN_EPS, facts
from vprom.features.config import ExtractConfig
from vprom.features.extract import extract
from vprom.feature_files import load_features, open_maps
from vprom.features.bottomup import caffe_rois, detector_scale
from tests.features.conftest import crop_table, write_dataset
from tests.features.test_extract import config
from tests.features.weights_files import conv_rows
from vprom.errors import VpromError

SHORT = 64  # --input-size: the shorter side (the detector's is 600; small keeps this fast)


@pytest.mark.parametrize("height, width, scale", [
    (375, 500, 1.6),  # VG's common size: 600 x 800
    (600, 800, 1.0),
    (200, 1000, 1.0),  # 600 / 200 would make the long side 3000 > 1000: 1000 / 1000
    (333, 500, 600 / 333),  # round(1.8018 * 500) = 901 <= 1000
])
def test_the_detector_scale(height, width, scale):
    assert detector_scale(height, width, 600, 1000) == pytest.approx(scale)
    test_scale = facts()["caffe"]["test_scale"]
    assert (test_scale["shortest_side"], test_scale["longest_side_max"]) == (600, 1000)


def test_rois_are_caffes_inclusive_corners_scaled():
    rois = caffe_rois([(10, 20, 110, 70)], 1.5)
    assert rois.tolist() == [[0, 15, 30, 163.5, 103.5]]


def caffe_round(value: np.float32) -> int:
    """C's round(): half away from zero."""
    return int(np.sign(value) * np.floor(np.abs(value) + np.float32(0.5)))


def caffe_roi_pool(fmap: torch.Tensor, roi, pooled: int, scale: float) -> torch.Tensor:
    """ROIPoolingLayer::Forward_cpu, restated in float32: (C, H, W), one RoI -> (C, p, p)."""
    height, width = fmap.shape[1:]
    f32 = np.float32
    x0, y0, x1, y1 = (caffe_round(f32(v) * f32(scale)) for v in roi)
    roi_h, roi_w = max(y1 - y0 + 1, 1), max(x1 - x0 + 1, 1)
    bin_h, bin_w = f32(roi_h) / f32(pooled), f32(roi_w) / f32(pooled)
    out = torch.zeros(fmap.shape[0], pooled, pooled)
    for ph in range(pooled):
        h0 = min(max(int(np.floor(f32(ph) * bin_h)) + y0, 0), height)
        h1 = min(max(int(np.ceil(f32(ph + 1) * bin_h)) + y0, 0), height)
        for pw in range(pooled):
            w0 = min(max(int(np.floor(f32(pw) * bin_w)) + x0, 0), width)
            w1 = min(max(int(np.ceil(f32(pw + 1) * bin_w)) + x0, 0), width)
            if h1 > h0 and w1 > w0:
                out[:, ph, pw] = fmap[:, h0:h1, w0:w1].amax(dim=(1, 2))
    return out


def frozen_bn(x: torch.Tensor, norm) -> torch.Tensor:
    scale = norm.weight / torch.sqrt(norm.running_var + FROZEN_BN_EPS)
    return x * scale.view(1, -1, 1, 1) + (norm.bias - norm.running_mean * scale).view(1, -1, 1, 1)


def released_res5(model, x: torch.Tensor) -> torch.Tensor:
    """res5a-c as test.prototxt runs them: each conv's stride, pad and dilation from the
    prototxt's table; the weights are the model's."""
    rows = {row["detectron2"]: row for row in conv_rows()}

    def conv(block, i, name, inp):
        row, module = rows[f"res5.{i}.{name}"], getattr(block, name)
        out = F.conv2d(inp, module.weight, stride=row["stride"], padding=row["pad"],
                       dilation=row["dilation"])
        return frozen_bn(out, module.norm)

    for i, block in enumerate(model.res5):
        out = F.relu(conv(block, i, "conv1", x))
        out = F.relu(conv(block, i, "conv2", out))
        out = conv(block, i, "conv3", out)
        x = F.relu(out + (conv(block, i, "shortcut", x) if f"res5.{i}.shortcut" in rows else x))
    return x


def reference(model, path, box, short: int) -> torch.Tensor:
    """The released procedure for one box of one image: (2048, 14, 14) res5 map."""
    rgb = np.asarray(Image.open(path).convert("RGB"), dtype=np.float32)
    height, width = rgb.shape[:2]
    bgr = torch.from_numpy(rgb[:, :, ::-1] - np.array(CAFFE_PIXEL_MEANS_BGR, np.float32))
    scale = detector_scale(height, width, short, round(short * 1000 / 600))
    x = F.interpolate(bgr.permute(2, 0, 1)[None].contiguous(),
                      size=(round(height * scale), round(width * scale)), mode="bilinear",
                      align_corners=False)
    with torch.no_grad():
        res4 = model.backbone_features(x)[0]
        x0, y0, w, h = box
        x1, y1 = min(width, x0 + w), min(height, y0 + h)
        roi = [v * scale for v in (x0, y0, x1 - 1, y1 - 1)]
        cells = caffe_roi_pool(res4, roi, 14, 1 / 16)
        return released_res5(model, cells[None])[0]


@pytest.fixture
def roi_dataset(tmp_path):
    rows = [(1, 11, 0, 0, 96, 72),  # the whole image
            (2, 11, 10, 5, 50, 45), (3, 12, 40, 30, 80, 60),  # inside; past the border
            # x1 = y1 = 63: at scale 64/72 and 1/16, Caffe's inclusive corner 62 rounds to
            # cell 3 where the exclusive 63 would round to 4
            (4, 13, 5, 8, 58, 55)]
    return write_dataset(tmp_path / "roi.h5", crop_table(rows)), rows


def test_roi_equals_the_released_roipool_and_res5(roi_dataset, vg_dir, tmp_path):
    dataset, rows = roi_dataset
    out = tmp_path / "maps.h5"
    extract(config(dataset, vg_dir, out, backbone="bottomup-r101", region="roi", pool="none",
                   input_size=SHORT))
    pooled = tmp_path / "pooled.h5"
    extract(config(dataset, vg_dir, pooled, backbone="bottomup-r101", region="roi",
                   input_size=SHORT))
    from vprom.features.backbones import get_backbone

    model = get_backbone("bottomup-r101").load("none").module
    feats = load_features(pooled)
    with open_maps(out) as maps:
        assert maps.shape == (4, 2048, 14, 14)  # res5 keeps RoI pooling's 14x14
        for crop_id, image_id, *box in rows:
            folder = "VG_100K" if image_id % 2 else "VG_100K_2"
            expected = reference(model, vg_dir / folder / f"{image_id}.jpg", box, SHORT)
            ours = torch.from_numpy(maps.gather([crop_id])[0])
            assert torch.allclose(ours, expected, rtol=1e-4, atol=1e-4 * expected.abs().max())
            vector = F.normalize(expected.mean(dim=(1, 2)), dim=0).numpy()
            assert np.allclose(feats.features[feats.index_of([crop_id])[0]], vector, atol=1e-5)


def test_roi_files_say_so_and_other_settings_are_refused(roi_dataset, vg_dir, tmp_path):
    dataset, _ = roi_dataset
    out = tmp_path / "f.h5"
    extract(config(dataset, vg_dir, out, backbone="bottomup-r101", region="roi",
                   input_size=SHORT, chunk_batches=1, batch_size=2))
    with h5py.File(out, "r") as h5:
        assert h5.attrs["region"] == "roi" and list(h5.attrs["input_size"]) == [64, 107]
        assert "RoI-max-pooled from the stride-16 map to 14x14" in h5.attrs["resize"]
    crop = tmp_path / "crop.h5"
    extract(config(dataset, vg_dir, crop, backbone="bottomup-r101", input_size=SHORT,
                   chunk_batches=1, batch_size=2))
    assert not np.allclose(load_features(crop).features, load_features(out).features)
    with pytest.raises(VpromError, match="--region roi: resnet18 is not a detector backbone"):
        extract(config(dataset, vg_dir, tmp_path / "r.h5", region="roi"))
    with pytest.raises(VpromError, match="--compile works with --region crop only"):
        ExtractConfig(dataset=dataset, vg=vg_dir, backbone="bottomup-r101", out=out,
                      region="roi", compile=True)


def test_the_region_mode_is_in_the_settings(roi_dataset, vg_dir, tmp_path, monkeypatch,
                                               capsys):
    import vprom.features.extract as extract_module

    dataset, _ = roi_dataset
    out = tmp_path / "f.h5"
    monkeypatch.setattr(extract_module, "assemble", lambda plan: (_ for _ in ()).throw(KeyError))
    with pytest.raises(KeyError):
        extract(config(dataset, vg_dir, out, backbone="bottomup-r101", input_size=SHORT))
    partial = json.loads((tmp_path / "f.h5.partial" / "manifest.json").read_text())["config"]
    assert (partial["region"], partial["decode"], partial["pool"]) == ("crop", "cpu", "avg")
    monkeypatch.undo()
    extract(config(dataset, vg_dir, out, backbone="bottomup-r101", input_size=SHORT,
                   region="roi"))
    assert "its settings changed: region" in capsys.readouterr().err
