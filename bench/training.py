"""Training speed of the four paper models: matrices/s and the time of a full neutral epoch.

What is timed is `baselines.train.train_epoch`, the real training path (`baselines.steps`: the
feature table on the device, per-epoch index tensors, a step that reads nothing back, CUDA
graphs with --cuda-graphs), on random L2-normalised features of the paper's size (D = 2048)
and random matrices: --matrices training matrices over --crops distinct crops, AdaDelta with
each model's defaults (`baselines/defaults.json`), at the paper's batch size 64, one
untimed warm-up epoch first. Side by side, in the same process, the plain loop it replaced
(`tests.baselines.test_steps.reference_epoch`: batch indices copied from the host every step,
figures read back every step) is timed on the same data, so the ratio is measured, not
estimated. The full-epoch time is extrapolated to the neutral split's 148,671 training
matrices from the measured rate.

    .venv/bin/python bench/training.py --device cpu --matrices 640           # here (CPU)
    python bench/training.py --device cuda --matrices 148671                 # one GPU
    python bench/training.py --device cuda --matrices 148671 --cuda-graphs
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np
import torch


from vprom.baselines.config import TrainConfig  # noqa: E402
from vprom.baselines.data import MatrixSet, SplitData  # noqa: E402
from vprom.baselines.steps import Stepper, epoch_share, make_optimizer  # noqa: E402
from vprom.baselines.train import build_model, train_epoch  # noqa: E402
from vprom.runtime import World, resolve_device  # noqa: E402

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
    p.add_argument("--no-plain", dest="plain", action="store_false",
                   help="skip the plain loop it replaced")
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
    return SplitData(features, {"train": part, "val": empty, "test": empty}, {}, Path("random"),
                     Path("random")).to(device)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_model(name: str, data: SplitData, args, world: World) -> dict:
    """Median epoch seconds of each path; the paths alternate epoch by epoch, so that load
    from other processes falls on both alike."""
    from tests.baselines.test_steps import reference_epoch

    config = TrainConfig(dataset="random", features="random", model=name, split="neutral",
                         out="unused", batch_size=args.batch, aux=args.aux,
                         cuda_graphs=args.cuda_graphs).resolved()
    runners = {}
    for path in ["device"] + (["plain"] if args.plain else []):
        model, _ = build_model(config, data.feature_dim)
        model.to(world.device)
        optimizer = make_optimizer(config.optimizer, model.parameters(), lr=config.lr,
                                   eps=config.eps, rho=config.rho,
                                   capturable=args.cuda_graphs and world.device.type == "cuda")
        if path == "device":
            shape = epoch_share(args.matrices, args.batch, 0, 0, world).index.shape
            stepper = Stepper(model, optimizer, data, args.aux, world, *shape,
                              cuda_graphs=args.cuda_graphs)
            runners[path] = lambda epoch, s=stepper: train_epoch(s, config, epoch, world)
        else:
            runners[path] = lambda epoch, m=model, o=optimizer: reference_epoch(
                m, o, data, config, epoch)
    times: dict[str, list[float]] = {path: [] for path in runners}
    for epoch in range(1 + args.epochs):  # epoch 0 warms up, untimed
        for path, run in runners.items():
            synchronize(world.device)
            began = time.perf_counter()
            run(epoch)
            synchronize(world.device)
            if epoch:
                times[path].append(time.perf_counter() - began)
    return {path: float(np.median(t)) for path, t in times.items()}


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
    print("| model | device path: matrices/s | full neutral epoch (148,671) | plain loop: "
          "matrices/s | device / plain |")
    print("|---|---:|---:|---:|---:|")
    for model in args.models.split(","):
        seconds = time_model(model.strip(), data, args, world)
        rate = args.matrices / seconds["device"]
        plain = args.matrices / seconds["plain"] if "plain" in seconds else None
        print(f"| {model} | {rate:,.0f} | {NEUTRAL_TRAIN / rate:,.1f} s | "
              + (f"{plain:,.0f} | {rate / plain:.2f}x |" if plain else "— | — |"), flush=True)


if __name__ == "__main__":
    main(get_args_parser().parse_args())
