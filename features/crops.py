"""The crop pipeline: which pixels each crop id gets, and the DataLoader that makes them.

Crops sharing an (image, box) are one *unit*, computed once; units sorted by (image, box) make
batches of B, consecutive batches make *chunks* (the unit of resuming and sharding), and one
image's units in a batch are a *group*, one DataLoader item, whose crops Pillow cuts in a
worker (a large crop decoded at 1/2-1/8 scale) or whose image is left to the main process:
with `--decode gpu` the device decodes a batch in one torchvision call (nvjpeg on CUDA) and
resizes each box antialiased, as Pillow does. `auto` decodes on the GPU when a GPU process has
fewer than `GPU_DECODE_BELOW` cores: Pillow keeps up with resnet101 from about 20-25 workers.
"""

from __future__ import annotations

import io
import math
import os
import sys
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from torch.nn import functional as F

from vprom.claim import remove_work_folder
from vprom.images import IMAGE_FOLDERS, ImageIndex, clip_box
from vprom.manifest import input_hashes, make_manifest, why_stale, write_manifest
from vprom.processes import usable_cores
from vprom.tables import CropTable

DRAFT_REDUCTIONS = (8, 4, 2)
GPU_DECODE_BELOW = 24  # CPU cores per GPU process under which auto decodes on the GPU
JPEG_MAGIC = b"\xff\xd8\xff"
RESIZE_TORCH = ("whole crop (box clipped to the image) resized to SxS, aspect ratio not kept; "
                "torch bilinear interpolation with antialiasing on the full-size decoded "
                "image, rounded to uint8")


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

    def image_paths(self, vg) -> list[str | None]:
        """Per group: its image's file under `vg`, or None when there is none."""
        index = ImageIndex(vg)
        return [str(index.paths[i]) if i in index.paths else None
                for i in self.unit_image[self.groups[:, 0]].tolist()]


def batch_layout(crops: CropTable, batch_size: int, chunk_batches: int,
                 whole_images: bool = False) -> BatchLayout:
    """The layout of `crops` (module doc); `whole_images` lets a batch run over an image's end."""
    order = np.argsort(crops.crop_id, kind="stable")
    crop_id = crops.crop_id[order]
    keys = np.stack([crops.image_id, crops.x, crops.y, crops.w, crops.h], axis=1).astype(np.int64)
    units, unit_of_row = np.unique(keys[order], axis=0, return_inverse=True)  # lexicographic order
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
    return next((r for r in DRAFT_REDUCTIONS if min(w, h) >= r * size), 1)


PILLOW_FILTERS = {"bilinear": Image.BILINEAR, "bicubic": Image.BICUBIC}


def decode_crops(path, boxes: np.ndarray, size: int, interpolation: str = "bilinear",
                 keep: float = 1.0) -> tuple[np.ndarray, list[str | None]]:
    """(k, size, size, 3) uint8 crops of one image by Pillow and a per-box error (or None)."""
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
                x0, y0, x1, y1 = x0 * sx, y0 * sy, x1 * sx, y1 * sy
                # the central `keep` of the box in each dimension (a timm model's crop_pct)
                dx, dy = (x1 - x0) * (1 - keep) / 2, (y1 - y0) * (1 - keep) / 2
                out[j] = np.asarray(rgb.resize((size, size), PILLOW_FILTERS[interpolation],
                                               box=(x0 + dx, y0 + dy, x1 - dx, y1 - dy)))
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


class CropDataset(torch.utils.data.Dataset):
    """Image group g -> (units, uint8 crops, sources, failures), by `mode` (module doc)."""

    def __init__(self, layout: BatchLayout, paths: list[str | None], size: int,
                 mode: str = "pillow-crops", vg: Path | str = "",
                 interpolation: str = "bilinear", keep: float = 1.0):
        self.layout, self.paths, self.size, self.mode, self.vg = layout, paths, size, mode, vg
        self.interpolation, self.keep = interpolation, keep  # the backbone's Preprocess

    def __len__(self) -> int:
        return len(self.layout.groups)

    def __getitem__(self, g: int):
        start, stop = (int(v) for v in self.layout.groups[g])
        units = np.arange(start, stop, dtype=np.int64)
        boxes = self.layout.unit_box[start:stop]
        image_id, path = int(self.layout.unit_image[start]), self.paths[g]
        none = np.zeros(0, np.int64), np.zeros((0, self.size, self.size, 3), np.uint8)
        if path is None:
            where = " or ".join(f"{Path(self.vg) / f / f'{image_id}.jpg'}" for f in IMAGE_FOLDERS)
            return *none, [], [(int(u), where, f"image {image_id}: no such file") for u in units]
        try:
            if self.mode != "pillow-crops":
                encoded = self.mode == "bytes"
                data = read_bytes(path) if encoded else pillow_image(path)
                return *none, [Source(image_id, path, data, encoded, units, boxes)], []
            pixels, errors = decode_crops(path, boxes, self.size, self.interpolation, self.keep)
        except DECODE_ERRORS as e:
            return *none, [], [(int(u), path, f"image {image_id}: cannot decode ({e})")
                               for u in units]
        ok = np.array([e is None for e in errors], dtype=bool)
        failed = [(int(u), path, f"image {image_id}: {e}")
                  for u, e in zip(units, errors) if e is not None]
        return units[ok], pixels[ok], [], failed


