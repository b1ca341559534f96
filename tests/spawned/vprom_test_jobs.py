"""Functions that tests run in spawned worker processes.

A spawned process finds a function by importing its module by name. The `tests` package is
not importable by name in a child: pytest runs in importlib mode and puts no folder of the
repository on sys.path, so that `import mining` fails as it does for users. This folder is on
sys.path instead (pyproject's `pythonpath`), and holds only these functions.
"""

from __future__ import annotations

import json
import os

from vprom.errors import VpromError


def square(x: int) -> int:
    return x * x


def fail_at(x: int) -> int:
    if x == 37:
        raise VpromError("record 37 is broken")
    if x == 38:
        raise ValueError("not a VpromError")
    if x == 39:
        os._exit(3)  # a worker that dies without a word (killed, out of memory)
    return x


def wait_for_parent(conn) -> None:
    conn.send("ready")
    conn.recv()  # until the parent writes or goes away


def ddp_rank(rank: int, dataset: str, source: str, rendezvous: str, out: str) -> None:
    """One DDP rank: gloo, a DistributedSampler, `vprom.data.loader` with a worker."""
    import torch.distributed as dist
    from torch.utils.data import DistributedSampler

    from vprom.data import VPROM, loader

    dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=rank, world_size=2)
    try:
        data = VPROM(dataset, "neutral", "train", source=source, shuffle_candidates=True)
        sampler = DistributedSampler(data, shuffle=True, seed=5)
        sampler.set_epoch(3)
        ids = [i for b in loader(data, 3, sampler=sampler, num_workers=1) for i in b["id"].tolist()]
        with open(f"{out}.{rank}", "w") as f:
            json.dump(ids, f)
    finally:
        dist.destroy_process_group()


def announce_and_sleep(seconds: float) -> None:
    """A job that says which worker took it, then keeps that worker busy."""
    import time

    os.write(1, f"busy {os.getpid()}\n".encode())  # one write: two workers' lines never mix
    time.sleep(seconds)
