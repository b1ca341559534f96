"""context-blind-pixels: the ResNet-18 context-blind control over the crops' pixels.

RAVEN-family papers report, beside every solver, a ResNet that sees only the 8 candidates: if
it beats chance, the answer sets give the answer away without the context (e.g. Hu et al.'s
I-RAVEN, and the context-blind ResNet-18 of mikomel/raven-generalization). Here each candidate
crop goes through one shared ResNet-18 trunk (`conv.resnet18`, widths hidden/8 to hidden: the
standard 64-512 at hidden 512) to an H-wide embedding, and the candidates are scored as the
`context-blind` control scores its feature vectors (a DeepSets head: each candidate's
embedding beside the mean of the 8, then f2 and a linear score).

Adapted: the RAVEN-family control stacks the 8 candidate images as the channels of one ResNet
input with 8 outputs, which can learn to prefer an answer position; V-PROM shuffles its answer
positions, and every vprom model but `gru` must score a permuted set of candidates by the
permuted scores, so the trunk runs on each candidate alone. Pixels come from a crop store
(`vprom crops`, uint8 RGB at S x S), scaled to [0, 1]; the context panels are never read.
"""

from __future__ import annotations

from torch import Tensor, nn

from vprom.baselines import parts
from vprom.baselines.context_blind import ContextBlind
from vprom.baselines.conv import resnet18
from vprom.baselines.parts import N_CANDIDATES, N_CONTEXT, ModelConfig
from vprom.baselines.registry import register_model
from vprom.errors import VpromError


class ContextBlindPixels(ContextBlind):
    """A ResNet-18 embedding of each candidate crop, scored by the DeepSets head."""

    def __init__(self, config: ModelConfig):
        if config.hidden % 8:
            raise VpromError(f"context-blind-pixels' ResNet-18 ends at the hidden width in 4 "
                             f"doublings from hidden/8: hidden must be a multiple of 8, got "
                             f"{config.hidden}")
        super().__init__(config, f1=resnet18(config.hidden // 8, config.feature_dim))
        self.side = config.side

    def embed(self, panels: Tensor) -> Tensor:
        parts.check_panels(panels, self.feature_dim, self.side, self.side)
        candidates = parts.unit_pixels(panels[:, N_CONTEXT:], self.score.weight)
        return self.f1(candidates.flatten(0, 1)).view(-1, N_CANDIDATES, self.score.in_features)


@register_model("context-blind-pixels", kind="pixels")
def build_context_blind_pixels(config: ModelConfig) -> nn.Module:
    return ContextBlindPixels(config)
