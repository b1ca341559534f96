"""No value that is not finite is ever stored as a feature, nor read as one: extract refuses
a float16 overflow in one line, and every reader refuses a file holding inf or NaN outside
the rows of missing crops."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
from vprom.features.backbones import get_backbone
from vprom.features.extract import extract

from tests.dataset_fixture import build_records, write_dataset, write_images
from tests.features.test_extract import config
from vprom.app.cli import main
from vprom.data import VPROM
from vprom.domain import ElementType
from vprom.errors import VpromError
from vprom.feature_files import load_features, open_maps


def loud_weights(path: Path, gain: float = 6.0) -> Path:
    """resnet18's random weights with every conv scaled by `gain`: maps far past float16's
    range (gain**depth), as a trunk with large activations gives."""
    state = get_backbone("resnet18").load("none").module.state_dict()
    torch.save({k: v * gain if k.endswith(("conv1.weight", "conv2.weight")) else v
                for k, v in state.items()}, path)
    return path


def test_extract_refuses_a_float16_overflow_naming_the_backbone_and_value(dataset, vg_dir,
                                                                          tmp_path):
    weights = loud_weights(tmp_path / "loud.pt")
    out = tmp_path / "maps.h5"
    with pytest.raises(VpromError, match=r"--backbone resnet18: its none features reach "
                                         r"[0-9.e+]+, beyond float16's range \(±65,504\); "
                                         r"extract again with --dtype float32"):
        extract(config(dataset, vg_dir, out, weights=str(weights), pool="none",
                       dtype="float16"))
    assert not out.exists()
    extract(config(dataset, vg_dir, out, weights=str(weights), pool="none", dtype="float32"))
    with h5py.File(out) as h5:
        assert abs(h5["maps"][()]).max() > 65504


@pytest.fixture(scope="module")
def small_build(tmp_path_factory):
    """(DATASET.h5, FEATS.h5 of vectors, FEATS.h5 of maps), both float32 and finite."""
    root = tmp_path_factory.mktemp("finite")
    crops, matrices = build_records(1, seed=3, element_types=(ElementType.OBJECT_ATTRIBUTE,
                                                              ElementType.COUNT))
    dataset = write_dataset(root / "d.h5", crops, matrices)
    vg = write_images(root / "vg", crops)
    extract(config(dataset, vg, root / "feats.h5", input_size=32))
    extract(config(dataset, vg, root / "maps.h5", input_size=32, pool="none"))
    return dataset, root / "feats.h5", root / "maps.h5"


def poisoned(source: Path, out: Path, name: str) -> Path:
    """A copy of `source` with one inf and one NaN in two rows of `name`."""
    shutil.copyfile(source, out)
    with h5py.File(out, "r+") as h5:
        values = h5[name][()]
        values.reshape(len(values), -1)[1, 3] = np.inf
        values.reshape(len(values), -1)[2, 0] = np.nan
        h5[name][...] = values
    return out


def test_every_reader_refuses_features_that_are_not_finite(small_build, tmp_path, capsys):
    dataset, feats, maps = small_build
    bad = poisoned(feats, tmp_path / "bad.h5", "features")
    said = rf"{bad}: 2 stored values are not finite \(inf or NaN\), in 2 crops"
    with pytest.raises(VpromError, match=said):
        load_features(bad)
    with pytest.raises(VpromError, match=said):
        VPROM(dataset, "neutral", "test", source=bad)
    assert main(["verify", str(dataset), "--features", str(bad), "--workers", "1"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and re.search(said, err), err
    assert len(VPROM(dataset, "neutral", "test", source=feats)) > 0

    bad_maps = poisoned(maps, tmp_path / "bad_maps.h5", "maps")
    with open_maps(bad_maps) as opened, pytest.raises(
            VpromError, match=rf"{bad_maps}: \d+ stored values are not"):
        opened.gather(opened.crop_id)
    out = tmp_path / "savir"
    assert main(["export", str(dataset), "--format", "savir-t", "--features", str(bad_maps),
                 "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{bad_maps}: 2 stored values are not finite" in err, err
    assert not out.exists()
