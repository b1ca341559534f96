"""Content fingerprints of the whole pipeline for one seed: proof that a change changed nothing.

Runs, through the command line only (so it works whatever the code's inside looks like):
synthetic build -> extract (resnet18, random weights, 64 px) -> train rn for 2 epochs ->
evaluate, and prints one sha256 per product:

- corpus:   every file of the synthetic VG folder (names and bytes), but for the record of
  what made it (`manifest.json`, `*.build-config.json`);
- pools, dataset: every HDF5 dataset's name, dtype, shape and bytes (the `manifest`
  attributes, which hold times and versions, are left out);
- features: the `crop_id` and `features` datasets;
- metrics:  metrics.json without its paths.

Run it before and after a refactor on the same machine and venv, and compare the lines:

    python bench/fingerprint.py [--work DIR] [--images 1000] [--scale 0.01] [--seed 0]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import h5py
import numpy as np


def vprom(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "vprom", *args], check=True,
                   stdout=subprocess.DEVNULL)


def hash_folder(folder: Path) -> str:
    digest = hashlib.sha256()
    records = {"manifest.json"}  # the record of what made the folder, like `manifest` attrs
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and p.name not in records
                       and not p.name.endswith(".build-config.json")):
        digest.update(str(path.relative_to(folder)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def hash_h5(path: Path, names: tuple[str, ...] | None = None) -> str:
    digest = hashlib.sha256()
    with h5py.File(path, "r") as f:
        items: list[tuple[str, h5py.Dataset]] = []
        f.visititems(lambda name, obj: items.append((name, obj))
                     if isinstance(obj, h5py.Dataset) else None)
        for name, data in sorted(items):
            if names is not None and name not in names:
                continue
            values = np.asarray(data[()])
            digest.update(f"{name} {values.dtype} {values.shape}".encode())
            digest.update(np.ascontiguousarray(values).tobytes() if values.dtype != object
                          else json.dumps([v.decode() if isinstance(v, bytes) else str(v)
                                           for v in values.ravel()]).encode())
    return digest.hexdigest()


def hash_metrics(path: Path) -> str:
    metrics = json.loads(path.read_text())
    for key in ("run", "dataset"):
        metrics.pop(key, None)
    metrics.get("features", {}).pop("path", None)
    for key in ("dataset", "features", "maps", "crops", "out"):  # input and output paths
        metrics.get("config", {}).pop(key, None)
    return hashlib.sha256(json.dumps(metrics, sort_keys=True).encode()).hexdigest()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", type=Path, default=None, help="default: a temporary folder")
    parser.add_argument("--images", type=int, default=1000)
    parser.add_argument("--scale", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = args.work or Path(tmp)
        build = work / "build"
        vprom("build", "--synthetic", "--out", str(build), "--images", str(args.images),
              "--scale", str(args.scale), "--seed", str(args.seed))
        feats = work / "resnet18.h5"
        vprom("extract", str(build / "dataset.h5"), "--vg", str(build / "vg"), "--backbone",
              "resnet18", "--weights", "none", "--input-size", "64", "--device", "cpu",
              "--out", str(feats))
        run = work / "run"
        vprom("train", str(build / "dataset.h5"), "--features", str(feats), "--model", "rn",
              "--split", "neutral", "--epochs", "2", "--hidden", "64", "--device", "cpu",
              "--seed", str(args.seed), "--out", str(run))
        vprom("evaluate", str(run), "--device", "cpu")
        figures = {
            "corpus": hash_folder(build / "vg"),
            "pools": hash_h5(build / "pools.h5"),
            "dataset": hash_h5(build / "dataset.h5"),
            "features": hash_h5(feats, ("crop_id", "features")),
            "metrics": hash_metrics(run / "metrics.json"),
        }
    for name, value in figures.items():
        print(f"{name:9s} {value}")


if __name__ == "__main__":
    main()
