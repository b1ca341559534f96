"""The backbone registry: trunks that map a batch of crops to a feature map.

A `Backbone`, registered once by name, builds its trunk (normalised (B, 3, S, S) -> the last
map (B, D, s, s)), says how its input is prepared and which poolings it offers, and loads its
weights (`imagenet`, `none`: random and seeded, or a file), naming missing and unexpected keys;
nothing is downloaded. Here: torchvision's ResNets and the `timm:<name>` family, any timm
model, learnt on the meta device; bottomup.py adds `bottomup-r101`.
"""

from __future__ import annotations

import functools
import json
import math
import os
from collections import OrderedDict
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Callable
from urllib.parse import urlparse

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
    """(1, 3, 1, 1) float32 on `device`, made once (a graph allows no copy) for any caller."""
    with torch.inference_mode(False):
        return torch.tensor(values, device=device).view(1, 3, 1, 1)


@dataclass(frozen=True)
class Preprocess:
    """uint8 crops -> the trunk's input: (pixels[order] * scale - mean) / std, warped to S x S."""

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
    """A detector's `--region roi` geometry (features/bottomup.py)."""

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
    build: Callable[[], nn.Module] | None = None  # random-init trunk; none: `load` overridden
    # checkpoint -> (trunk keys, notes on what was ignored); raises on anything unknown
    map_state_dict: Callable[[dict, str], tuple[dict, list[str]]] | None = None
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
        # on the meta device: no random initialisation for the weights to overwrite
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
    """`build()` with the same random weights in every process; the global generator untouched."""
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


BACKBONES: Registry[Backbone] = Registry("backbone", builtins=("vprom.features.bottomup",),
                                         hint="see `vprom extract --list`")


def register_backbone(backbone: Backbone) -> Backbone:
    return BACKBONES.add(backbone.name, backbone)


def get_backbone(name: str) -> Backbone:
    return BACKBONES.get(name)


def list_backbones() -> list[str]:
    return BACKBONES.names()


def _torchvision_trunk(arch: str) -> Callable[[], nn.Module]:
    def build() -> nn.Module:
        import torchvision

        net = torchvision.models.get_model(arch, weights=None)
        names = ("conv1", "bn1", "relu", "maxpool", "layer1", "layer2", "layer3", "layer4")
        return nn.Sequential(OrderedDict((n, getattr(net, n)) for n in names))

    return build


def _torchvision_map(state: dict, source: str) -> tuple[dict, list[str]]:
    classifier = sorted(k for k in state if k.startswith("fc."))
    notes = [f"ignored the ImageNet classifier ({', '.join(classifier)})"] if classifier else []
    return {k: v for k, v in state.items() if not k.startswith("fc.")}, notes


def _torchvision_imagenet(arch: str) -> Callable[[], tuple[dict, str, Path]]:
    def fetch() -> tuple[dict, str, Path]:
        import torchvision

        weights = torchvision.models.get_model_weights(arch).IMAGENET1K_V1
        path = Path(torch.hub.get_dir()) / "checkpoints" / os.path.basename(
            urlparse(weights.url).path)
        if not path.is_file():
            raise VpromError(
                f"ImageNet weights for {arch} are not in torchvision's cache ({path}); on a "
                f"machine with internet run `python -c \"import torchvision; "
                f"torchvision.models.{arch}(weights='IMAGENET1K_V1')\"` and copy the file "
                f"there (or set TORCH_HOME), or pass --weights PATH")
        return read_checkpoint(path), f"{weights}", path

    return fetch


# IMAGENET1K_V1: the original release (He et al.'s recipe) that paper-era features came from
for _arch, _dim in (("resnet101", 2048), ("resnet50", 2048), ("resnet18", 512)):
    register_backbone(Backbone(
        name=_arch,
        description=f"torchvision {_arch}, trunk up to layer4, ImageNet IMAGENET1K_V1",
        feature_dim=_dim,
        preprocess=Preprocess(input_size=224),
        build=_torchvision_trunk(_arch),
        map_state_dict=_torchvision_map,
        imagenet=_torchvision_imagenet(_arch),
    ))


