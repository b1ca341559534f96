"""Benchmark `vprom synth`: images per second at workers=1 and workers=2, side by side.

Usage: python bench/synth.py [--images 2000] [--seed 0]

Prints, for each worker count, the wall time, images/s of wall time, and images/s of CPU
time (this process plus its pool processes), so figures stay meaningful on a busy machine
where wall time includes waiting for a core. Also checks that both runs wrote identical
bytes and reports the smallest expected pool.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import resource
import shutil
import tempfile
import time
from pathlib import Path

from vprom.mining.synth import write_corpus


def _cpu() -> float:
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _digest(folder: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(folder.rglob("*")):
        if p.is_file():
            h.update(str(p.relative_to(folder)).encode())
            h.update(p.read_bytes())
    return h.hexdigest()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="vprom-bench-synth-"))
    try:
        print(f"vprom synth, {args.images} images, seed {args.seed}, {os.cpu_count()} CPUs, "
              f"load average {os.getloadavg()[0]:.1f}")
        print(f"{'workers':>7} {'wall s':>8} {'img/s wall':>11} {'img/s CPU':>10}")
        digests, summary = {}, None
        for workers in (1, 2):
            out = root / f"w{workers}"
            cpu0, t0 = _cpu(), time.perf_counter()
            summary = write_corpus(out, images=args.images, seed=args.seed, workers=workers)
            wall, cpu = time.perf_counter() - t0, _cpu() - cpu0
            print(f"{workers:>7} {wall:>8.2f} {args.images / wall:>11.0f} {args.images / cpu:>10.0f}")
            digests[workers] = _digest(out)
        print(f"identical bytes at workers=1 and 2: {digests[1] == digests[2]}")
        smallest = min((n, f"{et}/{sup}/{el}".replace("//", "/"))
                       for et, sups in summary.pools.items()
                       for sup, els in sups.items() for el, n in els.items())
        print(f"smallest expected pool: {smallest[1]} with {smallest[0]} crops")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
