"""What the folder exports share: cutting each distinct crop once, and the problem ids.

`cut_crops` groups the crop rows by VG image, decodes each image once on a thread pool
(Pillow releases the GIL) and hands each crop's pixels to a callback. `release_ids` numbers
the problems 0..N-1 in matrix-id order, as the original release does.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable

import numpy as np
from PIL import Image
from tqdm import tqdm

from vprom.errors import VpromError
from vprom.images import ImageIndex, clip_box
from vprom.tables import CropTable

#: Threads decoding images (bounded: the exports are disk-bound beyond that).
WORKERS = min(4, os.cpu_count() or 1)


def release_ids(ids: np.ndarray) -> np.ndarray:
    """The release's problem id of every matrix row: its rank in id order (0..N-1)."""
    order = np.argsort(ids, kind="stable")
    pids = np.empty(len(ids), dtype=np.int64)
    pids[order] = np.arange(len(ids))
    return pids


def cut_crops(crops: CropTable, rows: np.ndarray, vg_dir: Path,
              handle: Callable[[int, Image.Image], None], desc: str = "crops") -> int:
    """Call `handle(row, RGB crop)` on the pool's threads once for every crop row in `rows`;
    returns how many. A missing or unreadable image or a box outside it is a VpromError."""
    index = ImageIndex(vg_dir)
    by_image: dict[int, list[int]] = {}
    for r in np.unique(rows).tolist():
        by_image.setdefault(int(crops.image_id[r]), []).append(r)
    missing = [i for i in by_image if i not in index]
    if missing:  # before any work: every image must be there
        raise VpromError(f"{vg_dir}: image {missing[0]} is not under VG_100K or VG_100K_2 "
                         f"({len(missing)} of the {len(by_image)} images the matrices show "
                         "are missing); is the image download complete?")

    def cut(item) -> int:
        image_id, members = item
        path = index.path(image_id)
        try:
            with Image.open(path) as im:
                im = im.convert("RGB")
        except (OSError, ValueError) as e:
            raise VpromError(f"{path}: cannot read image {image_id} ({e}); re-download it") \
                from None
        for r in members:
            box = clip_box((crops.x[r], crops.y[r], crops.w[r], crops.h[r]), im.width, im.height)
            if box is None:
                raise VpromError(f"{path}: crop {int(crops.crop_id[r])} lies outside image "
                                 f"{image_id}; the data set does not match these images")
            handle(r, im.crop(box))
        return len(members)

    total = sum(len(m) for m in by_image.values())
    with ThreadPoolExecutor(WORKERS) as pool, tqdm(total=total, desc=desc, unit="crop",
                                                   disable=None) as bar:
        for n in pool.map(cut, sorted(by_image.items())):
            bar.update(n)
    return total
