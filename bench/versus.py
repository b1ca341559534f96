"""Two revisions of vprom side by side: mine, generate, verify, extract (CPU) and one training
epoch, timed through the command line, alternating between the revisions in every round.

Each revision is checked out into a temporary git worktree and installed there, editable,
into a light venv that borrows this interpreter's packages (torch, h5py, ...) through a `.pth`
file, so both run on the same libraries. Every round runs, for each revision in turn, the
chain below on one synthetic corpus (written once, by the newer revision), each stage reading
what that revision's previous stage wrote:

    mine      vprom mine --vg CORPUS --out pools.h5 --workers W
    generate  vprom generate pools.h5 --out dataset.h5 --scale S --workers W
    verify    vprom verify dataset.h5 --workers W
    extract   vprom extract dataset.h5 --backbone resnet18 --weights none --input-size 64
              --device cpu
    epoch     vprom train dataset.h5 --features feats.h5 --model rn --split neutral --epochs 1
              --device cpu

It prints each stage's median wall-clock seconds per revision and their ratio (new / old),
then the same for CPU seconds (user + system, the command and the workers it waited for),
which a machine shared with other work disturbs less:

    python bench/versus.py --old bc04bc8 [--new HEAD] [--rounds 3] [--images 2000]
                           [--stages generate,verify]

`--stages` times only the stages named; the chain still runs every stage up to the last one.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STAGES = ("mine", "generate", "verify", "extract", "epoch")


def install(rev: str, where: Path) -> Path:
    """A worktree of `rev` at `where`/src with vprom installed editable: its python."""
    src = where / "src"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(src), rev],
                   check=True)
    env = where / "venv"
    venv.create(env, with_pip=False, symlinks=True)
    python = env / "bin" / "python"
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()"
                           "['purelib'])"], capture_output=True, text=True, check=True)
    Path(site.stdout.strip(), "borrowed.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q",
                    "--no-deps", "--no-build-isolation", "-e", str(src)], check=True)
    return python


def commands(work: Path, corpus: Path, args) -> dict[str, list[str]]:
    w = str(args.workers)
    return {
        "mine": ["mine", "--vg", str(corpus), "--out", str(work / "pools.h5"), "--workers", w],
        "generate": ["generate", str(work / "pools.h5"), "--out", str(work / "dataset.h5"),
                     "--scale", str(args.scale), "--workers", w],
        "verify": ["verify", str(work / "dataset.h5"), "--workers", w],
        "extract": ["extract", str(work / "dataset.h5"), "--vg", str(corpus), "--backbone",
                    "resnet18", "--weights", "none", "--input-size", "64", "--device", "cpu",
                    "--out", str(work / "feats.h5")],
        "epoch": ["train", str(work / "dataset.h5"), "--features", str(work / "feats.h5"),
                  "--model", "rn", "--split", "neutral", "--epochs", "1", "--device", "cpu",
                  "--out", str(work / "run")],
    }


def chain(python: Path, work: Path, corpus: Path, args) -> dict[str, float]:
    """One run of every stage into a fresh `work` folder: (wall, CPU) seconds per stage."""
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    seconds = {}
    last = max(STAGES.index(s) for s in args.stages)
    for stage, argv in list(commands(work, corpus, args).items())[:last + 1]:
        start, used = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
        done = subprocess.run([str(python), "-m", "vprom", *argv], cwd=work, env=env,
                              capture_output=True, text=True)
        now = resource.getrusage(resource.RUSAGE_CHILDREN)
        seconds[stage] = (time.perf_counter() - start, now.ru_utime + now.ru_stime
                          - used.ru_utime - used.ru_stime)
        if done.returncode:
            sys.exit(f"{python}: vprom {argv[0]} failed (exit {done.returncode}):\n"
                     f"{done.stderr[-2000:]}")
    return seconds


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--old", required=True, help="the revision to compare against")
    p.add_argument("--new", default="HEAD", help="default: HEAD (commit your changes first)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--images", type=int, default=2000, help="synthetic corpus size")
    p.add_argument("--scale", type=float, default=0.05)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--stages", type=lambda s: s.split(","), default=list(STAGES),
                   help=f"comma-separated, from {','.join(STAGES)} (default: all)")
    args = p.parse_args()
    if unknown := set(args.stages) - set(STAGES):
        p.error(f"unknown stage(s) {', '.join(sorted(unknown))}; choose from {', '.join(STAGES)}")
    with tempfile.TemporaryDirectory(prefix="vprom-versus-") as tmp:
        tmp = Path(tmp)
        try:
            pythons = {"old": install(args.old, tmp / "old"), "new": install(args.new, tmp / "new")}
            corpus = tmp / "corpus"
            subprocess.run([str(pythons["new"]), "-m", "vprom", "synth", "--out", str(corpus),
                            "--images", str(args.images)], check=True, stdout=subprocess.DEVNULL)
            times = {side: {s: [] for s in STAGES} for side in pythons}
            for r in range(args.rounds):
                for side, python in pythons.items():
                    for stage, s in chain(python, tmp / side / "work", corpus, args).items():
                        times[side][stage].append(s)
                print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
        finally:
            for side in ("old", "new"):
                if (tmp / side / "src").exists():
                    subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force",
                                    str(tmp / side / "src")], check=False)
    print(f"old {args.old}, new {args.new}: median of {args.rounds} rounds, {args.images} "
          f"images, scale {args.scale}, {args.workers} workers, {os.cpu_count()} cores")
    print(f"{'stage':9s} {'old s':>8s} {'new s':>8s} {'new/old':>8s} {'old cpu':>8s} "
          f"{'new cpu':>8s} {'new/old':>8s}")
    for stage in [s for s in STAGES if s in args.stages]:
        cells = []
        for k in (0, 1):  # wall, then CPU
            old, new = (statistics.median(t[k] for t in times[side][stage])
                        for side in ("old", "new"))
            cells += [f"{old:8.2f}", f"{new:8.2f}", f"{new / old:8.2f}"]
        print(f"{stage:9s} " + " ".join(cells))

if __name__ == "__main__":
    main()
