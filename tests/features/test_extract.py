"""End-to-end extraction: reference features, resume, missing images, several processes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
import torchvision

import vprom.features.extract as extract_module
import vprom.features.pipeline as pipeline_module
from vprom.features.backbones import IMAGENET_MEAN, IMAGENET_STD, get_backbone
from vprom.features.config import BATCH_SIZE, ExtractConfig, default_batch_size
from vprom.features.crops import decode_crops
from vprom.features.extract import extract
from vprom.feature_files import check_complete, check_features_source, load_features
from tests.features.conftest import CROP_ROWS
from vprom.errors import VpromError
from vprom.manifest import input_hash
from vprom.tables import read_manifest

REPO = Path(__file__).resolve().parents[2]


def config(dataset, vg_dir, out, **overrides) -> ExtractConfig:
    options = dict(dataset=dataset, vg=vg_dir, backbone="resnet18", weights="none", out=out,
                   batch_size=4, workers=0, input_size=64, chunk_batches=1, dtype="float32",
                   device="cpu")
    options.update(overrides)
    return ExtractConfig(**options)


def datasets(path: Path) -> tuple[bytes, bytes]:
    with h5py.File(path, "r") as h5:
        return h5["crop_id"][()].tobytes(), h5["features"][()].tobytes()


def reference(net, vg_dir: Path, image_id: int, box, size: int = 64) -> np.ndarray:
    """torchvision's resnet18 up to avgpool on the same crop, then L2-normalised."""
    folder = "VG_100K" if image_id % 2 else "VG_100K_2"
    pixels, _ = decode_crops(vg_dir / folder / f"{image_id}.jpg", np.array([box]), size)
    x = torch.from_numpy(pixels).permute(0, 3, 1, 2).float() / 255
    x = (x - torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1)) / torch.tensor(IMAGENET_STD).view(
        1, 3, 1, 1)
    with torch.no_grad():
        body = torch.nn.Sequential(*list(net.children())[:-1])  # everything up to avgpool
        pooled = body(x).flatten(1)
    return torch.nn.functional.normalize(pooled, dim=1)[0].numpy()


def test_features_equal_the_torchvision_reference_and_have_unit_norm(dataset, vg_dir, tmp_path):
    out = tmp_path / "feats.h5"
    summary = extract(config(dataset, vg_dir, out))
    feats = load_features(out)
    assert summary.crops == len(CROP_ROWS) and summary.missing == []
    assert list(feats.crop_id) == sorted(r[0] for r in CROP_ROWS)
    assert feats.features.shape == (len(CROP_ROWS), 512)
    assert np.allclose(np.linalg.norm(feats.features, axis=1), 1, atol=1e-5)
    net = torchvision.models.resnet18()  # the same random weights, torchvision's own forward
    trunk = get_backbone("resnet18").load("none").module
    net.load_state_dict({**net.state_dict(), **trunk.state_dict()})
    net.eval()
    for cid, image, *box in [CROP_ROWS[1], CROP_ROWS[6], CROP_ROWS[7]]:
        row = feats.index_of([cid])[0]
        assert np.allclose(feats.features[row], reference(net, vg_dir, image, box), atol=2e-5)
    same = feats.index_of([104, 110])  # one box, two crop ids
    assert np.array_equal(feats.features[same[0]], feats.features[same[1]])
    attrs = feats.attrs
    assert attrs["backbone"] == "resnet18" and attrs["weights"] == "none"
    assert attrs["random_weights"] and list(attrs["input_size"]) == [64, 64]
    assert "average pool" in attrs["pooling"] and attrs["normalisation"].startswith("L2")
    assert "aspect ratio not kept" in attrs["resize"] and attrs["torch_version"]
    manifest = attrs["manifest"]
    assert manifest["kind"] == "features" and manifest["config"]["backbone"] == "resnet18"
    assert manifest["inputs"] == {"dataset.h5": input_hash(dataset)}
    assert [p.name for p in tmp_path.glob("feats.h5*")] == ["feats.h5"]  # nothing beside it


def test_default_storage_is_float16_and_random_weights_are_warned_about(dataset, vg_dir,
                                                                          tmp_path, capsys):
    out = tmp_path / "f16.h5"
    extract(config(dataset, vg_dir, out, dtype="float16", workers=2))
    assert "RANDOMLY INITIALISED" in capsys.readouterr().err
    with h5py.File(out, "r") as h5:
        assert h5["features"].dtype == np.float16
    ref = tmp_path / "f32.h5"
    extract(config(dataset, vg_dir, ref))  # workers 0 vs 2: the same numbers
    assert np.allclose(load_features(out).features, load_features(ref).features, atol=1e-3)


