"""`bottomup-r101`: the ResNet-101 of the bottom-up-attention Faster R-CNN, as released.

Anderson et al. (2018) ran res2-res4 over the whole image (stride 16), max-pooled each box to
14x14 cells and ran res5 (stride 1, dilation 2) on them. `--region crop` runs it all on a
warped crop, `--region roi` as the released `test.prototxt` (`RESIZE_ROI`). Caffe's
conventions, each with its source in `data/bottomup_r101.json`: stride in a stage's first 1x1
convolution, frozen batch norm, a ceil-mode stem pool, BGR 0-255 input minus the pixel means.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F
from torchvision.ops import roi_pool

from vprom.features.backbones import Backbone, Preprocess, RegionHead, name_some, register_backbone
from vprom.errors import VpromError

FACTS = Path(__file__).with_name("data") / "bottomup_r101.json"
CAFFE_PIXEL_MEANS_BGR = (102.9801, 115.9465, 122.7717)
FROZEN_BN_EPS = 1e-5
STAGES = (  # name, blocks, bottleneck channels, out channels, first stride, 3x3 dilation
    ("res2", 3, 64, 256, 1, 1),
    ("res3", 4, 128, 512, 2, 1),
    ("res4", 23, 256, 1024, 2, 1),
    ("res5", 3, 512, 2048, 1, 2),  # as released: stride 1, dilated (a 14x14 map at 224)
)
# The detector's test scale, RoI pooling and feature stride (test.prototxt, config.py).
REGION_HEAD = RegionHead(stride=16, pooled=14, shortest_side=600, longest_side=1000)
COUNTER_SUFFIX = ".num_batches_tracked"  # BatchNorm2d's step counter: not a weight


@lru_cache(maxsize=1)
def facts() -> dict:
    return json.loads(FACTS.read_text(encoding="utf-8"))


class FrozenBatchNorm(nn.Module):
    """Batch norm with fixed statistics and affine parameters, all buffers (never trained)."""

    def __init__(self, channels: int):
        super().__init__()
        self.register_buffer("weight", torch.ones(channels))
        self.register_buffer("bias", torch.zeros(channels))
        self.register_buffer("running_mean", torch.zeros(channels))
        self.register_buffer("running_var", torch.ones(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = self.weight * torch.rsqrt(self.running_var + FROZEN_BN_EPS)
        shift = self.bias - self.running_mean * scale
        return x * scale.view(1, -1, 1, 1).to(x.dtype) + shift.view(1, -1, 1, 1).to(x.dtype)


class ConvNorm(nn.Conv2d):
    """A bias-free convolution followed by its frozen norm (keys `weight`, `norm.*`)."""

    def __init__(self, cin: int, cout: int, kernel: int, stride: int = 1, padding: int = 0,
                 dilation: int = 1):
        super().__init__(cin, cout, kernel, stride=stride, padding=padding, dilation=dilation,
                         bias=False)
        self.norm = FrozenBatchNorm(cout)
        nn.init.kaiming_normal_(self.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(super().forward(x))


class CaffeBottleneck(nn.Module):
    def __init__(self, cin: int, bottleneck: int, cout: int, stride: int, dilation: int = 1):
        super().__init__()
        self.shortcut = ConvNorm(cin, cout, 1, stride=stride) if cin != cout else None
        self.conv1 = ConvNorm(cin, bottleneck, 1, stride=stride)  # Caffe: stride in the 1x1
        self.conv2 = ConvNorm(bottleneck, bottleneck, 3, padding=dilation, dilation=dilation)
        self.conv3 = ConvNorm(bottleneck, cout, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.conv1(x))
        out = F.relu(self.conv2(out))
        out = self.conv3(out)
        return F.relu(out + (self.shortcut(x) if self.shortcut is not None else x))


class BottomUpResNet101(nn.Module):
    """stem -> res2 -> res3 -> res4 (the detector's backbone) -> res5 (its RoI head)."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(OrderedDict(  # Caffe's max pool: no padding, rounding up
            conv1=ConvNorm(3, 64, 7, stride=2, padding=3), relu=nn.ReLU(),
            pool=nn.MaxPool2d(kernel_size=3, stride=2, padding=0, ceil_mode=True)))
        cin = 64
        for name, blocks, bottleneck, cout, stride, dilation in STAGES:
            stage = [CaffeBottleneck(cin if i == 0 else cout, bottleneck, cout,
                                     stride if i == 0 else 1, dilation) for i in range(blocks)]
            self.add_module(name, nn.Sequential(*stage))
            cin = cout

    def backbone_features(self, x: torch.Tensor) -> torch.Tensor:
        """The detector's backbone: image -> res4 (stride 16)."""
        return self.res4(self.res3(self.res2(self.stem(x))))

    def roi_head(self, x: torch.Tensor) -> torch.Tensor:
        """The detector's RoI head up to pool5: pooled res4 cells -> res5."""
        return self.res5(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.roi_head(self.backbone_features(x))


def map_bottomup(state: dict, source: str) -> tuple[dict, list[str]]:
    """Detectron2-named checkpoint -> (BottomUpResNet101 keys, notes); unknown keys refused."""
    heads = tuple(facts()["dropped_heads"])
    out, unknown, dropped, counters = {}, [], [], []
    for key, value in state.items():
        if key.endswith(COUNTER_SUFFIX):
            counters.append(key)
        elif key.startswith(heads):
            dropped.append(key)
        elif key.startswith("backbone."):
            out[key.removeprefix("backbone.")] = value
        elif key.startswith("roi_heads.res5."):
            out[key.removeprefix("roi_heads.")] = value
        else:
            unknown.append(key)
    if unknown:
        raise VpromError(f"{source}: {len(unknown)} unexpected keys outside the detector's "
                         f"backbone and heads ({name_some(sorted(unknown))}); expected the "
                         "bottom-up-attention Faster R-CNN in Detectron2 names "
                         "(backbone.*, roi_heads.res5.*)")
    # Affine-only frozen norms (Caffe folded its BN into scale/bias): mean 0, var 1.
    for key in [k for k in out if k.endswith(".norm.weight")]:
        stem = key.removesuffix("weight")
        out.setdefault(stem + "running_mean", torch.zeros_like(out[key]))
        out.setdefault(stem + "running_var", torch.ones_like(out[key]))
    notes = []
    if dropped:
        prefixes = sorted({p for p in heads for k in dropped if k.startswith(p)})
        notes.append(f"ignored {len(dropped)} detector-head tensors "
                     f"({', '.join(p + '*' for p in prefixes)})")
    if counters:
        notes.append(f"ignored {len(counters)} BatchNorm num_batches_tracked counters "
                     f"({name_some(sorted(counters), 3)})")
    return {k: v.float() for k, v in out.items()}, notes


register_backbone(Backbone(
    name="bottomup-r101",
    description="bottom-up-attention Faster R-CNN ResNet-101 (Caffe, Visual Genome): res2-res4 "
                "+ dilated res5 head; needs --weights PATH (faster_rcnn_from_caffe_attr.pkl or "
                "a bua-caffe .pth); --region crop|roi",
    feature_dim=2048,
    preprocess=Preprocess(input_size=224, channel_order="BGR", scale=1.0,
                          mean=CAFFE_PIXEL_MEANS_BGR, std=(1.0, 1.0, 1.0)),
    build=BottomUpResNet101,
    map_state_dict=map_bottomup,
    region_head=REGION_HEAD,
))


RESIZE_ROI = ("whole image resized so its shorter side is {short} px (longer side at most "
              "{long} px), bilinear without antialiasing as cv2.resize INTER_LINEAR; boxes "
              "RoI-max-pooled from the stride-{stride} map to {pooled}x{pooled} (Caffe "
              "ROIPooling, inclusive corners)")


def sides(head: RegionHead, shortest: int | None) -> tuple[int, int]:
    """(shorter side, longer-side limit) for `--input-size` (None: the detector's own)."""
    if shortest is None:
        return head.shortest_side, head.longest_side
    return shortest, round(shortest * head.longest_side / head.shortest_side)


def detector_scale(height: int, width: int, shortest: int, longest: int) -> float:
    """Caffe's `_get_image_blob` scale for one image."""
    scale = shortest / min(height, width)
    if round(scale * max(height, width)) > longest:
        scale = longest / max(height, width)
    return scale


def caffe_rois(corners: list, scale: float) -> torch.Tensor:
    """(k, 5) RoIs [0, x1, y1, x2, y2]: Caffe's inclusive corners, scaled, of clipped boxes."""
    rois = np.array([[0, x0, y0, x1 - 1, y1 - 1] for x0, y0, x1, y1 in corners], dtype=np.float64)
    rois[:, 1:] *= scale
    return torch.from_numpy(rois.astype(np.float32))


@torch.inference_mode()
def pooled_regions(model: torch.nn.Module, image: torch.Tensor, corners: list,
                   preprocess: Preprocess, head: RegionHead, shortest: int, longest: int,
                   autocast: torch.dtype | None) -> torch.Tensor:
    """One image's (3, H, W) uint8 and clipped boxes -> (k, C, pooled, pooled) RoI cells."""
    device = image.device
    height, width = image.shape[1:]
    scale = detector_scale(height, width, shortest, longest)
    x = preprocess.normalise(image.permute(1, 2, 0).unsqueeze(0))  # BGR minus means, NCHW
    x = F.interpolate(x, size=(round(height * scale), round(width * scale)), mode="bilinear",
                      align_corners=False, antialias=False)
    x = x.contiguous(memory_format=torch.channels_last)
    with torch.autocast(device.type, dtype=autocast, enabled=autocast is not None):
        fmap = model.backbone_features(x)
    rois = caffe_rois(corners, scale).to(device)
    return roi_pool(fmap.float(), rois, output_size=head.pooled, spatial_scale=1 / head.stride)


@torch.inference_mode()
def region_maps(model: torch.nn.Module, cells: torch.Tensor,
                autocast: torch.dtype | None) -> torch.Tensor:
    """RoI cells (n, C, p, p) -> the head's last conv map (n, D, p', p'), float32."""
    x = cells.contiguous(memory_format=torch.channels_last)
    with torch.autocast(cells.device.type, dtype=autocast, enabled=autocast is not None):
        return model.roi_head(x).float()
