"""`kill -9` of `vprom mine` and `vprom build --synthetic` at random moments, then a re-run.

For each command, one clean run gives the reference output. Then, N times: the command starts
in its own process group (as a shell starts it), is killed with SIGKILL at a moment drawn
uniformly from (0.2 s, 0.95 x the clean run's time) by a seeded numpy Generator (a run that
finishes first does not count, and another moment is drawn), and only its main process is
killed, as `kill -9 PID` does. A kill passes when

- within `ORPHAN_S` seconds no process of its group is left (no orphaned worker: /proc);
- the same command run again, without --wait, ends 0 within `HANG_S` seconds (no lock
  left held);
- the output folder then equals the clean run's, every file byte for byte, and holds no
  other file (`folder_hash`).

`mine` kills start from the output the previous re-run left (a killed run replacing a
finished pools.h5); `build` kills start from an empty folder (the kill lands in any stage).
It prints one line per kill and a result line per command:

    python bench/kill_test.py [--kills 20] [--commands mine build] [--seed 0] [--images 1000]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ORPHAN_S = 5.0
HANG_S = 300.0


def group_alive(pgid: int) -> list[int]:
    """The living (not zombie) processes of process group `pgid`."""
    alive = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            alive.append(int(stat.parent.name))
    return alive


def start(args: list[str], cwd: Path) -> subprocess.Popen:
    """`vprom ARGS` in its own process group; stderr to a file (an orphan holding a pipe open
    would keep a reader of it waiting)."""
    with open(cwd / "stderr.txt", "w") as err:
        return subprocess.Popen([sys.executable, "-m", "vprom", *args], cwd=cwd,
                                stdout=subprocess.DEVNULL, stderr=err,
                                stdin=subprocess.DEVNULL, start_new_session=True)


def run(args: list[str], cwd: Path) -> tuple[int | None, str, float]:
    """(exit status, stderr's last line, seconds); a run past HANG_S is killed: status None."""
    began = time.monotonic()
    proc = start(args, cwd)
    try:
        code = proc.wait(timeout=HANG_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return None, "hung", time.monotonic() - began
    lines = (cwd / "stderr.txt").read_text().strip().splitlines()
    return code, lines[-1] if lines else "", time.monotonic() - began


def kill_at(args: list[str], cwd: Path, after: float) -> tuple[bool, list[int]]:
    """Kill the command's main process `after` seconds in; (whether it was still running,
    the processes of its group still alive `ORPHAN_S` seconds later, then killed)."""
    proc = start(args, cwd)
    try:
        proc.wait(timeout=after)
        return False, []
    except subprocess.TimeoutExpired:
        pass
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + ORPHAN_S
    while (left := group_alive(proc.pid)) and time.monotonic() < deadline:
        time.sleep(0.05)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    return True, left


def folder_hash(folder: Path) -> str:
    """sha256 over the name and bytes of every file under `folder`, hidden ones included (a
    temporary part or lock left behind is a difference). vprom's outputs are byte for byte
    the same for the same inputs and settings, manifests included (they hold no times)."""
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(folder)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def trial(name: str, args: list[str], folder: Path, fresh: bool, kills: int,
          rng: np.random.Generator, work: Path) -> bool:
    """Kill `vprom ARGS` `kills` times; True when every kill passed (module doc)."""
    shutil.rmtree(folder, ignore_errors=True)
    code, last, clean_s = run(args, work)
    if code != 0:
        sys.exit(f"{name}: the clean run failed ({code}): {last}")
    reference = folder_hash(folder)
    failures = done = 0
    for _attempt in range(3 * kills):
        if done == kills:
            break
        if fresh:
            shutil.rmtree(folder, ignore_errors=True)
        after = float(rng.uniform(0.2, 0.95 * clean_s))
        killed, orphans = kill_at(args, work, after)
        if not killed:  # it finished first (a quieter machine): not a kill, draw again
            print(f"{name}: finished before {after:.2f} s; another moment is drawn")
            continue
        code, last, again_s = run(args, work)
        same = code == 0 and folder_hash(folder) == reference
        done += 1
        failures += not (same and not orphans)
        print(f"{name} kill {done}/{kills} at {after:.2f} s: orphans {orphans or 'none'}, "
              f"re-run exit {code} in {again_s:.1f} s, output "
              f"{'equal' if same else 'DIFFERENT'}" + ("" if code == 0 else f" ({last})"),
              flush=True)
    print(f"RESULT {name}: {done - failures}/{kills} kills passed (clean run {clean_s:.1f} s)",
          flush=True)
    return failures == 0 and done == kills


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--commands", nargs="+", choices=("mine", "build"),
                        default=["mine", "build"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--images", type=int, default=1000)
    parser.add_argument("--work", type=Path, default=None)
    a = parser.parse_args()
    work = a.work or Path(tempfile.mkdtemp(prefix="vprom-kill-"))
    work.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(a.seed)
    passed = True
    if "mine" in a.commands:
        vg = work / "vg"
        if not vg.exists():
            subprocess.run([sys.executable, "-m", "vprom", "synth", "--out", str(vg), "--images",
                            str(4 * a.images), "--seed", str(a.seed)], check=True,
                           stdout=subprocess.DEVNULL)
        pools = work / "mine" / "pools.h5"
        passed &= trial("mine", ["mine", "--vg", str(vg), "--out", str(pools)], pools.parent,
                        False, a.kills, rng, work)
    if "build" in a.commands:
        folder = work / "build"
        passed &= trial("build", ["build", "--synthetic", "--images", str(a.images), "--scale",
                                  "0.01", "--seed", str(a.seed), "--out", str(folder)],
                        folder, True, a.kills, rng, work)
    sys.exit(0 if passed else 1)


if __name__ == "__main__":
    main()
