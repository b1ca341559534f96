"""context-blind-pixels: the RAVEN papers' ResNet control. Each candidate crop goes alone (so no
answer position can be learned) through one shared ResNet-18 trunk, widths hidden/8 to hidden;
`context-blind`'s head scores it."""

from __future__ import annotations

from torch import Tensor

from vprom.baselines import parts
from vprom.baselines.context_blind import ContextBlind
from vprom.baselines.parts import N_CANDIDATES, N_CONTEXT, ModelConfig, resnet18
from vprom.baselines.registry import register_model
from vprom.errors import VpromError


@register_model("context-blind-pixels", kind="pixels")
class ContextBlindPixels(ContextBlind):
    def __init__(self, config: ModelConfig):
        if config.hidden % 8:
            raise VpromError(f"context-blind-pixels' ResNet-18 ends at the hidden width in 4 "
                             f"doublings from hidden/8: hidden must be a multiple of 8, got "
                             f"{config.hidden}")
        super().__init__(config, f1=resnet18(config.hidden // 8, config.feature_dim))
        self.panel_shape = (config.feature_dim, config.side, config.side)

    def embed(self, panels: Tensor) -> Tensor:
        candidates = parts.unit_pixels(panels[:, N_CONTEXT:], self.score.weight)
        return self.f1(candidates.flatten(0, 1)).view(-1, N_CANDIDATES, self.score.in_features)
