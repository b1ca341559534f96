"""One training epoch at device speed: the epoch's batches as device tensors, one step function.

An epoch's arithmetic is small next to what a plain loop spends around it on a GPU (copying
each batch's indices to the device, reading figures back, launching kernels one by one), so:

Epoch share (host, once per epoch). Epoch e visits the training matrices in the order of a
permutation drawn from a generator seeded by (seed, e), cut into ceil(n / batch_size)
batches of near-equal size (no tiny last batch). Under torchrun each process takes a
contiguous share of every batch. The shares are padded to one width W with a weight of 0
(padding repeats a real row, so every number stays finite): `index [S, W]`, `weight [S, W]`
and `scale [S]` = world size / the global batch's size, for the S steps. They are copied to
the device once per epoch (from pinned memory on CUDA, without waiting).

Step (device only). The step reads its batch from those tensors at a step counter that lives
on the device and is incremented there, gathers the panels from the feature table already on
the device, and adds its summed answer loss, auxiliary loss and correct answers to running
sums on the device, which are read once, at the end of the epoch. The loss it minimises is
the weighted sum over its share times `scale`: with DDP's gradient average over processes
that is the mean over the global batch, the same update as one process. A padded row weighs
0, so its loss and gradient add exactly nothing.

Because a step takes no argument and reads nothing back, the same function can be captured
once in a CUDA graph and replayed (`cuda_graphs`): the first `WARMUP_STEPS` steps of the run
execute eagerly on a side stream (they are real steps, so nothing changes in what is
computed), one graph is captured, and every later step is one replay instead of some hundred
kernel launches. Graphs need a fixed shape, which the padding gives, one process (DDP's
hooks are not captured here) and a `capturable` optimiser.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from vprom.baselines.data import MatrixSet, SplitData
from vprom.errors import VpromError
from vprom.runtime import World

WARMUP_STEPS = 3  # eager steps before capture: cuBLAS handles, optimiser state, autograd


def batches(n: int, batch_size: int, seed: int, epoch: int) -> list[np.ndarray]:
    """Epoch `epoch`'s batches: a seeded permutation cut in ceil(n/batch_size) near-equal parts."""
    order = np.random.default_rng(np.random.SeedSequence([seed, epoch])).permutation(n)
    return np.array_split(order, max(1, math.ceil(n / batch_size)))


@dataclass(frozen=True)
class EpochShare:
    """One process's share of every batch of an epoch, padded to one width (host arrays)."""

    index: np.ndarray  # [S, W] int64 positions in the training part
    weight: np.ndarray  # [S, W] float32: 1 for a real row, 0 for padding
    scale: np.ndarray  # [S] float32: world size / the global batch's size
    count: int  # real rows of this process over the epoch

    @property
    def steps(self) -> int:
        return len(self.index)


def epoch_share(n: int, batch_size: int, seed: int, epoch: int, world: World) -> EpochShare:
    """This process's share of epoch `epoch`'s batches (see the module doc)."""
    epoch_batches = batches(n, batch_size, seed, epoch)
    shares = [world.shard(b) for b in epoch_batches]
    width = max(len(s) for s in shares)
    index = np.zeros((len(epoch_batches), width), dtype=np.int64)
    weight = np.zeros((len(epoch_batches), width), dtype=np.float32)
    for step, share in enumerate(shares):
        index[step, :len(share)] = share
        index[step, len(share):] = share[0] if len(share) else 0
        weight[step, :len(share)] = 1
    scale = np.array([world.size / len(b) for b in epoch_batches], dtype=np.float32)
    return EpochShare(index, weight, scale, int(sum(len(s) for s in shares)))


def upload(array: np.ndarray, device: torch.device) -> torch.Tensor:
    """A host array as a tensor on `device`; on CUDA staged in pinned memory, not waited for."""
    tensor = torch.from_numpy(np.ascontiguousarray(array))
    if device.type == "cuda":
        return tensor.pin_memory().to(device, non_blocking=True)
    return tensor.to(device)


