"""bottom-up-attention ResNet-101: Detectron2 key mapping, Caffe conventions, preprocessing."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch

from features.backbones import get_backbone
from features.bottomup import CAFFE_PIXEL_MEANS_BGR, BottomUpResNet101, FrozenBatchNorm

# Names and shapes as published in faster_rcnn_from_caffe_attr.pkl / bua-caffe-frcn-r101.pth.
REAL_KEYS = {
    "backbone.stem.conv1.weight": (64, 3, 7, 7),
    "backbone.stem.conv1.norm.weight": (64,),
    "backbone.res2.0.shortcut.weight": (256, 64, 1, 1),
    "backbone.res2.0.conv1.weight": (64, 64, 1, 1),
    "backbone.res2.2.conv3.norm.bias": (256,),
    "backbone.res3.0.conv1.weight": (128, 256, 1, 1),
    "backbone.res3.3.conv2.weight": (128, 128, 3, 3),
    "backbone.res4.0.shortcut.weight": (1024, 512, 1, 1),
    "backbone.res4.22.conv3.weight": (1024, 256, 1, 1),
    "roi_heads.res5.0.shortcut.weight": (2048, 1024, 1, 1),
    "roi_heads.res5.0.conv1.weight": (512, 1024, 1, 1),
    "roi_heads.res5.2.conv3.norm.weight": (2048,),
}
HEADS = {  # detector parts a real checkpoint also holds
    "proposal_generator.rpn_head.conv.weight": (512, 1024, 3, 3),
    "proposal_generator.rpn_head.objectness_logits.weight": (12, 512, 1, 1),
    "roi_heads.box_predictor.cls_score.weight": (1601, 2048),
    "roi_heads.box_predictor.bbox_pred.weight": (6400, 2048),
}


def detectron_names(affine_only: bool, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """A checkpoint with the ports' key names and shapes and random values."""
    out = {}
    for key, value in BottomUpResNet101().state_dict().items():
        if affine_only and key.endswith(("running_mean", "running_var")):
            continue
        name = ("roi_heads." if key.startswith("res5.") else "backbone.") + key
        out[name] = rng.standard_normal(value.shape, dtype=np.float32)
        if key.endswith("running_var"):
            out[name] = np.abs(out[name]) + 0.5
    for key, shape in HEADS.items():
        out[key] = np.zeros(shape, dtype=np.float32)
    return out


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    path = tmp_path_factory.mktemp("bua") / "faster_rcnn_from_caffe_attr.pkl"
    state = detectron_names(affine_only=False, rng=np.random.default_rng(0))
    with open(path, "wb") as f:
        pickle.dump({"model": state, "__author__": "test"}, f)
    yield path, state
    path.unlink()


def test_the_module_has_the_real_names_and_shapes():
    state = BottomUpResNet101().state_dict()
    for key, shape in REAL_KEYS.items():
        ours = key.removeprefix("backbone.").removeprefix("roi_heads.")
        assert tuple(state[ours].shape) == shape, key


def test_a_detectron_pkl_maps_onto_the_trunk(checkpoint):
    path, state = checkpoint
    loaded = get_backbone("bottomup-r101").load(str(path))
    ours = loaded.module.state_dict()
    for key in ("backbone.stem.conv1.weight", "backbone.res4.22.conv3.norm.running_var",
                "roi_heads.res5.0.conv1.weight", "roi_heads.res5.2.conv3.norm.bias"):
        mapped = key.removeprefix("backbone.").removeprefix("roi_heads.")
        assert np.array_equal(ours[mapped].numpy(), state[key]), key
    assert loaded.weights == str(path) and len(loaded.weights_sha256) == 64


def test_a_pth_with_affine_only_norms_loads_with_mean_0_var_1(tmp_path):
    state = detectron_names(affine_only=True, rng=np.random.default_rng(1))
    path = tmp_path / "bua-caffe-frcn-r101.pth"
    torch.save({"model": {k: torch.from_numpy(v) for k, v in state.items()}}, path)
    module = get_backbone("bottomup-r101").load(str(path)).module
    assert torch.equal(module.res3[1].conv2.norm.running_mean, torch.zeros(128))
    assert torch.equal(module.res3[1].conv2.norm.running_var, torch.ones(128))
    assert np.array_equal(module.res3[1].conv2.norm.weight.numpy(),
                          state["backbone.res3.1.conv2.norm.weight"])
    path.unlink()


