"""The device-speed epoch: each process's share of the batches, its equality with a plain loop,
and its CUDA-only branches reached on the CPU with a stand-in for `torch.cuda`."""

from __future__ import annotations

import contextlib
import copy
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import vprom.baselines.steps as steps
from vprom.baselines.data import load_split
from vprom.baselines.steps import Stepper, batches, epoch_share, make_optimizer, upload
from vprom.baselines.train import (
    build_model,
    ddp_device_ids,
    rng_devices,
    train_epoch,
)
from vprom.runtime import World
from tests.baselines.conftest import small_config

ONE = World(0, 1, 0, torch.device("cpu"), owns_group=False)


def world(rank: int, size: int) -> World:
    return World(rank, size, rank, torch.device("cpu"), owns_group=False)


# ---------------------------------------------------------------- the epoch share
@pytest.mark.parametrize("n, batch_size, size", [(120, 16, 1), (101, 16, 2), (37, 64, 1),
                                                 (50, 7, 3)])
def test_the_processes_shares_cover_every_batch_once(n, batch_size, size):
    per_rank = [epoch_share(n, batch_size, seed=4, epoch=2, world=world(r, size))
                for r in range(size)]
    expected = batches(n, batch_size, 4, 2)
    assert all(p.steps == len(expected) == max(1, math.ceil(n / batch_size)) for p in per_rank)
    for step, batch in enumerate(expected):
        # each process's real rows, in rank order, are the batch itself
        shares = [p.index[step][p.weight[step] == 1] for p in per_rank]
        assert np.array_equal(np.concatenate(shares), batch)
        for p in per_rank:
            assert p.scale[step] == pytest.approx(size / len(batch))
            assert set(p.weight[step].tolist()) <= {0.0, 1.0}
            assert np.all(p.index[step] >= 0) and np.all(p.index[step] < n)
    assert sum(p.count for p in per_rank) == n
    for rank, p in enumerate(per_rank):  # one shape every epoch: a graph can replay it
        assert epoch_share(n, batch_size, 4, 7, world(rank, size)).index.shape == p.index.shape


def test_the_share_is_fixed_by_seed_and_epoch():
    a, b = epoch_share(90, 16, 1, 3, ONE), epoch_share(90, 16, 1, 3, ONE)
    assert np.array_equal(a.index, b.index)
    assert not np.array_equal(a.index, epoch_share(90, 16, 1, 4, ONE).index)


# ---------------------------------------------------------------- equality with a plain loop
def reference_epoch(model, optimizer, data, config, epoch: int) -> dict:
    """The plain loop the device path replaced: host indices per batch, summed losses."""
    part = data.parts["train"]
    totals = np.zeros(4)
    for batch in batches(len(part), config.batch_size, config.seed, epoch):
        index = torch.from_numpy(batch)
        out = model(data.panels(part, index))
        answer = F.cross_entropy(out.scores, part.answer[index], reduction="sum")
        extra = answer.new_zeros(())
        if config.aux:
            extra = (F.cross_entropy(out.relation_logits, part.relation[index], reduction="sum")
                     + F.cross_entropy(out.element_type_logits, part.element_class[index],
                                       reduction="sum"))
        loss = (answer + extra) / len(batch)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        correct = (out.scores.argmax(1) == part.answer[index]).sum()
        totals += [answer.item(), extra.item(), correct.item(), len(batch)]
    return {"train_loss": (totals[0] + totals[1]) / totals[3], "train_acc": totals[2] / totals[3]}


def setup(tiny_pair, model: str, aux: bool):
    dataset, features = tiny_pair
    config = small_config(dataset, features, dataset.parent / "unused", model=model, aux=aux,
                          batch_size=24, epochs=3).resolved()
    data = load_split(dataset, features, "neutral")
    net, _ = build_model(config, data.feature_dim)
    optimizer = make_optimizer(config.optimizer, net.parameters(), lr=config.lr,
                               eps=config.eps, rho=config.rho, capturable=False)
    return config, data, net, optimizer


