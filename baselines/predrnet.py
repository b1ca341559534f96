"""PredRNet, the Predictive Reasoning Network (Yang et al., ICML 2023), over crop-store pixels or
(`predrnet-maps`) maps. An encoder gives each panel c = hidden/16 channels; three predictive
reasoning blocks let the context predict the missing panel ((8 x 1) conv-BN-ReLU) and carry on
with the candidate's prediction error; each candidate is pooled to 2H values and classified."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from vprom.baselines import parts
from vprom.baselines.parts import N_CANDIDATES, N_CONTEXT, ModelConfig, conv_bn
from vprom.baselines.registry import register_model
from vprom.errors import VpromError

REASONING_BLOCKS = 3


class EncoderStage(nn.Module):
    """Three 3x3 conv-BN-ReLU (the first strided by 2), plus a pooled 1x1 conv-BN shortcut."""

    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.body = nn.Sequential(conv_bn(in_channels, out_channels, 3, 2, 1),
                                  conv_bn(out_channels, out_channels, 3, 1, 1),
                                  conv_bn(out_channels, out_channels, 3, 1, 1))
        self.shortcut = nn.Sequential(nn.AvgPool2d(2, 2, ceil_mode=True),
                                      conv_bn(in_channels, out_channels, 1, relu=False))

    def forward(self, x: Tensor) -> Tensor:
        return self.body(x) + self.shortcut(x)


class PredictiveReasoningBlock(nn.Module):
    """[N, c, 9, L] -> [N, c, 9, L]: the context's prediction error of the candidate row."""

    def __init__(self, channels: int):
        super().__init__()
        self.predict = conv_bn(channels, channels, (N_CONTEXT, 1))
        self.body = nn.Sequential(conv_bn(channels, 4 * channels, 3, 1, 1),
                                  conv_bn(4 * channels, channels, 3, 1, 1))
        self.shortcut = conv_bn(channels, channels, 1, relu=False)

    def forward(self, x: Tensor) -> Tensor:
        context, candidate = x[:, :, :N_CONTEXT], x[:, :, N_CONTEXT:]
        error = torch.relu(candidate) - self.predict(context)
        return self.body(torch.cat([context, error], dim=2)) + self.shortcut(x)


class PredRNet(parts.CandidateModel):
    def __init__(self, config: ModelConfig, kind: str):
        super().__init__(config.feature_dim, config.side, config.side)
        if config.hidden % 16:
            raise VpromError(f"predrnet's channels are hidden/16: hidden must be a multiple of "
                             f"16, got {config.hidden}")
        c = config.hidden // 16
        self.kind = kind
        if kind == "pixels":
            widths = [config.feature_dim, c, 2 * c, 3 * c, 4 * c]
            self.encoder = nn.Sequential(*(EncoderStage(a, b) for a, b in zip(widths, widths[1:])))
        else:
            self.encoder = conv_bn(config.feature_dim, 4 * c, 1)
        self.reducer = conv_bn(4 * c, c, 1, relu=False)
        self.reasoning = nn.Sequential(*(PredictiveReasoningBlock(c)
                                         for _ in range(REASONING_BLOCKS)))
        self.pooled = 2 * config.hidden
        self.classifier = nn.Sequential(nn.Linear(self.pooled, config.hidden, bias=False),
                                        nn.BatchNorm1d(config.hidden), nn.ReLU())
        self.heads(config)

    def candidates(self, panels: Tensor) -> Tensor:
        batch = panels.shape[0]
        x = panels.flatten(0, 1)
        if self.kind == "pixels":
            x = parts.unit_pixels(x, self.score.weight)
        x = self.reducer(self.encoder(x.to(self.score.weight.dtype)))  # [B*16, c, h, w]
        x = x.view(batch, x.shape[0] // batch, -1)  # [B, 16, c*L]
        sets = parts.candidate_sets(x)  # [B, 8, 9, c*L]
        channels = self.reducer[0].out_channels
        sets = sets.view(batch * N_CANDIDATES, N_CONTEXT + 1, channels, -1).transpose(1, 2)
        x = self.reasoning(sets.contiguous()).reshape(batch, N_CANDIDATES, -1)
        x = nn.functional.adaptive_avg_pool1d(x, self.pooled)  # [B, 8, 2H]
        return self.classifier(x.flatten(0, 1)).view(batch, N_CANDIDATES, -1)


register_model("predrnet", kind="pixels")(lambda config: PredRNet(config, "pixels"))
register_model("predrnet-maps", kind="maps")(lambda config: PredRNet(config, "maps"))
