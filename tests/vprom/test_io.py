import json
import os
import subprocess
import sys

import pytest

from vprom.errors import VpromError
from vprom.io import (atomic_dir, atomic_path, check_output, clean_stale_parts, make_manifest,
                      sha256_file, write_json)


def test_atomic_path_replaces_only_on_success(tmp_path):
    target = tmp_path / "out.txt"
    target.write_text("old")
    with pytest.raises(RuntimeError):
        with atomic_path(target) as tmp:
            tmp.write_text("half")
            raise RuntimeError("killed")
    assert target.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]
    with atomic_path(target) as tmp:
        tmp.write_text("new")
    assert target.read_text() == "new"


def test_atomic_dir_keeps_old_folder_until_new_one_is_complete(tmp_path):
    target = tmp_path / "export"
    with atomic_dir(target) as tmp:
        (tmp / "a").write_text("1")
    with pytest.raises(KeyError):
        with atomic_dir(target) as tmp:
            (tmp / "b").write_text("2")
            raise KeyError
    assert sorted(p.name for p in target.iterdir()) == ["a"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export"]


def test_manifest_records_versions_config_and_hashes(tmp_path):
    f = tmp_path / "x.bin"
    f.write_bytes(b"abc")
    m = make_manifest("pools", {"min_side": 100}, seed=3, inputs={"x.bin": sha256_file(f)},
                      counts={"crops": 2})
    write_json(tmp_path / "m.json", m)
    back = json.loads((tmp_path / "m.json").read_text())
    assert back["format_version"] == 1 and back["seed"] == 3
    assert back["inputs"]["x.bin"] == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    assert back["vprom_version"]


def test_parts_of_dead_runs_are_cleaned_and_live_ones_kept(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()
    stale = tmp_path / f".pools.h5.{dead}.abc123.part"
    legacy = tmp_path / ".pools.h5.k2j4h5.part"  # named before pids were
    live = tmp_path / f".pools.h5.{os.getppid()}.x.part"
    other = tmp_path / f".dataset.h5.{dead}.y.part"
    for p in (stale, legacy, live, other):
        p.write_bytes(b"12 MB of half a file")
    folder = tmp_path / f".pools.h5.{dead}.dir.part"
    folder.mkdir()
    with atomic_path(tmp_path / "pools.h5") as tmp:
        tmp.write_text("done")
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == sorted(["pools.h5", live.name, other.name])
    assert clean_stale_parts(tmp_path / "pools.h5") == []


@pytest.mark.parametrize("make, folder, message", [
    (lambda p: p.mkdir(), False, "is a folder, but this output is a file"),
    (lambda p: p.write_text("x"), True, "is a file, but this output is a folder"),
])
def test_an_output_of_the_wrong_kind_is_refused(tmp_path, make, folder, message):
    make(tmp_path / "out")
    with pytest.raises(VpromError, match=message):
        check_output(tmp_path / "out", folder=folder)


def test_a_file_in_the_parent_path_is_refused(tmp_path):
    (tmp_path / "a").write_text("a file")
    with pytest.raises(VpromError, match="a is a file, so no file can be made below it"):
        check_output(tmp_path / "a" / "b" / "out.h5")
    assert check_output(tmp_path / "new" / "out.h5") == tmp_path / "new" / "out.h5"


@pytest.mark.skipif(not hasattr(__import__("signal"), "pthread_sigmask"), reason="POSIX")
@pytest.mark.parametrize("writer, make", [(atomic_path, "mkstemp"), (atomic_dir, "mkdtemp")])
def test_ctrl_c_just_as_the_temporary_is_made_leaves_no_part(tmp_path, monkeypatch, writer,
                                                             make):
    """A Ctrl-C that lands right after the temporary exists (here: sent by the creating call
    itself) still removes it: `train` once left a `.history.json.*.part` this way."""
    import signal
    import tempfile

    real = getattr(tempfile, make)

    def made_then_interrupted(*args, **kwargs):
        made = real(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGINT)
        return made

    monkeypatch.setattr(tempfile, make, made_then_interrupted)
    target = tmp_path / "history.json"
    target.write_text("old") if writer is atomic_path else target.mkdir()
    with pytest.raises(KeyboardInterrupt):
        with writer(target):
            pass
    assert sorted(p.name for p in tmp_path.iterdir()) == ["history.json"]


def test_ctrl_c_while_setting_up_the_temporary_leaves_no_part(tmp_path, monkeypatch):
    def interrupted(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "chmod", interrupted)
    for writer in (atomic_path, atomic_dir):
        with pytest.raises(KeyboardInterrupt):
            with writer(tmp_path / "out"):
                pass
    assert list(tmp_path.iterdir()) == []