class Stepper:
    """The training step over device-resident epoch shares, eager or replayed from a CUDA graph.

    The share tensors, the step counter and the running sums are allocated once and refilled
    in place every epoch, so a captured graph keeps reading the right memory.
    """

    def __init__(self, model, optimizer, data: SplitData, aux: bool, world: World,
                 steps: int, width: int, cuda_graphs: bool = False):
        device = data.features.device
        self.model, self.optimizer, self.data, self.aux = model, optimizer, data, aux
        self.part: MatrixSet = data.parts["train"]
        self.device, self.graphs = device, cuda_graphs
        self.index = torch.zeros((steps, width), dtype=torch.int64, device=device)
        self.weight = torch.zeros((steps, width), dtype=torch.float32, device=device)
        self.scale = torch.zeros(steps, dtype=torch.float32, device=device)
        self.counter = torch.zeros(1, dtype=torch.int64, device=device)
        # answer loss, aux loss, correct; float64 so sums over an epoch stay exact enough
        self.totals = torch.zeros(3, dtype=torch.float64, device=device)
        self.done = 0  # steps taken by this Stepper (the warm-up counts them)
        self.graph = None
        if cuda_graphs and world.size > 1:
            raise VpromError("--cuda-graphs runs on one process; drop it under torchrun")

    def load(self, share: EpochShare) -> None:
        """Refill the share tensors in place with the next epoch's share; reset the sums."""
        if share.index.shape != tuple(self.index.shape):
            raise VpromError(f"epoch share of shape {share.index.shape}, expected "
                             f"{tuple(self.index.shape)}; the training part changed size")
        self.index.copy_(upload(share.index, self.device), non_blocking=True)
        self.weight.copy_(upload(share.weight, self.device), non_blocking=True)
        self.scale.copy_(upload(share.scale, self.device), non_blocking=True)
        self.counter.zero_()
        self.totals.zero_()

    def step(self) -> None:
        """One optimiser step on the batch at the counter; nothing is read back to the host."""
        index = self.index.index_select(0, self.counter).squeeze(0)  # [W]
        weight = self.weight.index_select(0, self.counter).squeeze(0)
        scale = self.scale.index_select(0, self.counter)
        part = self.part
        out = self.model(self.data.panels(part, index))
        answer = F.cross_entropy(out.scores, part.answer[index], reduction="none")
        extra = torch.zeros_like(answer)
        if self.aux:
            if out.relation_logits is None or out.element_type_logits is None:
                raise VpromError("--aux: this model returned no auxiliary logits; train it "
                                 "without --aux")
            extra = (F.cross_entropy(out.relation_logits, part.relation[index], reduction="none")
                     + F.cross_entropy(out.element_type_logits, part.element_class[index],
                                       reduction="none"))
        loss = ((answer + extra) * weight).sum() * scale.squeeze(0)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        correct = (out.scores.argmax(1) == part.answer[index]).to(weight.dtype)
        self.totals += torch.stack([(answer.detach() * weight).sum(),
                                    (extra.detach() * weight).sum(),
                                    (correct * weight).sum()]).double()
        self.counter += 1

    def run(self) -> None:
        """Take the next step: eagerly, or (with graphs) warm up, capture once, then replay."""
        if not self.graphs:
            self.step()
        elif self.graph is not None:
            self.graph.replay()
        elif self.done < WARMUP_STEPS:
            warm_up(self.step)
        else:
            self.graph = capture(self.step)
            self.graph.replay()  # capturing records the step; replaying takes it
        self.done += 1

    def figures(self) -> torch.Tensor:
        """The epoch's running sums (answer loss, aux loss, correct), still on the device."""
        return self.totals


def warm_up(step) -> None:
    """Run `step` on a side stream, as CUDA graph capture wants its warm-up steps run."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()
    torch.cuda.current_stream().wait_stream(side)


def capture(step):
    """A CUDA graph of `step` (capturing records its kernels without running them)."""
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    return graph


def make_optimizer(name: str, params, lr: float, eps: float, rho: float | None,
                   capturable: bool) -> torch.optim.Optimizer:
    """AdaDelta or Adam with the run's settings; `capturable` for CUDA graphs."""
    extra = {"capturable": True} if capturable else {}
    if name == "adam":
        return torch.optim.Adam(params, lr=lr, eps=eps, **extra)
    return torch.optim.Adadelta(params, lr=lr, rho=rho, eps=eps, **extra)
