"""Benchmark: `vprom verify --workers N` beside `vprom generate` on the same pool.

Writes the bench pool (`bench/generate.py --write-pools`), times `vprom generate POOLS.h5
--scale S` and then `vprom verify DATASET.h5 --workers N` for each N, each as its own
command line, and checks that every N printed the same report. With `--anchor TREE` it
also times `vprom verify` of another checkout (e.g. /work/main before issue 26: one
process; with `--anchor-workers`, a checkout that has `--workers`, at each N) on the same
file and compares its report. `--jobs` adds the seconds each kind of
job took, one after the other in one process (where one worker's time goes).

    flock /tmp/vprom-cpu.lock .venv/bin/python bench/verify.py [--scale 1] [--workers 1 2 4]
        [--anchor /work/main [--anchor-workers]] [--jobs] [--reuse] [--pools POOLS.h5]
        [--out /tmp/vbench-verify]

`--pools` generates from another POOLS.h5, e.g. the one `vprom mine` makes of the full-scale
VG-shaped corpus (`bench/mine_full_scale.py`), whose 642,956 crops and 268,389 distinct label
lists weigh on both commands differently from the bench pool's.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def timed_command(args: list[str], tree: Path) -> tuple[float, str]:
    """(wall seconds, stdout) of `python -m vprom ARGS` run from `tree`'s code."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "vprom", *args], check=False, env=env, cwd=tree,
                          capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode not in (0, 1):
        sys.exit(f"vprom {' '.join(args)} failed:\n{done.stderr[-2000:]}")
    return seconds, done.stdout


def job_seconds(dataset: Path) -> dict[str, float]:
    """Seconds per kind of job, all run here one after the other (`verify --workers 1`)."""
    from vprom.generation.verify.loaded import load
    from vprom.generation.verify import jobs
    from vprom.splits import load_rules

    rules = load_rules()
    data, structure = load(dataset)
    out: dict[str, float] = defaultdict(float)
    start = time.perf_counter()
    inputs = jobs.prepare(data, structure, rules, None)
    out["(shared inputs)"] += time.perf_counter() - start
    for job in jobs.job_list(inputs):
        start = time.perf_counter()
        jobs.run_job(inputs, job)
        out[job[0]] += time.perf_counter() - start
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--anchor", type=Path, default=None,
                        help="another checkout whose `vprom verify` is timed beside")
    parser.add_argument("--anchor-workers", action="store_true",
                        help="the anchor has --workers: time it at each --workers N too")
    parser.add_argument("--jobs", action="store_true", help="also time each kind of job")
    parser.add_argument("--reuse", action="store_true",
                        help="verify the DATASET.h5 a previous run left in --out (no generate)")
    parser.add_argument("--pools", type=Path, default=None,
                        help="generate from this POOLS.h5 (e.g. `vprom mine` of the corpus "
                             "bench/mine_full_scale.py writes) instead of the bench pool")
    parser.add_argument("--out", type=Path, default=Path("/tmp/vbench-verify"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    pools, dataset = args.pools or args.out / "pools.h5", args.out / "dataset.h5"
    print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at start", flush=True)
    if args.pools is None and not pools.is_file():
        subprocess.run([sys.executable, str(ROOT / "bench" / "generate.py"), "--write-pools",
                        str(pools)], check=True, capture_output=True)
    gen = float("nan")
    if not (args.reuse and dataset.is_file()):
        dataset.unlink(missing_ok=True)
        # one process, like `verify --workers 1`: the ratio compares work, not cores
        gen, _ = timed_command(["generate", str(pools), "--out", str(dataset), "--scale",
                                str(args.scale), "--workers", "1"], ROOT)
        print(f"{'vprom generate --workers 1':34s} {gen:7.2f} s", flush=True)
    reports = {}
    if args.anchor:
        for n in args.workers if args.anchor_workers else [None]:
            flags = ["--workers", str(n)] if n else []
            seconds, reports["anchor"] = timed_command(["verify", str(dataset), *flags],
                                                       args.anchor)
            name = f"vprom verify {' '.join(flags)} (anchor)"
            print(f"{name:34s} {seconds:7.2f} s  {seconds / gen:5.2f}x generate", flush=True)
    one = None
    for n in args.workers:
        seconds, reports[n] = timed_command(["verify", str(dataset), "--workers", str(n)], ROOT)
        one = one or seconds
        print(f"{'vprom verify --workers ' + str(n):34s} {seconds:7.2f} s  "
              f"{seconds / gen:5.2f}x generate  {one / seconds:5.2f}x speed-up over "
              f"{args.workers[0]} worker(s)", flush=True)
    same = len({r for k, r in reports.items() if k != "anchor"}) == 1
    print(f"reports of every --workers identical: {same}")
    if args.anchor:
        print(f"report identical to the anchor's: {reports['anchor'] == reports[args.workers[0]]}")
    print(f"load average at the end {os.getloadavg()[0]:.2f}")
    if args.jobs:
        for name, seconds in job_seconds(dataset).items():
            print(f"  job {name:30s} {seconds:7.1f} s")


if __name__ == "__main__":
    main()
