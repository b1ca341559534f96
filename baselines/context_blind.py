"""context-blind: a control that scores the candidates without seeing the context; above chance,
the answer sets give the answer away (RAVEN's flaw). DeepSets: s_j = w . f2([f1(c_j) ; mean of
the 8]) can learn "the odd one out"; the aux heads read the mean of f2's output."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from vprom.baselines import parts
from vprom.baselines.parts import N_CONTEXT, ModelConfig
from vprom.baselines.registry import register_model


@register_model("context-blind")
class ContextBlind(parts.CandidateModel):
    def __init__(self, config: ModelConfig, f1: nn.Module | None = None):
        super().__init__(config.feature_dim)
        self.f1 = parts.panel_encoder(config) if f1 is None else f1
        self.f2 = parts.mlp(2 * config.hidden, config.hidden, parts.half_depth(config))
        self.heads(config)

    def embed(self, panels: Tensor) -> Tensor:
        """[B, 16, D] -> [B, 8, H]: the candidates' embeddings, the context never read."""
        # ids keep the other models' input width; every candidate gets the same one
        return self.f1(parts.with_panel_ids(panels, candidates_share_id=True)[:, N_CONTEXT:])

    def candidates(self, panels: Tensor) -> Tensor:
        embedded = self.embed(panels)  # [B, 8, H]
        summary = embedded.mean(1, keepdim=True).expand_as(embedded)
        return self.f2(torch.cat([embedded, summary], dim=-1))
