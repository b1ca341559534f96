"""A panel transformer after SAViR-T (Sahu, Basioti and Pavlovic, ECML/PKDD 2022), over maps or
(`-pooled`) one token per panel. Tokens attend within their panel, then, with a cell embedding,
along each row and each column of every completed 3 x 3 matrix; the mean token goes through a
Linear+ReLU to w. Layers are pre-norm (4 heads, feed-forward 2d, no dropout)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from vprom.baselines import parts
from vprom.baselines.parts import N_CANDIDATES, N_CONTEXT, ModelConfig
from vprom.baselines.registry import register_model
from vprom.errors import VpromError

HEADS = 4
SIDE = 3  # the matrix is 3 x 3


def attention_layer(width: int) -> nn.TransformerEncoderLayer:
    return nn.TransformerEncoderLayer(width, HEADS, dim_feedforward=2 * width, dropout=0.0,
                                      batch_first=True, norm_first=True)


class PanelTransformer(parts.CandidateModel):
    def __init__(self, config: ModelConfig, spatial: bool):
        super().__init__(config.feature_dim, *((config.side, config.side) if spatial else ()))
        if config.hidden % HEADS:
            raise VpromError(f"the panel transformer's {HEADS} heads split the hidden width: "
                             f"hidden must be a multiple of {HEADS}, got {config.hidden}")
        tokens = config.side ** 2 if spatial else 1
        width = config.hidden
        self.embed = nn.Linear(config.feature_dim, width)
        self.position = nn.Parameter(0.02 * torch.randn(tokens, width))
        self.within_panel = attention_layer(width) if spatial else nn.Identity()
        self.cell = nn.Parameter(0.02 * torch.randn(N_CONTEXT + 1, 1, width))
        self.along_rows = attention_layer(width)
        self.along_columns = attention_layer(width)
        self.f = parts.mlp(width, width, 1)
        self.heads(config)

    def candidates(self, panels: Tensor) -> Tensor:
        batch = panels.shape[0]
        if len(self.panel_shape) == 3:  # [B, 16, C, H, W] -> [B, 16, H W, C]
            panels = panels.flatten(3).transpose(2, 3)
        else:
            panels = panels.unsqueeze(2)
        x = self.embed(panels.to(self.position.dtype)) + self.position  # [B, 16, T, d]
        tokens, width = x.shape[2:]
        x = self.within_panel(x.flatten(0, 1)).view(batch, -1, tokens, width)
        grid = parts.candidate_sets(x.flatten(2)).view(batch, N_CANDIDATES, N_CONTEXT + 1,
                                                        tokens, width) + self.cell
        # [B, 8, T, row, column, d]: attend along a row, then along a column
        grid = grid.view(batch, N_CANDIDATES, SIDE, SIDE, tokens, width).permute(0, 1, 4, 2, 3, 5)
        grid = self.along_rows(grid.reshape(-1, SIDE, width)).view(
            batch, N_CANDIDATES, tokens, SIDE, SIDE, width)
        grid = self.along_columns(grid.transpose(3, 4).reshape(-1, SIDE, width))
        return self.f(grid.view(batch, N_CANDIDATES, -1, width).mean(2))  # [B, 8, d]


register_model("panel-transformer", kind="maps")(
    lambda config: PanelTransformer(config, spatial=True))
register_model("panel-transformer-pooled")(lambda config: PanelTransformer(config, spatial=False))
