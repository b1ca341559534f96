"""bottomup-r101: `--region crop` against `--region roi`, end to end, side by side.

Both extract the same boxes of the VG-like corpus of bench/extract.py (images 500-800 x
333-600 px, 1-6 boxes each unless --crops-per-image says otherwise) with a saved random-init
bottom-up ResNet-101 (the released geometry, so the cost is the real model's):
- crop: each box warped to 224x224 through stem-res5 (res5 dilated: 14x14);
- roi: each image at shorter side 600 (longer <= 1000) through stem-res4 once, every box
  RoI-pooled to 14x14, res5 on the pooled cells.
The runs alternate (crop, roi, crop, roi, ...) so a drift in machine load hits both alike.
Prints crops/s of each and roi / crop.

    .venv/bin/python bench/bottomup_regions.py --crops 48               # this 2-core CPU
    python bench/bottomup_regions.py --device cuda --crops 20000 --batch-size 64
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import torch


from extract import saved_weights, vg_like_corpus  # noqa: E402  (bench/extract.py)

from vprom.features.config import ExtractConfig  # noqa: E402
from vprom.features.extract import extract  # noqa: E402


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--crops", type=int, default=48)
    p.add_argument("--crops-per-image", default="1-6", help="range of boxes per image")
    p.add_argument("--device", default="cpu")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--workers", type=int, default=None)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--work", type=Path, default=None)
    args = p.parse_args(argv)
    per_image = tuple(int(v) for v in args.crops_per_image.split("-"))
    root = args.work or Path(tempfile.mkdtemp(prefix="vprom-bench-regions-"))
    root.mkdir(parents=True, exist_ok=True)
    try:
        dataset, vg, images = vg_like_corpus(root, args.crops, per_image=per_image)
        weights = saved_weights(root, "bottomup-r101")
        print(f"bottomup-r101 (random weights, released geometry), torch {torch.__version__}, "
              f"{args.device}, {torch.get_num_threads()} threads, batch {args.batch_size}; "
              f"{args.crops} crops on {images} images ({args.crops / images:.2f} per image)",
              flush=True)
        seconds = {"crop": 0.0, "roi": 0.0}
        for _ in range(args.rounds):
            for region in seconds:
                start = time.perf_counter()
                extract(ExtractConfig(dataset=dataset, vg=vg, backbone="bottomup-r101",
                                      weights=str(weights), out=root / f"{region}.h5",
                                      region=region, batch_size=args.batch_size,
                                      workers=args.workers, device=args.device, resume=False))
                seconds[region] += time.perf_counter() - start
        n = args.crops * args.rounds
        crop, roi = n / seconds["crop"], n / seconds["roi"]
        print(f"{'region':6s} {'crops':>6s} {'seconds':>8s} {'crops/s':>8s}")
        for region, rate in (("crop", crop), ("roi", roi)):
            print(f"{region:6s} {n:6d} {seconds[region]:8.1f} {rate:8.3f}")
        print(f"roi / crop: {roi / crop:.2f}")
    finally:
        if args.work is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
