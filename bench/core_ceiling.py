"""What N processes can give on this machine at best: N copies of pure work, against one.

Usage: python bench/core_ceiling.py [--workers 2] [--seconds 3] [--rounds 3]

Each process runs the same Python loop (integer arithmetic: no memory shared, no I/O, no
pipes); one round times one process, then `--workers` of them started together, and prints
their throughput ratio, `workers x time(one) / time(all)`. A command's N-worker speed-up
(`bench/generate.py`, `bench/verify.py`, `bench/mine_full_scale.py`) cannot exceed it. On a
shared virtual machine it falls short of N: the cores' clock, their hyperthread siblings and
the neighbours' load all take their share.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import time


def spin(steps: int) -> int:
    total = 0
    for i in range(steps):
        total += i * i
    return total


def timed(processes: int, steps: int) -> float:
    """Seconds for `processes` forked processes to run `spin(steps)` each."""
    context = multiprocessing.get_context("fork")
    start = time.perf_counter()
    running = [context.Process(target=spin, args=(steps,)) for _ in range(processes)]
    for process in running:
        process.start()
    for process in running:
        process.join()
    return time.perf_counter() - start


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=3.0, help="work per process")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    probe, start = 5_000_000, time.perf_counter()
    spin(probe)
    steps = int(probe * args.seconds / (time.perf_counter() - start))
    print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at start; "
          f"{steps:,} steps a process (about {args.seconds:g} s)")
    for round_ in range(1, args.rounds + 1):
        one, many = timed(1, steps), timed(args.workers, steps)
        print(f"round {round_}: 1 process {one:.2f} s, {args.workers} processes {many:.2f} s"
              f" -> {args.workers * one / many:.2f}x the throughput of one")
    print(f"load average at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