class Killed(Exception):
    pass


def dies_after(monkeypatch, chunks: int) -> None:
    """The next extraction is killed after writing `chunks` chunk files."""
    write_chunk, written = pipeline_module.write_chunk, []

    def dying(job, c, rows, failed):
        if len(written) == chunks:
            raise Killed
        written.append(c)
        write_chunk(job, c, rows, failed)

    monkeypatch.setattr(pipeline_module, "write_chunk", dying)


def test_a_killed_run_resumes_to_identical_bytes(dataset, vg_dir, tmp_path, monkeypatch,
                                                 capsys):
    whole = tmp_path / "whole.h5"
    extract(config(dataset, vg_dir, whole))
    out = tmp_path / "resumed.h5"
    dies_after(monkeypatch, 2)
    with pytest.raises(Killed):
        extract(config(dataset, vg_dir, out))
    assert not out.exists() and len(list((tmp_path / "resumed.h5.partial").glob("*.npy"))) == 2
    monkeypatch.undo()
    summary = extract(config(dataset, vg_dir, out))
    assert "resuming, 2 of" in capsys.readouterr().err
    assert 0 < summary.extracted_units < summary.units
    assert datasets(out) == datasets(whole)
    again = extract(config(dataset, vg_dir, out))  # finished with these settings: kept
    assert again.extracted_units == 0 and "already complete" in capsys.readouterr().err
    redo = extract(config(dataset, vg_dir, out, resume=False))
    assert redo.extracted_units == redo.units and datasets(out) == datasets(whole)


def test_a_partial_run_with_other_settings_is_started_over(dataset, vg_dir, tmp_path,
                                                            monkeypatch, capsys):
    out = tmp_path / "f.h5"
    monkeypatch.setattr(extract_module, "assemble", lambda plan: (_ for _ in ()).throw(Killed))
    with pytest.raises(Killed):
        extract(config(dataset, vg_dir, out, batch_size=3))
    monkeypatch.undo()
    summary = extract(config(dataset, vg_dir, out))
    assert "its settings changed: batch_size" in capsys.readouterr().err
    assert summary.extracted_units == summary.units
    whole = tmp_path / "whole.h5"
    extract(config(dataset, vg_dir, whole, resume=False))
    assert datasets(out) == datasets(whole)


@pytest.mark.parametrize("resume", [True, False])
def test_a_partial_folder_holding_a_users_files_is_never_removed(dataset, vg_dir, tmp_path,
                                                                 resume):
    out = tmp_path / "f.h5"
    mine = tmp_path / "f.h5.partial" / "notes.txt"
    mine.parent.mkdir()
    mine.write_text("not vprom's")
    with pytest.raises(VpromError, match=r"f.h5.partial: .*what vprom did not write"):
        extract(config(dataset, vg_dir, out, resume=resume))
    assert mine.read_text() == "not vprom's" and not out.exists()


def test_missing_and_corrupt_images_fail_the_run_unless_allowed(dataset, vg_dir, tmp_path):
    (vg_dir / "VG_100K_2" / "14.jpg").unlink()  # crop 108
    (vg_dir / "VG_100K" / "15.jpg").write_bytes(b"\xff\xd8\xff\xe0 truncated")  # 109, 111
    out = tmp_path / "f.h5"
    with pytest.raises(VpromError, match=r"3 crops have no readable image \(first: crop 108, "
                                         r"image 14: no such file; looked at .*VG_100K/14.jpg or "
                                         r".*VG_100K_2/14.jpg\)"):
        extract(config(dataset, vg_dir, out))
    assert not out.exists()
    summary = extract(config(dataset, vg_dir, out, allow_missing=True))
    assert [m[0] for m in summary.missing] == [108, 109, 111]
    assert summary.missing[1][1] == str(vg_dir / "VG_100K" / "15.jpg")
    assert summary.missing[1][2].startswith("image 15: cannot decode")
    assert "missing crop 108" in str(summary) and "image 14: no such file" in str(summary)
    assert summary.extracted_units == 6  # only chunks 1 and 2 (4 + 2 boxes) were redone
    feats = load_features(out)
    assert list(feats.missing_crop_id) == [108, 109, 111]
    rows = feats.index_of([108, 109, 111])
    assert np.isnan(feats.features[rows]).all()
    assert not np.isnan(np.delete(feats.features, rows, axis=0)).any()
    again = extract(config(dataset, vg_dir, out, allow_missing=True))  # finished: kept
    assert again.extracted_units == 0
    assert [m[2] for m in again.missing] == ["image 14: missing in the existing file"] + [
        "image 15: missing in the existing file"] * 2
    assert again.missing[1][1] == str(vg_dir / "VG_100K" / "15.jpg")