def stepper_for(net, optimizer, data, config, graphs=False) -> Stepper:
    shape = epoch_share(len(data.parts["train"]), config.batch_size, config.seed, 0,
                       ONE).index.shape
    return Stepper(net, optimizer, data, config.aux, ONE, *shape, cuda_graphs=graphs)


@pytest.mark.parametrize("model, aux", [("rn", True), ("mlp-sum-2", False), ("gru-shared", True)])
def test_device_epochs_equal_a_plain_loop(tiny_pair, model, aux):
    config, data, fast_net, fast_opt = setup(tiny_pair, model, aux)
    _, _, plain_net, plain_opt = setup(tiny_pair, model, aux)
    stepper = stepper_for(fast_net, fast_opt, data, config)
    # 120 matrices in batches of 24 (5 full ones); the last epoch's share is checked too
    for epoch in range(config.epochs):
        fast = train_epoch(stepper, config, epoch, ONE)
        plain = reference_epoch(plain_net, plain_opt, data, config, epoch)
        assert fast["train_loss"] == pytest.approx(plain["train_loss"], rel=1e-5)
        assert fast["train_acc"] == plain["train_acc"]
    for (name, a), b in zip(fast_net.state_dict().items(), plain_net.state_dict().values()):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6, msg=name)


def test_padding_rows_weigh_nothing(tiny_pair):
    # 120 matrices in 18 batches of 7 or 6 over 2 processes: rank 0's shares are 4 or 3
    # rows, so some steps are padded to the width 4; the first is compared with its real rows
    share = epoch_share(120, 7, 0, 0, world(0, 2))
    padded_steps = np.flatnonzero((share.weight == 0).any(axis=1))
    assert len(padded_steps)
    first = int(padded_steps[0])
    share = steps.EpochShare(share.index[first:], share.weight[first:], share.scale[first:],
                             share.count)
    _, data, net, optimizer = setup(tiny_pair, "mlp-sum-2", False)
    padded = Stepper(net, optimizer, data, False, world(0, 2), *share.index.shape)
    padded.load(share)
    before = copy.deepcopy(net.state_dict())
    padded.step()
    # the same step computed from the real rows alone
    _, _, other, other_opt = setup(tiny_pair, "mlp-sum-2", False)
    real = torch.from_numpy(share.index[0][share.weight[0] == 1])
    assert len(real) < share.index.shape[1]
    part = data.parts["train"]
    out = other(data.panels(part, real))
    loss = F.cross_entropy(out.scores, part.answer[real], reduction="sum") * share.scale[0]
    other_opt.zero_grad()
    loss.backward()
    other_opt.step()
    assert not all(torch.equal(before[k], v) for k, v in net.state_dict().items())
    for (name, a), b in zip(net.state_dict().items(), other.state_dict().values()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7, msg=name)


# ---------------------------------------------------------------- CUDA-only branches
class FakeStream:
    def __init__(self):
        self.waited = 0

    def wait_stream(self, other) -> None:
        self.waited += 1


class FakeGraph:
    """A captured step: `replay` runs it."""

    def __init__(self):
        self.step = None
        self.replays = 0

    def replay(self) -> None:
        self.replays += 1
        self.step()


@pytest.fixture
def fake_cuda(monkeypatch):
    """torch.cuda's streams and graphs, on the CPU: capturing a step records it and, like the
    real capture, leaves every tensor it touched as it was."""
    made: dict[str, list] = {"graphs": [], "streams": [], "entered": []}
    current = FakeStream()

    def stream():
        made["streams"].append(FakeStream())
        return made["streams"][-1]

    @contextlib.contextmanager
    def on_stream(s):
        made["entered"].append(s)
        yield

    def graph_class():
        made["graphs"].append(FakeGraph())
        return made["graphs"][-1]

    def install(stepper: Stepper):
        @contextlib.contextmanager
        def graph(g):
            saved = (copy.deepcopy(stepper.model.state_dict()),
                     copy.deepcopy(stepper.optimizer.state_dict()),
                     stepper.counter.clone(), stepper.totals.clone())
            yield  # the step runs here: undo it, as a real capture runs nothing
            stepper.model.load_state_dict(saved[0])
            stepper.optimizer.load_state_dict(saved[1])
            stepper.counter.copy_(saved[2])
            stepper.totals.copy_(saved[3])
            g.step = stepper.step

        monkeypatch.setattr(torch.cuda, "graph", graph)

    monkeypatch.setattr(torch.cuda, "Stream", stream)
    monkeypatch.setattr(torch.cuda, "stream", on_stream)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda: current)
    monkeypatch.setattr(torch.cuda, "CUDAGraph", graph_class)
    return made, install


