"""Training speed of the four paper models: matrices/s and the time of a full neutral epoch.

What is timed is `baselines.train.train_one_epoch`, the loop `vprom train` runs (the feature
table on the device, one gather a batch; `--cuda-graphs` replays each step from a CUDA graph,
`CudaGraphStep`), on random L2-normalised features of the paper's size (D = 2048) and random
matrices: --matrices training matrices over --crops distinct crops, each model's defaults
(`baselines/defaults.json`) at the paper's batch size 64, after one untimed warm-up epoch.
The full-epoch time is extrapolated to the neutral split's 148,671 training matrices.

    .venv/bin/python bench/training.py --device cpu --matrices 640           # here (CPU)
    python bench/training.py --device cuda --matrices 148671                 # one GPU
    python bench/training.py --device cuda --matrices 148671 --cuda-graphs
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
import torch

from vprom.baselines.config import TrainConfig
from vprom.baselines.data import MatrixSet, SplitData
from vprom.baselines.train import (CudaGraphStep, build_model, epoch_batches, make_optimizer,
                                   train_one_epoch, train_step)
from vprom.runtime import World, resolve_device

PAPER_MODELS = ("mlp-sum-6", "gru-shared", "vqa", "rn")
NEUTRAL_TRAIN = 148_671


def get_args_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default=None, help="cpu, cuda, cuda:N (default: cuda if any)")
    p.add_argument("--matrices", type=int, default=640, help="training matrices per epoch")
    p.add_argument("--crops", type=int, default=0, help="distinct crops (default 2 x matrices)")
    p.add_argument("--feature-dim", type=int, default=2048)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--epochs", type=int, default=1, help="timed epochs per model")
    p.add_argument("--models", default=",".join(PAPER_MODELS))
    p.add_argument("--aux", action="store_true")
    p.add_argument("--cuda-graphs", action="store_true")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    return p


def random_split(args, device: torch.device) -> SplitData:
    """Random features and matrices of the requested size, already on `device`."""
    g = torch.Generator().manual_seed(0)
    n, crops = args.matrices, args.crops or 2 * args.matrices
    features = torch.nn.functional.normalize(torch.randn(crops, args.feature_dim, generator=g),
                                             dim=1)
    part = MatrixSet(ids=np.arange(n), rows=torch.randint(crops, (n, 16), generator=g),
                     answer=torch.randint(8, (n,), generator=g),
                     relation=torch.randint(4, (n,), generator=g),
                     element_class=torch.randint(3, (n,), generator=g),
                     relation_name=np.array(["and"] * n), element_type=np.array(["object"] * n))
    empty = part.take(np.zeros(0, dtype=np.int64))
    return SplitData(features, {"train": part, "val": empty, "test": empty}, {}).to(device)


def epoch_seconds(name: str, data: SplitData, args, world: World) -> float:
    """Median seconds of the timed epochs."""
    config = TrainConfig(dataset="random", features="random", model=name, split="neutral",
                         out="unused", batch_size=args.batch, aux=args.aux).resolved()
    model, _ = build_model(config, data.feature_dim)
    model.to(world.device)
    optimizer = make_optimizer(config, model, capturable=args.cuda_graphs)
    step = CudaGraphStep(world) if args.cuda_graphs else train_step
    times = []
    for epoch in range(1 + args.epochs):  # epoch 0 warms up, untimed
        if world.device.type == "cuda":
            torch.cuda.synchronize(world.device)
        began = time.perf_counter()
        batches = epoch_batches(args.matrices, args.batch, 0, epoch, world)
        train_one_epoch(model, optimizer, data, batches, args.aux, world, step)  # reads back
        times.append(time.perf_counter() - began)
    return float(np.median(times[1:]))


def main(args) -> None:
    if args.threads:
        torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    world = World(0, 1, 0, device, owns_group=False)
    data = random_split(args, device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else (
        f"CPU, {torch.get_num_threads()} threads")
    print(f"{name}; torch {torch.__version__}; {args.matrices:,} matrices x 16 panels over "
          f"{args.crops or 2 * args.matrices:,} crops, D {args.feature_dim}, batch {args.batch}"
          f"{', aux' if args.aux else ''}{', CUDA graphs' if args.cuda_graphs else ''}; "
          f"load average {os.getloadavg()[0]:.1f}")
    print("| model | matrices/s | epoch s | full neutral epoch (148,671) |")
    print("|---|---:|---:|---:|")
    for model in args.models.split(","):
        seconds = epoch_seconds(model.strip(), data, args, world)
        rate = args.matrices / seconds
        print(f"| {model} | {rate:,.0f} | {seconds:.3f} | {NEUTRAL_TRAIN / rate:,.1f} s |",
              flush=True)


if __name__ == "__main__":
    main(get_args_parser().parse_args())
