"""`vprom perceive`: what it learns from, resuming, and the weights `extract` loads.

Which crops the model was trained on is read from the pixels it was given: each crop of the
store used here is painted with its own crop id, so the test does not rely on perceive's own
account of what it loaded.
"""

from __future__ import annotations

import json
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from vprom.features import perceive as perceive_module
from vprom.features.backbones import IMAGENET_MEAN, IMAGENET_STD
from vprom.features.crop_store import StoreJob, build_crop_store
from vprom.features.crops import decode_crops
from vprom.features.perceive import PerceiveConfig, perceive
from vprom.features.perceive_data import HEADS

from vprom.errors import VpromError
from vprom.images import ImageIndex
from vprom.manifest import manifest_of
from vprom.tables import read_crop_table, read_matrix_table

SIZE = 16


@pytest.fixture(scope="module")
def id_store(synthetic_build, tmp_path_factory):
    """A crop store of the synthetic build whose every crop is three constant planes that
    spell its crop id (bytes 0, 1, 2)."""
    dataset, vg = synthetic_build
    out = tmp_path_factory.mktemp("perceive") / "crops.h5"
    build_crop_store(StoreJob(dataset, vg, SIZE, out, workers=1), log=lambda _: None)
    with h5py.File(out, "r+") as h5:
        ids = h5["crop_id"][()]
        planes = np.stack([(ids >> (8 * c)) & 255 for c in range(3)], axis=1).astype(np.uint8)
        h5["pixels"][...] = np.broadcast_to(planes[:, :, None, None], (len(ids), 3, SIZE, SIZE))
    return out


def crop_ids_of(x: torch.Tensor) -> np.ndarray:
    """The crop ids painted into a batch of normalised model inputs (B, 3, S, S)."""
    mean, std = torch.tensor(IMAGENET_MEAN), torch.tensor(IMAGENET_STD)
    planes = ((x[:, :, 0, 0].float() * std + mean) * 255).round().long().numpy()
    return planes[:, 0] + (planes[:, 1] << 8) + (planes[:, 2] << 16)


def record_training(monkeypatch, validated: list | None = None) -> list:
    """[(crop ids, {loss function: (logit width, target)})] of every training step; the crop
    ids of every validation batch go to `validated`."""
    steps = []
    forward = perceive_module.PerceptionModel.forward

    def seen_forward(model, x):
        if model.training:
            steps.append((crop_ids_of(x), {}))
        elif validated is not None:
            validated.append(crop_ids_of(x))
        return forward(model, x)

    def recording(name, function):
        def wrapped(logits, target, *args, **kwargs):
            steps[-1][1].setdefault(name, []).append((logits.shape[1], target.clone()))
            return function(logits, target, *args, **kwargs)
        return wrapped

    monkeypatch.setattr(perceive_module.PerceptionModel, "forward", seen_forward)
    for name in ("cross_entropy", "binary_cross_entropy_with_logits"):
        monkeypatch.setattr(F, name, recording(name, getattr(F, name)))
    return steps


def config(dataset, out, **settings) -> PerceiveConfig:
    return PerceiveConfig(**{"dataset": dataset, "split": "neutral", "backbone": "resnet18",
                             "out": out, "weights": "none", "epochs": 1, "batch_size": 32,
                             "input_size": SIZE, "device": "cpu", **settings})


def test_trains_only_on_training_crops(synthetic_build, id_store, tmp_path, monkeypatch):
    dataset, _ = synthetic_build
    validated = []
    steps = record_training(monkeypatch, validated)
    perceive(config(dataset, tmp_path / "w.pt", crops=id_store, split="held_out_objects"))
    matrices = read_matrix_table(dataset)
    parts = matrices.splits["held_out_objects"]
    train_crops = set(np.unique(matrices.panels[np.isin(matrices.id, parts["train"])]).tolist())
    other = set(np.unique(matrices.panels).tolist()) - train_crops
    seen = set(np.concatenate([ids for ids, _ in steps]).tolist())
    assert seen and seen <= train_crops
    assert not seen & other  # no crop that only validation, test or excluded problems show
    checked = set(np.concatenate(validated).tolist())
    assert checked & train_crops and not checked & seen  # training boxes held back, untrained


