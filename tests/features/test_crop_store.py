"""The crop store (`vprom crops`): extract's pixels, once per crop; resumable, parallel,
atomic; refuses what it cannot cut."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import h5py
import numpy as np
import pytest

from tests.dataset_fixture import build_records, write_dataset, write_images
from tests.own_model_fixture import STORE_SIZE, own_build  # noqa: F401 (fixture)
from vprom.errors import VpromError
from vprom.crop_store import CropStore
from vprom.features.crop_store import StoreJob, build_crop_store
from vprom.features.crops import decode_crops
from vprom.images import ImageIndex
from vprom.manifest import make_manifest
from vprom.tables import read_crop_table, read_matrix_table


@pytest.fixture
def small(tmp_path):
    crops, matrices = build_records(1, 0)
    dataset = write_dataset(tmp_path / "dataset.h5", crops, matrices)
    return dataset, write_images(tmp_path / "vg", crops)


def stored(path):
    with h5py.File(path, "r") as h5:
        return h5["crop_id"][()], h5["pixels"][()]


def test_every_used_crop_once_with_extracts_crop_and_resize_rule(own_build):
    crops = read_crop_table(own_build.dataset)
    used = np.unique(read_matrix_table(own_build.dataset).panels)
    index = ImageIndex(own_build.vg)
    with CropStore(own_build.crops) as store, h5py.File(own_build.crops, "r") as h5:
        assert np.array_equal(store.crop_id, used)
        assert store.pixels.shape == (len(used), 3, STORE_SIZE, STORE_SIZE)
        assert store.pixels.dtype == np.uint8 and store.pixels.chunks == (1, 3, 16, 16)
        assert h5.attrs["size"] == STORE_SIZE and "resized to SxS" in h5.attrs["resize"]
        for k in (0, 7, len(used) - 1):
            row = int(np.flatnonzero(crops.crop_id == used[k])[0])
            box = np.array([[crops.x[row], crops.y[row], crops.w[row], crops.h[row]]])
            want, errors = decode_crops(index.path(crops.image_id[row]), box, STORE_SIZE)
            assert errors == [None]
            assert np.array_equal(store.read_rows([k])[0], want[0].transpose(2, 0, 1))


def test_processes_and_compression_give_the_same_pixels(small, tmp_path):
    dataset, vg = small
    one = build_crop_store(StoreJob(dataset, vg, 12, tmp_path / "one.h5", workers=1,
                                    chunk_crops=20), log=lambda _: None)
    two = build_crop_store(StoreJob(dataset, vg, 12, tmp_path / "two.h5", workers=2,
                                    chunk_crops=20, compression="gzip"), log=lambda _: None)
    a, b = stored(one), stored(two)
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
    with h5py.File(two, "r") as h5:
        assert h5["pixels"].compression == "gzip"
    rows = [5, 0, 5, len(a[0]) - 1]
    with CropStore(one) as raw, CropStore(two) as compressed:  # both read paths
        assert np.array_equal(raw.read_rows(rows), a[1][rows])
        assert np.array_equal(compressed.read_rows(rows), a[1][rows])
    assert not (tmp_path / "one.h5.partial").exists()  # the work folder goes once done


def test_each_source_image_is_read_once_whatever_the_chunk_size(small, tmp_path, monkeypatch):
    import vprom.features.crops as crops_module

    calls = []
    real = crops_module.decode_crops
    monkeypatch.setattr(crops_module, "decode_crops",
                        lambda path, boxes, *a, **k: calls.append(str(path)) or
                        real(path, boxes, *a, **k))
    dataset, vg = small
    crops = read_crop_table(dataset)
    used = np.isin(crops.crop_id, read_matrix_table(dataset).panels)
    boxes = {(i, x, y, w, h) for i, x, y, w, h in zip(crops.image_id[used], crops.x[used],
                                                       crops.y[used], crops.w[used],
                                                       crops.h[used])}
    images = {b[0] for b in boxes}
    assert len(boxes) > len(images)  # images with several boxes: chunks of 3 would cut them
    whole = build_crop_store(StoreJob(dataset, vg, 12, tmp_path / "c3.h5", workers=1,
                                      chunk_crops=3), log=lambda _: None)
    assert len(calls) == len(set(calls)) == len(images)
    big = build_crop_store(StoreJob(dataset, vg, 12, tmp_path / "big.h5", workers=1,
                                    chunk_crops=10_000), log=lambda _: None)
    assert all(np.array_equal(a, b) for a, b in zip(stored(whole), stored(big)))


def test_a_missing_image_is_refused_and_the_rerun_resumes(small, tmp_path):
    dataset, vg = small
    jpeg = sorted((vg / "VG_100K").iterdir())[-1]
    shutil.move(jpeg, tmp_path / "aside.jpg")
    out = tmp_path / "crops.h5"
    job = StoreJob(dataset, vg, 12, out, workers=1, chunk_crops=20)
    with pytest.raises(VpromError, match=rf"image {jpeg.stem}: no such file.*re-run"):
        build_crop_store(job, log=lambda _: None)
    assert not out.exists()  # nothing that looks finished
    done = sorted((tmp_path / "crops.h5.partial").glob("chunk-*.npy"))
    assert done  # the chunks that could be cut are kept
    shutil.move(tmp_path / "aside.jpg", jpeg)
    said = []
    build_crop_store(job, log=said.append)
    total = int(said[0].split(" of ")[1].split()[0])
    assert f": {total - len(done)} of {total} chunks to decode" in said[0]
    fresh = build_crop_store(StoreJob(dataset, vg, 12, tmp_path / "fresh.h5", workers=1,
                                      chunk_crops=20), log=lambda _: None)
    assert np.array_equal(stored(out)[1], stored(fresh)[1])


def test_a_work_folder_of_other_settings_is_started_over(small, tmp_path):
    dataset, vg = small
    out = tmp_path / "crops.h5"
    folder = tmp_path / "crops.h5.partial"
    folder.mkdir()
    np.save(folder / "chunk-00000.npy", np.zeros((20, 3, 8, 8), np.uint8))  # another size
    (folder / "manifest.json").write_text(json.dumps(make_manifest("vprom-crops",
                                                                   {"size": 8})))
    said = []
    build_crop_store(StoreJob(dataset, vg, 12, out, workers=1, chunk_crops=20), log=said.append)
    assert said[0].startswith(f"{folder}: its inputs changed") and "starting over" in said[0]
    fresh = build_crop_store(StoreJob(dataset, vg, 12, tmp_path / "fresh.h5", workers=1,
                                      chunk_crops=20), log=lambda _: None)
    assert np.array_equal(stored(out)[1], stored(fresh)[1])


def test_a_current_store_is_kept_and_no_input_or_users_file_is_replaced(small, tmp_path):
    dataset, vg = small
    out = tmp_path / "crops.h5"
    build_crop_store(StoreJob(dataset, vg, 12, out, workers=1), log=lambda _: None)
    before, said = out.read_bytes(), []
    build_crop_store(StoreJob(dataset, vg, 12, out, workers=1), log=said.append)
    assert said == [f"{out}: already complete with these settings; nothing to do"]
    assert out.read_bytes() == before
    thesis = tmp_path / "thesis.txt"
    thesis.write_text("mine")
    data = dataset.read_bytes()
    for target, says in ((dataset, "input of this command"), (thesis, "not written by vprom")):
        with pytest.raises(VpromError, match=says):
            build_crop_store(StoreJob(dataset, vg, 12, target, workers=1), log=lambda _: None)
    assert thesis.read_text() == "mine" and dataset.read_bytes() == data


def test_a_work_folder_holding_a_users_files_is_never_removed(small, tmp_path):
    dataset, vg = small
    mine = tmp_path / "crops.h5.partial" / "notes.txt"
    mine.parent.mkdir()
    mine.write_text("not vprom's")
    with pytest.raises(VpromError, match=r"crops.h5.partial: .*what vprom did not write"):
        build_crop_store(StoreJob(dataset, vg, 12, tmp_path / "crops.h5", workers=1),
                         log=lambda _: None)
    assert mine.read_text() == "not vprom's" and not (tmp_path / "crops.h5").exists()


def test_the_command_writes_a_store_and_its_help_gives_the_sizes(small, tmp_path):
    from vprom.app.cli import main

    dataset, vg = small
    out = tmp_path / "c.h5"
    assert main(["crops", str(dataset), "--vg", str(vg), "--size", "10", "--out",
                 str(out)]) == 0
    with CropStore(out) as store:
        assert store.size == 10 and len(store) == len(np.unique(
            read_matrix_table(dataset).panels))
    text = subprocess.run([sys.executable, "-m", "vprom", "crops", "--help"], check=True,
                          capture_output=True, text=True).stdout
    flat = " ".join(text.split())
    assert "S=224: 147.0 KiB a crop, 21.6 GB for the full V-PROM's 143,634 crops" in flat
    assert "S=80: 18.8 KiB a crop, 2.8 GB" in flat


def copy_store(src, out, **layout):
    """`src`'s crops and attributes in a store of another HDF5 layout."""
    with h5py.File(src, "r") as a, h5py.File(out, "w") as b:
        b.create_dataset("crop_id", data=a["crop_id"][()])
        b.create_dataset("pixels", data=a["pixels"][()], **layout)
        b.attrs.update(dict(a.attrs))
    return out