def test_reader_refuses_partial_and_unknown_ids(dataset, vg_dir, tmp_path):
    out = tmp_path / "f.h5"
    extract(config(dataset, vg_dir, out))
    feats = load_features(out)
    with pytest.raises(VpromError, match=r"f.h5: no features for crop id 999"):
        feats.index_of([[101, 999], [102, 103]])
    assert feats.index_of([[101, 103], [111, 101]]).tolist() == [[0, 2], [10, 0]]
    with h5py.File(out, "a") as h5:
        del h5.attrs["complete"]
    with pytest.raises(VpromError, match="incomplete feature file"):
        check_complete(out)
    with pytest.raises(VpromError, match="partial extraction"):
        check_complete(tmp_path / "f.h5.partial")


def test_bad_config_is_refused(dataset, vg_dir, tmp_path):
    with pytest.raises(VpromError, match="batch_size must be >= 1"):
        config(dataset, vg_dir, tmp_path / "f.h5", batch_size=0)
    with pytest.raises(VpromError, match="unknown backbone"):
        extract(config(dataset, vg_dir, tmp_path / "f.h5", backbone="alexnet"))


def test_default_batch_size_keeps_a_cpu_batch_small_and_cuda_at_64():
    assert default_batch_size("cpu", "crop", 224, 2) == 8  # what measured fastest here
    assert default_batch_size("cpu", "crop", 224, 1) == 4
    assert default_batch_size("cpu", "crop", 224, 0) == 4  # an unknown count: one thread
    assert default_batch_size("cpu", "crop", 112, 2) == 32  # smaller crops, more of them
    assert default_batch_size("cpu", "crop", 64, 2) == BATCH_SIZE == 64  # never above 64
    assert default_batch_size("cpu", "crop", 518, 2) == 1  # DINOv2's side: still one crop
    assert default_batch_size("cpu", "crop", 224, 16) == 64
    assert default_batch_size("cuda", "crop", 224, 2) == 64
    assert default_batch_size("cpu", "roi", 600, 2) == 64  # roi batches count boxes


def test_extract_without_a_batch_size_takes_the_default_and_records_it(dataset, vg_dir,
                                                                        tmp_path, monkeypatch):
    monkeypatch.setattr(extract_module.torch, "get_num_threads", lambda: 1)
    out = tmp_path / "auto.h5"
    extract(config(dataset, vg_dir, out, batch_size=None, input_size=224))
    with h5py.File(out, "r") as h5:
        assert h5.attrs["batch_size"] == 4  # 4 crops of 224 px per thread
    fixed = tmp_path / "fixed.h5"
    extract(config(dataset, vg_dir, fixed, batch_size=4, input_size=224))
    assert datasets(out) == datasets(fixed)
    again = extract(config(dataset, vg_dir, out, batch_size=None, input_size=224))
    assert again.extracted_units == 0  # the same settings: the finished file is kept


def test_ranks_cut_the_batches_of_the_smallest_default(monkeypatch):
    class SecondOfTwo:  # rank 0 chose 4 crops: all_sum adds its slot to ours
        rank, size, device = 1, 2, torch.device("cpu")

        def all_sum(self, values):
            assert values[0] == 0.0
            return [4.0, values[1]]

    monkeypatch.setattr(extract_module.torch, "get_num_threads", lambda: 2)
    options = dict(dataset="d.h5", vg="v", backbone="resnet18", out="o.h5")
    assert extract_module._batch_size(ExtractConfig(**options), SecondOfTwo(), 224) == 4
    assert extract_module._batch_size(ExtractConfig(**options, batch_size=32), SecondOfTwo(),
                                      224) == 32


