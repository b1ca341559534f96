"""The `timm:<name>` backbone family: any timm model (DINO, DINOv2, CLIP, SigLIP, ConvNeXt, ...).

`resolve(name)` builds the model on the meta device to learn what it is: a token model (a ViT)
offers `cls` (its own pooled output), `mean` (of the patch tokens) and `none` (the patch grid),
a map model `avg` and `none`; preprocessing is timm's data config. Weights are `none`, a FILE
(checked by timm; non-safetensors read by `features/checkpoints.py`) or `pretrained`, the
tag's file if a hub cache already holds it: the hub is set offline before timm is imported.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path

import torch
from torch import nn

from vprom.errors import VpromError
from vprom.features.backbones import (
    BACKBONES,
    Backbone,
    Loaded,
    Preprocess,
    _ready,
    seeded,
)
from vprom.features.checkpoints import read_checkpoint
from vprom.files import sha256_file

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
    """timm's version (recorded in every features file)."""
    return version("timm")


def _timm():
    # Offline before huggingface_hub is first imported (it reads the flag then): nothing a
    # timm call does may reach the network.
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
        return {"timm": timm_version(), "data_config": json.dumps(self.data_config,
                                                                  sort_keys=True)}

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
        build=lambda: timm.create_model(name, pretrained=False, num_classes=0),
        map_state_dict=lambda state, source: (state, []),
        pools=TOKEN_POOLS if tokens else MAP_POOLS,
        model_name=name, tokens=tokens, nhwc=nhwc,
        data_config={k: list(v) if isinstance(v, tuple) else v for k, v in data_config.items()},
        pretrained_cfg={k: cfg.get(k) for k in ("hf_hub_id", "hf_hub_filename", "url")})


BACKBONES.add_family(PREFIX, resolve, USAGE)
