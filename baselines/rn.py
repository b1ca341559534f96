"""Relation network (Santoro et al. 2017) as V-PROM uses it (Eq. 7-8 of the paper).

For candidate j, r_j sums f1([x_a ; x_b]) over the 81 ordered pairs of the completed matrix
S_j = (x_1, ..., x_8, c_j), each panel with its id, and s_j = w . f2(r_j); f1 and f2 have k/2
Linear+ReLU layers each. `rn-direct` runs f1 on all 8 x 81 pairs. `rn` gives the same sums
faster: f1's first layer is linear, so each panel is projected once per half of it and a
pair's pre-activation is one addition, and the 64 context-context pairs are summed once per
matrix, each candidate adding its 17 pairs. Both share parameter names, so a state dict moves
between them. `rn-no-ids` drops the panel ids (the paper's ablation). The auxiliary heads
read the mean over candidates of f2's output.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from vprom.baselines import parts
from vprom.baselines.parts import N_CONTEXT, N_PANELS, ModelConfig
from vprom.baselines.registry import register_model


@register_model("rn")
class RelationNetwork(parts.CandidateModel):
    """Sum of f1 over the ordered pairs of each completed matrix, f2, a linear score."""

    def __init__(self, config: ModelConfig, panel_ids: bool = True, direct: bool = False):
        super().__init__(config.feature_dim)
        self.panel_ids = panel_ids
        self.direct = direct
        self.width = config.feature_dim + (N_PANELS if panel_ids else 0)
        depth = parts.half_depth(config)
        self.f1 = parts.mlp(2 * self.width, config.hidden, depth)
        self.f2 = parts.mlp(config.hidden, config.hidden, depth)
        self.heads(config)

    def candidates(self, panels: Tensor) -> Tensor:
        x = parts.with_panel_ids(panels, candidates_share_id=True) if self.panel_ids else panels
        relations = self.pair_sums_direct(x) if self.direct else pair_sums(x, self.f1, self.width)
        return self.f2(relations)

    def pair_sums_direct(self, x: Tensor) -> Tensor:
        """[B, 16, W] -> [B, 8, H]: Eq. 7 as written, f1 on all 81 concatenated pairs."""
        sets = parts.candidate_sets(x)  # [B, 8, 9, W]
        batch, n_candidates, n_set, width = sets.shape
        shape = (batch, n_candidates, n_set, n_set, width)
        first = sets.unsqueeze(3).expand(shape)  # x_a varies along dim 2
        second = sets.unsqueeze(2).expand(shape)  # x_b varies along dim 3
        return self.f1(torch.cat([first, second], dim=-1)).sum(dim=(2, 3))


def pair_sums(x: Tensor, f1: nn.Sequential, width: int) -> Tensor:
    """[B, 16, W] -> [B, 8, H]: f1 summed over each completed matrix's 81 pairs (module doc)."""
    first_layer, rest = f1[0], f1[1:]
    weight_a, weight_b = first_layer.weight.split(width, dim=1)
    project_a = x @ weight_a.T  # [B, 16, H]
    project_b = x @ weight_b.T + first_layer.bias
    context_a, candidate_a = project_a[:, :N_CONTEXT], project_a[:, N_CONTEXT:]
    context_b, candidate_b = project_b[:, :N_CONTEXT], project_b[:, N_CONTEXT:]
    # The 64 context-context pairs, once per matrix: [B, 8, 8, H] -> [B, 1, H].
    context_pairs = context_a.unsqueeze(2) + context_b.unsqueeze(1)
    context_sum = rest(context_pairs).sum(dim=(1, 2)).unsqueeze(1)
    # The 17 pairs with candidate j, for every j: [B, 8 candidates, 17, H].
    candidate_pairs = torch.cat(
        [
            context_a.unsqueeze(1) + candidate_b.unsqueeze(2),  # (context, candidate)
            candidate_a.unsqueeze(2) + context_b.unsqueeze(1),  # (candidate, context)
            (candidate_a + candidate_b).unsqueeze(2),  # (candidate, candidate)
        ],
        dim=2,
    )
    return context_sum + rest(candidate_pairs).sum(dim=2)


register_model("rn-no-ids")(lambda config: RelationNetwork(config, panel_ids=False))
register_model("rn-direct")(lambda config: RelationNetwork(config, direct=True))
