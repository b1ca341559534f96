"""bottom-up-attention ResNet-101: its geometry against the released Caffe model, and its
weights as the two public ports store them (key lists from features/data/bottomup_r101.json,
which names the repository, commit and file of every fact)."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch

from vprom.features.backbones import get_backbone
from vprom.features.bottomup import (
    CAFFE_PIXEL_MEANS_BGR,
    REGION_HEAD,
    BottomUpResNet101,
    FrozenBatchNorm,
    facts,
)
from tests.features.weights_files import conv_rows, numpy1_pth, port_state, py2_pickle, trunk_key
from vprom.errors import VpromError


def module_of(net: torch.nn.Module, detectron2_name: str) -> torch.nn.Conv2d:
    return net.get_submodule(detectron2_name)


def test_the_facts_name_their_sources():
    sources = facts()["sources"]
    assert set(sources) == {"caffe", "airsplay", "milvlg"}
    for source in sources.values():
        assert len(source["commit"]) == 40 and source["files"]
    assert len(conv_rows()) == 104


def test_every_convolution_has_the_released_geometry():
    """Channels, kernel, stride, padding and dilation of all 104 trunk convolutions equal the
    Caffe test.prototxt's, res5 included (stride 1 first block, 3x3s dilated 2, padding 2)."""
    net = BottomUpResNet101()
    ours = {name for name, m in net.named_modules() if isinstance(m, torch.nn.Conv2d)}
    assert ours == {row["detectron2"] for row in conv_rows()}
    for row in conv_rows():
        conv = module_of(net, row["detectron2"])
        k = row["kernel"]
        assert (conv.in_channels, conv.out_channels, conv.kernel_size) == \
            (row["in"], row["out"], (k, k)), row["caffe"]
        assert conv.stride == (row["stride"],) * 2, row["caffe"]
        assert conv.padding == (row["pad"],) * 2, row["caffe"]
        assert conv.dilation == (row["dilation"],) * 2, row["caffe"]


def test_caffe_conventions():
    net = BottomUpResNet101()
    # stride sits in the first 1x1 convolution of a stage's first block; res5 has none
    assert net.res3[0].conv1.stride == (2, 2) and net.res3[0].conv2.stride == (1, 1)
    assert net.res5[0].conv1.stride == (1, 1) and net.res5[0].shortcut.stride == (1, 1)
    assert all(b.conv2.dilation == (2, 2) and b.conv2.padding == (2, 2) for b in net.res5)
    assert not any(isinstance(m, torch.nn.BatchNorm2d) for m in net.modules())
    pool1 = facts()["caffe"]["pool1"]
    assert (pool1["kernel"], pool1["stride"], pool1["pad"]) == (3, 2, 0)
    # 224 input: conv1 112, Caffe's ceil-mode pool 56, res4 14 (what RoI pooling gives the
    # detector), res5 14 (dilated, as released: pool5 averages a 14x14 map)
    net = net.to("meta")  # shapes only
    x = torch.zeros(1, 3, 224, 224, device="meta")
    assert net.stem(x).shape[-1] == 56
    assert net.backbone_features(x).shape == (1, 1024, 14, 14)
    assert net(x).shape == (1, 2048, 14, 14)
    # a size where Caffe's ceil mode differs from floor: 113 -> conv1 57 -> pool 28 (not 27)
    assert net.stem(torch.zeros(1, 3, 113, 113, device="meta")).shape[-1] == 28


def test_the_region_head_is_the_detectors():
    caffe = facts()["caffe"]
    assert REGION_HEAD.pooled == caffe["roi_pool5"]["pooled_h"] == caffe["roi_pool5"]["pooled_w"]
    assert 1 / REGION_HEAD.stride == caffe["roi_pool5"]["spatial_scale"]
    assert (REGION_HEAD.shortest_side, REGION_HEAD.longest_side) == (
        caffe["test_scale"]["shortest_side"], caffe["test_scale"]["longest_side_max"])
    assert list(CAFFE_PIXEL_MEANS_BGR) == caffe["pixel_means_bgr"]


def _check_loaded(module: torch.nn.Module, state: dict, port: str) -> None:
    ours = module.state_dict()
    for row in conv_rows()[::7] + conv_rows()[-4:]:
        name = row["detectron2"]
        assert np.array_equal(ours[name + ".weight"].numpy(),
                              state[trunk_key(port, name) + ".weight"]), name
        assert np.array_equal(ours[name + ".norm.bias"].numpy(),
                              state[trunk_key(port, name) + ".norm.bias"]), name


