"""`vprom.data`: problems over features, maps and a crop store; workers, DDP, the loader of
whole batches, augmentations and the refusals of a source that does not fit."""

from __future__ import annotations

import pickle

import h5py
import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, DistributedSampler, default_collate
from vprom.crop_store import CropStore
from vprom_test_jobs import ddp_rank

from tests.own_model_fixture import DIM, MAP_SHAPE, STORE_SIZE
from vprom.data import VPROM, loader
from vprom.errors import VpromError
from vprom.feature_files import load_features, open_maps
from vprom.tables import read_matrix_table


def expected(build, part="test"):
    """(ids, panels [n, 16] crop ids, answers, relations, table) of neutral/part, read bare."""
    table = read_matrix_table(build.dataset)
    ids = table.splits["neutral"][part]
    rows = np.searchsorted(table.id, ids)
    return ids, table.panels[rows], table.answer[rows], table, rows


def test_features_give_16_vectors_in_the_papers_order_with_metadata(own_build):
    data = VPROM(own_build.dataset, "neutral", "test", source=own_build.features)
    ids, panels, answers, table, rows = expected(own_build)
    feats = load_features(own_build.features)
    assert len(data) == len(ids) > 0
    for i in range(len(data)):
        item = data[i]
        assert item["panels"].shape == (16, DIM) and item["panels"].dtype == torch.float32
        assert np.array_equal(item["panels"].numpy(), feats.features[feats.index_of(panels[i])])
        assert item["answer"] == answers[i] and item["id"] == ids[i]
        assert item["relation"] == table.relation[rows[i]]
        assert item["element_type"] == table.element_type[rows[i]]
        assert item["element"] == table.elements[rows[i], 8 + answers[i]]
        assert item["super_attribute"] == table.super_attribute[rows[i]]
    with pytest.raises(IndexError):
        data[len(data)]


def test_maps_give_16_maps(own_build):
    data = VPROM(own_build.dataset, "neutral", "train", source=own_build.maps)
    _, panels, _, _, _ = expected(own_build, "train")
    with open_maps(own_build.maps) as maps:
        for i in (0, len(data) - 1):
            assert data[i]["panels"].shape == (16, *MAP_SHAPE)
            assert np.array_equal(data[i]["panels"].numpy(), maps.gather(panels[i]))


def test_a_crop_store_gives_uint8_pixels_through_the_transform(own_build):
    data = VPROM(own_build.dataset, "neutral", "val", source=own_build.crops)
    _, panels, _, _, _ = expected(own_build, "val")
    with CropStore(own_build.crops) as store:
        want = store.read_rows(store.rows_of(panels[0]))
    item = data[0]["panels"]
    assert item.dtype == torch.uint8 and item.shape == (16, 3, STORE_SIZE, STORE_SIZE)
    assert np.array_equal(item.numpy(), want)
    scaled = VPROM(own_build.dataset, "neutral", "val", source=own_build.crops,
                   transform=lambda x: x.float() / 255)
    assert torch.equal(scaled[0]["panels"], item.float() / 255)


@pytest.mark.parametrize("source", ["features", "maps", "crops"])
def test_workers_read_what_the_main_process_reads(own_build, source):
    data = VPROM(own_build.dataset, "neutral", "train", source=getattr(own_build, source),
                 shuffle_candidates=True, seed=3)
    data[0]  # opens the lazy reader here; the workers must open their own
    assert pickle.loads(pickle.dumps(data))._reader is None  # h5py handles do not pickle
    alone = list(DataLoader(data, batch_size=4, num_workers=0))
    together = list(DataLoader(data, batch_size=4, num_workers=2))
    assert len(alone) == len(together)
    for a, b in zip(alone, together):
        assert torch.equal(a["panels"], b["panels"]) and torch.equal(a["answer"], b["answer"])
        assert a["id"].tolist() == b["id"].tolist() and a["relation"] == b["relation"]


