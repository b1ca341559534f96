"""`vprom extract --backbone labels`: each crop's labels as a multi-hot (perfect perception)."""

from __future__ import annotations

import h5py
import numpy as np
import pytest

from vprom.app.cli import main
from vprom.data import VPROM
from vprom.errors import VpromError
from vprom.feature_files import check_features_source, load_features
from vprom.features.config import ExtractConfig
from vprom.features.extract import extract
from vprom.generation.labels import LabelVocabulary
from vprom.tables import read_crop_table


def labels_file(dataset, out, **options):
    extract(ExtractConfig(dataset=dataset, vg=None, backbone="labels", out=out, **options))
    return load_features(out)


def test_a_crops_vector_equals_its_labels(synthetic_build, tmp_path):
    dataset, _ = synthetic_build
    feats = labels_file(dataset, tmp_path / "labels.h5")
    order = feats.attrs["label_order"]
    assert feats.attrs["symbolic"] and feats.attrs["backbone"] == "labels"
    assert len(order) == feats.features.shape[1] == len(set(order))
    crops = read_crop_table(dataset)
    with h5py.File(dataset, "r") as h5:
        vocab = LabelVocabulary.read(h5["vocab/labels"], str(dataset))
    words = (vocab.categories | set(vocab.implied) | set().union(*map(set, vocab.tables.values()))
             | {str(n) for n in range(1, 11)})
    rows = feats.index_of(crops.crop_id)
    checked = set()
    for i, labels in enumerate(vocab.label_sets(crops)):
        names = [order[d] for d in np.flatnonzero(feats.features[rows[i]])]
        # every label the solver reads (explicit and implied) that the vocabulary has, and
        # the crop's element, each in its own group
        assert {n.split(":", 1)[1] for n in names} == (labels & words) | {crops.element[i]}
        etype = crops.element_type[i]
        assert f"{etype}:{crops.element[i]}" in names
        table = "human_attribute" if etype == "human_attribute" else "object_attribute"
        assert all(n.split(":")[0] in ("object", "name", table, "count") for n in names)
        checked.add(etype)
    assert checked == {"object_attribute", "human_attribute", "object", "count"}
    assert (feats.features[:, [n.startswith("count:") for n in order]].sum(axis=1)
            <= 1).all()


def test_noise_zero_is_exact_one_flips_every_bit_and_the_seed_fixes_the_draw(synthetic_build,
                                                                            tmp_path):
    dataset, _ = synthetic_build
    exact = labels_file(dataset, tmp_path / "exact.h5").features
    assert set(np.unique(exact)) == {0.0, 1.0}
    flipped = labels_file(dataset, tmp_path / "flipped.h5", label_noise=1.0).features
    np.testing.assert_array_equal(flipped, 1 - exact)
    noisy = labels_file(dataset, tmp_path / "a.h5", label_noise=0.2, seed=3)
    changed = (noisy.features != exact).mean()
    assert 0.18 < changed < 0.22  # 0.2 of ~10^5 bits, drawn once for this seed
    assert noisy.attrs["label_noise"] == 0.2 and noisy.attrs["seed"] == 3
    again = labels_file(dataset, tmp_path / "b.h5", label_noise=0.2, seed=3).features
    other = labels_file(dataset, tmp_path / "c.h5", label_noise=0.2, seed=4).features
    np.testing.assert_array_equal(again, noisy.features)
    assert (other != noisy.features).any()


def test_the_file_is_an_ordinary_feats_file_recording_that_it_is_symbolic(synthetic_build,
                                                                          tmp_path):
    dataset, _ = synthetic_build
    out = tmp_path / "labels.h5"
    feats = labels_file(dataset, out, label_noise=0.1, seed=7)
    assert check_features_source(dataset, out)
    assert len(feats) == len(read_crop_table(dataset)) and not len(feats.missing_crop_id)
    config = feats.attrs["manifest"]["config"]
    assert (config["symbolic"], config["label_noise"], config["seed"]) == (True, 0.1, 7)
    assert config["label_order"] == feats.attrs["label_order"]
    exact = tmp_path / "exact.h5"
    order = labels_file(dataset, exact).attrs["label_order"]
    problem = VPROM(dataset, "neutral", "test", source=exact)[0]
    answer = problem["panels"][8 + int(problem["answer"])]
    assert answer.shape == (len(order),)
    assert f"{problem['element_type']}:{problem['element']}" in [
        order[d] for d in np.flatnonzero(answer.numpy())]


def test_the_command_line_needs_no_images_and_the_file_trains(synthetic_build, tmp_path,
                                                              capsys):
    dataset, _ = synthetic_build
    feats = tmp_path / "labels.h5"
    assert main(["extract", str(dataset), "--backbone", "labels", "--label-noise", "0.05",
                 "--out", str(feats)]) == 0
    run = tmp_path / "run"
    assert main(["train", str(dataset), "--features", str(feats), "--model", "rn", "--aux",
                 "--split", "neutral", "--epochs", "1", "--center-features", "--device", "cpu",
                 "--out", str(run)]) == 0
    assert main(["evaluate", str(run)]) == 0
    assert "(labels features)" in capsys.readouterr().out


def test_options_of_the_other_kind_are_refused(synthetic_build, tmp_path):
    dataset, vg = synthetic_build
    with pytest.raises(VpromError, match="--input-size: the labels backbone reads no pixels"):
        labels_file(dataset, tmp_path / "x.h5", input_size=64)
    with pytest.raises(VpromError, match="--label-noise: only the labels backbone"):
        extract(ExtractConfig(dataset=dataset, vg=vg, backbone="resnet18", out=tmp_path / "y.h5",
                              weights="none", label_noise=0.1))
    with pytest.raises(VpromError, match="--vg DIR is needed"):
        ExtractConfig(dataset=dataset, vg=None, backbone="resnet18", out=tmp_path / "z.h5")
    with pytest.raises(VpromError, match="--label-noise 1.5: a probability"):
        ExtractConfig(dataset=dataset, vg=None, backbone="labels", out=tmp_path / "z.h5",
                      label_noise=1.5)


def test_extract_records_that_its_weights_came_from_perceive(dataset, vg_dir, tmp_path):
    """A weights file whose manifest says `perception-weights` is recorded as such, so reports
    name the run's features "trained perception model" (baselines/perception_table.py)."""
    import torch
    import torchvision

    from vprom.baselines.perception_table import feature_source
    from vprom.manifest import make_manifest, write_manifest

    weights = tmp_path / "perceived.pth"
    torch.save(torchvision.models.resnet18().state_dict(), weights)
    kinds = {}
    for kind in ("", "perception-weights"):
        if kind:
            write_manifest(weights, make_manifest(kind, {}))
        out = tmp_path / f"feats-{kind or 'plain'}.h5"
        extract(ExtractConfig(dataset=dataset, vg=vg_dir, backbone="resnet18", out=out,
                              weights=str(weights), input_size=32, workers=0, device="cpu"))
        kinds[kind] = load_features(out).attrs
    assert kinds[""]["weights_kind"] == "" and feature_source(kinds[""], "resnet18") == "resnet18"
    assert kinds["perception-weights"]["weights_kind"] == "perception-weights"
    assert (feature_source(kinds["perception-weights"], "resnet18")
            == "trained perception model (resnet18)")
