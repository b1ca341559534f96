"""Training throughput of the later solvers beside the relation network, on the CPU or a GPU.

Each model is built at its defaults (`baselines/defaults.json`: hidden width, batch size,
optimiser) for V-PROM's sizes: pooled features of D = 2048, ResNet-101 maps of 2048 x 7 x 7,
or crop-store pixels of 3 x S x S (--pixel-size, default 80, PredRNet's input size). One
training step is forward + softmax cross-entropy over the 8 candidates + backward + the
optimiser's step, on random inputs, as in training. The models are timed in alternation, one
step of each per round, so that load from other processes falls on all alike; the figures are
medians. Printed per model: its input kind, parameters, batch, median step, matrices per
second, and its time per matrix over the relation network's (pooled-feature models must stay
within 3x).

    .venv/bin/python bench/zoo.py --threads 1                  # every model, the CPU
    .venv/bin/python bench/zoo.py --models rn,wren,scl --rounds 5
    .venv/bin/python bench/zoo.py --device cuda --rounds 20    # on a GPU
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch import nn

from vprom.baselines.config import TrainConfig
from vprom.baselines.parts import ModelConfig
from vprom.baselines.registry import get_model, input_kind
from vprom.baselines.train import make_optimizer

MODELS = ("rn", "wren", "scl", "panel-transformer-pooled", "panel-transformer",
          "predrnet-maps", "predrnet", "context-blind-pixels")


def get_args_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS), help="rn first: the reference")
    parser.add_argument("--feature-dim", type=int, default=2048)
    parser.add_argument("--map-side", type=int, default=7)
    parser.add_argument("--pixel-size", type=int, default=80)
    parser.add_argument("--rounds", type=int, default=3, help="timed steps of each model")
    parser.add_argument("--warmup", type=int, default=1, help="untimed steps of each model")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    return parser


def setup(name: str, args) -> dict:
    """The model at its defaults, its optimiser, and one random batch of its input kind."""
    defaults = TrainConfig(dataset=".", model=name, split="neutral", out=".").resolved()
    kind = input_kind(name)
    shape = {"vectors": (args.feature_dim,),
             "maps": (args.feature_dim, args.map_side, args.map_side),
             "pixels": (3, args.pixel_size, args.pixel_size)}[kind]
    config = ModelConfig(feature_dim=shape[0], hidden=defaults.hidden,
                         score_init=defaults.score_init, side=shape[-1] if kind != "vectors"
                         else 0)
    torch.manual_seed(0)
    model = get_model(name, config).to(args.device)
    optimizer = make_optimizer(defaults, model)
    batch = defaults.batch_size
    generator = torch.Generator().manual_seed(0)
    if kind == "pixels":
        panels = torch.randint(0, 256, (batch, 16, *shape), generator=generator,
                               dtype=torch.uint8)
    else:
        panels = torch.randn(batch, 16, *shape, generator=generator)
        panels = nn.functional.normalize(panels, dim=-1) if kind == "vectors" else panels
    answers = torch.randint(0, 8, (batch,), generator=generator)
    return {"model": model, "optimizer": optimizer, "panels": panels.to(args.device),
            "answers": answers.to(args.device), "kind": kind, "batch": batch,
            "parameters": sum(p.numel() for p in model.parameters()), "times": []}


def step(entry: dict, device: str) -> float:
    """One training step; its wall time in seconds."""
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    start = time.perf_counter()
    entry["optimizer"].zero_grad(set_to_none=True)
    loss = nn.functional.cross_entropy(entry["model"](entry["panels"]).scores, entry["answers"])
    loss.backward()
    entry["optimizer"].step()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return time.perf_counter() - start


def main(args) -> None:
    if args.threads:
        torch.set_num_threads(args.threads)
    entries = {name: setup(name, args) for name in args.models.split(",")}
    print(f"torch {torch.__version__}, {args.device}, {torch.get_num_threads()} threads; "
          f"D {args.feature_dim}, maps {args.feature_dim}x{args.map_side}x{args.map_side}, "
          f"pixels 3x{args.pixel_size}x{args.pixel_size}; {args.warmup} warm-up + "
          f"{args.rounds} timed steps each, interleaved")
    for round_index in range(args.warmup + args.rounds):
        for entry in entries.values():
            seconds = step(entry, args.device)
            if round_index >= args.warmup:
                entry["times"].append(seconds)
    reference = entries.get("rn")
    per_rn = (statistics.median(reference["times"]) / reference["batch"]) if reference else None
    print(f"{'model':26s} {'input':8s} {'parameters':>11s} {'batch':>5s} {'step s':>8s} "
          f"{'matrices/s':>11s} {'x rn':>6s}")
    for name, entry in entries.items():
        median = statistics.median(entry["times"])
        ratio = f"{median / entry['batch'] / per_rn:6.2f}" if per_rn else "     -"
        print(f"{name:26s} {entry['kind']:8s} {entry['parameters']:11,d} {entry['batch']:5d} "
              f"{median:8.3f} {entry['batch'] / median:11.1f} {ratio}")


if __name__ == "__main__":
    main(get_args_parser().parse_args())
