"""JPEG decoding and crop resizing with torch tensors: the `--decode gpu` path.

`--decode cpu` decodes with Pillow in the DataLoader workers (features/crops.py). `--decode gpu`
decodes with torchvision's decoder on the extraction device: nvjpeg on CUDA, fed the raw file
bytes that the workers read (batched, one call per batch), so the CPU only reads files. On a
CPU device the same code runs in the workers with torchvision's CPU decoder (libjpeg-turbo):
this is the fallback the tests exercise, and what `gpu` means on a machine without a GPU.

Crops: each box is clipped to the image, cut out and resized to S x S with torch's
antialiased filter (the aspect ratio is not kept), then rounded to uint8 as Pillow's result
is. In the workers (a CPU device) `crop_resize` does it crop by crop with
`F.interpolate(mode="bilinear", antialias=True)`; on CUDA `crop_resize_many` does the same
resize for a whole batch of images at once as matrix products (`resize_weights` builds the
interpolation's own weights), in half precision, within one grey level of `crop_resize`.
torch's antialiased bilinear filter is the same triangle filter as Pillow's BILINEAR resize,
so both paths agree to a fraction of a grey level on average (tests/features/test_decoding.py
states the tolerance). Differences left: the decoders' IDCT/upsampling (nvjpeg vs
libjpeg-turbo) and Pillow's draft mode, which decodes large crops at 1/2-1/8 scale where
this path decodes at full size.

A file torchvision cannot decode (not a JPEG, CMYK, a decoder error) is decoded by Pillow
instead, so a run never depends on which decoder an odd file happens to suit; only a file
neither can read is reported as missing.

`auto` chooses `gpu` on CUDA when the node has fewer than `GPU_DECODE_BELOW` CPU cores per
GPU process, else `cpu`; on a CPU device always `cpu`, which keeps today's numbers. Why 24:
on one H100 node (2026-11-26, bench/RESULTS.md) a Pillow worker fed 250-300 crops/s, so 14
workers gave resnet101 3,300-4,200 crops/s end to end, while `gpu` gave 5,000-5,200; Pillow
catches up only at about 20-25 workers. Measured with an H100's hardware JPEG decoder; on a
GPU without one, nvjpeg takes compute time from the forward (not measured).
"""

from __future__ import annotations

import io
import math
import os
import warnings
from contextlib import contextmanager

import numpy as np
import torch
from PIL import Image
from torch.nn import functional as F

from vprom.images import clip_box
from vprom.processes import usable_cores

GPU_DECODE_BELOW = 24  # CPU cores per GPU process under which auto decodes on the GPU
JPEG_MAGIC = b"\xff\xd8\xff"
RESIZE_TORCH = ("whole crop (box clipped to the image) resized to SxS, aspect ratio not kept; "
                "torch bilinear interpolation with antialiasing on the full-size decoded "
                "image, rounded to uint8")
RESIZE_BATCHED = RESIZE_TORCH + ("; on CUDA a whole batch at once as matrix products in half "
                                 "precision (within one grey level)")


@contextmanager
def _torchvision_decoders():
    """torchvision's decoders, without the warning torchvision 0.29 gives at every call (they
    are deprecated in favour of TorchCodec; docs/features.md says what that means)."""
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
    if device.type == "cuda" and cores_per_process() < GPU_DECODE_BELOW:
        return "gpu"
    return "cpu"


def clip_boxes(boxes: np.ndarray, width: int, height: int) -> tuple[list, list]:
    """Corners (x0, y0, x1, y1) of each VG box clipped to the image, and an error per box
    (None when fine); a box with no area inside the image gets no corners."""
    corners, errors = [], []
    for box in boxes:
        c = clip_box(box, width, height)
        corners.append(c)
        errors.append(None if c is not None else
                      f"box {tuple(int(v) for v in box)} lies outside the {width}x{height} image")
    return corners, errors


def crop_resize(image: torch.Tensor, corners: list, size: int, interpolation: str = "bilinear",
                keep: float = 1.0) -> torch.Tensor:
    """(3, H, W) uint8 image, k corner boxes -> (k, size, size, 3) uint8 crops, on its device.
    `keep` < 1 (a timm model's crop_pct): each box is resized to floor(size / keep) a side and
    its centre size x size kept."""
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


