"""What every baseline shares: its config, its output, panel ids and the layer builders. A model
reads 8 context panels then 8 candidates (`vectors` [B, 16, D], `maps` [B, 16, C, H, W] or
`pixels` [B, 16, 3, S, S]). A model scoring each candidate alone gives every candidate panel id 9,
so permuting the candidates permutes the scores. ResNet-18's trunk is here as this floor does not
import torchvision (at width 64: torchvision's layers, less the classifier)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor, nn

from vprom.domain import N_CANDIDATES, N_CONTEXT, N_PANELS, ElementType, Relation
from vprom.errors import VpromError

# the auxiliary heads' classes, in logit order
RELATION_CLASSES = (Relation.AND, Relation.OR, Relation.UNION, Relation.PROGRESSION)
ELEMENT_TYPE_CLASSES = ("attribute", "object", "count")
_ELEMENT_TYPE_CLASS = {ElementType.OBJECT_ATTRIBUTE: 0, ElementType.HUMAN_ATTRIBUTE: 0,
                       ElementType.OBJECT: 1, ElementType.COUNT: 2}


def relation_class(relation: Relation | str) -> int:
    return RELATION_CLASSES.index(Relation(relation))


def element_type_class(element_type: ElementType | str) -> int:
    """Object and human attributes are both 'attribute'."""
    return _ELEMENT_TYPE_CLASS[ElementType(element_type)]


@dataclass(frozen=True)
class ModelConfig:
    """Sizes of a baseline; written into every run folder and checkpoint."""

    feature_dim: int = 2048  # D of vectors, C of maps, 3 for pixels (ids are appended inside)
    hidden: int = 512
    aux: bool = False  # add the auxiliary heads
    layers: int = 2  # k for mlp-*-k: f1 and f2 get k/2 Linear+ReLU layers each
    score_init: float = 1.0  # scales the score head's initial weights: deep stacks need more
    side: int = 0  # H = W of maps, S of pixels; 0 for vectors


class ModelOutput(NamedTuple):
    scores: Tensor  # [B, 8], one per candidate
    relation_logits: Tensor | None  # [B, 4] in RELATION_CLASSES order, when aux
    element_type_logits: Tensor | None  # [B, 3] in ELEMENT_TYPE_CLASSES order, when aux


def check_panels(panels: Tensor, *panel_shape: int) -> None:
    """Refuse input that is not [B, 16, *panel_shape], before it fails inside a layer."""
    if panels.dim() != 2 + len(panel_shape) or tuple(panels.shape[1:]) != (N_PANELS, *panel_shape):
        expected = ", ".join(map(str, (N_PANELS, *panel_shape)))
        raise VpromError(f"model input has shape {list(panels.shape)}, expected [batch, "
                         f"{expected}]: 8 context panels then 8 candidates, each of the model "
                         "config's size; use the features, maps or crop store the model was "
                         "built for")


def unit_pixels(pixels: Tensor, like: Tensor) -> Tensor:
    """Crop-store pixels (uint8) as floats in [0, 1] of `like`'s dtype; floats pass as they are."""
    if pixels.dtype == torch.uint8:
        return pixels.to(like.dtype) / 255
    return pixels.to(like.dtype)


def with_panel_ids(panels: Tensor, candidates_share_id: bool = False) -> Tensor:
    """[B, 16, D] -> [B, 16, D + 16]: a one-hot panel id appended (candidates all 9 if shared)."""
    batch = panels.shape[0]
    ids = torch.eye(N_PANELS, dtype=panels.dtype, device=panels.device)
    if candidates_share_id:
        ids[N_CONTEXT:] = ids[N_CONTEXT]
    return torch.cat([panels, ids.expand(batch, N_PANELS, N_PANELS)], dim=-1)


def candidate_sets(x: Tensor) -> Tensor:
    """[B, 16, E] -> [B, 8, 9, E]: for each candidate, the 8 context panels then the candidate."""
    context, candidates = x[:, :N_CONTEXT], x[:, N_CONTEXT:]
    batch, _, width = x.shape
    context = context.unsqueeze(1).expand(batch, N_CANDIDATES, N_CONTEXT, width)
    return torch.cat([context, candidates.unsqueeze(2)], dim=2)


def mlp(in_features: int, hidden: int, n_layers: int) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i in range(n_layers):
        layers += [nn.Linear(in_features if i == 0 else hidden, hidden), nn.ReLU()]
    return nn.Sequential(*layers)


