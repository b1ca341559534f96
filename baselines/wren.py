"""WReN, the Wild Relation Network (Barrett et al., ICML 2018), over pooled features: panels
embedded by one Linear+ReLU and tagged with a position of 9 (candidates 9); s_j = w . f(sum of
g([e_a ; e_b]) over the 81 ordered pairs of its completed matrix), g four layers, f two."""

from __future__ import annotations

from torch import Tensor

from vprom.baselines import parts
from vprom.baselines.parts import N_CONTEXT, ModelConfig
from vprom.baselines.registry import register_model
from vprom.baselines.rn import pair_sums

TAGS = N_CONTEXT + 1  # context 1-8, and 9 for the candidate in the missing cell
G_LAYERS, F_LAYERS = 4, 2


@register_model("wren")
class WReN(parts.CandidateModel):
    def __init__(self, config: ModelConfig):
        super().__init__(config.feature_dim)
        self.width = config.hidden + TAGS
        self.encoder = parts.mlp(config.feature_dim, config.hidden, 1)
        self.g = parts.mlp(2 * self.width, config.hidden, G_LAYERS)
        self.f = parts.mlp(config.hidden, config.hidden, F_LAYERS)
        self.heads(config)

    def candidates(self, panels: Tensor) -> Tensor:
        embedded = self.encoder(panels)  # [B, 16, H]
        # ids 1-16 with the candidates' shared id 9, cut to the 9 tags WReN uses
        tagged = parts.with_panel_ids(embedded, candidates_share_id=True)[..., :self.width]
        return self.f(pair_sums(tagged, self.g, self.width))
