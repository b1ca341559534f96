"""The torchvision ResNets as backbones: resnet18, resnet50 and resnet101, up to `layer4`.

`imagenet` weights are torchvision's IMAGENET1K_V1, read from torchvision's cache (never
downloaded); a full checkpoint loses its classifier keys on the way in.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from pathlib import Path
from typing import Callable
from urllib.parse import urlparse

import torch
from torch import nn

from vprom.features.backbones import Backbone, Preprocess, register_backbone
from vprom.features.checkpoints import read_checkpoint
from vprom.errors import VpromError


def _torchvision_trunk(arch: str) -> Callable[[], nn.Module]:
    def build() -> nn.Module:
        import torchvision

        net = torchvision.models.get_model(arch, weights=None)
        names = ("conv1", "bn1", "relu", "maxpool", "layer1", "layer2", "layer3", "layer4")
        return nn.Sequential(OrderedDict((n, getattr(net, n)) for n in names))

    return build


def _torchvision_map(state: dict, source: str) -> tuple[dict, list[str]]:
    classifier = sorted(k for k in state if k.startswith("fc."))
    notes = [f"ignored the ImageNet classifier ({', '.join(classifier)})"] if classifier else []
    return {k: v for k, v in state.items() if not k.startswith("fc.")}, notes


def _torchvision_imagenet(arch: str) -> Callable[[], tuple[dict, str, Path]]:
    def fetch() -> tuple[dict, str, Path]:
        import torchvision

        weights = torchvision.models.get_model_weights(arch).IMAGENET1K_V1
        path = Path(torch.hub.get_dir()) / "checkpoints" / os.path.basename(
            urlparse(weights.url).path)
        if not path.is_file():
            raise VpromError(
                f"ImageNet weights for {arch} are not in torchvision's cache ({path}); on a "
                f"machine with internet run `python -c \"import torchvision; "
                f"torchvision.models.{arch}(weights='IMAGENET1K_V1')\"` and copy the file "
                f"there (or set TORCH_HOME), or pass --weights PATH")
        return read_checkpoint(path), f"{weights}", path

    return fetch


# IMAGENET1K_V1 is the original torchvision release (He et al.'s recipe), the weights the
# paper-era ResNet-101 features came from; 224x224 is the resolution they were trained at.
for _arch, _dim in (("resnet101", 2048), ("resnet50", 2048), ("resnet18", 512)):
    register_backbone(Backbone(
        name=_arch,
        description=f"torchvision {_arch}, trunk up to layer4, ImageNet IMAGENET1K_V1",
        feature_dim=_dim,
        preprocess=Preprocess(input_size=224),
        build=_torchvision_trunk(_arch),
        map_state_dict=_torchvision_map,
        imagenet=_torchvision_imagenet(_arch),
    ))