def test_the_cuda_graph_path_takes_the_same_steps_as_the_eager_one(tiny_pair, fake_cuda):
    made, install = fake_cuda
    config, data, eager_net, eager_opt = setup(tiny_pair, "rn", True)
    _, _, graph_net, graph_opt = setup(tiny_pair, "rn", True)
    eager = stepper_for(eager_net, eager_opt, data, config)
    graphed = stepper_for(graph_net, graph_opt, data, config, graphs=True)
    install(graphed)
    for epoch in range(2):
        a = train_epoch(eager, config, epoch, ONE)
        b = train_epoch(graphed, config, epoch, ONE)
        assert a == b
    assert torch.equal(eager.totals, graphed.totals)
    for k, v in eager_net.state_dict().items():
        assert torch.equal(v, graph_net.state_dict()[k]), k
    # 2 epochs of 5 steps: 3 warm-up steps on a side stream, one capture, 7 replays
    assert len(made["graphs"]) == 1 and made["graphs"][0].replays == 7
    assert len(made["entered"]) == steps.WARMUP_STEPS
    assert all(s.waited == 1 for s in made["streams"])


def test_cuda_graphs_are_refused_where_they_cannot_run(tiny_pair):
    from vprom.errors import VpromError

    config, data, net, optimizer = setup(tiny_pair, "mlp-sum-2", False)
    with pytest.raises(VpromError, match="one process"):
        Stepper(net, optimizer, data, False, world(0, 2), 5, 24, cuda_graphs=True)
    dataset, features = tiny_pair
    with pytest.raises(VpromError, match="needs a CUDA device"):
        from vprom.baselines.train import train

        train(small_config(dataset, features, tiny_pair[0].parent / "never", cuda_graphs=True))


def test_uploads_go_through_pinned_memory_on_cuda(monkeypatch):
    calls = []
    monkeypatch.setattr(torch.Tensor, "pin_memory",
                        lambda self: calls.append("pin") or self)
    original_to = torch.Tensor.to

    def to(self, *args, **kwargs):
        calls.append(("to", args, kwargs))
        return original_to(self, "cpu")

    monkeypatch.setattr(torch.Tensor, "to", to)
    out = upload(np.arange(6).reshape(2, 3), torch.device("cuda", 1))
    assert calls == ["pin", ("to", (torch.device("cuda", 1),), {"non_blocking": True})]
    assert out.tolist() == [[0, 1, 2], [3, 4, 5]]


def test_rng_and_ddp_name_this_process_gpu(monkeypatch):
    gpu = torch.device("cuda", 3)
    assert rng_devices(gpu) == [3] and ddp_device_ids(gpu) == [3]
    assert rng_devices(torch.device("cpu")) == [] and ddp_device_ids(torch.device("cpu")) is None
    # fork_rng saves and restores exactly that GPU's generator
    seen = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    monkeypatch.setattr(torch.cuda, "get_rng_state", lambda d: seen.append(("get", d)) or 7)
    monkeypatch.setattr(torch.cuda, "set_rng_state",
                        lambda state, d: seen.append(("set", d, state)))
    with torch.random.fork_rng(devices=rng_devices(gpu)):
        pass
    assert seen == [("get", 3), ("set", 3, 7)]


def test_the_optimizer_is_capturable_for_graphs():
    params = [torch.nn.Parameter(torch.zeros(2))]
    for name in ("adadelta", "adam"):
        optimizer = make_optimizer(name, params, lr=1.0, eps=1e-6,
                                   rho=0.9 if name == "adadelta" else None, capturable=True)
        assert optimizer.defaults["capturable"] is True
        assert make_optimizer(name, params, lr=1.0, eps=1e-6, rho=0.9,
                              capturable=False).defaults["capturable"] is False
