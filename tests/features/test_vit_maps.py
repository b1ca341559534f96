"""A maps file from a ViT trains a map-reading model (issue 24).

`vprom extract --backbone timm:<vit> --pool none` stores each crop's patch tokens as a
(C, H, W) grid; `vprom.data.VPROM` serves a problem as its 16 maps, [16, C, H, W]. No registered
baseline reads maps (they read pooled vectors), so the model here is the smallest one that
does: a 1x1 convolution over each panel's map, and a score per candidate from the mean of the
context panels' codes beside the candidate's own. timm's `test_vit` (16-px patches, 64-d)
at 48 px gives a 3x3 grid, on the tests' small build (tests/own_model_fixture.py).
"""

from __future__ import annotations

import h5py
import pytest
import torch
from torch import nn
from torch.nn import functional as F

from tests.own_model_fixture import own_build  # noqa: F401
from vprom.data import VPROM
from vprom.features.config import ExtractConfig
from vprom.features.extract import extract

VIT, SIZE, PATCH, WIDTH = "timm:test_vit", 48, 16, 64
GRID = SIZE // PATCH


@pytest.fixture(scope="module")
def vit_maps(own_build, tmp_path_factory):  # noqa: F811
    out = tmp_path_factory.mktemp("vit-maps") / "maps.h5"
    extract(ExtractConfig(dataset=own_build.dataset, vg=own_build.vg, backbone=VIT,
                          weights="none", pool="none", input_size=SIZE, out=out,
                          batch_size=64, workers=0, device="cpu", dtype="float16"))
    return out


class MapScorer(nn.Module):
    """panels [B, 16, C, H, W] -> scores [B, 8]: each panel's map through a 1x1 conv, the
    context's codes averaged and set beside each candidate's, one score per candidate."""

    def __init__(self, channels: int, grid: int, code: int = 8):
        super().__init__()
        self.conv = nn.Conv2d(channels, code, 1)
        self.score = nn.Sequential(nn.Linear(2 * code * grid * grid, 32), nn.ReLU(),
                                   nn.Linear(32, 1))

    def forward(self, panels: torch.Tensor) -> torch.Tensor:
        b = len(panels)
        codes = F.relu(self.conv(panels.flatten(0, 1))).view(b, 16, -1)
        context = codes[:, :8].mean(1, keepdim=True).expand(-1, 8, -1)
        return self.score(torch.cat([context, codes[:, 8:]], dim=2)).squeeze(2)


def test_the_vit_maps_follow_its_patch_grid(vit_maps, own_build):  # noqa: F811
    with h5py.File(vit_maps, "r") as h5:
        assert h5["maps"].shape[1:] == (WIDTH, GRID, GRID)
        assert h5.attrs["pool"] == "none" and list(h5.attrs["map_shape"]) == [WIDTH, GRID, GRID]
        assert h5.attrs["backbone"] == VIT and len(h5["missing_crop_id"]) == 0
    batch = VPROM(own_build.dataset, "neutral", "train", source=vit_maps).batch([0, 1])
    assert batch["panels"].shape == (2, 16, WIDTH, GRID, GRID)
    assert batch["panels"].dtype == torch.float32 and torch.isfinite(batch["panels"]).all()


def test_a_map_reading_model_trains_on_vit_maps(vit_maps, own_build):  # noqa: F811
    """It overfits a fixed batch (the loss falls), then trains an epoch through a DataLoader
    and is evaluated on the test part."""
    torch.manual_seed(0)
    train = VPROM(own_build.dataset, "neutral", "train", source=vit_maps)
    model = MapScorer(WIDTH, GRID)
    optimiser = torch.optim.Adam(model.parameters(), lr=1e-2)
    fixed = train.batch(list(range(min(8, len(train)))))
    losses = []
    for _ in range(40):
        loss = F.cross_entropy(model(fixed["panels"]), fixed["answer"])
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        losses.append(loss.item())
    assert losses[-1] < 0.25 * losses[0]
    with torch.no_grad():
        assert (model(fixed["panels"]).argmax(1) == fixed["answer"]).all()

    batches = torch.utils.data.BatchSampler(torch.utils.data.RandomSampler(train), 4, False)
    for batch in torch.utils.data.DataLoader(train, batch_size=None, sampler=batches):
        loss = F.cross_entropy(model(batch["panels"]), batch["answer"])
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        assert torch.isfinite(loss)
    test = VPROM(own_build.dataset, "neutral", "test", source=vit_maps)
    with torch.no_grad():
        batch = test.batch(list(range(len(test))))
        scores = model(batch["panels"])
    assert scores.shape == (len(test), 8) and torch.isfinite(scores).all()
