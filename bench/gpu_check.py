"""End-to-end check of the paths researchers run on a GPU machine, with a pass/fail table.

On a CUDA machine (the default device) it checks, each step through the `vprom` command
(`python -m vprom`, as `torchrun -m vprom` runs it):
1. build a small synthetic data set (`vprom build --synthetic`);
2. extract resnet18 features (random weights: nothing is downloaded) on the device, once
   plainly and once under `torchrun` (nccl on CUDA, gloo on the CPU), and check that the two
   files' `crop_id` and `features` datasets are equal byte for byte; on CUDA once more with
   `--cuda-graphs`, whose features must lie within 1e-2 of the plain run's;
3. train every paper model (mlp-sum-6, gru-shared, vqa, rn) at its defaults for --epochs
   epochs, without and with the auxiliary loss, plainly and under torchrun (and with
   --cuda-graphs on CUDA when asked): each must finish with finite losses. How far the
   torchrun run is from the plain one is shown, not judged: at the defaults' learning rates
   the first epochs are chaotic enough that summation-order differences grow to percents.
   The equivalence is checked on a small, calm relation network instead (hidden 16, batch 16,
   score-head scale 1, aux, --epochs epochs, like tests/baselines/test_train.py): same
   accuracies, losses within 1e-3 relative, for torchrun and for --cuda-graphs against the
   plain run;
4. evaluate every run and report over all of them (`vprom evaluate`, `vprom report`).
It prints a pass/fail table with each step's time and the median epoch time of each
training run, and exits non-zero when a step failed.

    python bench/gpu_check.py --out /tmp/gpu-check                     # CUDA machine
    python bench/gpu_check.py --out /tmp/gpu-check --nproc 4           # 4 GPUs under torchrun
    .venv/bin/python bench/gpu_check.py --device cpu --out /tmp/gc      # here: gloo, CPU

On the CPU (`--device cpu`) the same steps run with gloo; the test suite runs a tiny version.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULT = {True: "pass", False: "fail", None: "info"}
PAPER_MODELS = ("mlp-sum-6", "gru-shared", "vqa", "rn")


def get_args_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True, help="work folder (kept afterwards)")
    p.add_argument("--device", default="cuda", help="cuda (default) or cpu")
    p.add_argument("--nproc", type=int, default=None,
                   help="processes under torchrun (default: every visible GPU; 2 on the CPU). "
                        "NCCL takes one GPU per process, so on a one-GPU machine torchrun runs "
                        "one process and the nccl group is not exercised")
    p.add_argument("--models", default=",".join(PAPER_MODELS))
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--images", type=int, default=2000, help="synthetic corpus size")
    p.add_argument("--scale", type=float, default=0.002, help="fraction of Table 1")
    p.add_argument("--input-size", type=int, default=64, help="crop side for extraction")
    p.add_argument("--cuda-graphs", action="store_true", help="also train with --cuda-graphs")
    p.add_argument("--timeout", type=int, default=1800, help="seconds per command")
    return p


@dataclass
class Step:
    name: str
    ok: bool | None  # None: a figure shown, not judged
    seconds: float
    detail: str = ""
    epoch_seconds: list = field(default_factory=list)


class Checker:
    """Runs the commands and collects the table."""

    def __init__(self, args):
        self.args, self.steps = args, []
        path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
        self.env = {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": "1"}

    def command(self, name: str, argv: list[str], torchrun: bool = False) -> Step:
        prefix = [sys.executable]
        if torchrun:
            prefix += ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
                       str(self.args.nproc)]
        began = time.perf_counter()
        try:
            done = subprocess.run([*prefix, "-m", "vprom", *argv], cwd=ROOT, env=self.env,
                                  capture_output=True, text=True, timeout=self.args.timeout)
            ok, tail = done.returncode == 0, (done.stderr or done.stdout).strip()
            detail = "" if ok else f"exit {done.returncode}: {tail.splitlines()[-1] if tail else ''}"
        except subprocess.TimeoutExpired:
            ok, detail = False, f"no end after {self.args.timeout} s"
        step = Step(name, ok, time.perf_counter() - began, detail)
        self.steps.append(step)
        print(f"{RESULT[ok].upper()} {name} ({step.seconds:.1f} s) {detail}", flush=True)
        return step

    def check(self, name: str, ok: bool | None, detail: str = "") -> None:
        self.steps.append(Step(name, ok, 0.0, detail))
        print(f"{RESULT[ok].upper()} {name} {detail}", flush=True)


def same_features(a: Path, b: Path) -> tuple[bool, str]:
    import h5py

    try:
        with h5py.File(a, "r") as x, h5py.File(b, "r") as y:
            for name in ("crop_id", "features"):
                if x[name][()].tobytes() != y[name][()].tobytes():
                    return False, f"'{name}' differs"
            return True, f"{x['features'].shape[0]} crops x {x['features'].shape[1]} equal"
    except (OSError, KeyError) as e:
        return False, str(e)


def near_features(a: Path, b: Path, tolerance: float = 1e-2) -> tuple[bool, str]:
    """The same crops, and features within `tolerance` (unit vectors; a short last batch runs
    padded to the batch size in a graph, which may round its rows differently)."""
    import h5py
    import numpy as np

    try:
        with h5py.File(a, "r") as x, h5py.File(b, "r") as y:
            if x["crop_id"][()].tobytes() != y["crop_id"][()].tobytes():
                return False, "'crop_id' differs"
            f, g = x["features"][()].astype(np.float32), y["features"][()].astype(np.float32)
    except (OSError, KeyError) as e:
        return False, str(e)
    worst = float(np.abs(f - g).max()) if f.size else 0.0
    rows = int((f != g).any(axis=1).sum())
    return worst <= tolerance, (f"largest difference {worst:.1e}; {rows} of {len(f)} rows "
                                "not byte-equal")


def history(run: Path) -> list[dict]:
    try:
        return json.loads((run / "history.json").read_text())
    except (OSError, ValueError):
        return []


def finished(run: Path, epochs: int) -> tuple[bool, str]:
    h = history(run)
    if len(h) != epochs:
        return False, f"{len(h)} of {epochs} epochs in history.json"
    if not all(math.isfinite(e["train_loss"]) for e in h):
        return False, "a loss is not finite"
    return True, f"loss {h[-1]['train_loss']:.4f}, val {100 * (h[-1]['val_acc'] or 0):.1f}%"


def agree(a: list[dict], b: list[dict]) -> tuple[bool, str]:
    if not a or len(a) != len(b):
        return False, f"{len(a)} vs {len(b)} epochs"
    worst = max(abs(x["train_loss"] - y["train_loss"]) / abs(x["train_loss"])
                for x, y in zip(a, b))
    same_acc = all(x["train_acc"] == y["train_acc"] and x["val_acc"] == y["val_acc"]
                   for x, y in zip(a, b))
    return (worst <= 1e-3 and same_acc,
            f"largest loss difference {worst:.1e} relative; accuracies "
            f"{'equal' if same_acc else 'differ'}")


def main(argv: list[str] | None = None) -> list[Step]:
    args = get_args_parser().parse_args(argv)
    if args.nproc is None:
        import torch

        args.nproc = max(1, torch.cuda.device_count()) if args.device.startswith("cuda") else 2
    out, device = args.out.resolve(), args.device
    checker = Checker(args)
    build = out / "build"
    dataset, vg = build / "dataset.h5", build / "vg"
    checker.command("build synthetic data set", ["build", "--synthetic", "--out", str(build),
                                                 "--images", str(args.images),
                                                 "--scale", str(args.scale)])
    feats = {}
    for mode in ("plain", "torchrun"):
        feats[mode] = out / f"features-{mode}.h5"
        checker.command(f"extract resnet18 ({mode})", [
            "extract", str(dataset), "--vg", str(vg), "--backbone", "resnet18", "--weights",
            "none", "--input-size", str(args.input_size), "--device", device, "--no-resume",
            "--out", str(feats[mode])], torchrun=mode == "torchrun")
    checker.check("extract: plain and torchrun bytes equal", *same_features(feats["plain"],
                                                                           feats["torchrun"]))
    if device.startswith("cuda"):
        graphed = out / "features-cuda-graphs.h5"
        checker.command("extract resnet18 (--cuda-graphs)", [
            "extract", str(dataset), "--vg", str(vg), "--backbone", "resnet18", "--weights",
            "none", "--input-size", str(args.input_size), "--device", device, "--no-resume",
            "--cuda-graphs", "--out", str(graphed)])
        checker.check("extract: --cuda-graphs beside plain", *near_features(feats["plain"],
                                                                           graphed))
    modes = ["plain", "torchrun"] + (["cuda-graphs"] if args.cuda_graphs else [])
    runs = []

    def train(name: str, model: str, mode: str, folder: Path, *extra: str) -> None:
        graphs = ["--cuda-graphs"] if mode == "cuda-graphs" else []
        step = checker.command(f"train {name} ({mode})", [
            "train", str(dataset), "--features", str(feats["plain"]), "--model", model,
            "--split", "neutral", "--epochs", str(args.epochs), "--device", device,
            "--restart", *extra, *graphs, "--out", str(folder)], torchrun=mode == "torchrun")
        if step.ok:
            step.ok, step.detail = finished(folder, args.epochs)
        step.epoch_seconds = [h["seconds"] for h in history(folder)]

    for model in [m.strip() for m in args.models.split(",") if m.strip()]:
        for aux in (False, True):
            name = model + ("-aux" if aux else "")
            folders = {mode: out / "runs" / mode / name for mode in modes}
            for mode in modes:
                train(name, model, mode, folders[mode], *(["--aux"] if aux else []))
                runs.append(folders[mode])
            for mode in modes[1:]:
                checker.check(f"train {name}: {mode} beside plain",
                              None, agree(history(folders["plain"]), history(folders[mode]))[1])
    small = {mode: out / "equivalence" / mode for mode in modes}
    for mode in modes:
        train("rn-aux hidden 16", "rn", mode, small[mode], "--aux", "--hidden", "16",
              "--batch-size", "16", "--score-init", "1")
    for mode in modes[1:]:
        checker.check(f"equivalence: {mode} = plain (rn-aux, hidden 16)",
                      *agree(history(small["plain"]), history(small[mode])))
    for run in runs:
        checker.command(f"evaluate {run.parent.name}/{run.name}",
                        ["evaluate", str(run), "--device", device])
    checker.command("report over every run", ["report", *map(str, runs), "--out",
                                              str(out / "report")])
    print_table(checker.steps, args)
    return checker.steps


def print_table(steps: list[Step], args) -> None:
    failed = sum(s.ok is False for s in steps)
    passed = sum(s.ok is True for s in steps)
    print(f"\n{passed} passed, {failed} failed (device {args.device}, "
          f"{args.nproc} processes under torchrun)\n")
    print("| step | result | seconds | median epoch s | detail |")
    print("|---|---|---:|---:|---|")
    for s in steps:
        epoch = f"{statistics.median(s.epoch_seconds):.2f}" if s.epoch_seconds else ""
        result = "**FAIL**" if s.ok is False else RESULT[s.ok]
        print(f"| {s.name} | {result} | {s.seconds:.1f} | {epoch} | {s.detail} |")


if __name__ == "__main__":
    sys.exit(1 if any(s.ok is False for s in main()) else 0)
