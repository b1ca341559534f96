"""Extraction on the real-photograph VG fixture (tests/photo_fixture.py)."""

from __future__ import annotations

import numpy as np
from PIL import Image

from vprom.features.config import ExtractConfig
from vprom.features.crops import decode_crops
from vprom.features.extract import extract
from vprom.feature_files import load_features
from tests.features.conftest import write_dataset
from tests.photo_fixture import photo_crops, write_photo_vg


def test_real_photographs_extract_with_distinct_unit_features(tmp_path):
    vg = write_photo_vg(tmp_path / "vg")
    crops = photo_crops(vg)
    dataset = write_dataset(tmp_path / "dataset.h5", crops)
    out = tmp_path / "photos.h5"
    summary = extract(ExtractConfig(dataset=dataset, vg=vg, backbone="resnet18", weights="none",
                                    out=out, batch_size=8, workers=0, input_size=112,
                                    device="cpu"))
    assert summary.missing == [] and summary.crops == len(crops)
    feats = load_features(out)
    assert np.allclose(np.linalg.norm(feats.features, axis=1), 1, atol=2e-3)
    cosine = feats.features @ feats.features.T
    assert (cosine[~np.eye(len(crops), dtype=bool)] < 0.9999).all()  # no two crops collapse


def test_draft_decoding_of_a_real_photograph_matches_full_decoding(tmp_path):
    vg = write_photo_vg(tmp_path / "vg")
    path = vg / "VG_100K" / "5.jpg"  # grace hopper, 512x600: the woman's box allows 1/4
    box = (20, 20, 490, 580)
    pixels, errors = decode_crops(path, np.array([box]), 112)
    with Image.open(path) as im:
        full = np.asarray(im.convert("RGB").resize((112, 112), Image.BILINEAR,
                                                   box=(20, 20, 510, 600)))
    assert errors == [None]
    assert np.abs(pixels[0].astype(int) - full.astype(int)).mean() < 4
