"""POOLS.h5 as a file: it carries the hash of its own content, and a full disk leaves the
pools you had, and nothing else, behind."""

from __future__ import annotations

import shutil
import subprocess
import sys

import h5py

from tests.mining.hostile import tmpfs
from vprom.tables import content_hash, read_manifest


def test_pools_carry_the_hash_of_their_crops_and_vocabulary(mined, tmp_path):
    _, _, pools = mined
    recorded = read_manifest(pools)["outputs"]["content_hash"]
    assert recorded == content_hash(pools)
    for dataset in ("crops/x", "vocabulary/objects"):
        changed = tmp_path / f"{dataset.replace('/', '-')}.h5"
        shutil.copyfile(pools, changed)
        with h5py.File(changed, "r+") as h5:
            values = h5[dataset][()]
            # one value changed, as a damaged block would change it
            h5[dataset][0] = values[0] + (b"x" if isinstance(values[0], bytes) else 1)
        assert content_hash(changed) != recorded


def test_mine_on_a_full_disk_exits_1_and_keeps_the_pools_you_had(vg_dir, tmp_path):
    """A real 1 MB tmpfs (mounted where the tests may mount: as root), a finished POOLS.h5
    on it, then a second mine with other settings that no longer fits."""
    with tmpfs(tmp_path / "disk", "1m") as disk:
        out = disk / "pools.h5"
        mine = [sys.executable, "-m", "vprom", "mine", "--vg", str(vg_dir), "--out", str(out),
                "--workers", "2"]
        subprocess.run(mine, check=True, capture_output=True)
        before = {p.name: p.read_bytes() for p in disk.iterdir()}
        room = shutil.disk_usage(disk).free - out.stat().st_size // 2
        (disk / "ballast").write_bytes(b"\0" * room)
        done = subprocess.run([*mine, "--min-side", "50"], capture_output=True, text=True,
                              check=False)
        assert done.returncode == 1, done.stderr  # was -11: SIGSEGV inside libhdf5
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and "no space left on the device" in lines[0], done.stderr
        (disk / "ballast").unlink()
        assert {p.name: p.read_bytes() for p in disk.iterdir()} == before  # no part, no lock
