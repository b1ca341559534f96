"""`--region roi`: a box's features the way the bottom-up-attention detector computes them.

For each image (the released `test.prototxt`, `lib/fast_rcnn/test.py`; facts in
`data/bottomup_r101.json`):
1. Scale: s = 600 / shorter side, unless round(s * longer side) > 1000, then
   s = 1000 / longer side. The image, BGR minus the pixel means, is resized by s with
   bilinear interpolation and no antialiasing (`cv2.resize(..., INTER_LINEAR)`); the size is
   (round(h * s), round(w * s)) and the sampling grid follows the size ratio.
2. `backbone_features` (stem to res4, stride 16) runs once on the whole image.
3. Each box, clipped to the image, as Caffe's inclusive corners (x0, y0, x1 - 1, y1 - 1)
   times s, is max-pooled from res4 to 14x14 cells at scale 1/16 (`roi_pool5`: coordinates
   rounded, bins floor/ceil, empty bins 0 - exactly `torchvision.ops.roi_pool`).
4. `roi_head` (res5, stride 1 and dilated as released) runs on all boxes of the batch at once;
   the caller averages its 14x14 map (`pool5`) or keeps it (`--pool none`).

One image's boxes share one trunk pass. Whether that is faster per crop than `--region crop`
depends on the boxes per image: the trunk runs on ~600x800 pixels (about 10 crops' worth at
224x224) instead of once per box (figures in bench/RESULTS.md). `--input-size` sets the
shorter side here (default 600; the longer limit scales with it).
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
    """One image's boxes -> (k, C, pooled, pooled) float32 RoI cells of its res4 map.

    `image` is (3, H, W) uint8 RGB on the extraction device, `corners` its clipped boxes."""
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
