"""The crop pipeline: which pixels each crop id gets, and the DataLoader that makes them.

Crops sharing an (image, box) are one *unit*, computed once; units sorted by (image, box) make
batches of B (all full but the last), consecutive batches make *chunks* (the unit of resuming
and sharding), and one image's units within a batch are a *group*, one DataLoader item. The
layout depends only on the crops table and B, so every run and rank writes the same bytes.
With `--decode cpu --region crop` a worker's Pillow warps each clipped box to S x S (bilinear,
antialiased), decoding a large crop at 1/2-1/8 scale chosen from its own size; otherwise it
hands the image (file bytes, or decoded for `--region roi`) to the main process as a `Source`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from vprom.features.decoding import clip_boxes, pillow_image, read_bytes
from vprom.images import IMAGE_FOLDERS
from vprom.tables import CropTable

DRAFT_REDUCTIONS = (8, 4, 2)
RESIZE = "whole crop (box clipped to the image) resized to SxS, aspect ratio not kept; " \
         "bilinear with antialiasing; JPEG draft decoding at 1/2-1/8 when the crop's shorter " \
         "side is at least that many times S"


@dataclass
class BatchLayout:
    """Units (unique boxes), crop -> unit, image groups, batches and chunks."""

    crop_id: np.ndarray  # (N,) sorted ascending: the rows of the output file
    unit_of_row: np.ndarray  # (N,) unit index of each row
    unit_image: np.ndarray  # (U,) image id
    unit_box: np.ndarray  # (U, 4) x, y, w, h
    groups: np.ndarray  # (G, 2) [start, stop) unit ranges; one image each
    batches: list[np.ndarray]  # group indexes of each batch
    chunks: list[range]  # batch indexes of each chunk

    def chunk_units(self, c: int) -> tuple[int, int]:
        """[start, stop) unit range of chunk c (chunks cover consecutive units)."""
        batches = self.chunks[c]
        first = self.groups[self.batches[batches.start][0], 0]
        last = self.groups[self.batches[batches.stop - 1][-1], 1]
        return int(first), int(last)

    def batch_units(self, b: int) -> int:
        g = self.batches[b]
        return int(self.groups[g[-1], 1] - self.groups[g[0], 0])


def batch_layout(crops: CropTable, batch_size: int, chunk_batches: int,
                 whole_images: bool = False) -> BatchLayout:
    """Units sorted by image in batches of `batch_size`, `chunk_batches` batches a chunk;
    `whole_images` never cuts an image's units (a batch may then run over)."""
    order = np.argsort(crops.crop_id, kind="stable")
    crop_id = crops.crop_id[order]
    keys = np.stack([crops.image_id, crops.x, crops.y, crops.w, crops.h], axis=1)[order]
    keys = keys.astype(np.int64)
    units, unit_of_row = np.unique(keys, axis=0, return_inverse=True)  # lexicographic order
    unit_image, unit_box = units[:, 0], units[:, 1:]
    n = len(unit_image)
    cuts = np.flatnonzero(unit_image[1:] != unit_image[:-1]) + 1
    starts = np.r_[0, cuts] if whole_images else np.union1d(np.r_[0, cuts],
                                                            np.arange(0, n, batch_size))
    groups = np.stack([starts, np.r_[starts[1:], n]], axis=1).astype(np.int64)
    batch_of = groups[:, 0] // batch_size
    bounds = np.flatnonzero(np.r_[True, batch_of[1:] != batch_of[:-1], True])
    batches = [np.arange(a, b) for a, b in zip(bounds[:-1], bounds[1:])]
    chunks = [range(s, min(s + chunk_batches, len(batches)))
              for s in range(0, len(batches), chunk_batches)]
    return BatchLayout(crop_id=crop_id, unit_of_row=unit_of_row.reshape(-1).astype(np.int64),
                unit_image=unit_image, unit_box=unit_box, groups=groups, batches=batches,
                chunks=chunks)


DECODE_ERRORS = (OSError, ValueError, SyntaxError, RuntimeError, Image.DecompressionBombError)


def draft_reduction(w: int, h: int, size: int) -> int:
    """The largest JPEG scale reduction that keeps both sides of a w x h crop >= size."""
    for r in DRAFT_REDUCTIONS:
        if min(w, h) >= r * size:
            return r
    return 1


PILLOW_FILTERS = {"bilinear": Image.BILINEAR, "bicubic": Image.BICUBIC}


def centre_box(x0: float, y0: float, x1: float, y1: float, keep: float) -> tuple:
    """The central `keep` fraction of a box in each dimension (a timm model's crop_pct)."""
    if keep == 1:
        return x0, y0, x1, y1
    dx, dy = (x1 - x0) * (1 - keep) / 2, (y1 - y0) * (1 - keep) / 2
    return x0 + dx, y0 + dy, x1 - dx, y1 - dy