def test_missing_and_unexpected_keys_are_named(tmp_path):
    state = detectron_names(affine_only=True, rng=np.random.default_rng(2))
    del state["backbone.res4.7.conv2.weight"]
    path = tmp_path / "partial.pkl"
    with open(path, "wb") as f:
        pickle.dump({"model": state}, f)
    with pytest.raises(Exception, match=r"missing keys \(res4.7.conv2.weight\)"):
        get_backbone("bottomup-r101").load(str(path))
    state["backbone.fpn_lateral2.weight"] = np.zeros(1, np.float32)
    state["mystery.weight"] = np.zeros(1, np.float32)
    with open(path, "wb") as f:
        pickle.dump({"model": state}, f)
    with pytest.raises(Exception, match=r"unexpected keys outside.*mystery.weight"):
        get_backbone("bottomup-r101").load(str(path))
    path.unlink()


def test_a_pickle_that_would_run_code_is_refused(tmp_path):
    path = tmp_path / "evil.pkl"
    with open(path, "wb") as f:
        pickle.dump({"model": {"x": print}}, f)
    with pytest.raises(Exception, match="not allowed in a weights file"):
        get_backbone("bottomup-r101").load(str(path))


def test_caffe_conventions():
    net = BottomUpResNet101()
    # stride sits in the first 1x1 convolution of a stage's first block
    assert net.res3[0].conv1.stride == (2, 2) and net.res3[0].conv2.stride == (1, 1)
    assert net.res5[0].conv1.stride == (2, 2) and net.res2[0].conv1.stride == (1, 1)
    assert not any(isinstance(m, torch.nn.BatchNorm2d) for m in net.modules())
    assert sum(1 for m in net.modules() if isinstance(m, torch.nn.Conv2d)) == 104
    # 224 input: stem with Caffe's ceil-mode pool gives 56, res4 14 (as RoI pooling), res5 7
    net = net.to("meta")  # shapes only
    x = torch.zeros(1, 3, 224, 224, device="meta")
    assert net.stem(x).shape[-1] == 56
    assert net.res4(net.res3(net.res2(net.stem(x)))).shape[-1] == 14
    assert net(x).shape == (1, 2048, 7, 7)


def test_frozen_batch_norm_is_a_fixed_affine_map():
    bn = FrozenBatchNorm(2)
    bn.weight.copy_(torch.tensor([2.0, 1.0]))
    bn.bias.copy_(torch.tensor([1.0, 0.0]))
    bn.running_mean.copy_(torch.tensor([1.0, -1.0]))
    bn.running_var.copy_(torch.tensor([4.0, 1.0]))
    x = torch.tensor([3.0, 3.0]).view(1, 2, 1, 1)
    out = bn(x).view(2)
    expected = torch.tensor([2 * (3 - 1) / np.sqrt(4 + 1e-5) + 1, (3 + 1) / np.sqrt(1 + 1e-5)])
    assert torch.allclose(out, expected.float())


def test_caffe_preprocessing_is_bgr_0_255_minus_pixel_means():
    pre = get_backbone("bottomup-r101").preprocess
    pixels = torch.tensor([10, 20, 30], dtype=torch.uint8).view(1, 1, 1, 3).expand(1, 2, 2, 3)
    x = pre.normalise(pixels)
    expected = torch.tensor([30 - CAFFE_PIXEL_MEANS_BGR[0], 20 - CAFFE_PIXEL_MEANS_BGR[1],
                             10 - CAFFE_PIXEL_MEANS_BGR[2]])
    assert torch.allclose(x[0, :, 0, 0], expected)
    assert x.is_contiguous(memory_format=torch.channels_last)


def test_resnet_preprocessing_is_rgb_imagenet_normalised():
    pre = get_backbone("resnet101").preprocess
    pixels = torch.tensor([255, 0, 128], dtype=torch.uint8).view(1, 1, 1, 3)
    x = pre.normalise(pixels)[0, :, 0, 0]
    expected = torch.tensor([(1 - 0.485) / 0.229, (0 - 0.456) / 0.224,
                             (128 / 255 - 0.406) / 0.225])
    assert torch.allclose(x, expected, atol=1e-6)
