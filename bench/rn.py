"""Training throughput of the fast relation network against the direct Eq. 7-8 implementation.

Both models get the same weights and the same random batches (L2-normalised features, random
answers); one training step is forward + softmax cross-entropy over the 8 candidates +
backward + an AdaDelta step, as in training. The two are timed in alternation, one step of
each per round, so that load from other processes on a shared machine falls on both alike;
the figure to quote is the ratio of median step times. Run from the repository root:

    .venv/bin/python bench/rn.py                 # batch 64, D 2048 (+16 ids), 512 hidden
    .venv/bin/python bench/rn.py --rounds 3 --batch 8   # a quick look
    .venv/bin/python bench/rn.py --threads 1     # steadier when other jobs load the cores
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch import nn

from vprom.baselines.parts import ModelConfig
from vprom.baselines.registry import get_model


def get_args_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--feature-dim", type=int, default=2048)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--layers", type=int, default=2, help="k: f1 and f2 get k/2 layers")
    parser.add_argument("--rounds", type=int, default=5, help="timed steps of each model")
    parser.add_argument("--warmup", type=int, default=1, help="untimed steps of each model")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--threads", type=int, default=0, help="torch threads (0: torch's default)"
    )
    return parser


def make_batches(args, count: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(args.seed)
    batches = []
    for _ in range(count):
        panels = torch.randn(args.batch, 16, args.feature_dim, generator=generator)
        panels = nn.functional.normalize(panels, dim=-1)
        answers = torch.randint(0, 8, (args.batch,), generator=generator)
        batches.append((panels, answers))
    return batches


def train_step(model: nn.Module, optimizer, panels, answers) -> float:
    """One training step; returns its wall time in seconds."""
    start = time.perf_counter()
    optimizer.zero_grad(set_to_none=True)
    loss = nn.functional.cross_entropy(model(panels).scores, answers)
    loss.backward()
    optimizer.step()
    return time.perf_counter() - start


def main(args) -> None:
    if args.threads:
        torch.set_num_threads(args.threads)
    config = ModelConfig(feature_dim=args.feature_dim, hidden=args.hidden, layers=args.layers)
    torch.manual_seed(args.seed)
    fast = get_model("rn", config)
    direct = get_model("rn-direct", config)
    direct.load_state_dict(fast.state_dict())
    models = {"rn (fast)": fast, "rn-direct": direct}
    optimizers = {name: torch.optim.Adadelta(m.parameters()) for name, m in models.items()}
    times: dict[str, list[float]] = {name: [] for name in models}
    batches = make_batches(args, args.warmup + args.rounds)
    print(
        f"batch {args.batch}, D {args.feature_dim}+16, hidden {args.hidden}, k {args.layers}, "
        f"torch {torch.__version__}, {torch.get_num_threads()} threads; "
        f"{args.warmup} warm-up + {args.rounds} timed steps each, interleaved"
    )
    for round_index, (panels, answers) in enumerate(batches):
        for name, model in models.items():
            seconds = train_step(model, optimizers[name], panels, answers)
            if round_index >= args.warmup:
                times[name].append(seconds)
        if round_index >= args.warmup:
            ratio = times["rn-direct"][-1] / times["rn (fast)"][-1]
            print(
                f"round {round_index - args.warmup + 1}: fast {times['rn (fast)'][-1]:.3f} s, "
                f"direct {times['rn-direct'][-1]:.3f} s, ratio {ratio:.1f}x"
            )
    for name, seconds in times.items():
        median = statistics.median(seconds)
        print(f"{name:10s} median step {median:.3f} s = {args.batch / median:8.1f} matrices/s")
    ratio = statistics.median(times["rn-direct"]) / statistics.median(times["rn (fast)"])
    print(f"speed-up (ratio of medians): {ratio:.1f}x")


if __name__ == "__main__":
    main(get_args_parser().parse_args())
