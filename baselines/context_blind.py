"""context-blind: a control that scores the candidates without ever seeing the context.

If a model that reads only the 8 candidates beats chance (12.5%), the answer sets themselves
give the answer away (the flaw RAVEN had and I-RAVEN fixed). The model is a DeepSets scorer:
each candidate is embedded on its own, the set is summarised by the mean embedding, and each
candidate is scored against that summary, so it can learn "the odd one out" or any other
property of a candidate relative to its set:

    e_j = f1(c_j)                          k/2 Linear+ReLU layers
    m   = (e_1 + ... + e_8) / 8            the set summary
    h_j = f2([e_j ; m])                    k/2 Linear+ReLU layers
    s_j = w . h_j

The context panels are sliced away before any computation. The auxiliary heads read the mean
over candidates of h_j.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from vprom.baselines import parts
from vprom.baselines.parts import N_CONTEXT, ModelConfig, ModelOutput
from vprom.baselines.registry import register_model


@register_model("context-blind")
class ContextBlind(nn.Module):
    """DeepSets over the candidates alone; `f1` embeds one candidate (default: an MLP)."""

    def __init__(self, config: ModelConfig, f1: nn.Module | None = None):
        super().__init__()
        depth = parts.half_depth(config)
        self.feature_dim = config.feature_dim
        self.f1 = parts.panel_encoder(config) if f1 is None else f1
        self.f2 = parts.mlp(2 * config.hidden, config.hidden, depth)
        self.score = parts.score_head(config)
        self.aux = parts.make_aux(config)

    def embed(self, panels: Tensor) -> Tensor:
        """[B, 16, D] -> [B, 8, H]: the candidates' embeddings, the context never read."""
        parts.check_panels(panels, self.feature_dim)
        # Ids keep the input width of the other models; every candidate gets the same one.
        return self.f1(parts.with_panel_ids(panels, candidates_share_id=True)[:, N_CONTEXT:])

    def forward(self, panels: Tensor) -> ModelOutput:
        embedded = self.embed(panels)  # [B, 8, H]
        summary = embedded.mean(1, keepdim=True).expand_as(embedded)
        hidden = self.f2(torch.cat([embedded, summary], dim=-1))  # [B, 8, H]
        return parts.output(self.score(hidden).squeeze(-1), self.aux, hidden.mean(1))
