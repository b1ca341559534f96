"""`vprom verify --workers N`: the same report for any N, and damage still caught by workers."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys

import h5py
import numpy as np
import pytest

from tests.dataset_fixture import (
    build_records,
    write_dataset,
    write_pools,
)
from vprom.app import cli
from vprom.errors import VpromError
from vprom.generation.verify import jobs, verify
from vprom.splits import load_rules

RULES = load_rules()


@pytest.fixture(scope="module")
def sound(tmp_path_factory):
    crops, matrices = build_records(3, seed=1)
    return write_dataset(tmp_path_factory.mktemp("sound") / "dataset.h5", crops, matrices)


@pytest.fixture
def small_chunks(monkeypatch):
    """Several solver-and-splits jobs even on the fixture's few matrices."""
    monkeypatch.setattr(jobs, "CHUNK", 7)


def run(path, workers, **kw):
    report = verify(path, RULES, workers=workers, **kw)
    return report, {c.name: c for c in report.checks}


def as_bytes(report) -> bytes:
    return (report.format() + json.dumps(report.to_dict(), sort_keys=True)).encode()


def test_the_report_is_the_same_for_any_number_of_workers(sound, small_chunks):
    one = run(sound, 1)[0]
    for workers in (2, 3):
        assert as_bytes(run(sound, workers)[0]) == as_bytes(one)


def give_a_distractor_the_answer(path, matrices) -> None:
    """The crop of a distractor of each of `matrices` (rows) also carries the answer's label."""
    with h5py.File(path, "a") as h5:
        elements = h5["matrices/elements"].asstr()[()].astype(object)
        labels = h5["crops/labels"].asstr()[()].astype(object)
        rows = {int(c): k for k, c in enumerate(h5["crops/crop_id"][()])}
        for i in matrices:
            answer = int(h5["matrices/answer"][i])
            labels[rows[int(h5["matrices/panels"][i, 8 + (answer + 1) % 8])]] += \
                "|" + elements[i, 8 + answer]
        del h5["crops/labels"]
        h5.create_dataset("crops/labels", data=labels, dtype=h5py.string_dtype())


def test_failures_found_by_workers_are_reported_in_matrix_order(sound, small_chunks,
                                                                tmp_path):
    path = tmp_path / "damaged.h5"
    shutil.copyfile(sound, path)
    give_a_distractor_the_answer(path, range(1, 40, 4))
    one, _ = run(path, 1)
    two, checks_2 = run(path, 2)
    assert as_bytes(two) == as_bytes(one)
    assert checks_2["solver"].status == "fail" and checks_2["splits"].status == "fail"
    assert checks_2["solver"].figures["failed"] == 10
    assert checks_2["solver"].problems[0].startswith("matrix 1: not exactly one answer")


def test_a_distractor_carrying_the_answer_is_caught_by_two_workers(sound, tmp_path):
    path = tmp_path / "damaged.h5"
    shutil.copyfile(sound, path)
    give_a_distractor_the_answer(path, [0])
    report, checks = run(path, 2)
    assert checks["solver"].status == "fail" and checks["solver"].figures["failed"] == 1
    assert not report.ok and report.format() == run(path, 1)[0].format()


def test_an_error_in_a_worker_reaches_the_caller(sound, tmp_path):
    features = tmp_path / "features.h5"
    with h5py.File(features, "w") as h5:
        h5.attrs["manifest"] = "{}"  # no dataset hash: not made from this data set
    with pytest.raises(VpromError) as one:
        run(sound, 1, features=features)
    with pytest.raises(VpromError) as two:
        run(sound, 2, features=features)
    assert str(two.value) == str(one.value)


def test_cli_output_and_exit_code_are_the_same_for_1_and_2_workers(tmp_path, capsys):
    """End to end on a generated data set with the real rules, solver and assigner."""
    from vprom.generation.generate import generate

    dataset = tmp_path / "dataset.h5"
    generate(write_pools(tmp_path / "pools.h5"), dataset, RULES, scale=0.004, seed=3)
    outputs = []
    for workers in ("1", "2"):
        assert cli.main(["verify", str(dataset), "--workers", workers]) == 0
        outputs.append(capsys.readouterr().out)
    assert outputs[0] == outputs[1] and outputs[0].splitlines()[-1] == "verdict: PASS"
    with h5py.File(dataset, "a") as h5:  # damage: one test matrix moved to train
        test = h5["splits/held_out_objects/test"][()]
        train = h5["splits/held_out_objects/train"][()]
        for part, ids in (("test", test[1:]), ("train", np.append(train, test[0]))):
            del h5[f"splits/held_out_objects/{part}"]
            h5.create_dataset(f"splits/held_out_objects/{part}", data=ids)
    results = []
    for workers in ("1", "2"):
        code = cli.main(["verify", str(dataset), "--workers", workers])
        results.append((code, *capsys.readouterr()))
    assert results[0] == results[1] and results[0][0] == 1
    assert "held_out_objects: stored train, the rule says test" in results[0][1]


def test_workers_must_be_positive(capsys):
    with pytest.raises(SystemExit):
        cli.main(["verify", "x.h5", "--workers", "0"])
    assert "--workers" in capsys.readouterr().err



VERIFY_AFTER_TORCH = """
import sys
import torch
from vprom.app import cli

torch.set_num_threads(2)
torch.ones(1000, 1000) @ torch.ones(1000, 1000)  # torch's thread pool is now started
sys.exit(cli.main(["verify", sys.argv[1], "--workers", "2"]))
"""


def test_verify_with_workers_finishes_after_torch_ran_in_parallel(tmp_path):
    """A user who trained, then verifies in the same Python session: the forked workers must
    not hang on the thread pool torch left behind."""
    from vprom.generation.generate import generate

    dataset = tmp_path / "dataset.h5"
    generate(write_pools(tmp_path / "pools.h5"), dataset, RULES, scale=0.004, seed=3)
    # a session of its own, so that a hung run's workers are ended with it
    proc = subprocess.Popen([sys.executable, "-c", VERIFY_AFTER_TORCH, str(dataset)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=180)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail("vprom verify --workers 2 hung after torch had run in parallel")
    assert proc.returncode == 0, err[-2000:]
    assert out.splitlines()[-1] == "verdict: PASS"
