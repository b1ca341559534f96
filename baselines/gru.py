"""GRU and GRU-shared: f1 (k/2 Linear+ReLU) embeds each panel with its id into one GRU layer.
gru reads the 16 panels and scores all 8 from h_16; gru-shared runs the context once, then one
step per candidate (as cell 9), scoring each on its h_9 (aux heads: h_16, or the mean h_9)."""

from __future__ import annotations

from torch import Tensor, nn

from vprom.baselines import parts
from vprom.baselines.parts import N_CANDIDATES, N_CONTEXT, ModelConfig, ModelOutput
from vprom.baselines.registry import register_model


@register_model("gru")
class PanelGRU(parts.CandidateModel):
    def __init__(self, config: ModelConfig, outputs: int = N_CANDIDATES, bias: bool = True):
        super().__init__(config.feature_dim)
        self.f1 = parts.panel_encoder(config)
        self.gru = nn.GRU(config.hidden, config.hidden, batch_first=True)
        self.heads(config, outputs, bias)

    def forward(self, panels: Tensor) -> ModelOutput:  # the 8 scores and aux heads from h_16
        parts.check_panels(panels, *self.panel_shape)
        _, last = self.gru(self.f1(parts.with_panel_ids(panels)))  # last: [1, B, H]
        last = last.squeeze(0)
        return parts.output(self.score(last), self.aux, last)


@register_model("gru-shared")
class SharedGRU(PanelGRU):
    forward = parts.CandidateModel.forward  # one score per candidate, from its h_9

    def __init__(self, config: ModelConfig):
        super().__init__(config, outputs=1, bias=False)  # one bias-free score per candidate

    def candidates(self, panels: Tensor) -> Tensor:
        embedded = self.f1(parts.with_panel_ids(panels, candidates_share_id=True))  # [B, 16, H]
        batch, _, width = embedded.shape
        _, after_context = self.gru(embedded[:, :N_CONTEXT])  # [1, B, H]
        start = after_context.repeat_interleave(N_CANDIDATES, dim=1)  # [1, B*8, H]
        candidates = embedded[:, N_CONTEXT:].reshape(batch * N_CANDIDATES, 1, width)
        _, last = self.gru(candidates, start)
        return last.reshape(batch, N_CANDIDATES, width)
