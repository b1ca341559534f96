"""VQA-like (after Teney et al., CVPR 2018): the context as the question, each candidate as an
answer. Gated-tanh layers embed each panel; the question embeds the context's sum, the answer
candidate j; k/2 layers on their product give o_j, scored linearly (aux heads: the mean o_j)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from vprom.baselines import parts
from vprom.baselines.parts import N_CONTEXT, N_PANELS, ModelConfig
from vprom.baselines.registry import register_model


class GatedTanh(nn.Module):
    """y = tanh(W x + b) * sigmoid(W' x + b'), with both maps in one matmul."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, 2 * out_features)

    def forward(self, x: Tensor) -> Tensor:
        value, gate = self.linear(x).chunk(2, dim=-1)
        return torch.tanh(value) * torch.sigmoid(gate)


@register_model("vqa")
class JointEmbedding(parts.CandidateModel):
    def __init__(self, config: ModelConfig):
        super().__init__(config.feature_dim)
        hidden = config.hidden
        self.g_panel = GatedTanh(config.feature_dim + N_PANELS, hidden)
        self.g_q = GatedTanh(hidden, hidden)
        self.g_a = GatedTanh(hidden, hidden)
        depth = parts.half_depth(config)
        self.g_o = nn.Sequential(*(GatedTanh(hidden, hidden) for _ in range(depth)))
        self.heads(config)

    def candidates(self, panels: Tensor) -> Tensor:
        panels = parts.with_panel_ids(panels, candidates_share_id=True)
        embedded = self.g_panel(panels)  # [B, 16, H]
        question = self.g_q(embedded[:, :N_CONTEXT].sum(1))  # [B, H]
        answers = self.g_a(embedded[:, N_CONTEXT:])  # [B, 8, H]
        return self.g_o(question.unsqueeze(1) * answers)