def _triangle(x: torch.Tensor) -> torch.Tensor:
    return (1 - x).clamp_(min=0)


def _keys_cubic(x: torch.Tensor) -> torch.Tensor:  # a = -0.5, as Pillow and torch's aa
    a = -0.5
    near = ((a + 2) * x - (a + 3)) * x * x + 1
    far = ((a * x - 5 * a) * x + 8 * a) * x - 4 * a
    return torch.where(x < 1, near, torch.where(x < 2, far, torch.zeros_like(x)))


FILTERS = {"bilinear": (1.0, _triangle), "bicubic": (2.0, _keys_cubic)}  # (support, kernel)


def resize_weights(starts: torch.Tensor, lengths: torch.Tensor, out: int, total: int,
                   interpolation: str = "bilinear", dtype=torch.float32,
                   device: torch.device | str = "cpu") -> torch.Tensor:
    """(n, out, total) matrices on `device` of the antialiased resize of each segment [start,
    start + length) (CPU tensors) of an axis of `total` pixels to `out` pixels: the weights
    `F.interpolate(..., antialias=True, align_corners=False)` computes (centre, support and
    taps as its kernel sets them), zero outside the segment. Built as bands of the few taps
    an output pixel has, then scattered."""
    half, kernel = FILTERS[interpolation]
    taps = math.ceil(2 * max(1.0, float(lengths.max()) / out) * half) + 2  # on the host
    starts, lengths = starts.to(device, non_blocking=True), lengths.to(device, non_blocking=True)
    length = lengths.float()[:, None, None]
    scale = length / out
    wide = scale >= 1
    support = torch.where(wide, half * scale, torch.full_like(scale, half))
    inverse = torch.where(wide, 1 / scale, torch.ones_like(scale))
    centre = scale * (torch.arange(out, device=device, dtype=torch.float32)[None, :, None] + 0.5)
    low = (centre - support + 0.5).trunc().clamp_(min=0)
    high = torch.minimum((centre + support + 0.5).trunc(), length)
    at = low + torch.arange(taps, device=device, dtype=torch.float32)  # (n, out, taps)
    w = kernel(((at - centre + 0.5) * inverse).abs_()) * (at < high)
    w /= w.sum(-1, keepdim=True)
    where = (at + starts.float()[:, None, None]).clamp_(max=total - 1).long()
    # taps past the segment weigh 0 (and past the axis clamp onto one of them): adding is exact
    return torch.zeros(len(starts), out, total, dtype=dtype, device=device).scatter_add_(
        2, where, w.to(dtype))


ALIGN = 16  # matrix sides padded to a multiple of this: what tensor cores need
SLICE_BYTES = 2**29  # the images gathered for one matrix product at most (crop by crop)
PADDED_BYTES = 2**31  # a batch's padded images at most; beyond, crop by crop (`crop_resize`)