def test_held_out_labels_get_no_loss(synthetic_build, id_store, tmp_path, monkeypatch):
    """interpolation holds out the even counts; training problems show even-count crops as
    distractors, so those crops are trained on, but never on their count."""
    dataset, _ = synthetic_build
    spec = json.loads((Path(__file__).parents[2] / "splits" / "interpolation.json").read_text())
    held = {str(n) for n in spec["rule"]["test"]}
    crops = read_crop_table(dataset)
    count_of = {int(c): e for c, e, t in zip(crops.crop_id, crops.element, crops.element_type)
                if t == "count"}
    steps = record_training(monkeypatch)
    out = tmp_path / "w.pt"
    perceive(config(dataset, out, crops=id_store, split="interpolation"))
    held_crops_seen = 0
    for ids, losses in steps:
        width, target = losses["cross_entropy"][1]  # category, then count
        assert width == 10 - len(held)  # no output, so no loss, for a held-out count
        for crop, t in zip(ids.tolist(), target.tolist()):
            if count_of.get(crop) in held:
                held_crops_seen += 1
                assert t == -1  # ignored
            elif crop in count_of:
                assert t >= 0
    assert held_crops_seen > 0
    evidence = torch.load(out, weights_only=True)["perception"]
    assert held <= set(evidence["held_out_labels"])
    assert not held & set(evidence["vocabulary"]["count"])


def test_resume_after_a_kill_equals_an_unbroken_run(synthetic_build, id_store, tmp_path,
                                                    monkeypatch):
    dataset, _ = synthetic_build
    unbroken = tmp_path / "unbroken.pt"
    perceive(config(dataset, unbroken, crops=id_store, epochs=2))
    resumed = tmp_path / "resumed.pt"
    epochs = []
    train_one_epoch = perceive_module.train_one_epoch

    def killed_in_epoch_two(*args):
        epochs.append(1)
        if len(epochs) == 2:
            raise KeyboardInterrupt
        return train_one_epoch(*args)

    monkeypatch.setattr(perceive_module, "train_one_epoch", killed_in_epoch_two)
    with pytest.raises(KeyboardInterrupt):
        perceive(config(dataset, resumed, crops=id_store, epochs=2))
    assert not resumed.exists() and perceive_module.resume_path(resumed).is_file()
    monkeypatch.setattr(perceive_module, "train_one_epoch", train_one_epoch)
    perceive(config(dataset, resumed, crops=id_store, epochs=2))
    assert resumed.read_bytes() == unbroken.read_bytes()
    assert not perceive_module.resume_path(resumed).exists()
    manifest = manifest_of(resumed)
    assert manifest["kind"] == "perception-weights" and manifest["config"]["epochs"] == 2
    assert set(manifest["perception"]["validation"]) == {
        "val_attribute_acc", "val_category_acc", "val_count_acc"}


