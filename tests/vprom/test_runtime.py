"""Device resolution, tested on the CPU with a stand-in for `torch.cuda`."""

from __future__ import annotations

import pytest
import torch

from vprom import runtime as devices
from vprom.errors import VpromError
from vprom.runtime import joined_world, resolve_device


class FakeCuda:
    """Just enough of torch.cuda: `set_device` validates as the real one does."""

    def __init__(self, count: int):
        self.count = count
        self.current: list[torch.device] = []

    def is_available(self) -> bool:
        return self.count > 0

    def device_count(self) -> int:
        return self.count

    def set_device(self, device) -> None:
        # torch raises "Expected a torch.device with a specified index or an integer" here.
        if isinstance(device, torch.device) and device.index is None:
            raise ValueError("Expected a torch.device with a specified index or an integer")
        self.current.append(device)


@pytest.fixture
def gpus(monkeypatch):
    def install(count: int) -> FakeCuda:
        fake = FakeCuda(count)
        for name in ("is_available", "device_count", "set_device"):
            monkeypatch.setattr(torch.cuda, name, getattr(fake, name))
        return fake

    return install


def test_no_gpu_means_the_cpu(gpus):
    gpus(0)
    assert resolve_device(None) == torch.device("cpu")
    assert resolve_device("cpu") == torch.device("cpu")


def test_default_and_plain_cuda_are_indexed(gpus):
    fake = gpus(2)
    assert resolve_device(None) == torch.device("cuda", 0)
    assert resolve_device("cuda") == torch.device("cuda", 0)
    assert fake.current == [torch.device("cuda", 0)] * 2


def test_an_explicit_index_is_kept_when_alone(gpus):
    fake = gpus(2)
    assert resolve_device("cuda:1") == torch.device("cuda", 1)
    assert fake.current == [torch.device("cuda", 1)]


def test_under_torchrun_each_process_takes_its_local_rank(gpus):
    fake = gpus(4)
    assert resolve_device("cuda", local_rank=3, distributed=True) == torch.device("cuda", 3)
    assert resolve_device(None, local_rank=2, distributed=True) == torch.device("cuda", 2)
    assert fake.current == [torch.device("cuda", 3), torch.device("cuda", 2)]
    with pytest.raises(VpromError, match="LOCAL_RANK.*--device cuda"):
        resolve_device("cuda:1", local_rank=0, distributed=True)


@pytest.mark.parametrize("requested, message", [
    ("cuda:2", "GPU 2, but 2 GPU"),
    ("gpu", "not a torch device"),
    ("meta", "cpu or cuda"),
])
def test_bad_devices_are_named(gpus, requested, message):
    gpus(2)
    with pytest.raises(VpromError, match=message):
        resolve_device(requested)


def test_more_local_ranks_than_gpus_is_refused(gpus):
    gpus(2)
    with pytest.raises(VpromError, match="GPU 2, but 2 GPU"):
        resolve_device("cuda", local_rank=2, distributed=True)


def test_cuda_without_a_gpu_is_refused(gpus):
    gpus(0)
    with pytest.raises(VpromError, match="CUDA is not available.*--device cpu"):
        resolve_device("cuda")


def test_a_world_alone_on_a_gpu(gpus, monkeypatch):
    gpus(1)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    with joined_world("cuda") as world:
        assert (world.rank, world.size, world.main, world.owns_group) == (0, 1, True, False)
        assert world.device == torch.device("cuda", 0)


@pytest.fixture
def torchrun(monkeypatch):
    """Two processes as torchrun starts them, this one rank 1; returns the calls made."""
    calls = []
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setattr(devices.dist, "is_initialized", lambda: False)
    monkeypatch.setattr(devices.dist, "init_process_group",
                        lambda backend, **kw: calls.append(backend))
    monkeypatch.setattr(devices.dist, "get_rank", lambda: 1)
    monkeypatch.setattr(devices.dist, "get_world_size", lambda: 2)
    monkeypatch.setattr(devices.dist, "barrier", lambda: calls.append("barrier"))
    monkeypatch.setattr(devices.dist, "destroy_process_group", lambda: calls.append("destroy"))
    return calls


def test_a_world_under_torchrun_starts_nccl_on_gpus(gpus, torchrun):
    gpus(2)
    with joined_world(None) as world:
        assert torchrun == ["nccl"]
        assert world.device == torch.device("cuda", 1)
        assert (world.rank, world.size, world.local_rank, world.owns_group) == (1, 2, 1, True)


def test_a_joined_world_waits_for_its_peers_then_ends_the_group(gpus, torchrun):
    gpus(0)
    with joined_world(None) as world:
        assert world.device == torch.device("cpu")
    assert torchrun == ["gloo", "barrier", "destroy"]


def test_after_an_error_the_group_ends_without_waiting(gpus, torchrun):
    gpus(0)
    with pytest.raises(RuntimeError), joined_world("cpu"):
        raise RuntimeError("a rank failed")
    assert torchrun == ["gloo", "destroy"]