def _aligned(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def crop_resize_many(images: list, corners: list, size: int, interpolation: str = "bilinear",
                     keep: float = 1.0, dtype=torch.float16) -> torch.Tensor:
    """`crop_resize` for many images at once, on their device: [(3, H, W) uint8], [corner
    boxes per image] -> (k, size, size, 3) uint8, every image's crops in order. The images
    are padded into one tensor; each crop is two matrix products with `resize_weights`' rows
    and columns, batched over all crops. So a batch costs a few kernels and one copy an
    image, where `crop_resize` costs several kernels a crop: on a GPU that kept the host
    busier than the device. In half precision (CUDA) the pixels are exact and the weights
    kept to 1/2048; the crops agree with `crop_resize` within one grey level
    (tests/features/test_decoding.py). A batch whose padded images would pass `PADDED_BYTES`
    (images far larger than Visual Genome's) is cut crop by crop instead."""
    device = images[0].device
    boxes = torch.tensor([c for cs in corners for c in cs], dtype=torch.float32).reshape(-1, 4)
    if not len(boxes):
        return torch.zeros((0, size, size, 3), dtype=torch.uint8, device=device)
    source = torch.tensor([j for j, cs in enumerate(corners) for _ in cs])
    if device.type == "cuda":  # copied in without stopping the host (pageable memory would)
        boxes, source = boxes.pin_memory(), source.pin_memory()
    side = size if keep == 1 else math.floor(size / keep)
    start = (side - size) // 2
    high = _aligned(max(i.shape[1] for i, cs in zip(images, corners) if cs))
    wide = _aligned(max(i.shape[2] for i, cs in zip(images, corners) if cs))
    if len(images) * high * 3 * wide * dtype.itemsize > PADDED_BYTES:  # a few huge images
        return torch.cat([crop_resize(i, cs, size, interpolation, keep)
                          for i, cs in zip(images, corners)])
    padded = torch.zeros(len(images), high, 3, wide, dtype=dtype, device=device)
    for j, (image, cs) in enumerate(zip(images, corners)):
        if cs:
            padded[j, :image.shape[1], :, :image.shape[2]] = image.permute(1, 0, 2)
    rows = resize_weights(boxes[:, 1], boxes[:, 3] - boxes[:, 1], side, high, interpolation,
                          dtype, device)[:, start:start + size]  # (k, size, high)
    cols = resize_weights(boxes[:, 0], boxes[:, 2] - boxes[:, 0], side, wide, interpolation,
                          dtype, device)[:, start:start + size]  # (k, size, wide)
    source = source.to(device, non_blocking=True)
    step = max(1, SLICE_BYTES // padded[0].nbytes)
    out = []
    for a in range(0, len(boxes), step):  # (m, high, 3 * wide): each crop's image
        pixels = padded.view(len(images), high, 3 * wide)[source[a:a + step]]
        tall = torch.bmm(rows[a:a + step], pixels)  # (m, size, 3 * wide)
        out.append(torch.bmm(tall.view(-1, size * 3, wide), cols[a:a + step].transpose(1, 2)))
    crops = torch.cat(out).view(-1, size, 3, size).permute(0, 1, 3, 2)  # (k, y, x, channel)
    return crops.float().round_().clamp_(0, 255).to(torch.uint8).contiguous()


def is_jpeg(data: bytes | torch.Tensor) -> bool:
    head = bytes(data[:3].tolist()) if isinstance(data, torch.Tensor) else bytes(data[:3])
    return head == JPEG_MAGIC


def read_bytes(path) -> torch.Tensor:
    """A file's bytes as a 1-D uint8 tensor (what the device decoder takes)."""
    with open(path, "rb") as f:
        return torch.frombuffer(bytearray(f.read()), dtype=torch.uint8)


def pillow_image(data: bytes | torch.Tensor | str | os.PathLike) -> torch.Tensor:
    """(3, H, W) uint8 RGB by Pillow, from a path or file bytes (raises OSError/ValueError)."""
    if isinstance(data, torch.Tensor):
        data = data.numpy().tobytes()
    source = io.BytesIO(data) if isinstance(data, bytes) else data
    with Image.open(source) as im:
        rgb = np.asarray(im.convert("RGB"))
    return torch.from_numpy(rgb.copy()).permute(2, 0, 1)


def torch_image(data: torch.Tensor, device: torch.device | str = "cpu") -> torch.Tensor:
    """(3, H, W) uint8 RGB from JPEG bytes by torchvision on `device`; Pillow (on the CPU,
    moved to `device`) when torchvision cannot decode the file."""
    if is_jpeg(data):
        try:
            with _torchvision_decoders() as (decode_jpeg, rgb):
                return decode_jpeg(data, mode=rgb, device=device)
        except RuntimeError:
            pass
    return pillow_image(data).to(device)


def decode_many(datas: list[torch.Tensor], device: torch.device) -> list:
    """Decode a batch of JPEG byte tensors on `device` in one call (nvjpeg batches on CUDA);
    if the batch call fails, image by image, so one bad file cannot fail the others. Returns
    a (3, H, W) uint8 tensor or the exception per image."""
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
