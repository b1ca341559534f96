"""Workers die with their parent, `kill -9` included, and never keep its output lock held."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.app.test_interrupts import _group
from vprom import claim

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc (Linux)")
SPAWNED = Path(__file__).resolve().parents[1] / "spawned"

#: a parent holding an output lock with two forked workers; argv: lock path, "busy" (the
#: workers are in a job) or "idle" (they wait for one), and "no-death-signal" to leave the
#: workers only their pipe to notice the parent is gone (as off Linux)
PARENT = """
import sys, time
from vprom import claim, processes
import vprom_test_jobs as jobs
out, state = sys.argv[1], sys.argv[2]
if "no-death-signal" in sys.argv:
    assert callable(processes._die_with_parent)  # what the workers call, replaced
    processes._die_with_parent = lambda parent: None
with claim.output_lock(out):
    seconds = 600 if state == "busy" else 0
    # 4 jobs: each worker takes two at once (processes.DEPTH) and is busy with the first
    with processes.ordered_map(jobs.announce_and_sleep, [seconds] * 4, 2, "test",
                               method="fork") as results:
        if state == "idle":
            list(results)
            print("idle", flush=True)
        else:
            next(iter(results))
        time.sleep(600)
"""


def _lines(stream, count: int, timeout: float = 60) -> list[str]:
    """`count` lines from the pipe `stream`, or fewer once `timeout` seconds have passed."""
    text = ""
    deadline = time.monotonic() + timeout
    while text.count("\n") < count and select.select(
            [stream], [], [], max(0, deadline - time.monotonic()))[0]:
        chunk = os.read(stream.fileno(), 4096).decode()
        if not chunk:
            break
        text += chunk
    return text.splitlines()


@linux
@pytest.mark.parametrize("state, extra", [("busy", ()), ("idle", ()),
                                          ("idle", ("no-death-signal",))],
                         ids=["busy", "idle", "idle-by-pipe-alone"])
def test_workers_of_a_killed_parent_end_and_its_lock_is_free(tmp_path, state, extra):
    out = tmp_path / "out.h5"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(SPAWNED), os.environ.get("PYTHONPATH", "")])}
    parent = subprocess.Popen([sys.executable, "-c", PARENT, str(out), state, *extra],
                              stdout=subprocess.PIPE, text=True, env=env,
                              start_new_session=True)
    try:
        said = _lines(parent.stdout, 5 if state == "idle" else 2)
        assert said[-1].startswith("idle" if state == "idle" else "busy"), said
        os.kill(parent.pid, signal.SIGKILL)  # the parent alone, as `kill -9 PID` does
        parent.wait()
        deadline = time.monotonic() + 5
        while _group(parent.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _group(parent.pid), "a worker outlived its parent"
        with claim.output_lock(out, wait=False):  # refused while a worker held the fd
            pass
    finally:
        for pid in _group(parent.pid):
            os.kill(pid, signal.SIGKILL)
        parent.stdout.close()
