"""Benchmark `vprom export`: every format on one synthetic build, side by side.

Usage: python bench/export.py [--images 2000] [--scale 0.02] [--size 160] [--work DIR]

Builds the synthetic corpus, mines and generates it, then times `export` as jsonl, as the
original layout with symlinks and with --copy, and as npz (neutral split), printing for
each the wall time, the CPU time (all threads; meaningful on a busy machine where wall time
includes waiting for a core or the disk), problems per second of wall time and the bytes
written. The original layout's cost
is file creation (one link or file per panel): extrapolate linearly to 235,000 problems.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from vprom.generation.dataset import generate  # noqa: E402
from vprom.generation.export import export  # noqa: E402
from vprom.mining.pools import mine  # noqa: E402
from vprom.mining.synth import write_corpus  # noqa: E402
from vprom.splits import load_rules  # noqa: E402


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
    args = parser.parse_args()
    root = args.work or Path(tempfile.mkdtemp(prefix="vprom-bench-export-"))
    try:
        write_corpus(root / "vg", images=args.images, seed=0)
        mine(root / "vg", root / "pools.h5", workers=1)
        generate(root / "pools.h5", root / "dataset.h5", load_rules(), scale=args.scale, seed=0)
        print(f"vprom export, synthetic corpus of {args.images} images at scale {args.scale}, "
              f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
        print(f"{'format':<18} {'problems':>8} {'wall s':>8} {'CPU s':>7} {'problems/s':>11} "
              f"{'MB':>8}")
        runs = [("jsonl", "dataset.jsonl", {}), ("original", "release", {}),
                ("original --copy", "release-copy", {"copy": True}),
                ("npz", "npz", {"size": args.size})]
        for name, target, options in runs:
            fmt = name.split()[0]
            vg = None if fmt == "jsonl" else root / "vg"
            t0, c0 = time.perf_counter(), cpu_seconds()
            summary = export(root / "dataset.h5", fmt, root / target, vg_dir=vg, **options)
            wall, cpu = time.perf_counter() - t0, cpu_seconds() - c0
            n = summary.counts.get("problems", summary.counts.get("matrices"))
            print(f"{name:<18} {n:>8,} {wall:>8.2f} {cpu:>7.2f} {n / wall:>11.0f} "
                  f"{disk_bytes(root / target) / 1e6:>8.1f}")
            shutil.rmtree(root / target) if (root / target).is_dir() else (root / target).unlink()
    finally:
        if args.work is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