@pytest.mark.parametrize("layout", [
    {}, {"chunks": (1, 3, STORE_SIZE, STORE_SIZE)}, {"chunks": (2, 3, STORE_SIZE, STORE_SIZE)},
    {"compression": "lzf"}], ids=["contiguous", "crop-a-chunk", "two-a-chunk", "lzf"])
def test_every_layout_reads_the_pixels_h5py_reads(own_build, tmp_path, layout):
    path = copy_store(own_build.crops, tmp_path / "copy.h5", **layout)
    rows = [9, 0, 9, 3, 1]  # any order, repeats
    with CropStore(path) as store, h5py.File(path, "r") as h5:
        assert np.array_equal(store.read_rows(rows), h5["pixels"][()][rows])
        assert store.read_rows([]).shape == (0, 3, STORE_SIZE, STORE_SIZE)


def test_a_crop_never_written_reads_as_hdf5_fills_it(own_build, tmp_path):
    path = tmp_path / "holes.h5"
    with h5py.File(own_build.crops, "r") as a, h5py.File(path, "w") as b:
        pixels = a["pixels"][()]
        b.create_dataset("crop_id", data=a["crop_id"][()])
        ds = b.create_dataset("pixels", shape=pixels.shape, dtype=np.uint8,
                              chunks=(1, *pixels.shape[1:]))
        ds[1:] = pixels[1:]  # row 0's chunk is never allocated
        b.attrs.update(dict(a.attrs))
    with CropStore(path) as store:
        got = store.read_rows([2, 0])
    assert np.array_equal(got[0], pixels[2]) and not got[1].any()
