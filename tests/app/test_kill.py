"""`kill -9` of `vprom mine` and `vprom build` mid-run: no worker outlives the command, no
lock is left held, and the same command run again (without --wait) gives the clean output.

The command runs in its own process group; a probe holds its mining workers mid-chunk, so
the kill lands mid-run every time, and only the main process is killed (`kill -9 PID`).
bench/kill_test.py does the same at random moments, many times.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from tests.app.test_interrupts import PROBE_MINE, Command, _group, _vg_json, linux
from vprom.app import cli


def _files(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` (hidden ones included) by its relative name."""
    return {str(p.relative_to(folder)): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _kill_mid_mining_then_rerun(tmp_path: Path, *args: str) -> None:
    """Run `vprom ARGS` in tmp_path/killed/work, kill -9 it while its workers mine, check
    that its group ends, then run it again to the end."""
    logs = tmp_path / "killed"
    (logs / "work").mkdir(parents=True)
    run = Command(logs, *args, script=PROBE_MINE)
    run.wait_for(lambda: "PROBE: worker" in run.stderr, "a worker mining its chunk")
    os.kill(run.proc.pid, signal.SIGKILL)
    run.proc.wait()
    deadline = time.monotonic() + 5
    while _group(run.proc.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = _group(run.proc.pid)
    run.kill()
    assert not left, f"outlived the killed command: {left}"
    again = Command(logs, *args)
    assert again.proc.wait(timeout=300) == 0, again.stderr  # refused if a lock were held


@linux
def test_mine_killed_outright_leaves_no_worker_and_no_lock(tmp_path):
    vg = _vg_json(tmp_path / "vg", images=4000)
    assert cli.main(["mine", "--vg", str(vg), "--out", str(tmp_path / "clean/pools.h5")]) == 0
    _kill_mid_mining_then_rerun(tmp_path, "mine", "--vg", str(vg), "--out", "work/pools.h5")
    assert _files(tmp_path / "killed/work") == _files(tmp_path / "clean")


@linux
@pytest.mark.slow
def test_build_killed_outright_resumes_to_the_clean_build(tmp_path):
    options = ["--synthetic", "--images", "1000", "--scale", "0.01"]
    assert cli.main(["build", *options, "--out", str(tmp_path / "clean")]) == 0
    _kill_mid_mining_then_rerun(tmp_path, "build", *options, "--out", "work")
    assert _files(tmp_path / "killed/work") == _files(tmp_path / "clean")