def panel_encoder(config: ModelConfig) -> nn.Sequential:
    """f1 of most models: each panel's features with its one-hot position, k/2 layers deep."""
    return mlp(config.feature_dim + N_PANELS, config.hidden, half_depth(config))


def score_head(config: ModelConfig, outputs: int = 1, bias: bool = False) -> nn.Linear:
    """The paper's w, bias-free by default (a shift of all 8 scores changes no softmax)."""
    head = nn.Linear(config.hidden, outputs, bias=bias)
    with torch.no_grad():
        head.weight.mul_(config.score_init)
    return head


def half_depth(config: ModelConfig) -> int:
    if config.layers < 2 or config.layers % 2:
        raise VpromError(f"model config layers={config.layers}: f1 and f2 get k/2 layers each, "
                         "so layers must be an even number >= 2 (e.g. 2, 4 or 6)")
    return config.layers // 2


class AuxHeads(nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        self.relation = nn.Linear(hidden, len(RELATION_CLASSES))
        self.element_type = nn.Linear(hidden, len(ELEMENT_TYPE_CLASSES))

    def forward(self, representation: Tensor) -> tuple[Tensor, Tensor]:
        return self.relation(representation), self.element_type(representation)


def make_aux(config: ModelConfig) -> AuxHeads | None:
    return AuxHeads(config.hidden) if config.aux else None


def output(scores: Tensor, aux: AuxHeads | None, representation: Tensor) -> ModelOutput:
    """Scores, with the aux heads applied to `representation` [B, hidden]."""
    return ModelOutput(scores, *(aux(representation) if aux is not None else (None, None)))


class CandidateModel(nn.Module):
    """A model over panels of `panel_shape` that represents each candidate (`candidates`:
    [B, 16, ...] -> [B, 8, H]) for w to score; the aux heads read the mean representation.
    `heads` adds w and the aux heads, last in `__init__` so the layers' random draws come first."""

    def __init__(self, *panel_shape: int):
        super().__init__()
        self.panel_shape = panel_shape

    def heads(self, config: ModelConfig, outputs: int = 1, bias: bool = False) -> None:
        self.score, self.aux = score_head(config, outputs, bias), make_aux(config)

    def forward(self, panels: Tensor) -> ModelOutput:
        check_panels(panels, *self.panel_shape)
        hidden = self.candidates(panels)
        return output(self.score(hidden).squeeze(-1), self.aux, hidden.mean(1))


def conv_bn(in_channels: int, out_channels: int, kernel_size=3, stride: int = 1,
            padding=0, relu: bool = True) -> nn.Sequential:
    """Conv2d without bias (the batch norm has one), BatchNorm2d, and ReLU if `relu`."""
    layers = [nn.Conv2d(in_channels, out_channels, kernel_size, stride=stride, padding=padding,
                        bias=False), nn.BatchNorm2d(out_channels)]
    return nn.Sequential(*layers, nn.ReLU()) if relu else nn.Sequential(*layers)


class BasicBlock(nn.Module):
    """ResNet's basic block: two 3x3 conv-BN, the identity (or a strided 1x1 conv-BN) added."""

    def __init__(self, in_channels: int, out_channels: int, stride: int = 1):
        super().__init__()
        self.body = nn.Sequential(
            conv_bn(in_channels, out_channels, 3, stride, 1),
            conv_bn(out_channels, out_channels, 3, 1, 1, relu=False))
        self.shortcut = (nn.Identity() if stride == 1 and in_channels == out_channels
                         else conv_bn(in_channels, out_channels, 1, stride, relu=False))

    def forward(self, x: Tensor) -> Tensor:
        return nn.functional.relu(self.body(x) + self.shortcut(x))


def resnet18(width: int, in_channels: int = 3) -> nn.Sequential:
    """ResNet-18's trunk and global average pooling: [N, in_channels, S, S] -> [N, 8 width]."""
    layers: list[nn.Module] = [conv_bn(in_channels, width, 7, 2, 3),
                               nn.MaxPool2d(3, stride=2, padding=1)]
    channels = width
    for stage in range(4):
        out = width * 2 ** stage
        stride = 1 if stage == 0 else 2
        layers += [BasicBlock(channels, out, stride), BasicBlock(out, out)]
        channels = out
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten())
