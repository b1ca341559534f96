"""Benchmark `vprom export`: every format on one synthetic build, side by side.

Usage: python bench/export.py [--images 2000] [--scale 0.02] [--size 160] [--work DIR]
                              [--full-problems 235000] [--full-crops 110000] [--only vlm,hf]
                              [--store-size 224]

Builds the synthetic corpus, mines and generates it, then times `export` as jsonl, as the
original layout with symlinks and with --copy, and as npz (neutral split), printing for
each the wall time, the CPU time (all threads; meaningful on a busy machine where wall time
includes waiting for a core or the disk), problems per second of wall time and the bytes
written. The original layout's cost
is file creation (one link or file per panel): extrapolate linearly to 235,000 problems.

Also: npz in both styles (pgm, color), hf (with the size the rejected design, 16 JPEGs
inlined in every problem row of every split, would take, from the same JPEG bytes), and
the savir-t file size (a `torch.save` of one problem's float32 (16, 1, 2048, 7, 7) maps and
its target; its maps come from resnet101 extraction, not run here), and vlm in its three
layouts (the neutral split's test part, from the JPEGs; with its MB per 1,000 problems,
lmms-eval Parquet and VLMEvalKit TSV together), and the grid again from a crop store
(`vprom crops --size 224`, built first and timed apart). Each row is projected to
full scale: per-problem outputs linearly in problems (--full-problems), the hf crops table
in crops (--full-crops; the synthetic crops are smaller images than VG's, so this is a
floor).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import tempfile
import time
from pathlib import Path


from vprom.generation.generate import generate  # noqa: E402
from vprom.generation.export import export  # noqa: E402
from vprom.mining.pools import mine  # noqa: E402
from vprom.mining.synth import write_corpus  # noqa: E402
from vprom.splits import load_rules  # noqa: E402
from vprom.tables import read_matrix_table  # noqa: E402


def cpu_seconds() -> float:
    """CPU time of this process, all its threads included."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    return own.ru_utime + own.ru_stime