def test_distributed_samplers_split_the_problems_between_ranks(own_build):
    data = VPROM(own_build.dataset, "neutral", "train", source=own_build.crops,
                 shuffle_candidates=True, swap_rows=True)
    seen = []
    for rank in range(2):
        sampler = DistributedSampler(data, num_replicas=2, rank=rank, shuffle=True, seed=5)
        sampler.set_epoch(1)
        for batch in DataLoader(data, batch_size=3, sampler=sampler, num_workers=0):
            seen += batch["id"].tolist()
            for j, mid in enumerate(batch["id"].tolist()):
                index = int(np.flatnonzero(data.ids == mid)[0])
                assert torch.equal(batch["panels"][j], data[index]["panels"])
    assert set(seen) == set(data.ids.tolist())  # every problem on some rank
    assert len(seen) == len(data) + len(data) % 2  # padded to equal shares, no more


def test_shuffled_candidates_take_the_answer_with_them(own_build):
    plain = VPROM(own_build.dataset, "neutral", "train", source=own_build.features)
    shuffled = VPROM(own_build.dataset, "neutral", "train", source=own_build.features,
                     shuffle_candidates=True, seed=1)
    moved = 0
    for i in range(len(plain)):
        a, b = plain[i], shuffled[i]
        assert torch.equal(a["panels"][:8], b["panels"][:8])  # the context stays
        assert torch.equal(b["panels"][8 + b["answer"]], a["panels"][8 + a["answer"]])
        assert sorted(map(tuple, b["panels"][8:].tolist())) == sorted(
            map(tuple, a["panels"][8:].tolist()))
        moved += b["answer"] != a["answer"]
    assert moved > 0
    again = VPROM(own_build.dataset, "neutral", "train", source=own_build.features,
                  shuffle_candidates=True, seed=1)
    assert all(torch.equal(again[i]["panels"], shuffled[i]["panels"]) for i in range(len(plain)))
    answers = [shuffled[i]["answer"] for i in range(len(plain))]
    shuffled.set_epoch(1)
    assert [shuffled[i]["answer"] for i in range(len(plain))] != answers  # a new epoch
    shuffled.set_epoch(0)
    assert [shuffled[i]["answer"] for i in range(len(plain))] == answers


def test_swapped_rows_trade_rows_1_and_2_and_keep_the_answer(own_build):
    plain = VPROM(own_build.dataset, "neutral", "train", source=own_build.features)
    swapped = VPROM(own_build.dataset, "neutral", "train", source=own_build.features,
                    swap_rows=True, seed=2)
    kinds = set()
    for i in range(len(plain)):
        a, b = plain[i]["panels"], swapped[i]["panels"]
        assert torch.equal(a[6:], b[6:]) and plain[i]["answer"] == swapped[i]["answer"]
        if torch.equal(a[:6], b[:6]):
            kinds.add("kept")
        else:
            assert torch.equal(b[:3], a[3:6]) and torch.equal(b[3:6], a[:3])
            kinds.add("swapped")
    assert kinds == {"kept", "swapped"}


def test_a_source_from_another_data_set_is_refused(own_build):
    with pytest.raises(VpromError, match="crops.h5 was made from another data set.*vprom crops"):
        VPROM(own_build.dataset, source=own_build.other_crops)
    with pytest.raises(VpromError, match="made from another data set"):
        VPROM(own_build.other, source=own_build.features)


@pytest.mark.parametrize("source", ["features", "maps"])
def test_a_source_that_does_not_cover_the_split_is_refused(own_build, tmp_path, source):
    short = tmp_path / "short.h5"
    with h5py.File(getattr(own_build, source), "r") as src, h5py.File(short, "w") as h5:
        h5.create_dataset("crop_id", data=src["crop_id"][:-20])
        h5.create_dataset(source, data=src[source][:-20])
        for k, v in src.attrs.items():
            h5.attrs[k] = v
    with pytest.raises(VpromError, match=r"short.h5: no features for crop id \d+ \(\d+ of"):
        for part in ("train", "val", "test"):
            VPROM(own_build.dataset, "neutral", part, source=short)