def test_extract_loads_the_trained_weights(synthetic_build, tmp_path):
    import torchvision
    from vprom.features.config import ExtractConfig
    from vprom.features.extract import extract

    dataset, vg = synthetic_build
    side = 32  # extract's smallest input
    weights = perceive(config(dataset, tmp_path / "w.pt", vg=vg, input_size=side))
    feats = tmp_path / "feats.h5"
    extract(ExtractConfig(dataset=dataset, vg=vg, backbone="resnet18", out=feats,
                          weights=str(weights), input_size=side, dtype="float32",
                          device="cpu"))
    net = torchvision.models.resnet18(weights=None)
    net.fc = torch.nn.Identity()  # resnet18's own avgpool, then nothing
    state = torch.load(weights, weights_only=True)["state_dict"]
    net.load_state_dict(state)  # every key of the trunk, and nothing else
    crops = read_crop_table(dataset).take(np.arange(6))
    pixels = np.concatenate([decode_crops(ImageIndex(vg).path(i), np.array([[x, y, w, h]]),
                                          side)[0]
                             for i, x, y, w, h in zip(crops.image_id, crops.x, crops.y,
                                                      crops.w, crops.h)])
    x = (torch.from_numpy(pixels).permute(0, 3, 1, 2).float() / 255
         - torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1)) / torch.tensor(IMAGENET_STD).view(
        1, 3, 1, 1)
    with torch.no_grad():
        pooled = net.eval()(x)
    by_hand = F.normalize(pooled, dim=1).numpy()
    with h5py.File(feats) as h5:
        rows = np.searchsorted(h5["crop_id"][()], crops.crop_id)
        stored = h5["features"][()][rows]
    np.testing.assert_allclose(stored, by_hand, atol=1e-5)

    # --pool heads: the heads' probabilities of the labels the weights file names
    saved = torch.load(weights, weights_only=True)
    heads, vocabulary = saved["heads"], saved["perception"]["vocabulary"]
    labels = tmp_path / "predicted.h5"
    extract(ExtractConfig(dataset=dataset, vg=vg, backbone="resnet18", out=labels,
                          weights=str(weights), input_size=side, dtype="float32",
                          device="cpu", pool="heads"))

    def head(name):
        return pooled @ heads[f"{name}.weight"].T + heads[f"{name}.bias"]

    by_hand = torch.cat([torch.sigmoid(head("attribute")), head("category").softmax(1),
                         head("count").softmax(1)], dim=1).numpy()
    with h5py.File(labels) as h5:
        stored = h5["features"][()][rows]
        order = h5.attrs["label_order"].tolist()
    np.testing.assert_allclose(stored, by_hand, atol=1e-5)
    assert order == ([f"attribute:{a}" for a in vocabulary["attribute"]]
                     + [f"object:{c}" for c in vocabulary["category"]]
                     + [f"count:{n}" for n in vocabulary["count"]])


def test_a_timm_perception_model_predicts_labels(synthetic_build, tmp_path):
    """The demo's path: `perceive` on a timm backbone, then `extract --pool heads` reads it."""
    from vprom.features.config import ExtractConfig
    from vprom.features.extract import extract

    dataset, vg = synthetic_build
    weights = perceive(config(dataset, tmp_path / "w.pt", vg=vg, backbone="timm:resnet10t",
                              input_size=32))
    labels = tmp_path / "predicted.h5"
    extract(ExtractConfig(dataset=dataset, vg=vg, backbone="timm:resnet10t", out=labels,
                          weights=str(weights), input_size=32, dtype="float32", device="cpu",
                          pool="heads"))
    vocabulary = torch.load(weights, weights_only=True)["perception"]["vocabulary"]
    sizes = [len(vocabulary[head]) for head in HEADS]
    with h5py.File(labels) as h5:
        features = h5["features"][()]
        assert len(h5.attrs["label_order"]) == features.shape[1] == sum(sizes)
    attributes, categories, counts = np.split(features, np.cumsum(sizes)[:-1], axis=1)
    assert ((attributes >= 0) & (attributes <= 1)).all()
    np.testing.assert_allclose(categories.sum(1), 1, atol=1e-5)
    np.testing.assert_allclose(counts.sum(1), 1, atol=1e-5)


def test_predicted_labels_need_a_perception_weights_file(synthetic_build, tmp_path):
    import torchvision
    from vprom.features.config import ExtractConfig
    from vprom.features.extract import extract

    dataset, vg = synthetic_build
    trunk_only = tmp_path / "trunk.pt"
    torch.save(torchvision.models.resnet18(weights=None).state_dict(), trunk_only)
    for weights in ("none", str(trunk_only)):
        with pytest.raises(VpromError, match="heads"):
            extract(ExtractConfig(dataset=dataset, vg=vg, backbone="resnet18",
                                  out=tmp_path / "x.h5", weights=weights, input_size=32,
                                  device="cpu", pool="heads"))
    assert not (tmp_path / "x.h5").exists()


def test_refuses_both_or_neither_pixel_source(synthetic_build, id_store, tmp_path):
    dataset, vg = synthetic_build
    with pytest.raises(VpromError, match="exactly one of --vg"):
        perceive(config(dataset, tmp_path / "w.pt", vg=vg, crops=id_store))
