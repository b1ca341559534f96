"""WReN, the Wild Relation Network (Barrett et al., "Measuring abstract reasoning in neural
networks", ICML 2018): PGM's own baseline, over V-PROM's pooled features.

WReN embeds each of the 16 panels, tags every embedding with a one-hot position of 9 (context
panels 1-8; every candidate 9, the missing cell it would fill) and scores candidate j with a
relation network over the 9 tagged panels of the matrix it completes:

    e_a = [E(x_a) ; tag_a]
    r_j = sum over the 81 ordered pairs (a, b) of S_j = (x_1, ..., x_8, c_j) of g([e_a ; e_b])
    s_j = w . f(r_j)

g is four Linear+ReLU layers and f two, then the linear score (the paper: g four layers of
512 units; f 256, 256, then one output).

Adapted to V-PROM's input: a panel is already a CNN's pooled feature, so E is one Linear+ReLU
layer from D to the hidden width instead of the paper's four-layer CNN on 80x80 pixels; g and
f keep their depths, at the hidden width. The pair sums are computed as `rn` computes them
(`rn.pair_sums`: g's first layer is linear, so each tagged panel is projected once and the 64
context pairs are summed once per matrix), which gives the literal sum's numbers. The paper's
dropout (0.5, in f) is left out as in every vprom model: training keeps the epoch of the best
validation accuracy, and scores stay deterministic. V-PROM's auxiliary targets (relation and
element type) stand in for PGM's meta-targets; their heads read the mean over candidates of
f's output.
"""

from __future__ import annotations

from torch import Tensor, nn

from vprom.baselines import parts
from vprom.baselines.parts import N_CONTEXT, ModelConfig, ModelOutput
from vprom.baselines.registry import register_model
from vprom.baselines.rn import pair_sums

TAGS = N_CONTEXT + 1  # context 1-8, and 9 for the candidate in the missing cell
G_LAYERS, F_LAYERS = 4, 2


class WReN(nn.Module):
    """Panel embeddings with position tags, a relation network per candidate, a linear score."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.feature_dim = config.feature_dim
        self.width = config.hidden + TAGS
        self.encoder = parts.mlp(config.feature_dim, config.hidden, 1)
        self.g = parts.mlp(2 * self.width, config.hidden, G_LAYERS)
        self.f = parts.mlp(config.hidden, config.hidden, F_LAYERS)
        self.score = parts.score_head(config)
        self.aux = parts.make_aux(config)

    def forward(self, panels: Tensor) -> ModelOutput:
        parts.check_panels(panels, self.feature_dim)
        embedded = self.encoder(panels)  # [B, 16, H]
        # ids 1-16 with the candidates' shared id 9, cut to the 9 tags WReN uses
        tagged = parts.with_panel_ids(embedded, candidates_share_id=True)[..., :self.width]
        hidden = self.f(pair_sums(tagged, self.g, self.width))  # [B, 8, H]
        return parts.output(self.score(hidden).squeeze(-1), self.aux, hidden.mean(1))


@register_model("wren")
def build_wren(config: ModelConfig) -> nn.Module:
    return WReN(config)