# ------------------------------------------------------------------ timm:<name>
PREFIX = "timm"
TOKEN_POOLS = ("cls", "mean", "none")
MAP_POOLS = ("avg", "none")
INTERPOLATIONS = ("bilinear", "bicubic")  # what both crop paths resize with (antialiased)
CACHED = ("pretrained", "imagenet")  # --weights values meaning "the tag's published file"
HF_FILES = ("model.safetensors", "pytorch_model.bin")  # what timm's hub loader looks for
USAGE = ("timm:<name>  any timm model, e.g. timm:vit_base_patch16_224.dino, "
         "timm:vit_base_patch14_dinov2.lvd142m, timm:vit_base_patch16_clip_224.openai, "
         "timm:vit_so400m_patch14_siglip_224, timm:convnext_base.fb_in22k; --weights FILE "
         "(.safetensors/.pth), pretrained (already in the HF cache) or none")


def timm_version() -> str:
    return version("timm")


def _timm():
    # offline before huggingface_hub is first imported (it reads the flag only then)
    os.environ["HF_HUB_OFFLINE"] = "1"
    import timm
    import timm.data

    return timm


class TimmTrunk(nn.Module):
    """A timm model -> the (B, D, h, w) map the extractor pools (or stores, pool none)."""

    def __init__(self, model: nn.Module, tokens: bool, pool: str, nhwc: bool = False):
        super().__init__()
        self.model, self.tokens, self.pool, self.nhwc = model, tokens, pool, nhwc
        self.prefix = int(getattr(model, "num_prefix_tokens", 0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        feats = self.model.forward_features(x)
        if not self.tokens:
            return feats.permute(0, 3, 1, 2) if self.nhwc else feats
        if self.pool == "cls":
            return self.model.forward_head(feats, pre_logits=True)[:, :, None, None]
        patches = feats[:, self.prefix:]  # class and register tokens are not image patches
        side = math.isqrt(patches.shape[1])
        if side * side != patches.shape[1]:
            raise VpromError(f"{patches.shape[1]} patch tokens do not form a square grid")
        return patches.transpose(1, 2).reshape(len(feats), -1, side, side)


@dataclass(frozen=True)
class TimmBackbone(Backbone):
    model_name: str = ""
    tokens: bool = False
    nhwc: bool = False
    data_config: dict = field(default_factory=dict)
    pretrained_cfg: dict = field(default_factory=dict)

    def fingerprint_extra(self) -> dict:
        return {"timm": timm_version(), "data_config": json.dumps(self.data_config, sort_keys=True)}

    def load(self, weights: str, pool: str = "auto", input_size: int | None = None) -> Loaded:
        pool = self.pool_for(pool)
        timm = _timm()
        kwargs = {"num_classes": 0}
        if self.tokens and input_size and input_size != self.preprocess.input_size:
            kwargs["img_size"] = input_size  # position embeddings for this grid
        if weights == "none":
            model = seeded(lambda: timm.create_model(self.model_name, pretrained=False, **kwargs))
            return _ready(TimmTrunk(model, self.tokens, pool, self.nhwc), "none", "")
        path = self._cached() if weights in CACHED else Path(weights)
        if not path.is_file():
            raise VpromError(f"{path}: no such weights file; pass a .safetensors or .pth file "
                             f"for {self.name}, pretrained or none")
        overlay = ({"file": str(path)} if path.suffix == ".safetensors"
                   else {"state_dict": read_checkpoint(path)})
        try:
            model = timm.create_model(self.model_name, pretrained=True,
                                      pretrained_cfg_overlay=overlay, **kwargs)
        except Exception as e:  # a file timm cannot use (wrong model, corrupt) is the user's
            # torch names the model on line 1 and the keys on line 2 (missing, unexpected)
            why = " ".join(str(e).split("\n")[:2]).strip() or type(e).__name__
            raise VpromError(f"{path}: timm cannot load it into {self.model_name} ({why[:300]})"
                             "; pass that model's weights file") from None
        ident = f"pretrained:{path}" if weights in CACHED else str(path)
        return _ready(TimmTrunk(model, self.tokens, pool, self.nhwc), ident, sha256_file(path))

    def _cached(self) -> Path:
        """The tag's published weights file if a cache already holds it (never downloads)."""
        cfg = self.pretrained_cfg
        hub_id, filename = cfg.get("hf_hub_id"), cfg.get("hf_hub_filename")
        if hub_id:
            from huggingface_hub import constants, try_to_load_from_cache

            for name in ([filename] if filename else HF_FILES):
                found = try_to_load_from_cache(hub_id, name, cache_dir=constants.HF_HUB_CACHE)
                if isinstance(found, str):
                    return Path(found)
        if cfg.get("url"):
            found = Path(torch.hub.get_dir()) / "checkpoints" / os.path.basename(cfg["url"])
            if found.is_file():
                return found
        where = (f"https://huggingface.co/{hub_id} ({filename or HF_FILES[0]})" if hub_id
                 else cfg.get("url") or "its publisher")
        raise VpromError(
            f"{self.name}: its pretrained weights are not in the Hugging Face cache "
            f"({constants.HF_HUB_CACHE if hub_id else torch.hub.get_dir()}) and vprom "
            f"never downloads; on a machine with internet fetch {where} (or run `python -c "
            f"\"import timm; timm.create_model('{self.model_name}', pretrained=True)\"` and copy "
            f"the cache, HF_HOME), then pass --weights FILE")


def _preprocess(data_config: dict, name: str) -> Preprocess:
    _, height, width = data_config["input_size"]
    if height != width:
        raise VpromError(f"timm:{name} takes {height}x{width} inputs; vprom crops are square")
    interpolation = data_config.get("interpolation", "bilinear")
    if interpolation not in INTERPOLATIONS:
        raise VpromError(f"timm:{name}: its {interpolation} interpolation is not supported "
                         f"(crops are resized with {' or '.join(INTERPOLATIONS)})")
    return Preprocess(input_size=int(height), mean=tuple(data_config["mean"]),
                      std=tuple(data_config["std"]), interpolation=interpolation,
                      crop_pct=float(data_config.get("crop_pct") or 1.0))


def resolve(name: str) -> TimmBackbone:
    """The backbone for timm model `name` (architecture or architecture.tag)."""
    timm = _timm()
    if not timm.is_model(name):
        raise VpromError(f"timm:{name}: timm {timm_version()} has no such model; list them "
                         "with `python -c \"import timm; print(timm.list_models('*vit*', "
                         "pretrained=True))\"`")
    try:
        with torch.device("meta"):  # shapes and configs only: no memory, no init
            model = timm.create_model(name, pretrained=False, num_classes=0)
    except (RuntimeError, TypeError, ValueError) as e:
        raise VpromError(f"timm:{name}: {str(e).splitlines()[0]}") from None
    data_config = timm.data.resolve_model_data_config(model)
    size = data_config["input_size"][1]
    out = model.forward_features(torch.empty(1, 3, size, size, device="meta"))
    if out.dim() not in (3, 4):
        raise VpromError(f"timm:{name}: forward_features gives a {out.dim()}-d output; vprom "
                         "takes token models (B, N, C) and ConvNets (B, C, H, W)")
    tokens = out.dim() == 3
    nhwc = not tokens and getattr(model, "output_fmt", "NCHW") == "NHWC"
    cfg = model.pretrained_cfg
    return TimmBackbone(
        name=f"{PREFIX}:{name}",
        description=f"timm {name} ({'token model' if tokens else 'ConvNet'}, "
                    f"{model.num_features}-d)",
        feature_dim=0,  # known once built: depends on the pooling
        preprocess=_preprocess(data_config, name),
        pools=TOKEN_POOLS if tokens else MAP_POOLS,
        model_name=name, tokens=tokens, nhwc=nhwc,
        data_config={k: list(v) if isinstance(v, tuple) else v for k, v in data_config.items()},
        pretrained_cfg={k: cfg.get(k) for k in ("hf_hub_id", "hf_hub_filename", "url")})


BACKBONES.add_family(PREFIX, resolve, USAGE)
