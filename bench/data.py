"""DataLoader throughput of `vprom.data.VPROM` over features, maps and crop stores, beside
reading the same arrays bare; pixels from a crop store beside decoding the JPEGs; the cost of
building a crop store.

Usage: python bench/data.py [--images 1000] [--scale 0.003] [--batch 32] [--rounds 2]
                            [--work DIR]

On the synthetic corpus (mined and generated here, as tests/generation/synthetic_build.py
does) it writes, for every crop of the data set:
- pooled features, float16 [N, 2048] (resnet101's width), random values (speed only);
- maps, float16 [N, 512, 7, 7] (resnet18/34's last map at 224; resnet101's 2048x7x7 would
  be 4x the bytes per crop), random values;
- crop stores at S = 224 and S = 80 with `vprom crops` (`build_crop_store`, 2 processes):
  crops/s and decode time per source image.
Then, over the neutral training problems, in batches of `--batch`:
- `bare`: the same arrays read in the same batches without `VPROM` or a DataLoader: one
  vectorised gather from the in-memory table (features), `SpatialMaps.gather` (maps),
  `CropStore.read_rows` (pixels);
- `VPROM` through a DataLoader with 0 and 2 workers (persistent, timed after a warm-up
  pass: the steady state of a training loop, not the workers' start), item by item and
  as whole batches (`VPROM.batch` through a BatchSampler, which skips the collate copy);
and per problem, decoding the 16 panels from the JPEGs (`features.crops.decode_crops`, the
rule the store was made with) against reading them from the store. Each figure is the best
of `--rounds` passes. Problems/s of wall time; the machine is shared, so the load average is
printed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import h5py
import numpy as np
import torch
from torch.utils.data import BatchSampler, DataLoader, SequentialSampler

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from vprom.data import VPROM  # noqa: E402
from vprom.features.crop_store import CropStore, StoreJob, build_crop_store, bytes_per_crop  # noqa: E402
from vprom.features.crops import decode_crops  # noqa: E402
from vprom.features.reader import load_features, open_maps  # noqa: E402
from vprom.images import ImageIndex  # noqa: E402
from vprom.io import make_manifest, sha256_file  # noqa: E402
from vprom.tables import read_crop_table, set_manifest  # noqa: E402

FULL_SCALE_CROPS = 143_634


def build(work: Path, images: int, scale: float) -> tuple[Path, Path]:
    from vprom.generation.dataset import generate
    from vprom.mining.pools import mine
    from vprom.mining.synth import write_corpus
    from vprom.splits import load_rules

    if not (work / "dataset.h5").is_file():
        write_corpus(work / "vg", images=images, seed=0)
        mine(work / "vg", work / "pools.h5", workers=2)
        generate(work / "pools.h5", work / "dataset.h5", load_rules(), scale=scale, seed=0)
    return work / "dataset.h5", work / "vg"


def write_source(dataset: Path, out: Path, shape: tuple, name: str) -> Path:
    """A finished FEATS.h5 of random float16 values for every crop (speed only)."""
    if out.is_file():
        return out
    crop_id = np.sort(read_crop_table(dataset).crop_id)
    rng = np.random.default_rng(0)
    with h5py.File(out, "w") as h5:
        h5.create_dataset("crop_id", data=crop_id)
        ds = h5.create_dataset(name, shape=(len(crop_id), *shape), dtype=np.float16,
                               chunks=(min(4, len(crop_id)), *shape) if name == "maps" else None)
        for start in range(0, len(crop_id), 256):
            stop = min(start + 256, len(crop_id))
            ds[start:stop] = rng.normal(size=(stop - start, *shape)).astype(np.float16)
        h5.attrs.update({"backbone": "bench", "weights": "none", "complete": True})
        set_manifest(h5, make_manifest("features", {"dataset": str(dataset)},
                                       inputs={dataset.name: sha256_file(dataset)}))
    return out


def best(fn, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def loader_rate(data: VPROM, batch: int, workers: int, rounds: int,
                batched: bool = False) -> float:
    """Steady state: workers are started (and warmed by one pass) before the clock runs.
    `batched`: whole batches from `VPROM.batch` through a BatchSampler (no collate copy)."""
    if batched:
        loader = DataLoader(data, batch_size=None, num_workers=workers,
                            sampler=BatchSampler(SequentialSampler(data), batch, False),
                            persistent_workers=workers > 0)
    else:
        loader = DataLoader(data, batch_size=batch, num_workers=workers,
                            persistent_workers=workers > 0)

    def one_pass():
        for b in loader:
            b["panels"].sum()
    one_pass()
    return len(data) / best(one_pass, rounds)


def bare_rate(data: VPROM, batch: int, rounds: int) -> float:
    """The same panels in the same batches, read without VPROM or a DataLoader."""
    batches = [np.arange(s, min(s + batch, len(data))) for s in range(0, len(data), batch)]
    if data.kind == "features":
        table = load_features(data.source).features
        read = lambda idx: torch.from_numpy(table[data.rows[idx]])  # noqa: E731
    elif data.kind == "maps":
        reader = open_maps(data.source)
        read = lambda idx: torch.from_numpy(reader.gather(data.panels[idx].ravel()))  # noqa: E731
    else:
        reader = CropStore(data.source)
        read = lambda idx: torch.from_numpy(reader.read_rows(data.rows[idx].ravel()))  # noqa: E731

    def one_pass():
        for idx in batches:
            read(idx).sum()
    return len(data) / best(one_pass, rounds)


def jpeg_per_problem(dataset: Path, vg: Path, data: VPROM, size: int, n: int) -> float:
    """Seconds per problem decoding its 16 panels from the JPEGs (each panel's image)."""
    crops = read_crop_table(dataset)
    order = np.argsort(crops.crop_id)
    index = ImageIndex(vg)
    start = time.perf_counter()
    for i in range(n):
        rows = order[np.searchsorted(crops.crop_id[order], data.panels[i])]
        for r in rows:
            box = np.array([[crops.x[r], crops.y[r], crops.w[r], crops.h[r]]])
            decode_crops(index.path(crops.image_id[r]), box, size)
    return (time.perf_counter() - start) / n


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--images", type=int, default=1000)
    p.add_argument("--scale", type=float, default=0.003)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--jpeg-problems", type=int, default=40)
    p.add_argument("--work", type=Path, default=None, help="keep the inputs here")
    args = p.parse_args()
    torch.set_num_threads(1)
    work = args.work or Path(tempfile.mkdtemp(prefix="vprom-bench-data-"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"load average at start: {os.getloadavg()[0]:.1f} ({os.cpu_count()} cores)")
    dataset, vg = build(work, args.images, args.scale)
    sources = {"features 2048": write_source(dataset, work / "feats.h5", (2048,), "features"),
               "maps 512x7x7": write_source(dataset, work / "maps.h5", (512, 7, 7), "maps")}
    for size in (224, 80):
        out = work / f"crops-{size}.h5"
        if not out.is_file():
            start = time.perf_counter()
            build_crop_store(StoreJob(dataset, vg, size, out, workers=2), log=lambda _: None)
            wall = time.perf_counter() - start
            with CropStore(out) as store:
                n = len(store)
            with h5py.File(out, "r") as h5:
                timing = json.loads(h5.attrs["manifest"])["counts"]["timing"]
            per_image = 1000 * timing["decode_cpu_s"] / timing["image_groups"]
            print(f"crop store S={size}: {n:,} crops in {wall:.1f} s wall ({n / wall:,.0f} "
                  f"crops/s, 2 processes), {per_image:.1f} ms per source image in a worker "
                  f"(decode, crop, resize, save); {os.path.getsize(out) / 1e6:.1f} MB; full "
                  f"scale {bytes_per_crop(size) * FULL_SCALE_CROPS / 1e9:.1f} GB")
        sources[f"crops S={size}"] = out
    print(f"\n{'source':16s} {'problems':>8s} {'bare/s':>9s} {'0 workers/s':>12s} "
          f"{'2 workers/s':>12s} {'2w / bare':>9s} {'batched 0w/s':>13s} {'batched 2w/s':>13s}")
    for name, source in sources.items():
        data = VPROM(dataset, "neutral", "train", source=source)
        bare = bare_rate(data, args.batch, args.rounds)
        zero, two, zero_b, two_b = (loader_rate(data, args.batch, w, args.rounds, b)
                                    for b in (False, True) for w in (0, 2))
        print(f"{name:16s} {len(data):8d} {bare:9.0f} {zero:12.0f} {two:12.0f} "
              f"{two / bare:9.2f} {zero_b:13.0f} {two_b:13.0f}")
    for size in (224, 80):
        data = VPROM(dataset, "neutral", "train", source=sources[f"crops S={size}"])
        jpeg = jpeg_per_problem(dataset, vg, data, size, args.jpeg_problems)
        store = 1 / bare_rate(data, 1, args.rounds)
        print(f"S={size}: decoding 16 panels from JPEGs {1000 * jpeg:.1f} ms per problem, "
              f"from the crop store {1000 * store:.2f} ms: {jpeg / store:.0f}x")
    print(f"load average at end: {os.getloadavg()[0]:.1f}; inputs in {work}")


if __name__ == "__main__":
    main()