def test_bad_arguments_are_refused(own_build, tmp_path):
    with pytest.raises(VpromError, match="unknown split part neutral/dev"):
        VPROM(own_build.dataset, "neutral", "dev", source=own_build.features)
    with pytest.raises(VpromError, match="needs a source"):
        VPROM(own_build.dataset)
    with pytest.raises(VpromError, match="neither a FEATS.h5"):
        VPROM(own_build.dataset, source=own_build.dataset)


@pytest.mark.parametrize("source", ["features", "maps", "crops"])
@pytest.mark.parametrize("workers", [0, 2])
def test_the_loader_gives_collated_batches_in_the_samplers_order(own_build, source, workers):
    data = VPROM(own_build.dataset, "neutral", "train", source=getattr(own_build, source),
                 shuffle_candidates=True, swap_rows=source == "crops", seed=7,
                 transform=(lambda x: x.float() / 255) if source == "crops" else None)
    order = [5, 1, 3, 0, 2, 4, 6]
    got = loader(data, 3, sampler=order, num_workers=workers)
    batches = list(got)  # every batch kept: none may change under a later one
    assert len(batches) == len(got) == 3  # 3 + 3 + 1, the last one short
    for k, batch in enumerate(batches):
        want = default_collate([data[i] for i in order[3 * k:3 * k + 3]])
        assert set(batch) == set(want)
        for key, value in want.items():
            assert torch.equal(batch[key], value) if torch.is_tensor(value) else \
                batch[key] == value
    shuffled = torch.cat([b["id"] for b in data.loader(4, shuffle=True)])
    assert sorted(shuffled.tolist()) == sorted(data.ids.tolist())
    with pytest.raises(ValueError, match="not both"):
        loader(data, 3, shuffle=True, sampler=order)


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
        got = json.loads((tmp_path / f"ids.{rank}").read_text())
        assert got == [int(data.ids[i]) for i in sampler]  # the rank's share, in its order
        shares.append(set(got))
    assert shares[0] | shares[1] == set(data.ids.tolist())
    assert len(shares[0] & shares[1]) <= len(data) % 2  # DistributedSampler pads odd sizes


def test_a_crop_store_without_the_parts_crops_is_refused(own_build, tmp_path):
    short = tmp_path / "short.h5"
    with h5py.File(own_build.crops, "r") as src, h5py.File(short, "w") as h5:
        h5.create_dataset("crop_id", data=src["crop_id"][:-20])
        h5.create_dataset("pixels", data=src["pixels"][:-20], chunks=src["pixels"].chunks)
        for k, v in src.attrs.items():
            h5.attrs[k] = v  # the same data set's content hash: only crops are missing
    with pytest.raises(VpromError, match=r"short.h5: lacks \d+ crops that neutral/\w+ shows"):
        for part in ("train", "val", "test"):
            VPROM(own_build.dataset, "neutral", part, source=short)


@pytest.mark.parametrize("source", ["features", "maps", "crops"])
def test_batches_read_together_are_the_items_read_one_by_one(own_build, source):
    data = VPROM(own_build.dataset, "neutral", "train", source=getattr(own_build, source),
                 shuffle_candidates=source != "maps", swap_rows=source == "crops", seed=5)
    indices = [4, 0, 4, -1, 2]
    assert [item["id"] for item in data.__getitems__(indices)] == \
        [data[i]["id"] for i in indices]
    for got, want in zip(data.__getitems__(indices), [data[i] for i in indices]):
        assert torch.equal(got.pop("panels"), want.pop("panels")) and got == want
    order = [5, 1, 3, 0, 2, 4]
    batches = list(DataLoader(data, batch_size=3, sampler=order, num_workers=2))
    for k, batch in enumerate(batches):  # workers fetch a batch with one __getitems__
        one_by_one = default_collate([data[i] for i in order[3 * k:3 * k + 3]])
        assert torch.equal(batch["panels"], one_by_one["panels"])
        assert batch["relation"] == one_by_one["relation"]
        assert torch.equal(batch["answer"], one_by_one["answer"])
    with pytest.raises(IndexError, match=f"index {len(data)} out of range"):
        data.__getitems__([0, len(data)])
