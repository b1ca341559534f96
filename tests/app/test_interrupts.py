"""One Ctrl-C (or SIGTERM) ends every command cleanly: real signals sent to real processes.

Each command runs as `python -m vprom ...` in its own process group, as a shell runs it. The
test waits for a sign that work is in flight (a file the workers write, a line on stdout, a
worker holding its input open; `generate` prints nothing while it works, so a probe wrapped
around it prints a line), then sends the signal the way a terminal does (Ctrl-C reaches the
whole group), the way `kill PID` does (the parent alone) or the way a batch scheduler does
(SIGTERM to the whole group). It then checks that the command ended with 130 (Ctrl-C) or 143
(SIGTERM) and one line saying how to resume, that no process of the group is left, and that
no output looks finished. A hang is a failure after `HANG_S` seconds, never a stuck run.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from vprom.app import cli

linux = pytest.mark.skipif(not Path("/proc/self/stat").exists() or os.name != "posix",
                           reason="process groups and /proc (Linux)")

HANG_S = 60  # a command still running this long after the signal hangs
PROBE_GENERATE = """
import sys, time
from vprom.generation import generate as parallel
real = parallel.draw_chunk
def probe(job, indices):  # in a forked worker (every core by default), or here
    chunk = real(job, indices)
    if indices[0] == 0:  # mid-sampling: say so, then wait (in Python) for the signal
        print("PROBE: sampling matrices", file=sys.stderr, flush=True)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            time.sleep(0.01)
    return chunk
