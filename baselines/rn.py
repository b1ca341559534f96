"""Relation network (Santoro et al. 2017), as V-PROM uses it, computed without redundant work.

For candidate j, S_j = (x_1, ..., x_8, c_j) is the completed matrix (each panel with its id),
and (Eq. 7-8 of the paper), with f1 and f2 k/2 Linear+ReLU layers each:

    r_j = sum over all 81 ordered pairs (a, b) in S_j x S_j of f1([x_a ; x_b])
    s_j = w . f2(r_j)

`rn-direct` computes exactly that, running f1 on all 8 x 81 concatenated pairs. The fast `rn`
uses two facts. (1) f1's first layer is linear: W [x_a ; x_b] + b = W_a x_a + W_b x_b + b, so
each panel is projected once by W_a and once by W_b, and a pair's pre-activation is one
broadcast addition. (2) The 64 context-context pairs are shared by all 8 completed matrices:
their sum C is computed once, and each candidate adds only its 17 pairs (f1' is f1 after its
first linear map):

    r_j = C + sum_i f1'(P_a x_i + P_b c_j) + sum_i f1'(P_a c_j + P_b x_i) + f1'(P_a c_j + P_b c_j)

Pairs through f1' drop from 648 to 200 per matrix. Both versions share their parameter names,
so a state dict moves between them; tests/baselines/test_rn.py checks they agree in float64.
`rn-no-ids` drops the panel ids, so it cannot tell rows from columns (the paper's ablation).
The auxiliary heads read the mean over candidates of f2's output.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from vprom.baselines import parts
from vprom.baselines.parts import N_CONTEXT, N_PANELS, ModelConfig, ModelOutput
from vprom.baselines.registry import register_model


class RelationNetwork(nn.Module):
    """Sum of f1 over the ordered pairs of each completed matrix, f2, a linear score."""

    def __init__(self, config: ModelConfig, panel_ids: bool = True, direct: bool = False):
        super().__init__()
        self.panel_ids = panel_ids
        self.direct = direct
        self.feature_dim = config.feature_dim
        self.width = config.feature_dim + (N_PANELS if panel_ids else 0)
        depth = parts.half_depth(config)
        self.f1 = parts.mlp(2 * self.width, config.hidden, depth)
        self.f2 = parts.mlp(config.hidden, config.hidden, depth)
        self.score = parts.score_head(config)
        self.aux = parts.make_aux(config)

    def forward(self, panels: Tensor) -> ModelOutput:
        parts.check_panels(panels, self.feature_dim)
        x = parts.with_panel_ids(panels, candidates_share_id=True) if self.panel_ids else panels
        relations = self.pair_sums_direct(x) if self.direct else self.pair_sums_fast(x)
        hidden = self.f2(relations)  # [B, 8, H]
        return parts.output(self.score(hidden).squeeze(-1), self.aux, hidden.mean(1))

    def pair_sums_direct(self, x: Tensor) -> Tensor:
        """[B, 16, W] -> [B, 8, H]: Eq. 7 as written, f1 on all 81 concatenated pairs."""
        sets = parts.candidate_sets(x)  # [B, 8, 9, W]
        batch, n_candidates, n_set, width = sets.shape
        shape = (batch, n_candidates, n_set, n_set, width)
        first = sets.unsqueeze(3).expand(shape)  # x_a varies along dim 2
        second = sets.unsqueeze(2).expand(shape)  # x_b varies along dim 3
        return self.f1(torch.cat([first, second], dim=-1)).sum(dim=(2, 3))

    def pair_sums_fast(self, x: Tensor) -> Tensor:
        """[B, 16, W] -> [B, 8, H]: the same sums from per-panel projections (module docstring)."""
        return pair_sums(x, self.f1, self.width)


def pair_sums(x: Tensor, f1: nn.Sequential, width: int) -> Tensor:
    """[B, 16, W] -> [B, 8, H]: sum of f1 over the 81 ordered pairs of each completed matrix,
    from per-panel projections (f1[0] is a Linear from 2 * width; see the module docstring)."""
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


@register_model("rn")
def build_rn(config: ModelConfig) -> nn.Module:
    return RelationNetwork(config)


@register_model("rn-no-ids")
def build_rn_no_ids(config: ModelConfig) -> nn.Module:
    return RelationNetwork(config, panel_ids=False)


@register_model("rn-direct")
def build_rn_direct(config: ModelConfig) -> nn.Module:
    return RelationNetwork(config, direct=True)