def disk_bytes(path: Path) -> int:
    """Bytes the files take (links count as their own size, not their target's)."""
    if path.is_file():
        return path.stat().st_size
    return sum(p.lstat().st_size for p in path.rglob("*") if p.is_file() or p.is_symlink())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=2000)
    parser.add_argument("--scale", type=float, default=0.02)
    parser.add_argument("--size", type=int, default=160)
    parser.add_argument("--work", type=Path, default=None, help="default: a temporary folder")
    parser.add_argument("--full-problems", type=int, default=235_000)
    parser.add_argument("--full-crops", type=int, default=110_000)
    parser.add_argument("--only", default="", help="formats to time, comma-separated")
    parser.add_argument("--store-size", type=int, default=224, help="S of the crop store")
    args = parser.parse_args()
    root = args.work or Path(tempfile.mkdtemp(prefix="vprom-bench-export-"))
    try:
        write_corpus(root / "vg", images=args.images, seed=0)
        mine(root / "vg", root / "pools.h5", workers=1)
        generate(root / "pools.h5", root / "dataset.h5", load_rules(), scale=args.scale, seed=0)
        print(f"vprom export, synthetic corpus of {args.images} images at scale {args.scale}, "
              f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
        print(f"{'format':<18} {'problems':>8} {'wall s':>8} {'CPU s':>7} {'problems/s':>11} "
              f"{'MB':>8} {'full-scale GB':>14} {'full-scale h':>13}")
        runs = [("jsonl", "dataset.jsonl", {}), ("original", "release", {}),
                ("original --copy", "release-copy", {"copy": True}),
                ("npz --style pgm", "npz", {"size": args.size, "style": "pgm"}),
                ("npz --style color", "npz-color", {"size": args.size, "style": "color"}),
                ("hf", "hf", {}), ("vlm --layout grid", "vlm-grid", {"layout": "grid"}),
                ("vlm --layout panels", "vlm-panels", {"layout": "panels"}),
                ("vlm --layout text", "vlm-text", {"layout": "text"}),
                ("vlm grid --crops", "vlm-grid-store",
                 {"layout": "grid", "crop_store": root / "crops.h5"})]
        only = set(filter(None, args.only.split(",")))
        runs = [run for run in runs if not only or run[0].split()[0] in only]
        if any("crop_store" in run[2] for run in runs):
            crop_store(root, args.store_size)
        total = len(read_matrix_table(root / "dataset.h5"))
        for name, target, options in runs:
            fmt = name.split()[0]
            pictures = fmt != "jsonl" and not name.endswith("text") and "crop_store" not in options
            vg = root / "vg" if pictures else None
            t0, c0 = time.perf_counter(), cpu_seconds()
            summary = export(root / "dataset.h5", fmt, root / target, vg_dir=vg, **options)
            wall, cpu = time.perf_counter() - t0, cpu_seconds() - c0
            n = summary.counts.get("problems", summary.counts.get("matrices"))
            size = disk_bytes(root / target)
            ratio = args.full_problems / n
            full = size * ratio
            if fmt == "hf":
                full, inline = hf_sizes(root / target, args.full_problems / total,
                                        args.full_crops / summary.counts["crops"])
            print(f"{name:<18} {n:>8,} {wall:>8.2f} {cpu:>7.2f} {n / wall:>11.0f} "
                  f"{size / 1e6:>8.1f} {full / 1e9:>14.1f} {wall * ratio / 3600:>13.1f}")
            if fmt == "hf":
                print(f"{'  hf, 16 JPEGs inlined per row (rejected)':<44} "
                      f"{inline / 1e6:>8.1f} MB here")
            if fmt == "vlm":
                print(f"{'  ' + name + ', MB per 1,000 problems':<44} {size / n / 1e3:>8.1f}")
            shutil.rmtree(root / target) if (root / target).is_dir() else (root / target).unlink()
        if only and "savir-t" not in only:
            return
        per_problem = savir_bytes(root)
        print(f"{'savir-t':<18} {'(one problem, torch.save)':>36} {per_problem / 1e6:>8.2f} "
              f"{per_problem * args.full_problems / 1e9:>14.1f}")
    finally:
        if args.work is None:
            shutil.rmtree(root, ignore_errors=True)


def crop_store(root: Path, size: int) -> None:
    """`vprom crops` of the data set at S = size with 2 processes, its time printed."""
    from vprom.features.crop_store import StoreJob, build_crop_store

    t0 = time.perf_counter()
    build_crop_store(StoreJob(root / "dataset.h5", root / "vg", size, root / "crops.h5"),
                     log=lambda _: None)
    print(f"crop store at S={size}: {time.perf_counter() - t0:.2f} s wall (2 processes), "
          f"{(root / 'crops.h5').stat().st_size / 1e6:.1f} MB")


def hf_sizes(folder: Path, problem_ratio: float, crop_ratio: float) -> tuple[float, int]:
    """(projected full-scale bytes, bytes the inlined design would take here)."""
    import pyarrow.parquet as pq

    jpeg = {}
    for path in sorted((folder / "data" / "crops").glob("*.parquet")):
        t = pq.read_table(path, columns=["crop_id", "image"])
        for crop_id, image in zip(t["crop_id"].to_pylist(), t["image"].to_pylist()):
            jpeg[crop_id] = len(image["bytes"])
    crops_bytes = disk_bytes(folder / "data" / "crops")
    problem_bytes = disk_bytes(folder) - crops_bytes
    inline = 0
    for path in (folder / "data").glob("*/*.parquet"):
        if path.parent.name != "crops":
            for panels in pq.read_table(path, columns=["panels"])["panels"].to_pylist():
                inline += sum(jpeg[c] for c in panels)
    return crops_bytes * crop_ratio + problem_bytes * problem_ratio, inline


def savir_bytes(root: Path) -> int:
    """The two files of one savir-t problem, as torch.save writes them."""
    import torch

    torch.save(torch.zeros((16, 1, 2048, 7, 7), dtype=torch.float32), root / "f.pt")
    torch.save(torch.tensor(3, dtype=torch.int64), root / "t.pt")
    return (root / "f.pt").stat().st_size + (root / "t.pt").stat().st_size


if __name__ == "__main__":
    main()
