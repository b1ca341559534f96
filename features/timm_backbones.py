"""The `timm:<name>` backbone family: any timm model (DINO, DINOv2, CLIP, SigLIP, ConvNeXt, ...).

One registry family (`BACKBONES.add_family("timm", resolve, ...)`), not an entry per model:
`resolve(name)` builds the named model once on torch's meta device (no memory, no weights) to
learn what it is, and returns a `TimmBackbone`:

- its layout: a *token* model (a ViT: `forward_features` gives (B, N, C) tokens, the first
  `num_prefix_tokens` of them class/register tokens) or a *map* model (a ConvNet: (B, C, H, W),
  or (B, H, W, C) where timm says `output_fmt` NHWC);
- its poolings: token models `cls` (default: `forward_head(pre_logits=True)`, the class token
  after the final norm as DINO, DINOv2 and CLIP use it, or the attention-pool head of models
  without a class token such as SigLIP), `mean` (the patch tokens' average) and `none` (the
  patch tokens as a (C, H, W) grid); map models `avg` and `none`, as the ResNets;
- its preprocessing, from the model's `pretrained_cfg` through timm's own data config
  (`timm.data.resolve_model_data_config`): input size, interpolation, mean, std, crop_pct.

`load` builds the model for real with the classifier removed (`num_classes=0`), wrapped in
`TimmTrunk`, which returns what the extractor pools (a 1x1 map for `cls`, the patch grid for
`mean` and `none`, the feature map for ConvNets). Weights:

- `none`: random init from a fixed seed (recorded as "none" in the file, like the ResNets);
- a FILE: `.safetensors` is handed to timm as `pretrained_cfg_overlay=dict(file=FILE)`
  (safetensors holds tensors only); any other file is read by vprom's safe loader
  (`features/checkpoints.py`: weights only, a pickle naming code is refused) and handed to timm
  as `pretrained_cfg_overlay=dict(state_dict=...)`. Either way timm's own loading runs: its
  checkpoint filter (original DINO/CLIP/OpenCLIP key layouts, position embeddings resampled
  to another input size), classifier removal and a strict key check;
- `pretrained` (or the default `imagenet`): the tag's published file, only if it is already in
  the Hugging Face cache (or torch hub's, for URL-only tags). vprom never downloads: the hub
  is set offline before timm is imported, the file is looked up with
  `huggingface_hub.try_to_load_from_cache`, and a missing file is a one-line error saying
  how to fetch it elsewhere and pass it with --weights.
"""

from __future__ import annotations

import json
import math
import os
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import torch
from torch import nn

from vprom.errors import VpromError
from vprom.features.backbones import (
    BACKBONES,
    RANDOM_INIT_SEED,
    Backbone,
    Loaded,
    Preprocess,
    _ready,
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
    """timm's version, or "not installed" (recorded in every features file)."""
    try:
        return version("timm")
    except PackageNotFoundError:
        return "not installed"


def _timm():
    # Offline before huggingface_hub is first imported (it reads the flag then): nothing a
    # timm call does may reach the network.
    os.environ["HF_HUB_OFFLINE"] = "1"
    try:
        import timm
        import timm.data
    except ImportError:
        raise VpromError("timm:<name> backbones need timm: pip install timm (vprom declares "
                         "it as a dependency)") from None
    return timm


# ---------------------------------------------------------------------------- trunk
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


@contextmanager
def _built_on_meta_and_assigned():
    """Inside: modules are built on the meta device (no memory, no random initialisation) and
    `load_state_dict` assigns the checkpoint's tensors (in each parameter's own dtype,
    contiguous) instead of copying them into initialised ones.

    A timm model given a file's weights was built with its random init first, then
    overwritten: at 1-2 s for convnext_atto and ~5 s for ViT-S/16 on this machine, most of
    a short CPU extraction's fixed cost. Whatever this cannot give (a non-persistent buffer,
    computed in `__init__`; a model that loads its own way) stays on the meta device, and the
    caller builds the model again the ordinary way (`_create`)."""
    original = nn.Module.load_state_dict

    def assigning(module, state_dict, strict=True, assign=False):
        expected = module.state_dict()
        state = {k: v.to(expected[k].dtype).contiguous() if k in expected else v
                 for k, v in state_dict.items()}
        return original(module, state, strict=strict, assign=True)

    nn.Module.load_state_dict = assigning
    try:
        with torch.device("meta"):
            yield
    finally:
        nn.Module.load_state_dict = original


def _on_meta(timm, name: str, overlay: dict, kwargs: dict) -> nn.Module | None:
    """timm's model `name` built on the meta device and given the tensors of `overlay` (a file
    or a state dict), or None where that leaves a tensor without a value or fails."""
    try:
        with _built_on_meta_and_assigned():
            model = timm.create_model(name, pretrained=True, pretrained_cfg_overlay=overlay,
                                      **kwargs)
    except Exception:  # noqa: BLE001 - whatever fails on meta, the ordinary build decides
        return None
    return None if any(t.is_meta for t in (*model.parameters(), *model.buffers())) else model


def _create(timm, name: str, overlay: dict, kwargs: dict) -> nn.Module:
    """The model with the weights of `overlay`: built on meta where it can be (the same
    tensors as the ordinary build), else the ordinary way."""
    model = _on_meta(timm, name, overlay, kwargs)
    if model is None:
        model = timm.create_model(name, pretrained=True, pretrained_cfg_overlay=overlay,
                                  **kwargs)
    return model


# ------------------------------------------------------------------------- backbone
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
            with torch.random.fork_rng(devices=[]):  # same weights in every process
                torch.manual_seed(RANDOM_INIT_SEED)
                model = timm.create_model(self.model_name, pretrained=False, **kwargs)
            return _ready(TimmTrunk(model, self.tokens, pool, self.nhwc), "none", "")
        path = self._cached() if weights in CACHED else Path(weights)
        if not path.is_file():
            raise VpromError(f"{path}: no such weights file; pass a .safetensors or .pth file "
                             f"for {self.name}, pretrained or none")
        overlay = ({"file": str(path)} if path.suffix == ".safetensors"
                   else {"state_dict": read_checkpoint(path)})
        try:
            model = _create(timm, self.model_name, overlay, kwargs)
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
