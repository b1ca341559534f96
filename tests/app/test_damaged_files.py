"""A damaged HDF5 input never hangs a command: 4 KB zeroed inside a global heap collection
(where libhdf5 keeps variable-length strings, and loops for good on a zeroed object header)
gives the one-line "cannot be read" error within seconds, and Ctrl-C still works."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import h5py

from tests.dataset_fixture import make_dataset, write_pools
from vprom.app.cli import main
from vprom.tables import content_hash, read_manifest, set_manifest


def _zeroed(source: Path, out: Path, collection: int) -> Path:
    """`source` with 4 KB zeroed just past the header of its `collection`-th heap collection."""
    data = bytearray(source.read_bytes())
    start = [m.start() for m in re.finditer(b"GCOL", data)][collection] + 64
    data[start:start + 4096] = bytes(4096)
    out.write_bytes(bytes(data))
    return out


def _vprom(*argv) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "vprom", *map(str, argv)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_a_zeroed_block_gives_one_line_within_seconds(tmp_path):
    pools = write_pools(tmp_path / "pools.h5", images=300)
    dataset = make_dataset(tmp_path / "dataset.h5")
    runs = {}
    for k in (0, 1, 2):
        bad_pools = _zeroed(pools, tmp_path / f"pools{k}.h5", k)
        bad_data = _zeroed(dataset, tmp_path / f"dataset{k}.h5", k)
        runs[bad_pools, "generate"] = _vprom("generate", bad_pools, "--out",
                                             tmp_path / f"out{k}.h5", "--workers", 1)
        runs[bad_data, "stats"] = _vprom("stats", bad_data)
        runs[bad_data, "verify"] = _vprom("verify", bad_data, "--workers", 1)
    for (path, command), proc in runs.items():
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 1, (command, path, err)
        assert err.count("\n") == 1 and f"vprom {command}: error: {path}: cannot be read" in err
    assert not list(tmp_path.glob("out*.h5"))


def test_ctrl_c_stops_a_command_reading_a_damaged_file(tmp_path):
    bad = _zeroed(make_dataset(tmp_path / "dataset.h5"), tmp_path / "bad.h5", 0)
    proc = _vprom("stats", bad)
    time.sleep(2.5)  # past Python's start, into the read
    sent = time.monotonic()
    os.kill(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert time.monotonic() - sent < 3
    assert proc.returncode == 130 and err.count("\n") == 1 and "interrupted" in err, err


def _record_content_hash(path: Path) -> None:
    """Give `path` the `outputs.content_hash` `vprom mine` records in a POOLS.h5."""
    manifest = read_manifest(path)
    manifest["outputs"] = {"content_hash": content_hash(path)}
    with h5py.File(path, "r+") as h5:
        set_manifest(h5, manifest)


def test_a_pools_file_whose_data_differs_from_its_hash_is_refused(tmp_path, capsys):
    pools = write_pools(tmp_path / "pools.h5")
    _record_content_hash(pools)
    dataset = tmp_path / "dataset.h5"
    assert main(["generate", str(pools), "--out", str(dataset), "--scale", "0.004",
                 "--workers", "1"]) == 0
    assert main(["verify", str(dataset), "--pools", str(pools), "--workers", "1"]) == 0
    capsys.readouterr()
    with h5py.File(pools, "r+") as h5:  # a damaged block: one crop's box moves
        h5["crops/x"][5] += 8
    for argv in (["generate", str(pools), "--out", str(tmp_path / "again.h5")],
                 ["verify", str(dataset), "--pools", str(pools)]):
        assert main(argv) == 1
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"{pools}: its data differs from the content hash" in err
    assert not (tmp_path / "again.h5").exists()


def test_a_pools_file_that_records_no_hash_is_read_as_it_is(tmp_path, capsys):
    pools = write_pools(tmp_path / "pools.h5")
    with h5py.File(pools, "r+") as h5:
        h5["crops/x"][5] += 8
    assert main(["generate", str(pools), "--out", str(tmp_path / "d.h5"), "--scale", "0.004",
                 "--workers", "1"]) == 0
    assert "content hash" not in capsys.readouterr().err
