"""The backbone registry and weight loading (torchvision ResNets)."""

from __future__ import annotations

import pytest
import torch
import torchvision

from vprom.features.backbones import (
    Backbone,
    Preprocess,
    get_backbone,
    list_backbones,
    register_backbone,
)
from vprom.errors import VpromError


def test_registry_lists_every_backbone():
    assert list_backbones() == ["bottomup-r101", "resnet101", "resnet18", "resnet50"]


def test_unknown_backbone_names_the_known_ones():
    with pytest.raises(VpromError, match="unknown backbone 'vgg'.*resnet101"):
        get_backbone("vgg")


def test_duplicate_registration_is_refused():
    existing = get_backbone("resnet18")
    with pytest.raises(VpromError, match="already registered"):
        register_backbone(Backbone(name="resnet18", description="", feature_dim=1,
                                   preprocess=Preprocess(224), build=existing.build,
                                   map_state_dict=existing.map_state_dict))


@pytest.mark.parametrize("name,dim", [("resnet18", 512), ("resnet50", 2048)])
def test_trunk_ends_at_the_last_conv_stage(name, dim):
    backbone = get_backbone(name)
    loaded = backbone.load("none")
    out = loaded.module(torch.zeros(2, 3, 64, 64))
    assert out.shape == (2, dim, 2, 2) and backbone.feature_dim == dim
    assert loaded.weights == "none" and loaded.weights_sha256 == ""


def test_random_init_is_the_same_in_every_process_and_leaves_global_rng_alone():
    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    a = get_backbone("resnet18").load("none").module.state_dict()
    after = torch.rand(1)
    b = get_backbone("resnet18").load("none").module.state_dict()
    assert before == after
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_a_torchvision_state_dict_file_loads_and_its_classifier_is_dropped(tmp_path):
    net = torchvision.models.resnet18()
    torch.nn.init.constant_(net.layer4[1].conv2.weight, 0.5)
    path = tmp_path / "r18.pth"
    torch.save(net.state_dict(), path)
    loaded = get_backbone("resnet18").load(str(path))
    assert torch.equal(loaded.module.layer4[1].conv2.weight, net.layer4[1].conv2.weight)
    assert loaded.weights == str(path) and len(loaded.weights_sha256) == 64


def test_a_wrong_state_dict_names_missing_and_unexpected_keys(tmp_path):
    state = torchvision.models.resnet18().state_dict()
    del state["layer2.0.conv1.weight"]
    state["head.weight"] = torch.zeros(3)
    path = tmp_path / "bad.pth"
    torch.save(state, path)
    with pytest.raises(VpromError, match=r"1 missing keys \(layer2.0.conv1.weight\).*"
                                         r"1 unexpected keys \(head.weight\)"):
        get_backbone("resnet18").load(str(path))


def test_a_wrong_shape_is_named(tmp_path):
    state = torchvision.models.resnet18().state_dict()
    state["conv1.weight"] = torch.zeros(64, 3, 3, 3)
    path = tmp_path / "shape.pth"
    torch.save(state, path)
    with pytest.raises(VpromError, match=r"conv1.weight has shape \(64, 3, 3, 3\)"):
        get_backbone("resnet18").load(str(path))


def test_imagenet_weights_absent_from_the_cache_say_how_to_fetch_them(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    monkeypatch.setattr(torch.hub, "_hub_dir", None)
    with pytest.raises(VpromError, match="not in torchvision's cache.*IMAGENET1K_V1.*"
                                         "--weights PATH"):
        get_backbone("resnet101").load("imagenet")


def test_imagenet_weights_found_in_the_cache_are_used_offline(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    monkeypatch.setattr(torch.hub, "_hub_dir", None)
    net = torchvision.models.resnet18()
    url = torchvision.models.ResNet18_Weights.IMAGENET1K_V1.url
    (tmp_path / "hub" / "checkpoints").mkdir(parents=True)
    torch.save(net.state_dict(), tmp_path / "hub" / "checkpoints" / url.rsplit("/", 1)[1])
    loaded = get_backbone("resnet18").load("imagenet")
    assert loaded.weights == "imagenet:ResNet18_Weights.IMAGENET1K_V1"
    assert torch.equal(loaded.module.conv1.weight, net.conv1.weight)


def test_an_unreadable_weights_file_is_a_clear_error(tmp_path):
    path = tmp_path / "junk.pth"
    path.write_bytes(b"not a checkpoint")
    with pytest.raises(VpromError, match="junk.pth: cannot read the weights file"):
        get_backbone("resnet18").load(str(path))
    with pytest.raises(VpromError, match="no such weights file"):
        get_backbone("resnet18").load(str(tmp_path / "absent.pth"))


def test_normalisation_is_imagenets_and_serves_autograd_after_an_extraction():
    """The mean and std are made once per device (`channel_values`); made during an
    extraction (inference mode), they must still serve a caller that trains through them."""
    from vprom.features.backbones import IMAGENET_MEAN, IMAGENET_STD, channel_values

    channel_values.cache_clear()
    pre = Preprocess(4)
    pixels = torch.arange(48, dtype=torch.uint8).reshape(1, 4, 4, 3)
    with torch.inference_mode():
        first = pre.normalise(pixels)
    expected = ((pixels.permute(0, 3, 1, 2).float() / 255
                 - torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1))
                / torch.tensor(IMAGENET_STD).view(1, 3, 1, 1))
    assert torch.allclose(first, expected, rtol=1e-6, atol=1e-6)
    x = torch.rand(1, 4, 4, 3, requires_grad=True)
    pre.normalise(x * 255).sum().backward()
    assert x.grad is not None and torch.isfinite(x.grad).all()
