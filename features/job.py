"""One extraction job: its settings resolved, its layout, and where its pieces live on disk.

`fingerprint` lists everything that changes the numbers of a FEATS.h5 (or its layout): the
backbone and its weights' hash, the input size, the decoder (`cpu`: Pillow, `gpu`:
torchvision on the device), the region mode, the pooling, the stored dtype and compression,
batch size and chunking, device type, autocast, compile, the crops' boxes and the torch
version. A partial extraction or a finished file is reused only when its fingerprint matches.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from vprom.features.backbones import Backbone, Loaded
from vprom.features.config import ExtractConfig
from vprom.features.crops import RESIZE, BatchLayout
from vprom.features.decoding import RESIZE_BATCHED, RESIZE_TORCH
from vprom.features.regions import RESIZE_ROI, sides
from vprom.outputs import free_space_for
from vprom.runtime import World

DTYPES = {"float16": np.float16, "float32": np.float32}  # ExtractConfig.dtype -> numpy
TORCH_DTYPES = {"float16": torch.float16, "float32": torch.float32}


def check_space(config: ExtractConfig, layout: BatchLayout, row_shape: tuple) -> None:
    """Refuse before writing when the disk lacks room for the chunks and then the file: one
    stored row of `row_shape` per unit, then per crop (twice that, for headroom)."""
    row = int(np.prod(row_shape)) * np.dtype(DTYPES[config.dtype]).itemsize
    free_space_for(config.out, 2 * row * (len(layout.unit_image) + len(layout.crop_id)),
                   " for the chunks and the features file")


@dataclass
class Job:
    config: ExtractConfig
    backbone: Backbone
    loaded: Loaded
    layout: BatchLayout
    paths: list  # per image group: its file, or None when the image is not there
    size: int  # crop side (region crop) or the image's shorter side (region roi)
    decoder: str  # "cpu" or "gpu", resolved from --decode
    workers: int  # resolved from --workers
    autocast: torch.dtype | None
    world: World
    fingerprint: dict
    row_shape: tuple = ()  # one crop's stored shape: (D,) or the map's (C, H, W); set on start

    @property
    def partial(self) -> Path:
        return self.config.out.with_name(self.config.out.name + ".partial")

    def chunk_file(self, c: int, suffix: str = ".npy") -> Path:
        return self.partial / f"chunk-{c:06d}{suffix}"

    def chunk_done(self, c: int) -> bool:
        return self.chunk_file(c).is_file() and self.chunk_file(c, ".json").is_file()

    @property
    def decode_on_device(self) -> bool:
        """gpu decoding on CUDA runs in the main process; on a CPU device, in the workers."""
        return self.decoder == "gpu" and self.world.device.type == "cuda"

    @property
    def sides(self) -> tuple[int, int]:
        """(shorter side, longer-side limit) of the detector's resize (region roi)."""
        return sides(self.backbone.region_head, self.size)

    def resize_policy(self) -> str:
        if self.config.region == "roi":
            head = self.backbone.region_head
            short, long = self.sides
            return RESIZE_ROI.format(short=short, long=long, stride=head.stride,
                                     pooled=head.pooled)
        policy = (RESIZE if self.decoder == "cpu" else
                  RESIZE_BATCHED if self.decode_on_device else RESIZE_TORCH)
        pre = self.backbone.preprocess
        if pre.interpolation != "bilinear" or pre.crop_pct != 1:  # a timm model's eval crop
            policy = policy.replace("SxS", f"S/{pre.crop_pct:g} a side, centre crop SxS").replace(
                "bilinear", pre.interpolation)
        return policy


def fingerprint(config: ExtractConfig, backbone: Backbone, loaded: Loaded, layout: BatchLayout,
                size: int, decoder: str, device: torch.device,
                autocast: torch.dtype | None) -> dict:
    boxes = hashlib.sha256()
    for array in (layout.crop_id, layout.unit_of_row, layout.unit_image, layout.unit_box):
        boxes.update(np.ascontiguousarray(array, dtype=np.int64).tobytes())
    return {"backbone": backbone.name, "weights": loaded.weights,
            "weights_sha256": loaded.weights_sha256, "input_size": size,
            "preprocess": backbone.preprocess.describe(), "decode": decoder,
            "region": config.region, "pool": config.pool, "compression": config.compression,
            "dtype": config.dtype, "batch_size": config.batch_size,
            "chunk_batches": config.chunk_batches, "device_type": device.type,
            "autocast": str(autocast), "compile": config.compile,
            "crops_sha256": boxes.hexdigest(), "torch": torch.__version__,
            **backbone.fingerprint_extra(),
            **({"cuda_graphs": True} if config.cuda_graphs else {}),
            # CUDA's `gpu` crops are cut batch-wide (`crop_resize_many`): not mixed with others
            **({"crops": "batched"} if decoder == "gpu" and device.type == "cuda" else {})}


def config_hash(fingerprint: dict) -> str:
    return hashlib.sha256(json.dumps(fingerprint, sort_keys=True).encode()).hexdigest()
