"""A full disk (issue 20, rows 7 and 12): every writer, the npz export's memory-mapped tiles
included, stops with one line naming the output and leaves nothing behind; never SIGBUS.
Large outputs of known size are refused before any work when the disk lacks the space."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
from collections import namedtuple
from pathlib import Path

import pytest

from tests.dataset_fixture import build_records, write_dataset, write_images
from vprom.app.cli import main


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("full")
    crops, matrices = build_records(1)
    return write_dataset(folder / "d.h5", crops, matrices), write_images(folder / "vg", crops)


def no_space(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


def test_npz_on_a_full_disk_exits_1_naming_the_folder(data, tmp_path, monkeypatch, capsys):
    dataset, vg = data
    monkeypatch.setattr(os, "posix_fallocate", no_space)
    out = tmp_path / "npz"
    assert main(["export", str(dataset), "--format", "npz", "--vg", str(vg), "--out",
                 str(out), "--size", "16"]) == 1
    err = capsys.readouterr().err
    assert f"{out}: no space left on the device" in err and err.count("\n") == 1, err
    assert list(tmp_path.iterdir()) == []


def test_jsonl_on_a_full_disk_names_the_file(data, tmp_path, monkeypatch, capsys):
    """Row 12: the message said "a file: No space left on device"."""
    dataset, _ = data
    real = os.fsync

    def full(fd):  # the data reaches the disk at fsync on a file system that defers it
        real(fd)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    out = tmp_path / "d.jsonl"
    assert main(["export", str(dataset), "--format", "jsonl", "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert f"{out}: no space left" in err and "a file" not in err, err
    assert list(tmp_path.iterdir()) == []


def test_npz_larger_than_the_free_space_is_refused_before_any_work(data, tmp_path,
                                                                    monkeypatch, capsys):
    dataset, vg = data
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda p: usage(10**6, 10**6 - 1000, 1000))
    out = tmp_path / "npz"
    assert main(["export", str(dataset), "--format", "npz", "--vg", str(vg), "--out",
                 str(out)]) == 1
    err = capsys.readouterr().err
    assert f"{out}: needs about" in err and "1,000 bytes free" in err, err
    assert list(tmp_path.iterdir()) == []


@pytest.fixture
def small_tmpfs(tmp_path):
    """A 3 MB tmpfs (needs root and a kernel that lets this process mount)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    folder = tmp_path / "disk"
    folder.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(folder)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield folder
    finally:
        import gc

        gc.collect()  # a failed export's traceback may still map the removed tiles file
        # lazy: detached at once even while a failed test's traceback keeps a file open
        subprocess.run(["umount", "-l", str(folder)], check=False)


def test_npz_onto_a_real_full_tmpfs_never_dies_of_sigbus(data, small_tmpfs, monkeypatch,
                                                         capsys):
    """Row 7: onto a 3 MB tmpfs the export died of SIGBUS and left an 11 MB sparse tiles file.
    The free-space check is told the disk is roomy, so the writing itself meets the full disk
    (as when another program fills it meanwhile)."""
    dataset, vg = data
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda p: usage(10**12, 0, 10**12))
    (small_tmpfs / "ballast").write_bytes(b"\0" * (2 << 20))
    out = small_tmpfs / "npz"
    assert main(["export", str(dataset), "--format", "npz", "--vg", str(vg), "--out", str(out),
                 "--size", "512"]) == 1
    err = capsys.readouterr().err
    assert f"{out}: no space left on the device" in err, err
    assert sorted(p.name for p in small_tmpfs.iterdir()) == ["ballast"]


def tiny_disk(monkeypatch, free: int = 1000) -> None:
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda p: usage(10**6, 10**6 - free, free))


def test_original_copy_larger_than_the_free_space_is_refused(data, tmp_path, monkeypatch,
                                                             capsys):
    dataset, vg = data
    tiny_disk(monkeypatch)
    out = tmp_path / "release"
    assert main(["export", str(dataset), "--format", "original", "--vg", str(vg), "--out",
                 str(out), "--copy"]) == 1
    err = capsys.readouterr().err
    assert f"{out}: needs about" in err and "panel copies" in err, err
    assert list(tmp_path.iterdir()) == []


def test_extract_larger_than_the_free_space_is_refused(tmp_path, monkeypatch, capsys):
    import numpy as np

    from tests.features.conftest import CROP_ROWS, crop_table, write_dataset, write_jpeg

    rng = np.random.default_rng(7)
    vg = tmp_path / "vg"
    for i in sorted({r[1] for r in CROP_ROWS}):
        write_jpeg(vg / ("VG_100K" if i % 2 else "VG_100K_2") / f"{i}.jpg", rng)
    dataset = write_dataset(tmp_path / "d.h5", crop_table(CROP_ROWS))
    tiny_disk(monkeypatch)
    out = tmp_path / "feats.h5"
    assert main(["extract", str(dataset), "--vg", str(vg), "--backbone", "resnet18",
                 "--weights", "none", "--out", str(out), "--workers", "0", "--device",
                 "cpu"]) == 1
    err = capsys.readouterr().err
    assert f"{out}: needs about" in err and "features file" in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.h5", "vg"]


def test_crops_onto_a_real_full_tmpfs_says_the_disk_is_full(data, small_tmpfs, capsys):
    """numpy's write of a chunk to a full disk raises an OSError without errno ("N requested
    and M written"), which read as "OSError (check the path and try again)"."""
    dataset, vg = data
    (small_tmpfs / "ballast").write_bytes(b"\0" * ((3 << 20) - (64 << 10)))
    out = small_tmpfs / "crops.h5"
    assert main(["crops", str(dataset), "--vg", str(vg), "--size", "64", "--out", str(out),
                 "--workers", "1", "--chunk-crops", "64"]) == 1
    err = capsys.readouterr().err
    assert f"error: {out}.partial/chunk-" in err and err.count("\n") == 1, err
    assert "no space left on the device" in err, err
    assert not list(small_tmpfs.glob("**/*.part")) and not out.exists()
