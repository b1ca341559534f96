"""Atomic writing: a killed or failed write never leaves a file or folder that looks finished."""

import os
import subprocess
import sys
import time

import pytest

from vprom.errors import VpromError
from vprom.files import atomic_dir, atomic_path, clean_stale_parts, write_json


def test_atomic_path_replaces_only_on_success(tmp_path):
    target = tmp_path / "out.txt"
    target.write_text("old")
    with pytest.raises(RuntimeError), atomic_path(target) as tmp:
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
        (tmp / "manifest.json").write_text('{"kind": "export-npz"}')
    with pytest.raises(KeyError), atomic_dir(target) as tmp:
        (tmp / "b").write_text("2")
        raise KeyError
    assert sorted(p.name for p in target.iterdir()) == ["manifest.json"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export"]


def test_atomic_dir_fills_an_empty_folder_and_replaces_it(tmp_path):
    (tmp_path / "empty").mkdir()
    for text in ("1", "2"):
        with atomic_dir(tmp_path / "empty") as tmp:
            (tmp / "TRUTH").write_text(text)
    assert (tmp_path / "empty" / "TRUTH").read_text() == "2"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty"]


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


def test_parts_of_dead_runs_are_cleaned_and_live_ones_kept(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()
    stale = tmp_path / f".pools.h5.{dead}.0abc1234.part"
    live = tmp_path / f".pools.h5.{os.getppid()}.5e6f7a8b.part"
    other = tmp_path / f".dataset.h5.{dead}.9c0d1e2f.part"
    for p in (stale, live, other):
        p.write_bytes(b"12 MB of half a file")
    folder = tmp_path / f".pools.h5.{dead}.d1d2d3d4.part"
    folder.mkdir()
    with atomic_path(tmp_path / "pools.h5") as tmp:
        tmp.write_text("done")
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == sorted(["pools.h5", live.name, other.name])
    clean_stale_parts(tmp_path / "pools.h5")
    assert sorted(p.name for p in tmp_path.iterdir()) == left


def test_writing_one_output_never_deletes_the_temporary_of_another(tmp_path):
    """`stats --json e` leaves `.e.jsonl.<pid>.part` of an export of `e.jsonl` alone: a writer
    cleans only its own output's parts, and only those of dead writers."""
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()
    writer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        others = [tmp_path / f".e.jsonl.{pid}.0a1b2c3d.part" for pid in (writer.pid, dead)]
        others += [tmp_path / f".e.{dead}.0a1b2c3d.5e6f7a8b.part", tmp_path / ".e.x.part"]
        for part in others:
            part.write_text("another output's half-written file")
        write_json(tmp_path / "e", {"kind": "stats"})
        assert all(part.read_text().startswith("another") for part in others)
        write_json(tmp_path / "e.jsonl", {})  # its own: the dead writer's part goes
        assert [p.exists() for p in others] == [True, False, True, True]
    finally:
        writer.kill()
        writer.wait()


@pytest.mark.parametrize("writer, make", [(atomic_path, "open"), (atomic_dir, "mkdir")])
@pytest.mark.parametrize("on_thread", ["main", "other"])
def test_ctrl_c_just_as_the_temporary_is_made_leaves_no_part(tmp_path, monkeypatch, writer,
                                                             make, on_thread):
    """A Ctrl-C that lands right after the temporary exists (here: sent by the creating call
    itself) still removes it, whichever thread the OS hands the signal to (numpy's or torch's
    threads may take it in the middle of the window)."""
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
        with pytest.raises(KeyboardInterrupt), writer(target):
            # a SIGINT caught on the other thread can wait until a busy pure-Python loop ends
            # (seen on CPython 3.11 under load); a loop that sleeps takes it within milliseconds
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                time.sleep(0.001)
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
        with pytest.raises(KeyboardInterrupt), writer(tmp_path / "out"):
            pass
    assert list(tmp_path.iterdir()) == []
