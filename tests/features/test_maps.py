"""`--pool none`: the last conv map per crop in an (N, C, H, W) dataset, and its reader."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
import torch

from vprom.features.extract import extract
from vprom.feature_files import check_complete, load_features, open_maps
from tests.features.conftest import CROP_ROWS
from tests.features.test_extract import Killed, config, dies_after
from vprom.errors import VpromError

CROP_IDS = sorted(r[0] for r in CROP_ROWS)


def maps_bytes(path) -> tuple[bytes, bytes]:
    with h5py.File(path, "r") as h5:
        return h5["crop_id"][()].tobytes(), h5["maps"][()].tobytes()


@pytest.fixture
def maps_file(dataset, vg_dir, tmp_path):
    out = tmp_path / "maps.h5"
    extract(config(dataset, vg_dir, out, pool="none", dtype="float16"))
    return out


def test_maps_have_their_shape_and_dtype_and_pool_to_the_features(maps_file, dataset, vg_dir,
                                                                   tmp_path):
    with h5py.File(maps_file, "r") as h5:
        assert h5["maps"].shape == (len(CROP_ROWS), 512, 2, 2)  # resnet18 at 64 px: 2x2
        assert h5["maps"].dtype == np.float16 and h5["maps"].chunks[1:] == (512, 2, 2)
        assert h5.attrs["pool"] == "none" and list(h5.attrs["map_shape"]) == [512, 2, 2]
        assert h5.attrs["normalisation"].startswith("none") and "features" not in h5
    check_complete(maps_file)
    pooled = tmp_path / "pooled.h5"
    extract(config(dataset, vg_dir, pooled))  # float32 pooled vectors of the same crops
    feats = load_features(pooled)
    with open_maps(maps_file) as maps:
        vectors = torch.nn.functional.normalize(
            torch.from_numpy(maps.gather(CROP_IDS)).mean(dim=(2, 3)), dim=1).numpy()
    assert np.allclose(vectors, feats.features, atol=2e-3)  # float16 maps


def test_the_reader_gathers_any_ids_and_iterates_in_order(maps_file):
    with open_maps(maps_file) as maps:
        assert len(maps) == len(CROP_ROWS) and maps.shape == (len(CROP_ROWS), 512, 2, 2)
        assert maps.dtype == np.float16 and maps.attrs["backbone"] == "resnet18"
        whole = maps.maps[()]
        picked = maps.gather([110, 101, 110], dtype=np.float16)
        assert np.array_equal(picked, whole[[9, 0, 9]])
        assert maps.gather([]).shape == (0, 512, 2, 2)
        assert np.array_equal(maps.gather([104]), maps.gather([110]))  # one box, two ids
        blocks = list(maps.batches(4))
        assert [len(ids) for ids, _ in blocks] == [4, 4, 3]
        assert np.concatenate([ids for ids, _ in blocks]).tolist() == CROP_IDS
        assert np.array_equal(np.concatenate([b for _, b in blocks]), whole.astype(np.float32))
        with pytest.raises(VpromError, match="maps.h5: no features for crop id 999"):
            maps.gather([101, 999])


def test_the_vector_reader_refuses_maps_and_the_maps_reader_refuses_vectors(
        maps_file, dataset, vg_dir, tmp_path):
    with pytest.raises(VpromError, match=r"maps.h5: holds spatial maps \(512x2x2 per crop.*"
                                         r"not pooled vectors: extract them without "
                                         r"--pool none, train a model of maps with --maps"):
        load_features(maps_file)
    pooled = tmp_path / "pooled.h5"
    extract(config(dataset, vg_dir, pooled))
    with pytest.raises(VpromError, match="pooled.h5: holds pooled features, not spatial maps"):
        open_maps(pooled)
    with h5py.File(maps_file, "a") as h5:
        del h5.attrs["complete"]
    with pytest.raises(VpromError, match="incomplete feature file"):
        open_maps(maps_file)


def test_a_killed_maps_run_resumes_to_identical_bytes(dataset, vg_dir, tmp_path, monkeypatch,
                                                      maps_file):
    out = tmp_path / "resumed.h5"
    dies_after(monkeypatch, 1)
    with pytest.raises(Killed):
        extract(config(dataset, vg_dir, out, pool="none", dtype="float16"))
    monkeypatch.undo()
    summary = extract(config(dataset, vg_dir, out, pool="none", dtype="float16"))
    assert 0 < summary.extracted_units < summary.units
    assert maps_bytes(out) == maps_bytes(maps_file)


def test_compressed_maps_hold_the_same_values(maps_file, dataset, vg_dir, tmp_path):
    for compression in ("gzip", "lzf"):
        out = tmp_path / f"{compression}.h5"
        extract(config(dataset, vg_dir, out, pool="none", dtype="float16",
                       compression=compression))
        with h5py.File(out, "r") as h5:
            assert h5["maps"].compression == compression and h5.attrs["compression"] == compression
        assert maps_bytes(out) == maps_bytes(maps_file)


def test_missing_images_leave_nan_maps(dataset, vg_dir, tmp_path):
    (vg_dir / "VG_100K_2" / "14.jpg").unlink()  # crop 108
    out = tmp_path / "m.h5"
    extract(config(dataset, vg_dir, out, pool="none", allow_missing=True))
    with open_maps(out) as maps:
        assert maps.missing_crop_id.tolist() == [108]
        assert np.isnan(maps.gather([108])).all() and not np.isnan(maps.gather([107])).any()
