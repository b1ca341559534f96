"""Benchmark `vprom.processes.ordered_map` against `multiprocessing.Pool.imap`, side by side.

Usage: python bench/workers.py [--images 1500] [--workers 2] [--rounds 2]

`vprom synth` renders its images with `ordered_map` (one pipe per worker, nothing shared, so
a Ctrl-C or a killed worker never leaves it hanging) instead of a spawn `Pool` with `imap`.
This renders the same images, the same chunk size, with both, alternating the order each
round, and prints wall time and images/s of wall and of CPU time (this process plus its
workers) for each, and whether both gave the same records in the same order.
"""

from __future__ import annotations

import argparse
import hashlib
import multiprocessing
import os
import resource
import shutil
import tempfile
import time
from pathlib import Path


from vprom.processes import ordered_map  # noqa: E402
from vprom.mining.synth import _render_to  # noqa: E402

CHUNK = 16  # what `vprom synth` uses


def _cpu() -> float:
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _pool(jobs, workers: int, consume) -> None:
    with multiprocessing.get_context("spawn").Pool(workers) as pool:
        consume(pool.imap(_render_to, jobs, chunksize=CHUNK))


def _ordered(jobs, workers: int, consume) -> None:
    with ordered_map(_render_to, jobs, workers, "bench", chunksize=CHUNK) as results:
        consume(results)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=1500)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="vprom-bench-workers-"))
    print(f"{args.images} synthetic images, {args.workers} workers, chunks of {CHUNK}; "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    print(f"{'round':>5} {'runner':>12} {'wall s':>8} {'img/s wall':>11} {'img/s CPU':>10}")
    digests = {}
    try:
        for r in range(args.rounds):
            runners = [("Pool.imap", _pool), ("ordered_map", _ordered)]
            for name, run in runners[::1 if r % 2 == 0 else -1]:
                folder = root / f"{name}-{r}"
                folder.mkdir()
                digest = hashlib.sha256()

                def consume(results):
                    for records, *_ in results:
                        digest.update("".join(records).encode())

                jobs = ((0, i, str(folder)) for i in range(args.images))
                cpu0, t0 = _cpu(), time.perf_counter()
                run(jobs, args.workers, consume)
                wall, cpu = time.perf_counter() - t0, _cpu() - cpu0
                digests.setdefault(name, set()).add(digest.hexdigest())
                print(f"{r + 1:>5} {name:>12} {wall:>8.2f} {args.images / wall:>11.0f} "
                      f"{args.images / cpu:>10.0f}")
                shutil.rmtree(folder)
        same = len(set.union(*digests.values())) == 1
        print(f"same records in the same order: {same}; load average after "
              f"{os.getloadavg()[0]:.1f}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
