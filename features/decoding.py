"""JPEG decoding and crop resizing with torch tensors: the `--decode gpu` path.

The workers only read the files; the device decodes a batch in one torchvision call (nvjpeg
on CUDA), Pillow taking any file it cannot. `crop_resize` resizes each clipped box with
antialiased interpolation, Pillow's triangle filter, so both paths agree to a fraction of a
grey level. `auto` decodes on the GPU when a GPU process has fewer than `GPU_DECODE_BELOW`
cores: Pillow keeps up with resnet101 only from about 20-25 workers.
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
    if device.type == "cuda" and cores_per_process() < GPU_DECODE_BELOW:
        return "gpu"
    return "cpu"


def clip_boxes(boxes: np.ndarray, width: int, height: int) -> tuple[list, list]:
    """Corners (x0, y0, x1, y1) of each VG box clipped to the image (None outside it), and
    an error per box (None when fine)."""
    corners, errors = [], []
    for box in boxes:
        c = clip_box(box, width, height)
        corners.append(c)
        errors.append(None if c is not None else
                      f"box {tuple(int(v) for v in box)} lies outside the {width}x{height} image")
    return corners, errors


def crop_resize(image: torch.Tensor, corners: list, size: int, interpolation: str = "bilinear",
                keep: float = 1.0) -> torch.Tensor:
    """(3, H, W) uint8 image, k corner boxes -> (k, size, size, 3) uint8 crops, on its device;
    `keep` < 1 resizes to floor(size / keep) and keeps the centre."""
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
    """(3, H, W) uint8 RGB from JPEG bytes by torchvision on `device`, or by Pillow."""
    if is_jpeg(data):
        try:
            with _torchvision_decoders() as (decode_jpeg, rgb):
                return decode_jpeg(data, mode=rgb, device=device)
        except RuntimeError:
            pass
    return pillow_image(data).to(device)


def decode_many(datas: list[torch.Tensor], device: torch.device) -> list:
    """A (3, H, W) uint8 tensor, or the exception, per JPEG byte tensor, decoded on `device`
    in one call, or image by image if that fails."""
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
