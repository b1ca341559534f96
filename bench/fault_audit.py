"""The outside fault and security audit's failed cases, replayed as a user meets them.

Every case of the audit's list (docs/errors-and-resuming.md states the promise each one
checks), the kill test's scenario (bench/kill_test.py) and each hostile input the audit named
is run through the `vprom` command line, in a fresh process, on one temporary synthetic build
(`vprom build --synthetic`) and files derived from it. Where a case needs a condition no
command can make (a full disk, a held lock, a zeroed HDF5 block, a finalizer interrupted),
the test suite's own helper makes it. Items 1-11 are here, 12-15 and the infinities in
bench/fault_audit_more.py. One line per case:

    CASE | expected | observed | PASS or FAIL

then the number of failures; the exit status is 1 when any case failed. Cases that need a
real full disk mount a small tmpfs (root only; elsewhere they are reported as SKIP).

    python bench/fault_audit.py [--work DIR] [--only WORD ...]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import h5py
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

import kill_test  # noqa: E402  (bench/kill_test.py)

from tests.app.test_damaged_files import _zeroed  # noqa: E402
from tests.app.test_one_writer import held_elsewhere  # noqa: E402
from tests.mining.hostile import tmpfs  # noqa: E402

ENV = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}


class Skip(Exception):
    """A case that cannot run here (no root for a tmpfs)."""


def registry(cases: list):
    """A decorator `case(name, expected)` that appends the check it decorates to `cases`."""
    def case(name: str, expected: str):
        def register(check):
            cases.append((name, expected, check))
            return check
        return register
    return case


CASES = []
case = registry(CASES)


def vprom(*argv, cwd=None, timeout: float = 600, shell_prefix: str = "") -> tuple[int, str, str]:
    """`vprom ARGV` in a fresh process: (exit status, stdout, stderr); a run past `timeout`
    is killed and reported as status None."""
    command = [sys.executable, "-m", "vprom", *map(str, argv)]
    if shell_prefix:  # e.g. "ulimit -n 64;"
        command = ["bash", "-c", shell_prefix + " exec " + " ".join(map(_quote, command))]
    try:
        done = subprocess.run(command, cwd=cwd, env=ENV, capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return None, "", f"still running after {timeout} s"
    return done.returncode, done.stdout, done.stderr


def _quote(word: str) -> str:
    return "'" + word.replace("'", "'\\''") + "'"


def one_line(result, *words, code=1) -> tuple[bool, str]:
    """The command exited `code` with one line of its own (`vprom CMD: ...`) on stderr, holding
    every one of `words`, and no traceback; progress notes (`extract: decoding ...`) may
    stand beside it."""
    status, _, err = result
    said = [x for x in err.splitlines() if x.startswith("vprom")]
    broken = "Traceback" in err or "Exception ignored" in err
    ok = status == code and len(said) == 1 and not broken and all(w in said[0] for w in words)
    shown = said[-1] if said else (err.strip().splitlines() or ["(nothing on stderr)"])[-1]
    return ok, f"exit {status}: {shown[:160]}" + (" (and a traceback)" if broken else "")


def both(*checks: tuple[bool, str]) -> tuple[bool, str]:
    return all(ok for ok, _ in checks), "; ".join(text for _, text in checks)


def plain(path: Path) -> str:
    return str(path.resolve())


# ---------------------------------------------------------------- the shared inputs
class Work:
    """The temporary build and what the cases derive from it, made when first needed."""

    def __init__(self, root: Path):
        self.root = root
        self.build = root / "build"
        if not (self.build / "manifest.json").is_file():
            status, _, err = vprom("build", "--synthetic", "--out", self.build, "--workers", 2)
            if status != 0:
                sys.exit(f"the synthetic build failed: {err[-2000:]}")
        self.dataset, self.pools, self.vg = (self.build / "dataset.h5", self.build / "pools.h5",
                                             self.build / "vg")

    def fresh(self, name: str) -> Path:
        folder = self.root / name
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        return folder

    def build_copy(self, name: str) -> Path:
        """A fresh copy of the finished build folder."""
        folder = self.root / name
        shutil.rmtree(folder, ignore_errors=True)
        shutil.copytree(self.build, folder, symlinks=True)
        return folder

    @property
    def features(self) -> Path:
        path = self.root / "labels.h5"
        if not path.is_file():
            check = vprom("extract", self.dataset, "--backbone", "labels", "--out", path)
            assert check[0] == 0, check[2]
        return path

    def run(self, name: str = "run", model: str = "mlp-sum-2", epochs: int = 1) -> Path:
        out = self.root / name
        if not (out / "best.pt").is_file():
            check = vprom(*self.train_argv(out, model, epochs))
            assert check[0] == 0, check[2]
        return out

    def train_argv(self, out: Path, model: str = "mlp-sum-2", epochs: int = 1) -> list:
        return ["train", self.dataset, "--features", self.features, "--model", model,
                "--split", "neutral", "--epochs", epochs, "--hidden", 16, "--device", "cpu",
                "--out", out]

    def predictions(self, rows: str, name: str) -> Path:
        path = self.root / name
        path.write_bytes(rows.encode("utf-8"))
        return path


# ---------------------------------------------------------------- 1-3: nothing you had lost
@case("1 crops --out its own dataset.h5", "refused in one line; the data set unchanged")
def crops_onto_input(w: Work):
    copy = w.fresh("c1") / "dataset.h5"
    shutil.copy(w.dataset, copy)
    before = copy.read_bytes()
    result = vprom("crops", copy, "--vg", w.vg, "--size", 8, "--out", copy)
    ok, text = one_line(result, str(copy))
    return ok and copy.read_bytes() == before, text


@case("1 crops --out thesis.txt", "refused in one line; the text file unchanged")
def crops_onto_users_file(w: Work):
    thesis = w.fresh("c1b") / "thesis.txt"
    thesis.write_text("three years of work")
    result = vprom("crops", w.dataset, "--vg", w.vg, "--size", 8, "--out", thesis)
    ok, text = one_line(result, "thesis.txt")
    return ok and thesis.read_text() == "three years of work", text


@case("2 symlink at the lock path", "refused in one line; the link's target untouched")
def lock_symlink(w: Work):
    folder = w.fresh("c2")
    (folder / "out").mkdir()
    victim = folder / "victim.txt"
    victim.write_text("precious")
    (folder / "out" / ".stats.json.lock").symlink_to("../victim.txt")
    result = vprom("stats", w.dataset, "--json", folder / "out" / "stats.json")
    ok, text = one_line(result, ".stats.json.lock")
    return ok and victim.read_text() == "precious", text


@case("3 report --out a folder holding the user's report.md", "refused; report.md unchanged")
def report_into_users_folder(w: Work):
    run, folder = w.run(), w.fresh("c3a")
    (folder / "report.md").write_text("my own report")
    result = vprom("report", run, "--out", folder)
    ok, text = one_line(result, str(folder))
    return ok and (folder / "report.md").read_text() == "my own report", text


@case("3 build --out a folder holding the user's manifest.json and stats.json",
      "refused; both files kept")
def build_into_users_folder(w: Work):
    folder = w.fresh("c3b")
    for name in ("manifest.json", "stats.json"):
        (folder / name).write_text(f"my {name}")
    result = vprom("build", "--synthetic", "--images", 200, "--out", folder)
    ok, text = one_line(result, str(folder))
    kept = all((folder / n).read_text() == f"my {n}" for n in ("manifest.json", "stats.json"))
    return ok and kept, text


# ---------------------------------------------------------------- 4: kill -9
@case("4 kill -9 of mine and of build, then a re-run (the kill test, 2 kills each)",
      "no worker left; the re-run starts at once and ends 0 with the clean run's bytes")
def kill_nine(w: Work):
    work = w.fresh("c4")
    vg = work / "vg"
    status, _, err = vprom("synth", "--out", vg, "--images", 4000)
    assert status == 0, err
    rng = np.random.default_rng(0)
    pools = work / "mine" / "pools.h5"
    mine = kill_test.trial("mine", ["mine", "--vg", str(vg), "--out", str(pools)],
                           pools.parent, False, 2, rng, work)
    build = kill_test.trial("build", ["build", "--synthetic", "--images", "1000", "--scale",
                                      "0.01", "--out", str(work / "build")],
                            work / "build", True, 2, rng, work)
    return mine and build, f"mine {'passed' if mine else 'FAILED'}, build " + (
        "passed" if build else "FAILED") + " (lines above)"


# ---------------------------------------------------------------- 5-7: damaged inputs
@case("5 a zeroed 4 KB block in dataset.h5 and pools.h5: stats, generate, verify",
      "one line 'cannot be read' each, within 120 s")
def zeroed_block(w: Work):
    folder = w.fresh("c5")
    bad_data = _zeroed(w.dataset, folder / "dataset.h5", 0)
    bad_pools = _zeroed(w.pools, folder / "pools.h5", 0)
    checks = [one_line(vprom("stats", bad_data, timeout=120), "cannot be read"),
              one_line(vprom("verify", bad_data, "--workers", 1, timeout=120), "cannot be read"),
              one_line(vprom("generate", bad_pools, "--out", folder / "out.h5", "--workers", 1,
                             timeout=120), "cannot be read")]
    return both(*checks)[0] and not (folder / "out.h5").exists(), both(*checks)[1]


@case("5 Ctrl-C while stats reads a damaged file", "exit 130 within 10 s, one line")
def zeroed_block_ctrl_c(w: Work):
    bad = _zeroed(w.dataset, w.fresh("c5b") / "dataset.h5", 0)
    proc = subprocess.Popen([sys.executable, "-m", "vprom", "stats", str(bad)], env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(2.5)
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    took = time.monotonic() - sent
    ok, text = one_line((proc.returncode, "", err), code=proc.returncode)
    return ok and proc.returncode in (1, 130) and took < 10, f"{text} after {took:.1f} s"


@case("6 pools.h5 with 4 KB zeroed in its data: generate and verify --pools",
      "both refuse in one line naming pools.h5; no data set written")
def damaged_pools(w: Work):
    folder = w.fresh("c6")
    bad = folder / "pools.h5"
    data = bytearray(w.pools.read_bytes())
    with h5py.File(w.pools, "r") as h5:  # inside the largest numeric column: boxes, ids
        largest = max((h5[n] for n in _datasets(h5) if h5[n].dtype.kind in "iuf"),
                      key=lambda d: d.id.get_storage_size())
        if largest.chunks:
            chunk = largest.id.get_chunk_info(0)
            start = chunk.byte_offset + chunk.size // 4
        else:
            start = largest.id.get_offset() + largest.id.get_storage_size() // 4
    data[start:start + 4096] = bytes(4096)
    bad.write_bytes(bytes(data))
    shutil.copy(w.pools.with_name("pools.h5.excluded_counts.tsv"), folder)
    made = one_line(vprom("generate", bad, "--out", folder / "d.h5", "--workers", 1),
                    "pools.h5")
    checked = one_line(vprom("verify", w.dataset, "--pools", bad, "--workers", 1), "pools.h5")
    return made[0] and checked[0] and not (folder / "d.h5").exists(), both(made, checked)[1]


def _datasets(h5) -> list[str]:
    names = []
    h5.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
    return names


@case("7 generate into a finished build with other settings, then build again",
      "build does not keep that data set: it says why and makes it again")
def build_vouches(w: Work):
    folder = w.build_copy("c7")
    status, _, err = vprom("generate", folder / "pools.h5", "--out", folder / "dataset.h5",
                           "--scale", 0.01, "--seed", 9, "--workers", 2)
    assert status == 0, err
    status, out, err = vprom("build", "--synthetic", "--out", folder, "--workers", 2)
    kept = "kept dataset.h5" in out
    same = (folder / "dataset.h5").read_bytes() == w.dataset.read_bytes()
    return status == 0 and not kept and same, (
        f"exit {status}; " + ("said 'kept dataset.h5'" if kept else "made it again") +
        ("; the build's own bytes" if same else "; OTHER bytes"))


# ---------------------------------------------------------------- 8-9: one writer
@case("8 evaluate while another process writes the run", "refused at once, naming the pid")
def evaluate_lock(w: Work):
    run = w.run()
    (run / "metrics.json").unlink(missing_ok=True)
    with held_elsewhere(run) as holder:
        ok, text = one_line(vprom("evaluate", run, "--device", "cpu", timeout=120),
                            str(holder.pid))
    return ok and not (run / "metrics.json").exists(), text


@case("9 stats --json e beside a live export's temporary of e.jsonl",
      "the other output's temporary is left alone")
def others_temporary(w: Work):
    folder = w.fresh("c9")
    sleeper = subprocess.Popen(["sleep", "120"])
    try:
        parts = [folder / f".e.jsonl.{sleeper.pid}.part",
                 folder / f".e.jsonl.{sleeper.pid}.0123abcd.part",
                 folder / f".e.{sleeper.pid}.0123abcd.part.jsonl"]
        for part in parts:
            part.write_text("an export writing")
        status, _, err = vprom("stats", w.dataset, "--json", folder / "e")
    finally:
        sleeper.kill()
        sleeper.wait()
    left = [p.name for p in parts if p.exists()]
    return status == 0 and len(left) == len(parts), f"exit {status}; kept {len(left)} of 3"


# ---------------------------------------------------------------- 10-11: full disks
@contextlib.contextmanager
def full_disk(w: Work, name: str, size: str):
    """A real tmpfs of `size` (`fill` fills it)."""
    import pytest  # tmpfs() skips through pytest's exception where mounting is not allowed

    folder = w.root / name
    try:
        with tmpfs(folder, size) as disk:
            yield disk
    except pytest.skip.Exception as e:
        raise Skip(str(e)) from None


def fill(disk: Path, keep: int) -> Path:
    ballast = disk / "ballast"
    ballast.write_bytes(bytes(max(0, shutil.disk_usage(disk).free - keep)))
    return ballast


@case("10 mine on a full disk over an existing pools.h5",
      "exit 1, one line 'no space'; no .part, no lock, the old pools and side files kept")
def mine_full_disk(w: Work):
    with full_disk(w, "c10", "8m") as disk:
        for p in w.build.glob("pools.h5*"):
            shutil.copy(p, disk)
        before = {p.name: p.read_bytes() for p in disk.iterdir()}
        fill(disk, 256 * 1024)
        result = vprom("mine", "--vg", w.vg, "--out", disk / "pools.h5", "--workers", 1)
        ok, text = one_line(result, "no space")
        after = {p.name: p.read_bytes() for p in disk.iterdir() if p.name != "ballast"}
        return ok and after == before, text + ("" if after == before else "; files changed")


@case("11 train on a full disk, then the same command with room",
      "exit 1, one line 'no space'; the re-run resumes (not refused)")
def train_full_disk(w: Work):
    with full_disk(w, "c11", "8m") as disk:
        argv = w.train_argv(disk / "run")
        argv[argv.index("--hidden") + 1] = 256
        ballast = fill(disk, 64 * 1024)
        first = one_line(vprom(*argv), "no space")
        ballast.unlink()
        status, _, err = vprom(*argv)
        return first[0] and status == 0, first[1] + f"; re-run exit {status}"


# ---------------------------------------------------------------- the run
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, help="folder for the build and the cases "
                                                  "(default: a new temporary folder)")
    parser.add_argument("--only", nargs="*", default=[], help="run the cases naming a word")
    args = parser.parse_args()
    import fault_audit_more  # bench/fault_audit_more.py: items 12-15 and the infinities

    work = Work(args.work or Path(tempfile.mkdtemp(prefix="vprom-audit-")))
    failures = 0
    for name, expected, check in CASES + fault_audit_more.CASES:
        if args.only and not any(word in name for word in args.only):
            continue
        began = time.monotonic()
        try:
            passed, observed = check(work)
            verdict = "PASS" if passed else "FAIL"
        except Skip as e:
            passed, observed, verdict = True, str(e), "SKIP"
        except Exception as e:  # a case that broke is a failure, with what broke it
            passed, observed, verdict = False, f"{type(e).__name__}: {str(e)[:200]}", "FAIL"
        failures += not passed
        print(f"{name} | {expected} | {observed} ({time.monotonic() - began:.0f} s) | {verdict}",
              flush=True)
    print(f"failures: {failures}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
