"""The runtime of the torch stages: the device and the data-parallel processes (`World`).

`--device` names `cpu`, `cuda` or `cuda:N` (default: CUDA when available); under `torchrun`
(WORLD_SIZE > 1) a plain `cuda` is `cuda:LOCAL_RANK`, and `joined_world` starts the process
group (nccl on CUDA, gloo on the CPU) unless one exists, and ends it.
"""

from __future__ import annotations

import math
import os
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta

import numpy as np
import torch
import torch.distributed as dist

from vprom.errors import VpromError


def resolve_device(requested: str | None, local_rank: int = 0,
                   distributed: bool = False) -> torch.device:
    """The indexed torch device this process should use."""
    if requested is None:
        requested = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(requested)
    except (RuntimeError, TypeError):
        raise VpromError(f"--device {requested}: not a torch device; use cpu, cuda or "
                         "cuda:N") from None
    if device.type == "cpu":
        return torch.device("cpu")
    if device.type != "cuda":
        raise VpromError(f"--device {requested}: vprom runs on cpu or cuda devices")
    if not torch.cuda.is_available():
        raise VpromError(f"--device {requested}: CUDA is not available on this machine; use "
                         "--device cpu")
    if distributed and device.index is not None:
        raise VpromError(f"--device {requested}: under torchrun every process uses the GPU of "
                         "its LOCAL_RANK; pass --device cuda (choose the GPUs with "
                         "CUDA_VISIBLE_DEVICES)")
    index = local_rank if device.index is None else device.index
    count = torch.cuda.device_count()
    if index >= count:
        raise VpromError(f"--device {requested}: this process would use GPU {index}, but "
                         f"{count} GPU(s) are visible; use --device cuda:0 .. cuda:{count - 1}"
                         " (or fewer processes per node)")
    device = torch.device("cuda", index)
    torch.cuda.set_device(device)
    return device


@dataclass(frozen=True)
class World:
    """This process's place among the data-parallel processes (rank 0 of 1 when alone)."""

    rank: int
    size: int
    local_rank: int
    device: torch.device
    owns_group: bool  # joined_world started the process group

    @property
    def main(self) -> bool:
        return self.rank == 0

    def barrier(self) -> None:
        if self.size > 1:
            dist.barrier()

    def all_sum(self, values: list[float]) -> list[float]:
        """Sum figures over processes (float64, so counts stay exact)."""
        if self.size == 1:
            return values
        t = torch.tensor(values, dtype=torch.float64, device=self.device)
        dist.all_reduce(t)
        return t.tolist()

    def shard(self, index: np.ndarray) -> np.ndarray:
        return np.array_split(index, self.size)[self.rank]


@contextmanager
def joined_world(requested_device: str | None, timeout: timedelta | None = None):
    """This process's `World` for a `with` block; a normal exit first waits for the others."""
    size = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = resolve_device(requested_device, local_rank, distributed=size > 1)
    world = World(0, 1, 0, device, owns_group=False)
    if size > 1:
        owns = not dist.is_initialized()
        if owns:
            dist.init_process_group("nccl" if device.type == "cuda" else "gloo",
                                    **({"timeout": timeout} if timeout else {}))
        world = World(dist.get_rank(), dist.get_world_size(), local_rank, device, owns)
    try:
        yield world
        world.barrier()  # gloo torn down while a peer still sends can abort the process
    finally:
        if world.owns_group:
            dist.destroy_process_group()


def cosine_lr(lr: float, done: float, total: int) -> float:
    """The rate after `done` of `total` epochs on a cosine from `lr` to 0: torch's CosineAnnealingLR
    in closed form, taken from the position so that a resumed run needs no scheduler state."""
    return lr * (1 + math.cos(math.pi * done / total)) / 2


def epoch_batches(n: int, batch_size: int, seed: int, epoch: int,
                  world: World) -> list[tuple[torch.Tensor, float]]:
    """This process's share of each batch of epoch `epoch` (positions in the training part,
    on the device), with the loss scale world size / batch size."""
    order = np.random.default_rng(np.random.SeedSequence([seed, epoch])).permutation(n)
    # tensor_split cuts like np.array_split; its pieces are views of one upload per epoch
    batches = torch.from_numpy(order).to(world.device).tensor_split(
        max(1, math.ceil(n / batch_size)))
    return [(batch.tensor_split(world.size)[world.rank], world.size / len(batch))
            for batch in batches]
