"""`vprom.data.loader`: whole batches from workers through rings of shared memory they reuse.

What a user relies on: the loader gives `VPROM.batch`'s batches on any number of workers, a
batch kept by the user is never overwritten by a later one, and a slot is free again only
once nothing in the main process refers to its batch."""

from __future__ import annotations

import gc
import os
import pickle
from multiprocessing.reduction import ForkingPickler

import numpy as np
import pytest
import torch
from torch.utils.data import DistributedSampler

from vprom.data import VPROM, loader, shipping
from vprom_test_jobs import ddp_rank


def same(got: dict, want: dict) -> None:
    assert set(got) == set(want)
    for key, value in want.items():
        if torch.is_tensor(value):
            assert got[key].dtype == value.dtype and torch.equal(got[key], value), key
        else:
            assert got[key] == value, key


def data_of(build, source: str) -> VPROM:
    return VPROM(build.dataset, "neutral", "train", source=getattr(build, source),
                 shuffle_candidates=True, swap_rows=source == "crops", seed=7,
                 transform=(lambda x: x.float() / 255) if source == "crops" else None)


@pytest.mark.parametrize("source", ["features", "maps", "crops"])
@pytest.mark.parametrize("workers,group", [(0, None), (2, None), (2, 1), (2, 2)])
def test_the_loader_gives_the_batches_of_batch(own_build, source, workers, group):
    data = data_of(own_build, source)
    order = [5, 1, 3, 0, 2, 4, 6]
    rings = set(shipping._maps)
    got = loader(data, 3, sampler=order, num_workers=workers, group=group)
    batches = list(got)
    assert len(batches) == len(got) == 3  # 3 + 3 + 1, the last one short
    for k, batch in enumerate(batches):
        same(batch, data.batch(order[3 * k:3 * k + 3]))
    new = set(shipping._maps) - rings
    # each worker that got a message made a ring: by default all 3 batches go in one
    assert len(new) == {0: 0, 2: 1 if group in (None, 3) else 2}[workers]
    assert os.getpid() not in {pid for pid, _ in new}


def test_a_message_carries_batches_of_256_problems_up_to_16_mb(own_build):
    data = data_of(own_build, "features")
    problem = data.batch([0])["panels"].nbytes
    assert shipping.group_size(data, 32, workers=0) == 1
    assert shipping.group_size(data, 32, workers=2) == min(8, (16 << 20) // (32 * problem))
    assert shipping.group_size(data, 300, workers=2) == 1
    big = max(1, (16 << 20) // problem)  # a batch whose panels pass 16 MB goes alone
    assert shipping.group_size(data, big, workers=2) == 1


def test_batches_the_user_keeps_are_never_overwritten(own_build):
    data = data_of(own_build, "features")
    order = list(range(len(data))) * 3
    kept = list(data.loader(2, sampler=order, num_workers=2, prefetch_factor=1))
    # 2 slots a worker (prefetch_factor + 2) and every batch kept: most went torch's way
    assert len(kept) > 8
    for k, batch in enumerate(kept):
        same(batch, data.batch(order[2 * k:2 * k + 2]))


def test_a_slot_is_free_again_once_its_batch_and_views_are_gone(own_build):
    ring = shipping.Ring(4 * 16 * 8 * 4, slots=2)
    slot, panels = ring.take((4, 16, 8), torch.float32)
    panels.copy_(torch.arange(4 * 16 * 8, dtype=torch.float32).view(4, 16, 8))
    parcel = shipping.Parcel(ring, slot, {"panels": panels, "answer": torch.arange(4),
                                          "relation": ["and"] * 4})
    sent = bytes(ForkingPickler.dumps(parcel))  # as a worker's queue sends it
    batch = pickle.loads(sent)  # as the main process receives it (the descriptor, once)
    assert torch.equal(batch["panels"], panels) and batch["relation"] == ["and"] * 4
    assert torch.equal(batch["answer"], torch.arange(4)) and ring.taken[slot] == 1
    view, array = batch["panels"][1:3], batch["panels"].numpy()
    del batch
    gc.collect()
    assert ring.taken[slot] == 1  # the view and the array still show the slot
    assert view[0, 0, 0] == 16 * 8 and array[3, 15, 7] == 4 * 16 * 8 - 1
    del view, array
    gc.collect()
    assert ring.taken[slot] == 0
    slot, panels = ring.take((2, 3), torch.int64)
    panels.copy_(torch.arange(6).view(2, 3))
    again = pickle.loads(bytes(ForkingPickler.dumps(shipping.Parcel(ring, slot,
                                                                    {"panels": panels}))))
    assert torch.equal(again["panels"], torch.arange(6).view(2, 3))  # the map, no descriptor


def test_a_ring_hands_out_only_free_slots_that_fit(own_build):
    ring = shipping.Ring(100, slots=2)
    assert ring.take((1, 16, 8), torch.bfloat16) is None  # no numpy twin
    assert ring.take((ring.slot_bytes + 1,), torch.uint8) is None
    first, second = ring.take((10,), torch.float32), ring.take((10,), torch.float32)
    assert {first[0], second[0]} == {0, 1} and ring.take((10,), torch.float32) is None


def test_without_memfd_workers_hand_batches_over_torchs_way(own_build, monkeypatch):
    data = data_of(own_build, "features")
    batches = shipping.Batches(data, slots=4)
    monkeypatch.setattr(shipping, "get_worker_info", lambda: object())  # as in a worker
    assert isinstance(batches[[[0, 1]]][0], shipping.Parcel)
    fresh = shipping.Batches(data, slots=4)
    monkeypatch.delattr(os, "memfd_create")
    got, = fresh[[[0, 1]]]
    assert isinstance(got, dict) and fresh.ring is None
    same(got, data.batch([0, 1]))


def test_a_distributed_sampler_gives_each_rank_its_share(own_build):
    data = data_of(own_build, "crops")
    seen = []
    for rank in range(2):
        sampler = DistributedSampler(data, num_replicas=2, rank=rank, shuffle=True, seed=5)
        for batch in loader(data, 3, sampler=sampler, num_workers=2):
            seen += batch["id"].tolist()
    assert sorted(set(seen)) == sorted(data.ids.tolist())
    with pytest.raises(ValueError, match="not both"):
        loader(data, 3, shuffle=True, sampler=sampler)
    assert np.array_equal(np.sort(np.concatenate([b["id"].numpy() for b in
                                                  loader(data, 4, shuffle=True)])),
                          np.sort(data.ids))


def test_two_ddp_processes_each_read_their_sampler_share(own_build, tmp_path):
    import json

    import torch.multiprocessing as mp

    args = (str(own_build.dataset), str(own_build.crops), str(tmp_path / "rendezvous"),
            str(tmp_path / "ids"))
    mp.start_processes(ddp_rank, args=args, nprocs=2, start_method="spawn")
    data = VPROM(own_build.dataset, "neutral", "train", source=own_build.crops)
    shares = []
    for rank in range(2):
        sampler = DistributedSampler(data, num_replicas=2, rank=rank, shuffle=True, seed=5)
        sampler.set_epoch(3)
        want = [int(data.ids[i]) for i in sampler]
        got = json.loads((tmp_path / f"ids.{rank}").read_text())
        assert got == want  # the rank's share, in its sampler's order
        shares.append(set(got))
    assert shares[0] | shares[1] == set(data.ids.tolist())
    assert len(shares[0] & shares[1]) <= len(data) % 2  # DistributedSampler pads odd sizes