@pytest.mark.parametrize("protocol", [2, 4])
def test_an_airsplay_pkl_loads_with_its_heads_named(tmp_path, protocol):
    """faster_rcnn_from_caffe_attr.pkl: a Detectron2 'model' dict of numpy arrays; protocol 2
    as Python 3 writes it names _codecs.encode for every array's bytes."""
    state = port_state("airsplay", np.random.default_rng(0))
    path = tmp_path / "faster_rcnn_from_caffe_attr.pkl"
    with open(path, "wb") as f:
        pickle.dump({"model": state, "__author__": "test", "matching_heuristics": True}, f,
                    protocol=protocol)
    if protocol == 2:
        assert b"_codecs" in path.read_bytes()
    loaded = get_backbone("bottomup-r101").load(str(path))
    _check_loaded(loaded.module, state, "airsplay")
    assert loaded.notes == ("ignored 15 detector-head tensors (proposal_generator.*, "
                            "roi_heads.box_predictor.*)",)


def test_a_pickle_written_by_python_2_loads(tmp_path):
    state = port_state("airsplay", np.random.default_rng(1), heads=False)
    path = tmp_path / "faster_rcnn_from_caffe.pkl"
    path.write_bytes(py2_pickle({"model": state}))
    assert b"_codecs" not in path.read_bytes()
    _check_loaded(get_backbone("bottomup-r101").load(str(path)).module, state, "airsplay")


def test_a_milvlg_pth_with_num_batches_tracked_loads_and_names_them(tmp_path):
    """bua-caffe-frcn-r101.pth re-saved from the port's model: res4/res5 are BatchNorm2d
    there, whose state dict adds a num_batches_tracked counter per norm (80 of them)."""
    state = port_state("milvlg", np.random.default_rng(2))
    path = tmp_path / "bua-caffe-frcn-r101-k10-100.pth"
    torch.save({"model": {k: torch.from_numpy(np.asarray(v)) for k, v in state.items()}}, path)
    loaded = get_backbone("bottomup-r101").load(str(path))
    _check_loaded(loaded.module, state, "milvlg")
    assert loaded.notes[0] == ("ignored 15 detector-head tensors (proposal_generator.*, "
                               "roi_heads.box_predictor.*)")
    assert loaded.notes[1].startswith("ignored 80 BatchNorm num_batches_tracked counters "
                                      "(backbone.res4.0.conv1.norm.num_batches_tracked")


def test_a_pth_of_numpy_arrays_loads_without_running_code(tmp_path):
    """Values saved as numpy arrays (here the stem, res2, res3 and the heads; res4 and res5
    stay tensors so the file is quick to write) need numpy's names, which torch's
    weights-only loader refuses on its own."""
    state = port_state("milvlg", np.random.default_rng(3), affine_only=True)
    mixed = {k: torch.from_numpy(v) if ".res4." in k or ".res5." in k else v
             for k, v in state.items()}
    path = tmp_path / "numpy2.pth"
    torch.save({"model": mixed}, path)
    with pytest.raises(Exception, match="Weights only load failed"):
        torch.load(path, weights_only=True)
    loaded = get_backbone("bottomup-r101").load(str(path))
    _check_loaded(loaded.module, state, "milvlg")
    old = tmp_path / "numpy1.pth"  # the same file as numpy 1.x names its functions
    numpy1_pth(path, old)
    _check_loaded(get_backbone("bottomup-r101").load(str(old)).module, state, "milvlg")


def test_affine_only_norms_get_mean_0_var_1(tmp_path):
    state = port_state("airsplay", np.random.default_rng(4), affine_only=True)
    path = tmp_path / "affine.pth"
    torch.save({"model": {k: torch.from_numpy(v) for k, v in state.items()}}, path)
    module = get_backbone("bottomup-r101").load(str(path)).module
    assert torch.equal(module.res3[1].conv2.norm.running_mean, torch.zeros(128))
    assert torch.equal(module.res3[1].conv2.norm.running_var, torch.ones(128))


def test_missing_and_unexpected_keys_are_named(tmp_path):
    state = port_state("airsplay", np.random.default_rng(5))
    del state["backbone.res4.7.conv2.weight"]
    path = tmp_path / "partial.pkl"
    with open(path, "wb") as f:
        pickle.dump({"model": state}, f)
    with pytest.raises(VpromError, match=r"partial.pkl: not a bottomup-r101 checkpoint: "
                                         r"1 missing keys \(res4.7.conv2.weight\)"):
        get_backbone("bottomup-r101").load(str(path))
    state["backbone.fpn_lateral2.weight"] = np.zeros(1, np.float32)
    with open(path, "wb") as f:
        pickle.dump({"model": state}, f)
    with pytest.raises(VpromError, match=r"1 missing keys \(res4.7.conv2.weight\); "
                                         r"1 unexpected keys \(fpn_lateral2.weight\)"):
        get_backbone("bottomup-r101").load(str(path))
    state["mystery.weight"] = np.zeros(1, np.float32)
    with open(path, "wb") as f:
        pickle.dump({"model": state}, f)
    with pytest.raises(VpromError, match=r"1 unexpected keys outside the detector's backbone "
                                         r"and heads \(mystery.weight\)"):
        get_backbone("bottomup-r101").load(str(path))


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
