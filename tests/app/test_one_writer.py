"""One writer per output (issue 20, rows 5 and 6): real concurrent `train`, `extract` and
`build` processes on one output. The first is paused (SIGSTOP) while it holds the lock, so the
second always meets it; the second refuses at once naming the holder's PID, or waits with
--wait. A holder killed with SIGKILL leaves no lock behind."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tests.baselines.conftest import write_pair
from tests.features.conftest import CROP_ROWS, crop_table, write_dataset, write_jpeg
from vprom.app.cli import main
from vprom.claim import lock_path, output_lock
from vprom.errors import VpromError

REPO = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}


def start(*argv: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "vprom", *argv], cwd=REPO, env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def paused_holding(proc: subprocess.Popen, out: Path, limit: float = 120) -> None:
    """Wait until `proc` holds the lock of `out`, then stop it there."""
    lock = lock_path(out)
    end = time.monotonic() + limit
    while time.monotonic() < end:
        if lock.is_file() and lock.read_text().strip() == str(proc.pid):
            os.kill(proc.pid, signal.SIGSTOP)
            return
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.005)
    raise AssertionError(f"{proc.args} never took the lock of {out}")


def second_refused(argv: list[str], holder: subprocess.Popen, out: Path) -> None:
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "vprom", *argv], cwd=REPO, env=ENV,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    line = done.stderr.strip()
    assert "\n" not in line and f"pid {holder.pid}" in line and str(out) in line, line
    assert time.monotonic() - started < 60  # at once, not after the first finished


def finish(proc: subprocess.Popen) -> str:
    os.kill(proc.pid, signal.SIGCONT)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    return out


@pytest.fixture(scope="module")
def pair(tmp_path_factory) -> tuple[Path, Path]:
    return write_pair(tmp_path_factory.mktemp("pair"))


def train_argv(pair, out: Path, seed: int, *more: str) -> list[str]:
    dataset, features = pair
    return ["train", str(dataset), "--features", str(features), "--model", "mlp-sum-2",
            "--split", "neutral", "--out", str(out), "--epochs", "3", "--batch-size", "16",
            "--hidden", "16", "--device", "cpu", "--seed", str(seed), *more]


@pytest.mark.slow
def test_two_trains_into_one_folder_never_mix(pair, tmp_path):
    """Row 5: two runs with seeds 1 and 2 once left config.json of one and best.pt of the
    other in the same folder."""
    import json

    out = tmp_path / "run"
    first = start(*train_argv(pair, out, 1))
    paused_holding(first, out)
    second_refused(train_argv(pair, out, 2), first, out)
    finish(first)
    assert json.loads((out / "config.json").read_text())["seed"] == 1
    assert not lock_path(out).exists()


@pytest.mark.slow
def test_a_waiting_train_starts_after_the_first_and_sees_its_run(pair, tmp_path):
    out = tmp_path / "run"
    first = start(*train_argv(pair, out, 1))
    paused_holding(first, out)
    waiter = start(*train_argv(pair, out, 2, "--wait"))
    told = waiter.stderr.readline()  # it says so when it starts waiting
    assert f"waiting for the vprom run (pid {first.pid})" in told, told
    assert waiter.poll() is None  # blocked on the lock
    finish(first)
    _, err = waiter.communicate(timeout=300)
    # it ran only after the first had finished, so it met a complete run of other settings
    assert waiter.returncode == 1 and "seed 1 vs 2" in err, err


@pytest.mark.slow
def test_two_extracts_into_one_file(tmp_path):
    """Row 6: the extract that lost the race said "chunks were not written by any rank"."""
    import numpy as np

    from vprom.feature_files import check_complete

    rng = np.random.default_rng(7)
    vg = tmp_path / "vg"
    for i in sorted({r[1] for r in CROP_ROWS}):
        write_jpeg(vg / ("VG_100K" if i % 2 else "VG_100K_2") / f"{i}.jpg", rng)
    dataset = write_dataset(tmp_path / "d.h5", crop_table(CROP_ROWS))
    out = tmp_path / "feats.h5"
    argv = ["extract", str(dataset), "--vg", str(vg), "--backbone", "resnet18", "--weights",
            "none", "--out", str(out), "--workers", "0", "--batch-size", "1", "--device", "cpu"]
    first = start(*argv)
    paused_holding(first, out)
    second_refused(argv, first, out)
    finish(first)
    check_complete(out)


@pytest.mark.slow
def test_a_build_killed_with_sigkill_leaves_no_lock(tmp_path):
    out = tmp_path / "b"
    argv = ["build", "--synthetic", "--images", "40", "--out", str(out)]
    first = start(*argv)
    paused_holding(first, out)
    second_refused(argv, first, out)
    first.kill()  # SIGKILL: the OS drops the flock with the process
    first.communicate(timeout=60)
    with output_lock(out, wait=False):
        pass


def test_a_lock_is_reentrant_in_one_process_and_refused_to_another(tmp_path):
    out = tmp_path / "x.h5"
    with output_lock(out), output_lock(out):
        code = ("import sys; from vprom.claim import output_lock\n"
                f"with output_lock({str(out)!r}): pass")
        done = subprocess.run([sys.executable, "-c", code], env=ENV, capture_output=True,
                              text=True, timeout=60)
        assert done.returncode != 0 and f"pid {os.getpid()}" in done.stderr
    assert not lock_path(out).exists()


@contextlib.contextmanager
def held_elsewhere(out: Path, seconds: float = 60):
    """Another process holding the lock of `out` for `seconds` (or until the block ends)."""
    script = ("import time; from vprom.claim import output_lock\n"
              f"with output_lock({str(out)!r}):\n"
              f"    print('held', flush=True); time.sleep({seconds})")
    holder = subprocess.Popen([sys.executable, "-c", script], env=ENV, stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        yield holder
    finally:
        holder.kill()
        holder.wait()


def test_a_second_download_into_one_folder_is_refused(tmp_path):
    from vprom.mining.download import download

    out = tmp_path / "vg"
    out.mkdir()
    with held_elsewhere(out) as holder, pytest.raises(VpromError, match=str(holder.pid)):
        download(out, base_url="http://127.0.0.1:9", images=False)
    assert not list(out.iterdir())  # nothing was fetched or written


def test_crops_is_refused_while_another_writes_its_store_and_waits_when_asked(tmp_path,
                                                                              capsys):
    """Audit items 1 and 15: two concurrent `crops` into one store, and one failed on a
    missing chunk."""
    from vprom.crop_store import CropStore
    from vprom.features.crop_store import StoreJob, build_crop_store

    from tests import dataset_fixture
    from vprom.tables import read_matrix_table

    crops, matrices = dataset_fixture.build_records(1, 0)
    dataset = dataset_fixture.write_dataset(tmp_path / "dataset.h5", crops, matrices)
    vg = dataset_fixture.write_images(tmp_path / "vg", crops)
    out = tmp_path / "crops.h5"
    with held_elsewhere(out) as holder, pytest.raises(VpromError, match=f"pid {holder.pid}"):
        build_crop_store(StoreJob(dataset, vg, 8, out, workers=1), log=lambda _: None)
    assert not list(tmp_path.glob("crops.h5*"))  # no store and no work folder was begun
    with held_elsewhere(out, seconds=1) as holder:
        assert main(["crops", str(dataset), "--vg", str(vg), "--size", "8", "--out", str(out),
                     "--workers", "1", "--wait"]) == 0
    assert f"waiting for the vprom run (pid {holder.pid})" in capsys.readouterr().err
    with CropStore(out) as store:
        assert np.array_equal(store.crop_id, np.unique(read_matrix_table(dataset).panels))


def test_evaluate_is_refused_while_a_train_writes_the_run_and_waits_when_asked(tmp_path,
                                                                               capsys):
    """Audit item 8: `evaluate` beside a `train` continuing the same run wrote metrics for
    epoch 1 while best.pt was epoch 6, and `report` used them."""
    from vprom.baselines.evaluate import evaluate
    from vprom.baselines.run_folder import load_checkpoint
    from vprom.baselines.train import train

    from tests.baselines.conftest import small_config

    run = train(small_config(*write_pair(tmp_path / "pair"), tmp_path / "run", epochs=2))
    with held_elsewhere(run) as holder, pytest.raises(VpromError, match=f"pid {holder.pid}"):
        evaluate(run, device="cpu")
    assert not (run / "metrics.json").exists()
    with held_elsewhere(run, seconds=1) as holder:
        assert main(["evaluate", str(run), "--device", "cpu", "--wait"]) == 0
    assert f"waiting for the vprom run (pid {holder.pid})" in capsys.readouterr().err
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["checkpoint"]["epoch"] == load_checkpoint(run / "best.pt")["best"]["epoch"] + 1
