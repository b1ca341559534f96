"""The plan of one `vprom extract` call: its options resolved, its batches, where its chunks go.

`settings` lists everything that changes the numbers or layout of a FEATS.h5: the manifest's
`config`, by which a finished file is kept and a work folder `<out>.partial/` resumed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from vprom.features.backbones import Backbone, Loaded
from vprom.features.config import ExtractConfig
from vprom.features.crops import RESIZE, BatchLayout
from vprom.features.decoding import RESIZE_TORCH
from vprom.features.regions import RESIZE_ROI, sides
from vprom.files import free_space_for
from vprom.runtime import World

DTYPES = {"float16": np.float16, "float32": np.float32}  # ExtractConfig.dtype -> numpy
TORCH_DTYPES = {"float16": torch.float16, "float32": torch.float32}


@dataclass
class ExtractPlan:
    config: ExtractConfig  # with pool and batch size resolved
    backbone: Backbone
    loaded: Loaded
    layout: BatchLayout
    paths: list  # per image group: its file, or None when the image is not there
    size: int  # crop side (region crop) or the image's shorter side (region roi)
    decoder: str  # "cpu" or "gpu", resolved from --decode
    workers: int  # resolved from --workers
    autocast: torch.dtype | None
    world: World

    @property
    def partial(self) -> Path:
        return self.config.out.with_name(self.config.out.name + ".partial")

    def chunk_file(self, c: int, suffix: str = ".npy") -> Path:
        return self.partial / f"chunk-{c:06d}{suffix}"

    def chunk_done(self, c: int) -> bool:
        return self.chunk_file(c).is_file() and self.chunk_file(c, ".json").is_file()

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
        policy = RESIZE if self.decoder == "cpu" else RESIZE_TORCH
        pre = self.backbone.preprocess
        if pre.interpolation != "bilinear" or pre.crop_pct != 1:  # a timm model's eval crop
            policy = policy.replace("SxS", f"S/{pre.crop_pct:g} a side, centre crop SxS").replace(
                "bilinear", pre.interpolation)
        return policy

    def settings(self) -> dict:
        """What the output is made with (module doc): its manifest's `config`."""
        config = self.config
        return {"backbone": self.backbone.name, "weights": self.loaded.weights,
                "weights_sha256": self.loaded.weights_sha256, "input_size": self.size,
                "preprocess": self.backbone.preprocess.describe(), "decode": self.decoder,
                "region": config.region, "pool": config.pool, "dtype": config.dtype,
                "compression": config.compression, "batch_size": config.batch_size,
                "chunk_batches": config.chunk_batches, "device_type": self.world.device.type,
                "autocast": str(self.autocast), "compile": config.compile,
                "cuda_graphs": config.cuda_graphs, "torch": torch.__version__,
                **self.backbone.fingerprint_extra()}

    def check_space(self, row_shape: tuple) -> None:
        """Refuse before writing when the disk lacks room for the chunks and the file (twice
        a row of `row_shape` per unit and per crop)."""
        row = int(np.prod(row_shape)) * np.dtype(DTYPES[self.config.dtype]).itemsize
        free_space_for(self.config.out, 2 * row * (len(self.layout.unit_image) +
                                                   len(self.layout.crop_id)),
                       " for the chunks and the features file")
