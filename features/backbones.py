"""The backbone registry: trunks that map a batch of crops to a feature map.

A `Backbone`, registered once by name, builds its trunk (a normalised (B, 3, S, S) batch ->
the last map (B, D, s, s)), says how its input is prepared (`Preprocess`) and which poolings
it offers, and loads its weights: `imagenet` (from torchvision's cache, never downloaded),
`none` (random init from a fixed seed) or a state dict read without running code
(`features/checkpoints.py`), naming missing and unexpected keys. A detector also says how it
pools a box from the whole image (`RegionHead`). The built-ins (resnets.py, bottomup.py,
timm_backbones.py) are imported when a name is first asked for.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
from torch import nn

from vprom.features.checkpoints import read_checkpoint
from vprom.errors import VpromError
from vprom.files import sha256_file
from vprom.registry import Registry

RANDOM_INIT_SEED = 0
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


@functools.lru_cache(maxsize=None)
def channel_values(values: tuple, device: torch.device) -> torch.Tensor:
    """(1, 3, 1, 1) float32 on `device`, made once (a copy per batch would wait for the queued
    forwards, and none may run in a graph), outside inference mode so any caller may use it."""
    with torch.inference_mode(False):
        return torch.tensor(values, device=device).view(1, 3, 1, 1)


@dataclass(frozen=True)
class Preprocess:
    """How uint8 crops become the trunk's input: x = (pixels[order] * scale - mean) / std, the
    crop warped with `interpolation` to S x S (or to S / crop_pct, keeping the centre)."""

    input_size: int
    channel_order: str = "RGB"  # or "BGR" (Caffe)
    scale: float = 1 / 255
    mean: tuple[float, float, float] = IMAGENET_MEAN
    std: tuple[float, float, float] = IMAGENET_STD
    interpolation: str = "bilinear"  # or "bicubic"
    crop_pct: float = 1.0

    def describe(self) -> str:
        rng = "0-1" if self.scale != 1 else "0-255"
        warp = ("" if self.interpolation == "bilinear" and self.crop_pct == 1 else
                f"; {self.interpolation} resize to S/{self.crop_pct:g}, centre crop S")
        return (f"{self.channel_order} {rng}, minus mean {list(self.mean)}, divided by std "
                f"{list(self.std)}{warp}")

    def normalise(self, pixels: torch.Tensor) -> torch.Tensor:
        """(B, S, S, 3) uint8 on any device -> (B, 3, S, S) float32, channels_last strides."""
        x = pixels.permute(0, 3, 1, 2).float()  # a view: NHWC memory = channels_last
        if self.channel_order == "BGR":
            x = x.flip(1)
        x = (x * self.scale - channel_values(self.mean, x.device)) / channel_values(self.std,
                                                                                x.device)
        return x.contiguous(memory_format=torch.channels_last)


@dataclass(frozen=True)
class Loaded:
    """A ready trunk (eval mode, no grad) and the weights it carries."""

    module: nn.Module
    weights: str  # "imagenet:<torchvision enum>", "none" or the file path
    weights_sha256: str  # "" for random init
    notes: tuple[str, ...] = ()  # what the file held that the trunk deliberately ignores


@dataclass(frozen=True)
class RegionHead:
    """A detector's per-box computation (`--region roi`, features/regions.py): the image's
    sides, the stride of `module.backbone_features` and the cells `module.roi_head` reads."""

    stride: int
    pooled: int
    shortest_side: int
    longest_side: int


@dataclass(frozen=True)
class Backbone:
    name: str
    description: str
    feature_dim: int
    preprocess: Preprocess
    build: Callable[[], nn.Module]  # random-init trunk
    # checkpoint -> (trunk keys, notes on what was ignored); raises on anything unknown
    map_state_dict: Callable[[dict, str], tuple[dict, list[str]]]
    imagenet: Callable[[], tuple[dict, str, Path]] | None = None  # (state, id, file)
    region_head: RegionHead | None = None  # only detectors: how --region roi runs
    pools: tuple[str, ...] = ("avg", "none")  # the poolings it offers, its default first

    def pool_for(self, requested: str) -> str:
        """--pool resolved: `auto` is the backbone's default; one it does not offer is refused."""
        pool = self.pools[0] if requested == "auto" else requested
        if pool not in self.pools:
            raise VpromError(f"--pool {requested}: {self.name} offers {', '.join(self.pools)} "
                             f"(default {self.pools[0]})")
        return pool

    def fingerprint_extra(self) -> dict:
        """What else changes this backbone's numbers (a library's version, its data config)."""
        return {}

    def load(self, weights: str, pool: str = "avg", input_size: int | None = None) -> Loaded:
        """The trunk with `weights` ("imagenet", "none" or a file path), eval mode, no grad."""
        self.pool_for(pool)
        if weights == "none":
            return _ready(seeded(self.build), "none", "")
        if weights == "imagenet":
            if self.imagenet is None:
                raise VpromError(f"backbone {self.name} has no ImageNet weights; pass "
                                 "--weights PATH (its converted checkpoint)")
            state, ident, path = self.imagenet()
            module, notes = self._with(state, str(path))
            return _ready(module, f"imagenet:{ident}", sha256_file(path), notes)
        path = Path(weights)
        module, notes = self._with(read_checkpoint(path), str(path))
        return _ready(module, str(path), sha256_file(path), notes)

    def _with(self, state: dict, source: str) -> tuple[nn.Module, tuple[str, ...]]:
        # Built without memory (meta device) and given the checkpoint's tensors: no random
        # initialisation that the weights would overwrite anyway.
        with torch.device("meta"):
            module = self.build()
        state, notes = self.map_state_dict(state, source)
        expected = module.state_dict()
        missing = sorted(set(expected) - set(state))
        unexpected = sorted(set(state) - set(expected))
        if missing or unexpected:
            found = [f"{len(keys)} {kind} keys ({name_some(keys)})" for kind, keys in
                     (("missing", missing), ("unexpected", unexpected)) if keys]
            raise VpromError(f"{source}: not a {self.name} checkpoint: {'; '.join(found)}; "
                             "pass the right file")
        for key, value in state.items():
            if tuple(value.shape) != tuple(expected[key].shape):
                raise VpromError(f"{source}: {key} has shape {tuple(value.shape)}, {self.name} "
                                 f"needs {tuple(expected[key].shape)}; pass the right file")
        # assign=True keeps the checkpoint's dtypes: give each tensor the module's own
        state = {k: v.to(expected[k].dtype) for k, v in state.items()}
        module.load_state_dict(state, strict=True, assign=True)
        return module, tuple(notes)


def seeded(build: Callable[[], nn.Module]) -> nn.Module:
    """`build()` with random weights every process builds bit-identically; the caller's global
    generator is untouched."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(RANDOM_INIT_SEED)
        return build()


def _ready(module: nn.Module, weights: str, sha256: str, notes: tuple[str, ...] = ()) -> Loaded:
    module.eval().requires_grad_(False)
    return Loaded(module, weights, sha256, notes)


def name_some(keys: list[str], shown: int = 8) -> str:
    """The first `shown` of `keys` and how many more there are."""
    more = f" and {len(keys) - shown} more" if len(keys) > shown else ""
    return ", ".join(keys[:shown]) + more


BACKBONES: Registry[Backbone] = Registry("backbone", builtins=("vprom.features.resnets",
                                                               "vprom.features.bottomup",
                                                               "vprom.features.timm_backbones"),
                                         hint="see `vprom extract --list`")


def register_backbone(backbone: Backbone) -> Backbone:
    """Register `backbone` under its name; a name can be registered once."""
    return BACKBONES.add(backbone.name, backbone)


def get_backbone(name: str) -> Backbone:
    return BACKBONES.get(name)


def list_backbones() -> list[str]:
    return BACKBONES.names()
