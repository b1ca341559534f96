"""`--region roi`: a box's features the way the bottom-up-attention detector computes them.

As its released `test.prototxt`: the image is scaled so its shorter side is 600 unless the
longer would exceed 1000 (bilinear, no antialiasing, as cv2), `backbone_features` runs once on
it, each clipped box (Caffe's inclusive corners) is max-pooled to 14x14 cells
(`torchvision.ops.roi_pool`), and `roi_head` runs on all boxes of the batch at once.
`--input-size` sets the shorter side.
"""

from __future__ import annotations

import numpy as np
import torch
from torch.nn import functional as F
from torchvision.ops import roi_pool

from vprom.features.backbones import Preprocess, RegionHead

RESIZE_ROI = ("whole image resized so its shorter side is {short} px (longer side at most "
              "{long} px), bilinear without antialiasing as cv2.resize INTER_LINEAR; boxes "
              "RoI-max-pooled from the stride-{stride} map to {pooled}x{pooled} (Caffe "
              "ROIPooling, inclusive corners)")


def sides(head: RegionHead, shortest: int | None) -> tuple[int, int]:
    """(shorter side, longer-side limit) for `--input-size` (None: the detector's own)."""
    if shortest is None:
        return head.shortest_side, head.longest_side
    return shortest, round(shortest * head.longest_side / head.shortest_side)


def detector_scale(height: int, width: int, shortest: int, longest: int) -> float:
    """Caffe's `_get_image_blob` scale for one image."""
    scale = shortest / min(height, width)
    if round(scale * max(height, width)) > longest:
        scale = longest / max(height, width)
    return scale


def caffe_rois(corners: list, scale: float) -> torch.Tensor:
    """(k, 5) RoIs [batch index 0, x1, y1, x2, y2] in the resized image, Caffe's inclusive
    corners of the clipped boxes (x0, y0, x1, y1) times the image's scale."""
    rois = np.array([[0, x0, y0, x1 - 1, y1 - 1] for x0, y0, x1, y1 in corners],
                    dtype=np.float64)
    rois[:, 1:] *= scale
    return torch.from_numpy(rois.astype(np.float32))


@torch.inference_mode()
def pooled_regions(model: torch.nn.Module, image: torch.Tensor, corners: list,
                   preprocess: Preprocess, head: RegionHead, shortest: int, longest: int,
                   autocast: torch.dtype | None) -> torch.Tensor:
    """One image's (3, H, W) uint8 and clipped boxes -> (k, C, pooled, pooled) RoI cells."""
    device = image.device
    height, width = image.shape[1:]
    scale = detector_scale(height, width, shortest, longest)
    x = preprocess.normalise(image.permute(1, 2, 0).unsqueeze(0))  # BGR minus means, NCHW
    x = F.interpolate(x, size=(round(height * scale), round(width * scale)), mode="bilinear",
                      align_corners=False, antialias=False)
    x = x.contiguous(memory_format=torch.channels_last)
    with torch.autocast(device.type, dtype=autocast, enabled=autocast is not None):
        fmap = model.backbone_features(x)
    rois = caffe_rois(corners, scale).to(device)
    return roi_pool(fmap.float(), rois, output_size=head.pooled, spatial_scale=1 / head.stride)


@torch.inference_mode()
def region_maps(model: torch.nn.Module, cells: torch.Tensor,
                autocast: torch.dtype | None) -> torch.Tensor:
    """RoI cells (n, C, p, p) -> the head's last conv map (n, D, p', p'), float32."""
    x = cells.contiguous(memory_format=torch.channels_last)
    with torch.autocast(cells.device.type, dtype=autocast, enabled=autocast is not None):
        return model.roi_head(x).float()
