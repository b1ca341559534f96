"""The baselines on the synthetic corpus at demo scale: RN on every split, plus the controls.

Runs, over a build folder made by `make demo` (or `vprom build --synthetic` + `vprom extract`):
the relation network on each of the seven splits, the context-blind model and the
shuffled-context relation network on neutral; evaluates each and prints one table (test
accuracy, 95% interval, test size). Synthetic figures only show the pipeline learns and the
controls stay at chance; they say nothing about V-PROM on Visual Genome.

    .venv/bin/python bench/synthetic_baselines.py build/demo [--epochs 15]
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from vprom.baselines.config import TrainConfig
from vprom.baselines.evaluate import evaluate
from vprom.baselines.train import train
from vprom.domain import SPLITS


def runs(epochs: int):
    for split in SPLITS:
        yield f"rn/{split}", dict(model="rn", split=split)
    yield "context-blind/neutral", dict(model="context-blind", split="neutral")
    yield "rn-shuffled-context/neutral", dict(model="rn", split="neutral", shuffle_context=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("build", type=Path, help="folder with dataset.h5 and features/resnet18.h5")
    p.add_argument("--features", type=Path, default=None)
    p.add_argument("--epochs", type=int, default=15)
    p.add_argument("--out", type=Path, default=None, help="runs folder (default BUILD/bench-runs)")
    args = p.parse_args()
    features = args.features or args.build / "features" / "resnet18.h5"
    out = args.out or args.build / "bench-runs"
    print(f"load average {os.getloadavg()[0]:.1f}; dataset {args.build / 'dataset.h5'}; "
          f"features {features}; {args.epochs} epochs, centred features")
    rows = []
    for name, options in runs(args.epochs):
        start = time.perf_counter()
        run = train(TrainConfig(dataset=args.build / "dataset.h5", features=features,
                                out=out / name.replace("/", "-"), epochs=args.epochs,
                                center_features=True, **options))
        test = evaluate(run)["test"]
        rows.append((name, test, time.perf_counter() - start))
    print("\n| run | test accuracy | 95% interval | test matrices | seconds |")
    print("|---|---:|---|---:|---:|")
    for name, t, secs in rows:
        low, high = t["ci95"]
        print(f"| {name} | {100 * t['accuracy']:.1f}% | {100 * low:.1f}–{100 * high:.1f}% "
              f"| {t['n']:,} | {secs:.0f} |")


if __name__ == "__main__":
    main()
