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
    with atomic_dir(target, kinds=("export-npz",)) as tmp:
        (tmp / "manifest.json").write_text('{"kind": "export-npz"}')
    with pytest.raises(KeyError):
        with atomic_dir(target, kinds=("export-npz",)) as tmp:
            (tmp / "b").write_text("2")
            raise KeyError
    assert sorted(p.name for p in target.iterdir()) == ["manifest.json"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export"]


@pytest.mark.parametrize("manifest", [None, '{"kind": "pools"}', "not json"])
def test_atomic_dir_never_replaces_a_folder_vprom_did_not_write(tmp_path, manifest):
    """`export --out vg` once deleted the whole Visual Genome folder."""
    target = tmp_path / "vg"
    target.mkdir()
    (target / "objects.json").write_text("[]")
    if manifest is not None:
        (target / "manifest.json").write_text(manifest)
    with pytest.raises(VpromError, match=r"vg: already exists and is .*move it away"):
        with atomic_dir(target, kinds=("export-npz",)) as tmp:
            (tmp / "x").write_text("1")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["vg"]
    assert (target / "objects.json").read_text() == "[]"


def test_atomic_dir_fills_an_empty_folder_and_replaces_its_marked_own(tmp_path):
    (tmp_path / "empty").mkdir()
    with atomic_dir(tmp_path / "empty") as tmp:
        (tmp / "TRUTH").write_text("1")
    with atomic_dir(tmp_path / "empty", marker="TRUTH") as tmp:
        (tmp / "TRUTH").write_text("2")
    assert (tmp_path / "empty" / "TRUTH").read_text() == "2"


def test_a_full_disk_names_the_output_and_leaves_no_part(tmp_path, monkeypatch):
    import errno

    real = os.write

    def full(fd, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    (tmp_path / "d.jsonl").write_text("old")
    with pytest.raises(VpromError, match=r"d\.jsonl: no space left on the device"):
        with atomic_path(tmp_path / "d.jsonl") as tmp:
            monkeypatch.setattr(os, "write", full)
            fd = os.open(tmp, os.O_WRONLY)
            try:
                os.write(fd, b"x")
            finally:
                monkeypatch.setattr(os, "write", real)
                os.close(fd)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.jsonl"]
    assert (tmp_path / "d.jsonl").read_text() == "old"


def test_a_folder_moved_aside_by_a_killed_swap_comes_back(tmp_path):
    """kill -9 between the two renames of `atomic_dir` leaves the old folder aside; the next
    write of that output puts it back instead of deleting it as a stale part."""
    aside = tmp_path / ".export.999999999.old.part"  # no such process
    aside.mkdir()
    (aside / "manifest.json").write_text('{"kind": "export-npz"}')
    clean_stale_parts(tmp_path / "export")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export"]
    assert (tmp_path / "export" / "manifest.json").exists()


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


@pytest.mark.parametrize("writer, make", [(atomic_path, "open"), (atomic_dir, "mkdir")])
@pytest.mark.parametrize("on_thread", ["main", "other"])
def test_ctrl_c_just_as_the_temporary_is_made_leaves_no_part(tmp_path, monkeypatch, writer,
                                                             make, on_thread):
    """A Ctrl-C that lands right after the temporary exists (here: sent by the creating call
    itself) still removes it, whichever thread the OS hands the signal to: `train` once left
    a `.history.json.*.part` this way, and a signal mask held on the main thread alone let
    numpy's or torch's threads take it in the middle of the window."""
    import signal
    import threading

    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    real = getattr(os, make)

    def made_then_interrupted(name, *args, **kwargs):
        made = real(name, *args, **kwargs)
        if str(name).endswith(".part"):
            if on_thread == "main":
                os.kill(os.getpid(), signal.SIGINT)
            else:
                signal.pthread_kill(other.ident, signal.SIGINT)
        return made

    monkeypatch.setattr(os, make, made_then_interrupted)
    target = tmp_path / "history.json"
    target.write_text("old") if writer is atomic_path else target.mkdir()
    try:
        with pytest.raises(KeyboardInterrupt):
            with writer(target):
                for _ in range(1000):  # the interrupt is taken at the next bytecode at most
                    pass
    finally:
        stop.set()
        other.join()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["history.json"]


def test_ctrl_c_while_setting_up_the_temporary_leaves_no_part(tmp_path, monkeypatch):
    import secrets

    def interrupted(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(secrets, "token_hex", interrupted)
    for writer in (atomic_path, atomic_dir):
        with pytest.raises(KeyboardInterrupt):
            with writer(tmp_path / "out"):
                pass
    assert list(tmp_path.iterdir()) == []
