"""Feature extraction throughput: end-to-end `extract()` vs the bare model forward.

For each backbone, in one run and side by side (each round times half the bare forwards, the
end-to-end run, then the other half, so a drift in machine load hits both alike):
- bare forward: `features.extract.embed` (normalise, trunk, pool, L2; channels_last) on
  pre-made uint8 batches in memory, the same batch sizes and resolution, no data loading;
- end-to-end: `features.extract.extract`, from scratch each round, on a synthetic VG folder
  (Pillow JPEGs of 500x375, several crops each) and its crops table: decoding in DataLoader
  workers, resize, forward, pooling, L2, chunk files, assembling the HDF5 file. Reported for
  the whole call and for the extraction loop alone (without model build and assembly).
Prints crops/s and the ratio end-to-end / bare forward (target >= 0.9 for resnet101), in
total and per round. On a machine shared with other jobs the ratio moves with their load.

    .venv/bin/python bench/extract.py                      # resnet101 and resnet18, ~3 min
    .venv/bin/python bench/extract.py --backbones resnet18 --images 40 --rounds 2
    python bench/extract.py --device cuda --batch-size 256 --workers 8 --images 400   # a GPU

On CUDA both sides use the same autocast dtype as `extract` (bf16 where supported), and each
timed forward ends with a synchronisation so the GPU's queue is counted.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from features.backbones import get_backbone  # noqa: E402
from features.config import ExtractConfig
from features.extract import _autocast_dtype, embed, extract  # noqa: E402
from tests.features.conftest import crop_table, write_dataset  # noqa: E402


def synthetic_vg(root: Path, n_images: int, crops_per_image: int, seed: int = 0) -> Path:
    """500x375 JPEGs (smooth colour fields + noise) and random boxes of >= 100 px."""
    rng = np.random.default_rng(seed)
    rows, crop_id = [], 0
    for image_id in range(1, n_images + 1):
        coarse = rng.integers(0, 256, size=(24, 32, 3), dtype=np.uint8)
        img = Image.fromarray(coarse).resize((500, 375), Image.BICUBIC)
        noisy = np.asarray(img, dtype=np.int16) + rng.integers(-25, 26, (375, 500, 3))
        path = root / "vg" / "VG_100K" / f"{image_id}.jpg"
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(np.clip(noisy, 0, 255).astype(np.uint8)).save(path, quality=90)
        for _ in range(crops_per_image):
            w, h = int(rng.integers(100, 400)), int(rng.integers(100, 300))
            x, y = int(rng.integers(0, 500 - w)), int(rng.integers(0, 375 - h))
            rows.append((crop_id, image_id, x, y, w, h))
            crop_id += 1
    return write_dataset(root / "dataset.h5", crop_table(rows))


class BareForward:
    """The trunk + pooling + L2 on ready uint8 batches: no decoding, no files."""

    def __init__(self, name: str, side: int, batch: int, device: torch.device):
        self.backbone = get_backbone(name)
        self.device = device
        self.autocast = _autocast_dtype(device)
        self.model = self.backbone.load("none").module.to(device,
                                                          memory_format=torch.channels_last)
        gen = torch.Generator().manual_seed(0)
        self.pixels = torch.randint(0, 256, (batch, side, side, 3), dtype=torch.uint8,
                                    generator=gen)
        self(self.pixels.shape[:1])  # warm-up

    def __call__(self, sizes) -> float:
        """Seconds for forwards of batches of these sizes."""
        start = time.perf_counter()
        for size in sizes:
            embed(self.model, self.pixels[:size], self.backbone, self.autocast, self.device)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return time.perf_counter() - start


def run(name: str, images: int, crops_per_image: int, batch: int, workers: int, rounds: int,
        root: Path, device: str = "cpu") -> dict:
    """`rounds` x (bare forward, end-to-end, bare forward): the machine's load drifts, so the
    two are interleaved; per-round ratios show how much it moved."""
    dataset = synthetic_vg(root / name, images, crops_per_image)
    crops = images * crops_per_image
    sizes = [batch] * (crops // batch) + ([crops % batch] if crops % batch else [])
    half = len(sizes) // 2
    bare_forward = BareForward(name, get_backbone(name).preprocess.input_size, batch,
                               torch.device(device))
    bare = whole = loop = 0.0
    ratios = []
    for _ in range(rounds):
        b = bare_forward(sizes[:half])
        summary = extract(ExtractConfig(dataset=dataset, vg=root / name / "vg", backbone=name,
                                        weights="none", out=root / name / "feats.h5",
                                        batch_size=batch, workers=workers, device=device,
                                        resume=False))
        b += bare_forward(sizes[half:])
        ratios.append(b / summary.seconds)
        bare, whole, loop = bare + b, whole + summary.seconds, loop + summary.loop_seconds
    n = crops * rounds
    return {"backbone": name, "crops": n, "bare": n / bare, "e2e": n / whole, "loop": n / loop,
            "ratios": ratios}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--backbones", default="resnet101,resnet18")
    p.add_argument("--images", type=int, default=0,
                   help="images per backbone and round (default: 16 for resnet101, 32 for others)")
    p.add_argument("--crops-per-image", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3, help="interleaved bare/end-to-end rounds")
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, ...")
    args = p.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="vprom-bench-extract-"))
    print(f"torch {torch.__version__}, device {args.device}, {torch.get_num_threads()} threads, "
          f"batch {args.batch_size}, {args.workers} workers, weights none, 224x224")
    print(f"{'backbone':10s} {'crops':>6s} {'bare fwd/s':>10s} {'e2e/s':>8s} {'loop/s':>8s} "
          f"{'e2e/bare':>8s} {'loop/bare':>9s}  per-round e2e/bare")
    try:
        for name in args.backbones.split(","):
            images = args.images or (16 if name == "resnet101" else 32)
            r = run(name, images, args.crops_per_image, args.batch_size, args.workers,
                    args.rounds, root, args.device)
            print(f"{r['backbone']:10s} {r['crops']:6d} {r['bare']:10.2f} {r['e2e']:8.2f} "
                  f"{r['loop']:8.2f} {r['e2e'] / r['bare']:8.3f} {r['loop'] / r['bare']:9.3f}  "
                  + " ".join(f"{x:.3f}" for x in r["ratios"]),
                  flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
