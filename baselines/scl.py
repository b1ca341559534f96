"""SCL, the Scattering Compositional Learner (Wu, Dong, Grosse and Ba, 2020), on pooled features:
an object network splits each panel into 8 groups, a shared attribute network embeds each, a
shared relation network reads per attribute the 9 panels of the completed matrix; F and w score.
R's first layer is linear, so its context part is computed once per matrix."""

from __future__ import annotations

from torch import Tensor, nn

from vprom.baselines import parts
from vprom.baselines.parts import N_CONTEXT, ModelConfig
from vprom.baselines.registry import register_model
from vprom.errors import VpromError

GROUPS = 8


@register_model("scl")
class SCL(parts.CandidateModel):
    def __init__(self, config: ModelConfig):
        super().__init__(config.feature_dim)
        if config.hidden % GROUPS:
            raise VpromError(f"scl splits the hidden width into {GROUPS} groups: hidden must be "
                             f"a multiple of {GROUPS}, got {config.hidden}")
        self.group, self.inner = config.hidden // GROUPS, config.hidden // 2
        self.objects = parts.mlp(config.feature_dim, config.hidden, 1)
        self.attributes = parts.mlp(self.group, self.inner, 1)
        self.relation_in = nn.Linear((N_CONTEXT + 1) * self.inner, self.inner)
        self.relation_rest = nn.Sequential(nn.ReLU(), *parts.mlp(self.inner, self.inner, 1))
        self.f = parts.mlp(GROUPS * self.inner, config.hidden, 1)
        self.heads(config)

    def candidates(self, panels: Tensor) -> Tensor:
        batch = panels.shape[0]
        groups = self.objects(panels).view(batch, -1, GROUPS, self.group)  # [B, 16, K, G]
        values = self.attributes(groups)  # [B, 16, K, A]
        # R's first layer on [v_1; ...; v_8; v_c]: the context's part once per matrix
        weight = self.relation_in.weight.view(self.inner, N_CONTEXT + 1, self.inner)
        context = values[:, :N_CONTEXT].permute(0, 2, 1, 3).flatten(2)  # [B, K, 8A]
        context_part = context @ weight[:, :N_CONTEXT].flatten(1).T  # [B, K, A]
        candidate_part = values[:, N_CONTEXT:] @ weight[:, N_CONTEXT].T  # [B, 8, K, A]
        relations = self.relation_rest(context_part.unsqueeze(1) + candidate_part
                                       + self.relation_in.bias)  # [B, 8, K, A]
        return self.f(relations.flatten(2))