def collate(items) -> Batch:
    units = np.concatenate([i[0] for i in items])
    pixels = torch.from_numpy(np.concatenate([i[1] for i in items]))
    return Batch(units, pixels, [s for i in items for s in i[2]], [f for i in items for f in i[3]])


def open_work_folder(folder: Path, kind: str, files: tuple, dataset: Path, settings: dict,
                     redo: str | None = None, log=None) -> bool:
    """Keep `folder` if current for `dataset` and `settings` (True), else start it over."""
    log = log or partial(print, file=sys.stderr)
    kept = folder.exists() or folder.is_symlink()
    why = kept and (redo or why_stale(folder, [dataset], settings))
    if why:
        log(f"{folder}: {why}; starting over")
        remove_work_folder(folder, kind, files)
    if not folder.is_dir():
        folder.mkdir(parents=True)
        write_manifest(folder, make_manifest(kind, settings, inputs=input_hashes([dataset])))
    return kept and not why


# ------------------------------------------------------- decoding with torch tensors
@contextmanager
def _torchvision_decoders():
    """torchvision's decoders, without their deprecation warning at every call."""
    from torchvision.io import ImageReadMode, decode_jpeg

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=DeprecationWarning,
                                message="The image decoding and encoding capabilities")
        yield decode_jpeg, ImageReadMode.RGB


def cores_per_process() -> int:
    """CPU cores this process may use, shared among the node's torchrun processes."""
    return max(1, usable_cores() // int(os.environ.get("LOCAL_WORLD_SIZE", "1")))


def resolve_decoder(requested: str, device: torch.device) -> str:
    """`cpu` or `gpu` for `--decode auto|cpu|gpu` on this device (see the module doc)."""
    if requested != "auto":
        return requested
    return "gpu" if device.type == "cuda" and cores_per_process() < GPU_DECODE_BELOW else "cpu"


def clip_boxes(boxes: np.ndarray, width: int, height: int) -> tuple[list, list]:
    """Corners (x0, y0, x1, y1) of each box clipped to the image, and an error per box."""
    corners = [clip_box(box, width, height) for box in boxes]
    return corners, [None if c is not None else f"box {tuple(int(v) for v in box)} lies outside "
                     f"the {width}x{height} image" for c, box in zip(corners, boxes)]


def crop_resize(image: torch.Tensor, corners: list, size: int, interpolation: str = "bilinear",
                keep: float = 1.0) -> torch.Tensor:
    """(3, H, W) uint8 image, k corner boxes -> (k, size, size, 3) uint8 crops (centre `keep`)."""
    if not corners:
        return torch.zeros((0, size, size, 3), dtype=torch.uint8, device=image.device)
    whole = image.unsqueeze(0).float()  # once per image, not per crop
    side = size if keep == 1 else math.floor(size / keep)
    start = (side - size) // 2
    crops = [F.interpolate(whole[:, :, y0:y1, x0:x1], size=(side, side), mode=interpolation,
                           align_corners=False, antialias=True)[:, :, start:start + size,
                                                               start:start + size]
             for x0, y0, x1, y1 in corners]
    out = torch.cat(crops).round_().clamp_(0, 255).to(torch.uint8)
    return out.permute(0, 2, 3, 1).contiguous()


def is_jpeg(data: bytes | torch.Tensor) -> bool:
    return bytes(data[:3].tolist() if isinstance(data, torch.Tensor) else data[:3]) == JPEG_MAGIC


def read_bytes(path) -> torch.Tensor:
    """A file's bytes as a 1-D uint8 tensor (what the device decoder takes)."""
    return torch.frombuffer(bytearray(Path(path).read_bytes()), dtype=torch.uint8)


def pillow_image(data: bytes | torch.Tensor | str | os.PathLike) -> torch.Tensor:
    """(3, H, W) uint8 RGB by Pillow, from a path or file bytes (raises OSError/ValueError)."""
    if isinstance(data, torch.Tensor):
        data = data.numpy().tobytes()
    source = io.BytesIO(data) if isinstance(data, bytes) else data
    with Image.open(source) as im:
        rgb = np.asarray(im.convert("RGB"))
    return torch.from_numpy(rgb.copy()).permute(2, 0, 1)


def torch_image(data: torch.Tensor, device: torch.device | str = "cpu") -> torch.Tensor:
    """(3, H, W) uint8 RGB from JPEG bytes by torchvision on `device`, or by Pillow."""
    if is_jpeg(data):
        try:
            with _torchvision_decoders() as (decode_jpeg, rgb):
                return decode_jpeg(data, mode=rgb, device=device)
        except RuntimeError:
            pass
    return pillow_image(data).to(device)


def decode_many(datas: list[torch.Tensor], device: torch.device) -> list:
    """Per JPEG byte tensor its (3, H, W) uint8 image on `device` (one call), or the exception."""
    if not datas:
        return []
    if all(is_jpeg(d) for d in datas):
        try:
            with _torchvision_decoders() as (decode_jpeg, rgb):
                return list(decode_jpeg(datas, mode=rgb, device=device))
        except RuntimeError:
            pass
    out = []
    for data in datas:
        try:
            out.append(torch_image(data, device))
        except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as e:
            out.append(e)
    return out
