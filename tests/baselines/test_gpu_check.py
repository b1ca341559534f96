"""`bench/gpu_check.py` end to end, in a tiny version on the CPU (gloo): every step passes."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def load_gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "bench" / "gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_the_gpu_check_passes_on_the_cpu(tmp_path, capsys):
    gpu_check = load_gpu_check()
    steps = gpu_check.main(["--device", "cpu", "--out", str(tmp_path), "--models", "rn",
                            "--epochs", "1", "--images", "600", "--scale", "0.001",
                            "--input-size", "32", "--timeout", "600"])
    failed = [f"{s.name}: {s.detail}" for s in steps if s.ok is False]
    assert not failed, failed
    names = [s.name for s in steps]
    assert "extract: plain and torchrun bytes equal" in names
    assert {"train rn (plain)", "train rn-aux (torchrun)", "train rn-aux: torchrun beside plain",
            "equivalence: torchrun = plain (rn-aux, hidden 16)",
            "report over every run"} <= set(names)
    trained = [s for s in steps if s.name.startswith("train") and s.name.endswith(")")]
    assert len(trained) == 6 and all(s.ok and s.epoch_seconds for s in trained)
    table = capsys.readouterr().out
    assert "| step | result | seconds | median epoch s | detail |" in table
    assert "0 failed" in table


def test_a_failing_command_fails_its_step(tmp_path):
    gpu_check = load_gpu_check()
    checker = gpu_check.Checker(gpu_check.get_args_parser().parse_args(
        ["--out", str(tmp_path), "--nproc", "1"]))
    step = checker.command("stats of nothing", ["stats", str(tmp_path / "absent.h5")])
    assert not step.ok and "exit 1" in step.detail and "absent.h5" in step.detail
    assert gpu_check.agree([{"train_loss": 2.0, "train_acc": 0.5, "val_acc": 0.4}],
                           [{"train_loss": 2.1, "train_acc": 0.5, "val_acc": 0.4}])[0] is False
