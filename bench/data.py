"""DataLoader throughput of `vprom.data.VPROM` over features, maps and crop stores, beside
reading the same arrays bare; pixels from a crop store beside decoding the JPEGs; the cost of
building a crop store.

Usage: python bench/data.py [--images 1000] [--scale 0.003] [--batch 32[,128]]
                            [--problems 3200] [--rounds 3] [--work DIR] [--only SOURCES]

On the synthetic corpus (mined and generated here, as tests/generation/synthetic_build.py
does; 384x288 images) it writes, for every crop of the data set:
- pooled features, float16 [N, 2048] (resnet101's width), random values (speed only);
- maps, float16 [N, 512, 7, 7] (resnet18/34's last map at 224), random values;
- crop stores at S = 224 and S = 80 with `vprom crops` (`build_crop_store`, 2 processes):
  crops/s, and per source image the decode time in a worker and the wall time.

Throughput, problems/s: the neutral training problems, repeated to `--problems` (so a pass
is many batches), in batches of `--batch`, the same index list for every reader:
- `bare`: the same arrays read in the same batches without `VPROM` or a DataLoader: one
  vectorised gather from the same in-memory table into a reused buffer (features),
  `SpatialMaps.gather` (maps), `CropStore.read_rows` (pixels);
- `VPROM` through a DataLoader with 0 and 2 workers, item by item (`batch_size`, collated),
  and `VPROM.loader` (a DataLoader over whole batches, `VPROM.batch`, no collate step).
Every reader is warmed by one untimed pass first: the workers are persistent and already
started when the clock runs (steady state; their start is printed apart), and the bare
reader has its pages and buffers in place too. Each batch is consumed by reading one byte of
every 4 KiB page of its panels, the same for every reader, so what is timed is the delivery.
Each figure is the best of `--rounds` passes, the readers' passes taken in turn within each
round (a drift in the machine's load falls on all of them alike); pooled features pass in
~40 ms at the default size, so time them with `--problems 12800`. One more pass of the
2-worker `VPROM.loader` gives the CPU time a batch costs its main process and its workers
(from /proc). A DataLoader's worker hands each batch to the main process in a fresh
shared-memory segment; what one batch's segment costs here is printed too (`shm ms`).
`--batch` takes a list: each size is timed in turn.

Pixels per problem (single process, the same `--jpeg-problems` problems for each): decoding
their 16 panels from the JPEGs (`features.crops.decode_crops`, the rule the store was made
with: decode, crop, resize; one decode per panel, as a loader without a store does) against
reading them from the store (`CropStore.read_rows`), against h5py crop by crop (the read the
store had before), and against a `VPROM` item. The machine is shared: load averages are
printed.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import h5py
import numpy as np
import torch
from torch.utils.data import DataLoader


from vprom.data import VPROM
from vprom.crop_store import CropStore
from vprom.features.crop_store import (
    FULL_SCALE_CROPS,
    StoreJob,
    build_crop_store,
    bytes_per_crop,
)
from vprom.features.crops import decode_crops
from vprom.feature_files import open_maps
from vprom.images import ImageIndex
from vprom.manifest import input_hashes, make_manifest
from vprom.tables import read_crop_table, set_manifest


def build(work: Path, images: int, scale: float) -> tuple[Path, Path]:
    from vprom.generation.generate import generate
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
                                       inputs=input_hashes([dataset])))
    return out


def build_store(dataset: Path, vg: Path, out: Path, size: int) -> None:
    start = time.perf_counter()
    build_crop_store(StoreJob(dataset, vg, size, out, workers=2), log=lambda _: None)
    wall = time.perf_counter() - start
    with h5py.File(out, "r") as h5:
        n = h5["crop_id"].shape[0]
        timing = json.loads(h5.attrs["manifest"])["counts"]["timing"]
    images = timing["image_groups"]
    print(f"crop store S={size}: {n:,} crops from {images:,} images in {wall:.1f} s wall "
          f"({n / wall:,.0f} crops/s, 2 processes; {1000 * wall / images:.1f} ms wall per "
          f"source image); in a worker {1000 * timing['decode_cpu_s'] / images:.1f} ms per "
          f"source image (decode, crop, resize, save); {os.path.getsize(out) / 1e6:.1f} MB; "
          f"full scale ({FULL_SCALE_CROPS:,} crops) "
          f"{bytes_per_crop(size) * FULL_SCALE_CROPS / 1e9:.1f} GB")


def touch(panels: torch.Tensor) -> None:
    """Read one byte of every 4 KiB page: the batch is really there, at little cost."""
    panels.reshape(-1).view(torch.uint8)[::4096].sum()


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process `pid` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_per_batch(loader, one_pass) -> tuple[float, float]:
    """(the main process's, all workers') CPU ms per batch over one more pass of `loader`."""
    pids = [w.pid for w in loader._iterator._workers]  # persistent: the pass's own workers
    main, workers = cpu_seconds(os.getpid()), sum(map(cpu_seconds, pids))
    one_pass()
    batches = len(loader)
    return (1000 * (cpu_seconds(os.getpid()) - main) / batches,
            1000 * (sum(map(cpu_seconds, pids)) - workers) / batches)


def make_loader(data: VPROM, order: list, batch: int, workers: int, batched: bool):
    """(the loader, seconds to its first batch): persistent workers, started."""
    if batched:
        loader = data.loader(batch, sampler=order, num_workers=workers,
                             persistent_workers=workers > 0)
    else:
        loader = DataLoader(data, batch_size=batch, num_workers=workers, sampler=order,
                            persistent_workers=workers > 0)
    start = time.perf_counter()
    touch(next(iter(loader))["panels"])
    return loader, time.perf_counter() - start


def loader_pass(loader):
    def one_pass():
        for b in loader:
            touch(b["panels"])
    return one_pass


def bare_reader(data: VPROM):
    """The panels of problems `idx`, read without VPROM."""
    if data.kind == "features":  # the very table the loaders read (a fresh copy in other
        table = data.features.features  # pages gathered up to 4x slower), into one buffer
        buffers = {}

        def gather(idx):
            rows = data.rows[idx].ravel()
            out = buffers.setdefault(len(rows), np.empty((len(rows), *table.shape[1:]),
                                                         table.dtype))
            return torch.from_numpy(np.take(table, rows, axis=0, out=out, mode="clip"))
        return gather
    if data.kind == "maps":
        maps = open_maps(data.source)
        return lambda idx: torch.from_numpy(maps.gather(data.panels[idx].ravel()))
    store = CropStore(data.source)
    return lambda idx: torch.from_numpy(store.read_rows(data.rows[idx].ravel()))


def bare_pass(data: VPROM, order: list, batch: int):
    read = bare_reader(data)
    batches = [np.array(order[s:s + batch]) for s in range(0, len(order), batch)]

    def one_pass():
        for idx in batches:
            touch(read(idx))
    return one_pass


def interleaved(passes: dict, rounds: int) -> dict:
    """Best seconds of each pass over `rounds` rounds, each round running every pass once
    in turn (after one untimed warm-up round), so that a drift in machine load falls on all
    of them alike."""
    times = {key: [] for key in passes}
    for r in range(rounds + 1):
        for key, one_pass in passes.items():
            start = time.perf_counter()
            one_pass()
            if r:
                times[key].append(time.perf_counter() - start)
    return {key: min(t) for key, t in times.items()}


def best(fn, rounds: int) -> float:
    return interleaved({0: fn}, rounds)[0]


def transport_ms(data: VPROM, batch: int, rounds: int = 20) -> float:
    """Milliseconds to put one batch's panels into a fresh shared-memory segment, as a
    DataLoader worker does for every batch (`default_collate` in a worker)."""
    panels = data.batch(list(range(min(batch, len(data)))))["panels"]
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        storage = panels.untyped_storage()._new_shared(panels.untyped_storage().nbytes())
        torch.empty(0, dtype=panels.dtype).set_(storage).view(panels.shape).copy_(panels)
        times.append(time.perf_counter() - start)
        del storage
    return 1000 * float(np.median(times))


def throughput(name: str, data: VPROM, batch: int, args) -> None:
    order = (list(range(len(data))) * (args.problems // len(data) + 1))[:args.problems]
    passes, loaders, first = {"bare": bare_pass(data, order, batch)}, {}, {}
    for batched in (False, True):
        for workers in (0, 2):
            key = batched, workers
            loaders[key], first[key] = make_loader(data, order, batch, workers, batched)
            passes[key] = loader_pass(loaders[key])
    rates = {key: len(order) / seconds for key, seconds in
             interleaved(passes, args.rounds).items()}
    bare = rates.pop("bare")
    items0, items2, whole0, whole2 = (rates[k] for k in sorted(rates))
    cpu_main, cpu_workers = cpu_per_batch(loaders[True, 2], passes[True, 2])
    print(f"{name:14s} {batch:5d} {bare:9.0f} {items0:10.0f} {items2:10.0f} {whole0:10.0f} "
          f"{whole2:10.0f} {items2 / bare:7.2f} {whole2 / bare:7.2f} {items0 / bare:7.2f} "
          f"{whole0 / bare:7.2f} {first[True, 2]:7.2f} {transport_ms(data, batch):9.1f} "
          f"{1000 * batch / bare:8.2f} {cpu_main:8.2f} {cpu_workers:8.2f}", flush=True)


def pixels_per_problem(dataset: Path, vg: Path, data: VPROM, n: int, rounds: int) -> None:
    crops = read_crop_table(dataset)
    order = np.argsort(crops.crop_id)
    index = ImageIndex(vg)
    size = CropStore(data.source).size
    problems = range(min(n, len(data)))

    def jpegs():
        for i in problems:
            for r in order[np.searchsorted(crops.crop_id[order], data.panels[i])]:
                box = np.array([[crops.x[r], crops.y[r], crops.w[r], crops.h[r]]])
                decode_crops(index.path(crops.image_id[r]), box, size)

    store = CropStore(data.source)

    def each(read):  # nothing kept: every problem's buffer is freed before the next
        def run():
            for i in problems:
                read(i)
        return run
    timed = {"jpeg": jpegs, "store": each(lambda i: store.read_rows(data.rows[i])),
             "h5py": each(lambda i: [store.pixels[int(r)] for r in data.rows[i]]),
             "item": each(lambda i: data[i])}
    ms = {k: 1000 * best(fn, rounds) / len(problems) for k, fn in timed.items()}
    print(f"S={size}: 16 panels of a problem ({len(problems)} problems) from the JPEGs "
          f"{ms['jpeg']:.2f} ms; from the store {ms['store']:.3f} ms "
          f"({ms['jpeg'] / ms['store']:.0f}x); a VPROM item {ms['item']:.3f} ms "
          f"({ms['jpeg'] / ms['item']:.0f}x); h5py crop by "
          f"crop {ms['h5py']:.3f} ms ({ms['jpeg'] / ms['h5py']:.0f}x)", flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--images", type=int, default=1000)
    p.add_argument("--scale", type=float, default=0.003)
    p.add_argument("--batch", default="32", help="batch sizes, comma-separated")
    p.add_argument("--problems", type=int, default=3200, help="problems in a timed pass")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--jpeg-problems", type=int, default=40)
    p.add_argument("--only", default="", help="comma-separated sources to time (default all)")
    p.add_argument("--work", type=Path, default=None, help="keep the inputs here")
    args = p.parse_args()
    torch.set_num_threads(1)
    work = args.work or Path(tempfile.mkdtemp(prefix="vprom-bench-data-"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"load average at start: {os.getloadavg()[0]:.1f} ({os.cpu_count()} cores)")
    dataset, vg = build(work, args.images, args.scale)
    sources = {"features": write_source(dataset, work / "feats.h5", (2048,), "features"),
               "maps": write_source(dataset, work / "maps.h5", (512, 7, 7), "maps")}
    for size in (224, 80):
        sources[f"crops{size}"] = work / f"crops-{size}.h5"
        if not sources[f"crops{size}"].is_file():
            build_store(dataset, vg, sources[f"crops{size}"], size)
    only = [s for s in args.only.split(",") if s] or list(sources)
    print(f"\nproblems/s, {args.problems} problems a pass; then ratios to bare; loader: "
          "VPROM.loader; first: s to a fresh 2-worker VPROM.loader's first batch; shm: ms to "
          "put one batch in fresh shared memory, as a DataLoader's worker does; bare ms: "
          "a batch's bare read; CPU ms a batch of the 2-worker loader's main process and of "
          "its workers together")
    print(f"{'source':14s} {'batch':>5s} {'bare':>9s} {'items 0w':>10s} {'items 2w':>10s} "
          f"{'loader 0w':>10s} {'loader 2w':>10s} {'i2w/b':>7s} {'l2w/b':>7s} {'i0w/b':>7s} "
          f"{'l0w/b':>7s} {'first':>7s} {'shm ms':>9s} {'bare ms':>8s} {'main ms':>8s} "
          f"{'work ms':>8s}")
    for name in only:
        for batch in map(int, args.batch.split(",")):
            if name in sources:
                data = VPROM(dataset, "neutral", "train", source=sources[name])
                throughput(name, data, batch, args)
    print()
    for size in (224, 80):
        if f"crops{size}" in only:
            data = VPROM(dataset, "neutral", "train", source=sources[f"crops{size}"])
            pixels_per_problem(dataset, vg, data, args.jpeg_problems, args.rounds)
    print(f"load average at end: {os.getloadavg()[0]:.1f}; inputs in {work}")


if __name__ == "__main__":
    main()
