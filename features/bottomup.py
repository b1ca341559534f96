"""`bottomup-r101`: the ResNet-101 trunk of the bottom-up-attention Faster R-CNN.

Anderson et al. (2018) trained a Faster R-CNN with a ResNet-101 "C4" backbone on Visual
Genome objects and attributes in Caffe. The detector runs res2-res4 over the image, RoI-pools
each box to 14x14 on the stride-16 res4 map and runs the res5 stage on it, then averages the
7x7 result into a 2048-d vector. For a V-PROM crop we run the same layers on the crop itself,
resized to 224x224, so res4 is 14x14 (what RoI pooling gives the detector) and res5 is 7x7.

Caffe conventions kept here:
- the stride of a stage's first block sits in its first 1x1 convolution (MSRA ResNet);
- batch norm is frozen: y = x * weight / sqrt(var + eps) + (bias - mean * weight /
  sqrt(var + eps)); a checkpoint holding only the affine pair (weight, bias) gets mean 0 and
  var 1, as Detectron2's FrozenBatchNorm2d does;
- the stem's max pool has no padding and rounds up (Caffe's ceil mode);
- input is BGR in 0-255 with the Caffe pixel means [102.9801, 115.9465, 122.7717]
  subtracted and no division by a std.

Weights: the public PyTorch ports (airsplay/py-bottom-up-attention's
`faster_rcnn_from_caffe_attr.pkl`, MILVLG/bottom-up-attention.pytorch's `bua-caffe-frcn-*.pth`)
use Detectron2 names: `backbone.stem.conv1.{weight,norm.*}`, `backbone.res{2,3,4}.<i>.
{shortcut,conv1,conv2,conv3}.{weight,norm.*}` and `roi_heads.res5.<i>....`. `map_bottomup`
maps those to this module explicitly, drops the detector's heads (RPN, box/attribute
predictors, pixel mean/std buffers) and rejects anything else by name.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from features.backbones import Backbone, Preprocess, register_backbone
from vprom.errors import VpromError

CAFFE_PIXEL_MEANS_BGR = (102.9801, 115.9465, 122.7717)
FROZEN_BN_EPS = 1e-5
STAGES = (  # name, blocks, bottleneck channels, out channels, first stride (ResNet-101)
    ("res2", 3, 64, 256, 1),
    ("res3", 4, 128, 512, 2),
    ("res4", 23, 256, 1024, 2),
    ("res5", 3, 512, 2048, 2),
)
# Detector parts that sit on top of the trunk: present in the checkpoints, unused here.
HEAD_PREFIXES = ("proposal_generator.", "roi_heads.box_predictor.", "roi_heads.attribute",
                 "roi_heads.res5_bn.", "pixel_mean", "pixel_std")


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

    def __init__(self, cin: int, cout: int, kernel: int, stride: int = 1, padding: int = 0):
        super().__init__(cin, cout, kernel, stride=stride, padding=padding, bias=False)
        self.norm = FrozenBatchNorm(cout)
        nn.init.kaiming_normal_(self.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(super().forward(x))


class CaffeBottleneck(nn.Module):
    def __init__(self, cin: int, bottleneck: int, cout: int, stride: int):
        super().__init__()
        self.shortcut = ConvNorm(cin, cout, 1, stride=stride) if cin != cout else None
        self.conv1 = ConvNorm(cin, bottleneck, 1, stride=stride)  # Caffe: stride in the 1x1
        self.conv2 = ConvNorm(bottleneck, bottleneck, 3, padding=1)
        self.conv3 = ConvNorm(bottleneck, cout, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.conv1(x))
        out = F.relu(self.conv2(out))
        out = self.conv3(out)
        return F.relu(out + (self.shortcut(x) if self.shortcut is not None else x))


class CaffeStem(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = ConvNorm(3, 64, 7, stride=2, padding=3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.max_pool2d(F.relu(self.conv1(x)), kernel_size=3, stride=2, padding=0,
                            ceil_mode=True)


class BottomUpResNet101(nn.Module):
    """stem -> res2 -> res3 -> res4 (the detector's backbone) -> res5 (its RoI head)."""

    def __init__(self):
        super().__init__()
        self.stem = CaffeStem()
        cin = 64
        for name, blocks, bottleneck, cout, stride in STAGES:
            stage = [CaffeBottleneck(cin if i == 0 else cout, bottleneck, cout,
                                     stride if i == 0 else 1) for i in range(blocks)]
            self.add_module(name, nn.Sequential(*stage))
            cin = cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        for name, *_ in STAGES:
            x = getattr(self, name)(x)
        return x


def map_bottomup(state: dict, source: str) -> dict:
    """Detectron2-named checkpoint -> BottomUpResNet101 keys; unknown keys are refused."""
    out, unknown = {}, []
    for key, value in state.items():
        if key.startswith("backbone."):
            out[key.removeprefix("backbone.")] = value
        elif key.startswith("roi_heads.res5."):
            out[key.removeprefix("roi_heads.")] = value
        elif not key.startswith(HEAD_PREFIXES):
            unknown.append(key)
    if unknown:
        raise VpromError(f"{source}: {len(unknown)} unexpected keys outside the detector's "
                         f"backbone and heads ({', '.join(sorted(unknown)[:8])}); expected "
                         "the bottom-up-attention Faster R-CNN (Detectron2 names)")
    # Affine-only frozen norms (Caffe folded its BN into scale/bias): mean 0, var 1.
    for key in [k for k in out if k.endswith(".norm.weight")]:
        stem = key.removesuffix("weight")
        out.setdefault(stem + "running_mean", torch.zeros_like(out[key]))
        out.setdefault(stem + "running_var", torch.ones_like(out[key]))
    return {k: v.float() for k, v in out.items()}


register_backbone(Backbone(
    name="bottomup-r101",
    description="bottom-up-attention Faster R-CNN ResNet-101 (Caffe, Visual Genome): res2-res4 "
                "+ res5 head; needs --weights PATH (faster_rcnn_from_caffe_attr.pkl or a "
                "bua-caffe .pth)",
    feature_dim=2048,
    preprocess=Preprocess(input_size=224, channel_order="BGR", scale=1.0,
                          mean=CAFFE_PIXEL_MEANS_BGR, std=(1.0, 1.0, 1.0)),
    build=BottomUpResNet101,
    map_state_dict=map_bottomup,
))