parallel.draw_chunk = probe
from vprom.app.cli import main
sys.exit(main(sys.argv[1:]))
"""
PROBE_MINE = """
import os, sys, time
from vprom.mining import pools as pool_jobs
real = pool_jobs._mine_chunks
def probe(kind, chunks, setup):  # in a forked worker: say so, then wait for the signal
    print(f"PROBE: worker {os.getpid()} mining {kind}", file=sys.stderr, flush=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        time.sleep(0.01)
    return real(kind, chunks, setup)
pool_jobs._mine_chunks = probe
from vprom.app.cli import main
sys.exit(main(sys.argv[1:]))
"""


# ---------------------------------------------------------------- running and signalling
def _group(pgid: int) -> dict[int, str]:
    """pid -> command line of every living (not zombie) process in process group `pgid`."""
    members = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            cmdline = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, IndexError):
            continue  # gone meanwhile
        state, group = fields[0], int(fields[2])
        if group == pgid and state != "Z":
            members[int(stat.parent.name)] = cmdline.strip()
    return members


class Command:
    """`vprom ARGS` (or a Python script) in its own process group, its output in files."""

    def __init__(self, folder: Path, *args: str, script: str | None = None):
        self.folder = folder
        self.out_file, self.err_file = folder / "stdout.txt", folder / "stderr.txt"
        argv = [sys.executable, "-c", script, *args] if script else [
            sys.executable, "-m", "vprom", *args]
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
        with open(self.out_file, "w") as out, open(self.err_file, "w") as err:
            self.proc = subprocess.Popen(argv, cwd=folder, stdout=out, stderr=err, env=env,
                                         stdin=subprocess.DEVNULL, start_new_session=True)

    @property
    def stdout(self) -> str:
        return self.out_file.read_text()

    @property
    def stderr(self) -> str:
        return self.err_file.read_text()

    def wait_for(self, condition, what: str, timeout: float = 180) -> None:
        """Poll until `condition()` holds; fail if the command ends or stalls first."""
        deadline = time.monotonic() + timeout
        while not condition():
            if self.proc.poll() is not None:
                pytest.fail(f"the command ended (exit {self.proc.returncode}) before {what}:\n"
                            f"{self.stderr[-2000:]}")
            if time.monotonic() > deadline:
                self.kill()
                pytest.fail(f"no sign of {what} after {timeout} s:\n{self.stderr[-2000:]}")
            time.sleep(0.02)

    def send(self, sig: int, group: bool = True) -> None:
        (os.killpg if group else os.kill)(self.proc.pid, sig)

    def finish(self) -> int:
        """The exit status; fails (and kills the group) if the command hangs."""
        try:
            return self.proc.wait(timeout=HANG_S)
        except subprocess.TimeoutExpired:
            stuck = _group(self.proc.pid)
            self.kill()
            pytest.fail(f"still running {HANG_S} s after the signal: {stuck}")

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()

    def assert_stopped(self, command: str, sig: int, group: bool = True, says: str = "",
                       clean: bool = True) -> None:
        """Send `sig`, then check the exit status, the message and that no process is left."""
        self.send(sig, group)
        sent = time.monotonic()
        code = self.finish()
        print(f"vprom {command}: ended {time.monotonic() - sent:.2f} s after the signal")
        err = self.stderr
        assert code == (130 if sig == signal.SIGINT else 143), err
        by = "Ctrl-C" if sig == signal.SIGINT else "SIGTERM"
        line = f"vprom {command}: interrupted ({by}); no partial output was left looking finished"
        assert line in err, err
        assert "run the same command again" in err and says in err, err
        if clean:
            assert "Traceback" not in err, err
        deadline = time.monotonic() + 10  # a worker may take a moment to read its end-of-file
        while _group(self.proc.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _group(self.proc.pid), f"left behind: {_group(self.proc.pid)}"


def _parts(folder: Path) -> list[str]:
    """Temporary parts (`.<name>.<pid>.<random>.part`) left in `folder`."""
    return sorted(p.name for p in folder.rglob("*.part"))


# ---------------------------------------------------------------- inputs
def _vg_json(folder: Path, images: int) -> Path:
    """Visual Genome's four annotation files, large enough that mining takes seconds."""
    folder.mkdir(parents=True)
    names = ["car", "dog", "shirt", "tree", "bus", "chair", "man", "woman"]
    attributes = ["red", "wooden", "young", "smiling", "metal", "blue"]
    ids = range(1, images + 1)

    def objects(i: int, with_attributes: bool) -> list[dict]:
        return [{"object_id": i * 100 + k, "names": [names[k % 8]], "x": 20 * k, "y": 10 * k,
                 "w": 150, "h": 120, "synsets": [],
                 **({"attributes": [attributes[(i + k) % 6]]} if with_attributes else {})}
                for k in range(12)]

    files = {
        "image_data": [{"image_id": i, "width": 800, "height": 600} for i in ids],
        "objects": [{"image_id": i, "objects": objects(i, False)} for i in ids],
        "attributes": [{"image_id": i, "attributes": objects(i, True)} for i in ids],
        "region_descriptions": [{"id": i, "regions": [
            {"region_id": i * 100 + k, "image_id": i, "x": 30 * k, "y": 20, "width": 200,
             "height": 150, "phrase": f"{('two', 'three', 'five')[k % 3]} dogs on a bench"}
            for k in range(8)]} for i in ids],
    }
    for stem, records in files.items():
        (folder / f"{stem}.json").write_text(json.dumps(records))
    return folder


@pytest.fixture(scope="module")
def pools(tmp_path_factory) -> Path:
    """POOLS.h5 mined from a small synthetic corpus."""
    from vprom.mining.pools import mine
    from vprom.mining.synth import write_corpus

    root = tmp_path_factory.mktemp("pools")
    write_corpus(root / "vg", images=1000, seed=0)
    mine(root / "vg", root / "pools.h5", workers=1)
    return root / "pools.h5"


# ---------------------------------------------------------------- synth
@linux
@pytest.mark.parametrize("sig, group", [(signal.SIGINT, True), (signal.SIGTERM, True),
                                        (signal.SIGTERM, False)],
                         ids=["ctrl-c", "sigterm-to-group", "sigterm-to-parent"])
def test_synth_with_several_workers_stops_cleanly(tmp_path, sig, group):
    run = Command(tmp_path, "synth", "--out", "corpus", "--images", "5000", "--workers", "3")
    run.wait_for(lambda: any(tmp_path.glob(".corpus.*.part/VG_100K/*.jpg")),
                 "the workers writing JPEGs")
    run.assert_stopped("synth", sig, group, says="(it starts over)")
    assert not (tmp_path / "corpus").exists() and not _parts(tmp_path)


@linux
def test_synth_replaces_a_finished_corpus_only_when_complete(tmp_path):
    from vprom.mining.synth import TRUTH, write_corpus

    write_corpus(tmp_path / "corpus", images=20, seed=0)
    before = (tmp_path / "corpus" / TRUTH).read_bytes()
    run = Command(tmp_path, "synth", "--out", "corpus", "--images", "5000", "--seed", "1",
                  "--workers", "2")
    run.wait_for(lambda: any(tmp_path.glob(".corpus.*.part/VG_100K/*.jpg")),
                 "the workers writing JPEGs")
    run.assert_stopped("synth", signal.SIGINT)
    assert (tmp_path / "corpus" / TRUTH).read_bytes() == before and not _parts(tmp_path)


# ---------------------------------------------------------------- mine
@linux
@pytest.mark.parametrize("sig, group", [(signal.SIGINT, True), (signal.SIGTERM, False)],
                         ids=["ctrl-c", "sigterm-to-parent"])
def test_mine_stops_its_two_passes(tmp_path, sig, group):
    vg = _vg_json(tmp_path / "vg", images=4000)
    run = Command(tmp_path, "mine", "--vg", str(vg), "--out", "pools.h5", "--workers", "2",
                  script=PROBE_MINE)
    run.wait_for(lambda: len(set(re.findall(r"PROBE: worker (\d+)", run.stderr))) == 2,
                 "both workers mining their chunks")
    run.assert_stopped("mine", sig, group)
    assert not list(tmp_path.glob("pools.h5*")) and not _parts(tmp_path)


# ---------------------------------------------------------------- generate
@linux
def test_generate_stops_and_leaves_no_dataset(tmp_path, pools):
    run = Command(tmp_path, "generate", str(pools), "--out", "dataset.h5", "--scale", "0.2",
                  script=PROBE_GENERATE)
    run.wait_for(lambda: "PROBE: sampling matrices" in run.stderr, "sampling")
    run.assert_stopped("generate", signal.SIGINT)
    assert not list(tmp_path.glob("dataset.h5*")) and not _parts(tmp_path)


# ---------------------------------------------------------------- build
@linux
@pytest.mark.slow
def test_build_stops_in_each_stage_and_resumes(tmp_path):
    out = tmp_path / "b"
    argv = ("build", "--synthetic", "--out", str(out), "--images", "1200", "--scale", "0.01")
    logs = [tmp_path / name for name in ("first", "second", "third")]
    for folder in logs:
        folder.mkdir()

    run = Command(logs[0], *argv)  # a scheduler's SIGTERM to the group while synthesising
    run.wait_for(lambda: any(out.glob(".vg.*.part/VG_100K/*.jpg")), "the synthetic corpus")
    run.assert_stopped("build", signal.SIGTERM, says="finished stages are kept")
    assert not (out / "vg").exists() and not vouched(out)
    assert not _parts(out)

    run = Command(logs[1], *argv)  # Ctrl-C just as the miner starts its workers
    run.wait_for(lambda: "[2/5] mining" in run.stdout, "mining")
    run.assert_stopped("build", signal.SIGINT)
    assert (out / "vg" / "manifest.json").is_file()  # the corpus is kept
    assert not (out / "pools.h5").exists() and not vouched(out)
    assert not _parts(out)

    run = Command(logs[2], *argv)
    assert run.finish() == 0, run.stderr
    assert "[1/5] corpus: kept" in run.stdout and "[2/5] mining" in run.stdout
    assert "dataset.h5" in vouched(out)


def vouched(build: Path) -> dict:
    """The files the build folder's manifest vouches for: none until the build is whole."""
    return json.loads((build / "manifest.json").read_text())["outputs"]


# ---------------------------------------------------------------- extract
@pytest.fixture
def crops(tmp_path) -> tuple[Path, Path]:
    """A DATASET.h5 of 40 crops over 4 images, and its VG folder."""
    from tests.features.conftest import crop_table, write_dataset, write_jpeg

    rng = np.random.default_rng(0)
    rows = []
    for image_id in range(1, 5):
        write_jpeg(tmp_path / "vg" / "VG_100K" / f"{image_id}.jpg", rng, size=(160, 120))
        rows += [(len(rows) + k, image_id, 5 * k, 3 * k, 60 + k, 50 + k) for k in range(10)]
    return write_dataset(tmp_path / "dataset.h5", crop_table(rows)), tmp_path / "vg"


@linux
@pytest.mark.slow
@pytest.mark.parametrize("sig, group", [(signal.SIGINT, True), (signal.SIGTERM, False),
                                        (signal.SIGTERM, True)],
                         ids=["ctrl-c", "sigterm-to-parent", "sigterm-to-group"])
def test_extract_stops_its_loader_workers_and_resumes(tmp_path, crops, sig, group):
    dataset, vg = crops
    argv = ("extract", str(dataset), "--vg", str(vg), "--backbone", "resnet18", "--weights",
            "none", "--input-size", "64", "--out", "feats.h5", "--workers", "2",
            "--batch-size", "4", "--chunk-batches", "1")
    run = Command(tmp_path, *argv)
    run.wait_for(lambda: any(tmp_path.glob("feats.h5.partial/chunk-*.npy")), "a finished chunk")
    run.assert_stopped("extract", sig, group, says="finished chunks are kept")
    assert not (tmp_path / "feats.h5").exists() and not _parts(tmp_path)
    if sig == signal.SIGINT:
        again = Command(tmp_path, *argv)
        assert again.finish() == 0, again.stderr
        assert "resuming" in again.stderr and (tmp_path / "feats.h5").is_file()


def _waits_for(pid: int) -> int:
    """The first argument of the system call process `pid` is blocked in (from /proc): the
    child's pid while it waits for one (wait4); 0 when it is in none."""
    fields = Path(f"/proc/{pid}/syscall").read_text().split()
    return int(fields[1], 16) if len(fields) > 3 else 0


@linux
@pytest.mark.slow
def test_extract_workers_dying_after_its_line_add_nothing(tmp_path, crops):
    """A scheduler's SIGTERM to the whole group may kill extract's DataLoader workers after
    extract has said its line, while it waits at exit for another worker; torch would then
    print their deaths ("Exception ignored ... killed by signal: Terminated") under the line.
    Made certain here: the workers are held stopped with the group's SIGTERM pending, and
    those extract is not waiting for are let go first, one by one."""
    dataset, vg = crops
    run = Command(tmp_path, "extract", str(dataset), "--vg", str(vg), "--backbone", "resnet18",
                  "--weights", "none", "--input-size", "64", "--out", "feats.h5", "--workers",
                  "3", "--batch-size", "4", "--chunk-batches", "1")
    run.wait_for(lambda: any(tmp_path.glob("feats.h5.partial/chunk-*.npy")), "a finished chunk")
    workers = [pid for pid in _group(run.proc.pid) if pid != run.proc.pid]
    assert len(workers) == 3, workers
    for pid in workers:
        os.kill(pid, signal.SIGSTOP)
    run.send(signal.SIGTERM)
    try:
        run.wait_for(lambda: "interrupted (SIGTERM)" in run.stderr
                     and _waits_for(run.proc.pid) in workers, "extract's line, then its wait")
        waited = _waits_for(run.proc.pid)
        for pid in workers:
            if pid != waited:
                os.kill(pid, signal.SIGCONT)
                run.wait_for(lambda: pid not in _group(run.proc.pid), "a worker's death", 30)
    finally:
        for pid in workers:
            os.kill(pid, signal.SIGCONT)
    assert run.finish() == 143, run.stderr
    err = run.stderr
    assert "Traceback" not in err and "Exception ignored" not in err, err
    assert err.count("vprom extract: interrupted (SIGTERM)") == 1, err
    assert not (tmp_path / "feats.h5").exists() and not _parts(tmp_path)


# ---------------------------------------------------------------- train
@linux
@pytest.mark.slow
@pytest.mark.parametrize("sig, group", [(signal.SIGINT, True), (signal.SIGTERM, False)],
                         ids=["ctrl-c", "sigterm-to-parent"])
def test_train_stops_between_or_inside_epochs(tmp_path, sig, group):
    from tests.baselines.conftest import write_pair

    dataset, features = write_pair(tmp_path / "data", n=400)
    argv = ("train", str(dataset), "--features", str(features), "--model", "mlp-sum-2",
            "--split", "neutral", "--out", "run", "--patience", "100000", "--hidden", "16",
            "--batch-size", "16", "--device", "cpu")
    run = Command(tmp_path, *argv, "--epochs", "100000")
    run.wait_for(lambda: "epoch 2/100000" in run.stdout, "two finished epochs")
    run.assert_stopped("train", sig, group, says="it resumes after the last finished epoch")
    history = json.loads((tmp_path / "run" / "history.json").read_text())
    assert 2 <= len(history) < 100000
    assert not (tmp_path / "run" / "metrics.json").exists() and not _parts(tmp_path / "run")
    # what the line says works: the same command, no flag, goes on after the last epoch
    epochs = len(history) + 2
    again = Command(tmp_path, *argv, "--epochs", str(epochs))
    assert again.finish() == 0, again.stderr
    assert "resuming after epoch" in again.stdout
    history = json.loads((tmp_path / "run" / "history.json").read_text())
    assert [h["epoch"] for h in history] == list(range(1, epochs + 1))


# ---------------------------------------------------------------- while starting
SIGNAL_DURING_IMPORTS = """
import importlib.abc, os, signal, sys
class SignalOnImport(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "vprom.generation.export":  # imported by vprom.app.cli, after its guard
            os.kill(os.getpid(), getattr(signal, sys.argv[1]))
sys.meta_path.insert(0, SignalOnImport())
from vprom.app.cli import main
sys.exit(main(sys.argv[2:]))
"""


@linux
@pytest.mark.parametrize("sig, code, by", [("SIGINT", 130, "Ctrl-C"), ("SIGTERM", 143, "SIGTERM")])
def test_a_signal_while_the_command_starts_is_one_line(tmp_path, sig, code, by):
    run = Command(tmp_path, sig, "synth", "--out", "corpus", script=SIGNAL_DURING_IMPORTS)
    assert run.finish() == code
    assert run.stderr == f"vprom: interrupted ({by}) while starting; nothing was done\n"
    assert not (tmp_path / "corpus").exists()


def test_importing_the_command_line_leaves_the_signal_handlers_as_they_were():
    assert signal.getsignal(signal.SIGINT) is not cli._interrupted_while_starting
    assert signal.getsignal(signal.SIGTERM) is not cli._interrupted_while_starting


# ---------------------------------------------------------------- in this process
@pytest.mark.parametrize("interrupt, code", [(KeyboardInterrupt, 130), (cli.Terminated, 143)])
def test_cleanup_failing_during_an_interrupt_still_reports_the_interrupt(monkeypatch, capsys,
                                                                         interrupt, code):
    def stats(dataset):
        try:
            raise interrupt()
        finally:  # as torch's loader does when the same SIGTERM killed its workers
            raise RuntimeError("DataLoader worker (pid 1) is killed by signal: Terminated.")

    monkeypatch.setattr("vprom.generation.verify.stats.stats", stats)
    assert cli.main(["stats", "dataset.h5"]) == code
    err = capsys.readouterr().err
    assert err.startswith("vprom stats: interrupted (") and "RuntimeError" not in err
    assert err.count("\n") == 1


def test_an_unexpected_error_outside_an_interrupt_keeps_its_traceback(monkeypatch):
    def stats(dataset):
        raise RuntimeError("a bug")

    monkeypatch.setattr("vprom.generation.verify.stats.stats", stats)
    with pytest.raises(RuntimeError, match="a bug"):
        cli.main(["stats", "dataset.h5"])