def decode_crops(path, boxes: np.ndarray, size: int, interpolation: str = "bilinear",
                 keep: float = 1.0) -> tuple[np.ndarray, list[str | None]]:
    """(k, size, size, 3) uint8 crops of one image by Pillow and a per-box error (None when
    fine); raises OSError/ValueError when the file cannot be decoded at all."""
    out = np.zeros((len(boxes), size, size, 3), dtype=np.uint8)
    im = Image.open(path)  # reads the header only; pixels are decoded below
    try:
        width, height = im.size
        clipped, errors = clip_boxes(boxes, width, height)
        reductions: dict[int, list[int]] = {}
        for j, c in enumerate(clipped):
            if c is not None:
                r = draft_reduction(c[2] - c[0], c[3] - c[1], size)
                reductions.setdefault(r, []).append(j)
        for r, members in sorted(reductions.items()):
            if im is None:  # a second reduction: draft() only acts before the first decode
                im = Image.open(path)
            if r > 1:
                im.draft(im.mode, (math.ceil(width / r), math.ceil(height / r)))
            rgb = im.convert("RGB")
            im.close()
            im = None
            sx, sy = rgb.width / width, rgb.height / height
            for j in members:
                x0, y0, x1, y1 = clipped[j]
                box = centre_box(x0 * sx, y0 * sy, x1 * sx, y1 * sy, keep)
                out[j] = np.asarray(rgb.resize((size, size), PILLOW_FILTERS[interpolation],
                                               box=box))
    finally:
        if im is not None:
            im.close()
    return out, errors


@dataclass
class Source:
    """One image of a batch that the main process finishes (decodes, crops or RoI-pools)."""

    image_id: int
    path: str
    data: torch.Tensor  # uint8: the file's bytes (1-D) when `encoded`, else (3, H, W) RGB
    encoded: bool
    units: np.ndarray  # (k,) the units of its boxes
    boxes: np.ndarray  # (k, 4) their VG boxes (x, y, w, h)


@dataclass
class Batch:
    """What the DataLoader yields per batch: ready crops and/or images still to finish."""

    units: np.ndarray  # (n,) units of `pixels`' rows
    pixels: torch.Tensor  # (n, S, S, 3) uint8
    sources: list[Source] = field(default_factory=list)
    failed: list[tuple[int, str, str]] = field(default_factory=list)  # (unit, path, error)

    def pin_memory(self) -> "Batch":  # called by the DataLoader's pinning thread on CUDA
        self.pixels = self.pixels.pin_memory()
        for source in self.sources:
            source.data = source.data.pin_memory()
        return self


def worker_mode(decoder: str, region: str) -> str:
    """How a worker prepares an image group (module doc)."""
    if decoder == "gpu":
        return "bytes"
    return "pillow-crops" if region == "crop" else "pillow-image"


class CropDataset(torch.utils.data.Dataset):
    """Item g = image group g prepared as `mode` says (see `worker_mode`):
    (units, uint8 crops, sources, failures)."""

    def __init__(self, layout: BatchLayout, paths: list[str | None], size: int,
                 mode: str = "pillow-crops", vg: Path | str = "",
                 interpolation: str = "bilinear", keep: float = 1.0):
        self.layout, self.paths, self.size, self.mode, self.vg = layout, paths, size, mode, vg
        self.interpolation, self.keep = interpolation, keep  # the backbone's Preprocess

    def __len__(self) -> int:
        return len(self.layout.groups)

    def _empty(self):
        return np.zeros(0, np.int64), np.zeros((0, self.size, self.size, 3), np.uint8)

    def __getitem__(self, g: int):
        start, stop = (int(v) for v in self.layout.groups[g])
        units = np.arange(start, stop, dtype=np.int64)
        boxes = self.layout.unit_box[start:stop]
        image_id = int(self.layout.unit_image[start])
        path = self.paths[g]
        none, no_pixels = self._empty()
        if path is None:
            where = " or ".join(f"{Path(self.vg) / f / f'{image_id}.jpg'}" for f in IMAGE_FOLDERS)
            return none, no_pixels, [], [(int(u), where, f"image {image_id}: no such file")
                                         for u in units]
        try:
            if self.mode == "pillow-crops":
                pixels, errors = decode_crops(path, boxes, self.size, self.interpolation,
                                              self.keep)
            else:
                encoded = self.mode == "bytes"
                data = read_bytes(path) if encoded else pillow_image(path)
                return none, no_pixels, [Source(image_id, str(path), data, encoded, units,
                                                boxes)], []
        except DECODE_ERRORS as e:
            return none, no_pixels, [], [(int(u), str(path),
                                          f"image {image_id}: cannot decode ({e})")
                                         for u in units]
        ok = np.array([e is None for e in errors], dtype=bool)
        failed = [(int(u), str(path), f"image {image_id}: {e}")
                  for u, e in zip(units, errors) if e is not None]
        return units[ok], pixels[ok], [], failed


def collate(items) -> Batch:
    """Concatenate the groups of one batch."""
    units = np.concatenate([i[0] for i in items])
    pixels = torch.from_numpy(np.concatenate([i[1] for i in items]))
    return Batch(units, pixels, [s for i in items for s in i[2]], [f for i in items for f in i[3]])