def test_command_line_extracts_and_lists(dataset, vg_dir, tmp_path, capsys):
    from vprom.app.cli import main

    assert main(["extract", "--list"]) == 0
    assert "bottomup-r101" in capsys.readouterr().out
    out = tmp_path / "cli.h5"
    assert main(["extract", str(dataset), "--vg", str(vg_dir), "--backbone", "resnet18",
                 "--weights", "none", "--out", str(out), "--workers", "0", "--input-size",
                 "64", "--device", "cpu"]) == 0
    assert "11 crops (10 distinct boxes)" in capsys.readouterr().out
    check_complete(out)
    maps = tmp_path / "maps.h5"
    assert main(["extract", str(dataset), "--vg", str(vg_dir), "--backbone", "resnet18",
                 "--weights", "none", "--out", str(maps), "--workers", "0", "--input-size",
                 "32", "--device", "cpu", "--decode", "gpu", "--pool", "none",
                 "--compression", "gzip", "--in-flight", "0", "--prefetch", "1"]) == 0
    with h5py.File(maps, "r") as h5:
        assert (h5.attrs["decode"], h5.attrs["pool"], h5.attrs["compression"]) == (
            "gpu", "none", "gzip")
    assert main(["extract", str(dataset), "--vg", str(vg_dir), "--backbone", "resnet18",
                 "--out", str(maps), "--region", "roi", "--device", "cpu"]) != 0
    assert "--region roi: resnet18 is not a detector backbone" in capsys.readouterr().err


def test_command_line_defaults_come_from_the_config():
    from vprom.app.cli import build_parser

    args = build_parser().parse_args(["extract", "d.h5", "--vg", "v", "--backbone", "b",
                                      "--out", "o.h5"])
    defaults = ExtractConfig(dataset="d.h5", vg="v", backbone="b", out="o.h5")
    for name in ("decode", "region", "pool", "compression", "workers", "prefetch",
                 "in_flight", "batch_size", "dtype", "input_size", "chunk_batches"):
        assert getattr(args, name) == getattr(defaults, name), name


@pytest.mark.slow
def test_two_processes_under_torchrun_equal_one(dataset, vg_dir, tmp_path):
    one = tmp_path / "one.h5"
    extract(config(dataset, vg_dir, one, batch_size=4, input_size=None))
    two = tmp_path / "two.h5"
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    # no --batch-size: both processes agree on the CPU default (4 crops of 224 px, 1 thread)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
           "2", "-m", "vprom", "extract", str(dataset), "--vg", str(vg_dir), "--backbone",
           "resnet18", "--weights", "none", "--out", str(two),
           "--chunk-batches", "1", "--workers", "0", "--dtype", "float32", "--device", "cpu"]
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "rank 1 of 2" in done.stdout
    assert datasets(two) == datasets(one)
    with h5py.File(two, "r") as h5:
        assert h5.attrs["batch_size"] == 4


def test_the_manifest_names_the_data_set_and_the_features_by_their_content(dataset, vg_dir,
                                                                          tmp_path):
    # so `train` and `verify --features` recognise the source even once DATASET.h5 is rewritten
    out = tmp_path / "f.h5"
    extract(config(dataset, vg_dir, out))
    assert read_manifest(out)["inputs"] == {"dataset.h5": input_hash(dataset)}
    assert check_features_source(dataset, out) == "recorded hash"
    again = tmp_path / "again.h5"
    extract(config(dataset, vg_dir, again, chunk_batches=2))  # other chunks, same features
    assert input_hash(again) == input_hash(out) == read_manifest(out)["outputs"]["content_hash"]


@pytest.mark.parametrize("files", [16, 20])
def test_workers_under_a_low_open_file_limit_get_one_line(dataset, vg_dir, tmp_path, files):
    """Under `ulimit -n 16` the DataLoader failed to start its workers and printed a traceback
    after the error line; under 20 it failed midway with torch's RuntimeError."""
    import resource

    def low_limit():
        resource.setrlimit(resource.RLIMIT_NOFILE, (files, files))

    out = tmp_path / "f.h5"
    done = subprocess.run(
        [sys.executable, "-m", "vprom", "extract", str(dataset), "--vg", str(vg_dir),
         "--backbone", "resnet18", "--weights", "none", "--input-size", "32", "--batch-size",
         "2", "--workers", "2", "--device", "cpu", "--out", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=300, preexec_fn=low_limit,
        check=False)
    err = done.stderr.replace("WARNING: --weights none", "")
    assert done.returncode == 1 and "Traceback" not in err and "Exception" not in err, err
    assert "--workers 2" in err and "ulimit -n" in err and not out.exists(), err
