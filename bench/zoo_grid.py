"""A small grid of training defaults for the later solvers (the zoo), on the learnable task.

Each later solver is trained on the learnable task of `tests/baselines/conftest.py`
(`learnable_task`: 2,400 matrices of 256-d vectors for the pooled-feature models; 800
matrices of 16 x 3 x 3 maps, or of 16 x 16 RGB crops, for the map and pixel models; the
answer crop marked for the context-blind control) by the real training loop (`fit`), at each
setting:

  adadelta  lr 1, rho 0.9, eps 1e-9, score-head scale 100 (what the paper's deep models
            needed, bench/grid.py)
  adam      lr 1e-3, eps 1e-8 (the optimiser the later solvers' own papers train with)
  adam      lr 1e-4, eps 1e-8

at hidden 256 (wren, scl) or 128 (the panel transformers, whose pooled variant is the ablation
of the map one, and the map and pixel models, whose encoders are costly on a CPU) and batch
64, for at most --epochs epochs, stopping at 99% validation accuracy. A setting's rank:
reaching 95% validation accuracy, then the fewest epochs to 95%, then the best accuracy.

    .venv/bin/python bench/zoo_grid.py                    # prints the table and the choice
    .venv/bin/python bench/zoo_grid.py --write-defaults   # stores it in baselines/defaults.json
"""

from __future__ import annotations

import argparse
import json
import time
from multiprocessing import Pool
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
ZOO = ("wren", "scl", "panel-transformer-pooled", "panel-transformer", "predrnet-maps",
       "predrnet", "context-blind-pixels")
SETTINGS = ({"optimizer": "adadelta", "lr": 1.0, "rho": 0.9, "eps": 1e-9, "score_init": 100.0},
            {"optimizer": "adam", "lr": 1e-3, "eps": 1e-8, "score_init": 1.0},
            {"optimizer": "adam", "lr": 1e-4, "eps": 1e-8, "score_init": 1.0})
TARGET = 0.95


def run_one(job: tuple[str, dict, int]) -> dict:
    from suite_builders import load

    model, setting, epochs = job
    torch.set_num_threads(1)
    conftest = load("tests/baselines/conftest.py")
    data = conftest.learnable_task(model)
    hidden = 256 if model in ("wren", "scl") else 128
    began = time.perf_counter()
    history = conftest.fit(model, data, epochs, target=0.99, hidden=hidden, batch_size=64,
                           **setting)
    reached = next((e + 1 for e, acc in enumerate(history) if acc >= TARGET), None)
    row = {"model": model, **setting, "hidden": hidden, "batch_size": 64, "history": history,
           "epochs_to_95": reached, "best": max(history),
           "seconds": round(time.perf_counter() - began, 1)}
    print(f"{model:26s} {setting['optimizer']:8s} lr {setting['lr']:<6g} best "
          f"{100 * row['best']:5.1f}% epochs to 95%: {reached}  ({row['seconds']} s)", flush=True)
    return row


def choose(rows: list[dict]) -> dict[str, dict]:
    best: dict[str, dict] = {}
    for row in rows:
        key = (row["epochs_to_95"] is None, row["epochs_to_95"] or 0, -row["best"])
        current = best.get(row["model"])
        if current is None or key < current[0]:
            best[row["model"]] = (key, row)
    return {model: row for model, (_, row) in best.items()}


def entry(row: dict) -> dict:
    keys = ["optimizer", "lr", "rho", "eps"] if row["optimizer"] == "adadelta" else [
        "optimizer", "lr", "eps"]
    return {**{k: row[k] for k in keys}, "hidden": row["hidden"],
            "batch_size": row["batch_size"], "score_init": row["score_init"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(ZOO))
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--write-defaults", action="store_true")
    parser.add_argument("--out", type=Path, default=None, help="write the rows as JSON here")
    args = parser.parse_args()
    jobs = [(m, s, args.epochs) for m in args.models.split(",") for s in SETTINGS]
    with Pool(args.workers) as pool:
        rows = pool.map(run_one, jobs, chunksize=1)
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))
    chosen = choose(rows)
    print("\nchosen:")
    for model, row in chosen.items():
        print(f"  {model}: {json.dumps(entry(row))} (95% after {row['epochs_to_95']} epochs)")
    if args.write_defaults:
        path = ROOT / "baselines" / "defaults.json"
        data = json.loads(path.read_text())
        for model, row in chosen.items():
            data["models"][model] = {"_note": "bench/zoo_grid.py", **entry(row)}
        path.write_text(json.dumps(data, indent=2) + "\n")
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
