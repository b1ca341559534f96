"""MLP-cat-k and MLP-sum-k: f1 (k/2 Linear+ReLU layers) embeds each panel with its id; the 9
embeddings of candidate j's completed matrix are concatenated or summed, and f2 (k/2 layers) and
w score it. The auxiliary heads read the mean over candidates of f2's output."""

from __future__ import annotations

import dataclasses
import itertools
from functools import partial

from torch import Tensor, nn

from vprom.baselines import parts
from vprom.baselines.parts import N_CONTEXT, ModelConfig
from vprom.baselines.registry import register_model

COMBINATIONS = ("cat", "sum")
DEPTHS = (2, 4, 6)


class PanelMLP(parts.CandidateModel):
    def __init__(self, config: ModelConfig, combine: str):
        super().__init__(config.feature_dim)
        self.combine = combine
        self.f1 = parts.panel_encoder(config)
        joint_width = (N_CONTEXT + 1) * config.hidden if combine == "cat" else config.hidden
        self.f2 = parts.mlp(joint_width, config.hidden, parts.half_depth(config))
        self.heads(config)

    def candidates(self, panels: Tensor) -> Tensor:
        embedded = self.f1(parts.with_panel_ids(panels, candidates_share_id=True))  # [B, 16, H]
        sets = parts.candidate_sets(embedded)  # [B, 8, 9, H]
        return self.f2(sets.flatten(2) if self.combine == "cat" else sets.sum(2))


def _build(config: ModelConfig, combine: str, depth: int) -> nn.Module:
    # the registered name fixes k, whatever the config says
    return PanelMLP(dataclasses.replace(config, layers=depth), combine)


for _combine, _depth in itertools.product(COMBINATIONS, DEPTHS):
    register_model(f"mlp-{_combine}-{_depth}")(partial(_build, combine=_combine, depth=_depth))
