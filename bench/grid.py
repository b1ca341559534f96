"""Coarse grid search of each paper model's training defaults, the paper's way (AdaDelta).

Two tasks, both on the neutral split, seed 0:
  learnable  `tests/baselines/conftest.write_pair(n=2400, dim=256)`: each crop's feature is
             its element's random unit vector plus noise; a model that reads the context
             can reach 100% (chance 12.5%);
  corpus     features of the synthetic corpus, made as `make demo` makes them:
             `vprom build --synthetic --scale S` then `vprom extract --backbone resnet18
             --weights none --input-size 112`, trained with centred features.

Each setting is trained by the real `baselines.train.train`, one epoch per call (a call
resumes the run, which gives the same weights as an unbroken run), for at most --epochs
epochs. On the learnable task a run stops early once its validation accuracy reaches 99%,
or when its answer loss is still above ln 8 - 0.01 after --give-up epochs (it did not
learn); on the corpus task it stops after 3 epochs without a better validation accuracy
(`--patience 3`, the runs' own early stopping). Every setting is trained on the learnable
task, which ranks it; the --finalists best of them are then trained on the corpus task,
which decides between them: a setting that cannot learn the easy task is out.

Search per model (a coarse staged grid; later stages start from the best setting so far):
  stage 1  AdaDelta lr x eps x score-head scale in {1, 10, 100} x {1e-6, 1e-9, 1e-12} x
           {1, 100}, rho 0.9, hidden 512, batch 64 (the paper's batch size): 18 settings
  stage 2  rho 0.95; score-head scale 10
  stage 3  hidden 256; batch 32
A setting's rank on the learnable task: reaching 60% validation accuracy within the epochs
(the test's requirement), then the fewest epochs to 60%, then the best validation accuracy.
The choice among the finalists: the corpus task's test accuracy at its best validation epoch
(as `vprom evaluate` scores it: the corpus's validation part is small, 160 matrices at
--scale 0.02, its test part 1,579; build the grid's corpus with another --seed than the
demo's, so the demo's figures stay untouched by the search) decides only where it is
clearly better: the first finalist (by the learnable rank) is replaced by another only when
their 95% Wilson intervals on the corpus test do not overlap. `--from-results` redoes the
choice (and the table) from a results.json without training. `--adam` adds Adam (lr 1e-4, 1e-3) as evidence
for the case where no AdaDelta setting learns.

    .venv/bin/python bench/grid.py --corpus /tmp/grid/corpus --out /tmp/grid/results
    .venv/bin/python bench/grid.py ... --write-defaults     # store the choice in defaults.json

Prints one row per run as it ends, then the table of every setting and the chosen defaults;
writes results.json into --out.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import multiprocessing
import os
import shutil
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PAPER_MODELS = ("mlp-sum-6", "gru-shared", "vqa", "rn")
BASE = {"optimizer": "adadelta", "lr": 1.0, "rho": 0.9, "eps": 1e-6, "hidden": 512,
        "batch_size": 64, "score_init": 1.0}
STAGE1 = [{"lr": lr, "eps": eps, "score_init": w} for lr in (1.0, 10.0, 100.0)
          for eps in (1e-6, 1e-9, 1e-12) for w in (1.0, 100.0)]
STAGE2 = [{"rho": 0.95}, {"score_init": 10.0}]
STAGE3 = [{"hidden": 256}, {"batch_size": 32}]
ADAM = [{"optimizer": "adam", "lr": 1e-4, "eps": 1e-8, "rho": None},
        {"optimizer": "adam", "lr": 1e-3, "eps": 1e-8, "rho": None}]
#: models that are a searched model's network (the same parameters, or the same less the
#: panel ids) take its settings
SAME_NETWORK = {"rn-direct": "rn", "rn-no-ids": "rn"}
LEARNED = 0.60
DONE = 0.99


def get_args_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--corpus", type=Path, required=True,
                   help="a build folder with dataset.h5 and features/resnet18.h5")
    p.add_argument("--out", type=Path, required=True, help="work folder (runs, results.json)")
    p.add_argument("--models", default=",".join(PAPER_MODELS))
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--give-up", type=int, default=4,
                   help="stop a run whose loss is still at ln 8 after this many epochs")
    p.add_argument("--workers", type=int, default=2, help="processes (one torch thread each)")
    p.add_argument("--finalists", type=int, default=3,
                   help="settings per model trained on the corpus task")
    p.add_argument("--adam", action="store_true", help="also train Adam, as evidence")
    p.add_argument("--write-defaults", action="store_true",
                   help="store the chosen settings in baselines/defaults.json")
    p.add_argument("--from-results", type=Path, default=None,
                   help="a results.json of an earlier search: choose and print, train nothing")
    return p


def learnable_task(folder: Path) -> tuple[Path, Path]:
    from suite_builders import load

    write_pair = load("tests/baselines/conftest.py").write_pair
    if not (folder / "feats.h5").is_file():
        write_pair(folder, n=2400, dim=256, seed=0)
    return folder / "dataset.h5", folder / "feats.h5"


def run_one(task: tuple[str, Path, Path, bool], model: str, setting: dict, args,
            runs: Path) -> dict:
    """Train one setting on one task, epoch by epoch; returns its figures."""
    from vprom.baselines.config import TrainConfig
    from vprom.baselines.train import train

    from vprom.baselines.evaluate import evaluate

    name, dataset, features, center = task
    label = ",".join(f"{k}={v}" for k, v in sorted(setting.items()) if v is not None)
    out = runs / model / name / label
    shutil.rmtree(out, ignore_errors=True)
    began = time.perf_counter()
    history: list[dict] = []
    patience = 3 if name == "corpus" else args.epochs
    for epochs in range(1, args.epochs + 1):
        with contextlib.redirect_stdout(io.StringIO()):  # train's per-epoch log lines
            train(TrainConfig(dataset=dataset, features=features, model=model,
                              split="neutral", out=out, epochs=epochs, patience=patience,
                              device="cpu", center_features=center, **setting))
        history = json.loads((out / "history.json").read_text())
        last = history[-1]
        if len(history) < epochs or last["val_acc"] >= DONE:  # stopped early, or done
            break
        if epochs >= args.give_up and min(h["train_answer_loss"] for h in history) > (
                math.log(8) - 0.01):
            break
    val = [h["val_acc"] for h in history]
    reached = next((h["epoch"] for h in history if h["val_acc"] >= LEARNED), None)
    test = evaluate(out, device="cpu")["test"]
    shutil.rmtree(out, ignore_errors=True)
    return {"model": model, "task": name, "setting": setting, "best_val": max(val),
            "test": test["accuracy"], "n_test": test["n"],
            "epochs_run": len(history), "epochs_to_60": reached,
            "min_loss": min(h["train_answer_loss"] for h in history),
            "seconds": round(time.perf_counter() - began, 1)}


def rank(results: dict) -> tuple:
    """Higher is better: learns the learnable task, then faster, then higher."""
    learn = results["learnable"]
    reached = learn["epochs_to_60"]
    return (reached is not None, -(reached or 99), learn["best_val"])


def corpus_interval(row: dict) -> tuple[float, float]:
    from vprom.statistics import wilson_interval

    corpus = row["corpus"]
    return wilson_interval(corpus["test"] * corpus["n_test"], corpus["n_test"])


def choose(rows: list[dict]) -> dict:
    """The finalist first by the learnable rank, unless another is clearly better on the
    corpus task (95% intervals apart); Adam only when no AdaDelta setting learns."""
    adadelta = [r for r in rows if r["setting"]["optimizer"] == "adadelta"]
    pool = adadelta if any(rank(r)[0] for r in adadelta) else rows
    finalists = sorted((r for r in pool if "corpus" in r), key=rank, reverse=True)
    if not finalists:
        return max(pool, key=rank)
    best = finalists[0]
    for other in finalists[1:]:
        if corpus_interval(other)[0] > corpus_interval(best)[1]:
            best = other
    return best


def search(model: str, args) -> list[dict]:
    """The staged search of one model (runs in a worker process, one torch thread)."""
    import torch

    torch.set_num_threads(1)
    runs = args.out / "runs"
    tasks = [("learnable", *learnable_task(args.out / "learnable"), False),
             ("corpus", args.corpus / "dataset.h5", args.corpus / "features" / "resnet18.h5",
              True)]
    table: list[dict] = []

    def train_on(row: dict, task) -> None:
        r = row[task[0]] = run_one(task, model, row["setting"], args, runs)
        print(f"{model:10s} {row['stage']:4s} {task[0]:9s} {_label(row['setting']):42s} best "
              f"val {100 * r['best_val']:5.1f}% in {r['epochs_run']:2d} epochs, 60% at "
              f"{r['epochs_to_60'] or '-'}, test {100 * r['test']:5.1f}%, "
              f"{r['seconds']:.0f} s", flush=True)

    def trial(change: dict, stage: str) -> dict:
        setting = {**BASE, **change}
        key = json.dumps(setting, sort_keys=True)
        for row in table:
            if json.dumps(row["setting"], sort_keys=True) == key:
                return row
        row = {"model": model, "stage": stage, "setting": setting}
        train_on(row, tasks[0])
        table.append(row)
        return row

    for change in STAGE1:
        trial(change, "1")
    base = {k: max(table, key=rank)["setting"][k] for k in ("lr", "eps", "score_init")}
    for change in STAGE2:
        trial({**base, **change}, "2")
    base = {k: max(table, key=rank)["setting"][k] for k in BASE}
    for change in STAGE3:
        trial({**base, **change}, "3")
    adadelta = sorted(table, key=rank, reverse=True)
    for row in adadelta[:args.finalists]:
        train_on(row, tasks[1])
    if args.adam:  # evidence only; on the corpus too if no AdaDelta setting learned
        for change in ADAM:
            row = trial(change, "adam")
            if not rank(adadelta[0])[0] and rank(row)[0]:
                train_on(row, tasks[1])
    return table


def _label(setting: dict) -> str:
    names = {"optimizer": "", "lr": "lr", "rho": "rho", "eps": "eps", "hidden": "h",
             "batch_size": "b", "score_init": "w"}
    return " ".join(f"{names[k]}{v:g}" if isinstance(v, float) else f"{names[k]}{v}"
                    for k, v in setting.items() if v is not None)


def markdown(table: list[dict], chosen: dict) -> str:
    lines = ["| model | stage | optimizer | lr | rho | eps | hidden | batch | score init | "
             "learnable: best val (epoch of 60%) | corpus: best val | corpus: test | chosen |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---|"]
    for row in table:
        s, a, c = row["setting"], row["learnable"], row.get("corpus")
        corpus = (f"{100 * c['best_val']:.1f}% | {100 * c['test']:.1f}%" if c
                  else "— | —")
        mark = "**yes**" if s == chosen[row["model"]] else ""
        lines.append(f"| {row['model']} | {row['stage']} | {s['optimizer']} | {s['lr']:g} | "
                     f"{'' if s['rho'] is None else format(s['rho'], 'g')} | {s['eps']:g} | "
                     f"{s['hidden']} | {s['batch_size']} | {s['score_init']:g} | "
                     f"{100 * a['best_val']:.1f}% ({a['epochs_to_60'] or '—'}) | "
                     f"{corpus} | {mark} |")
    return "\n".join(lines)


def write_defaults(chosen: dict) -> Path:
    from vprom.baselines.config import defaults_path, load_defaults

    path = defaults_path()
    data = json.loads(path.read_text())
    for model, setting in chosen.items():
        data["models"][model] = {k: v for k, v in setting.items()
                                 if v is not None or k != "rho"}
        if setting["optimizer"] != "adadelta":
            data["models"][model].pop("rho", None)
    for model, searched in SAME_NETWORK.items():
        if searched in chosen:
            data["models"][model] = {"_note": f"{searched}'s settings: the same network",
                                     **data["models"][searched]}
    path.write_text(json.dumps(data, indent=2) + "\n")
    load_defaults.cache_clear()
    load_defaults()  # refuse what we just wrote if it is not a valid defaults file
    return path


def main(args) -> None:
    if args.from_results:
        recorded = json.loads(args.from_results.read_text())
        table, minutes = recorded["table"], recorded["minutes"]
        summary = recorded.get("summary", "")
    else:
        table, minutes, summary = search_all(args)
    models = list(dict.fromkeys(r["model"] for r in table))
    chosen = {m: choose([r for r in table if r["model"] == m])["setting"] for m in models}
    runs = sum(("learnable" in row) + ("corpus" in row) for row in table)
    print(f"\n{len(table)} settings, {runs} runs in {minutes:.1f} min {summary}\n")
    print(markdown(table, chosen))
    print("\nchosen:")
    for model, setting in chosen.items():
        print(f"  {model:10s} {_label(setting)}")
    if not args.from_results:
        (args.out / "results.json").write_text(json.dumps(
            {"table": table, "chosen": chosen, "minutes": minutes, "summary": summary},
            indent=2) + "\n")
    if args.write_defaults:
        print(f"written to {write_defaults(chosen)}")


def search_all(args) -> tuple[list[dict], float, str]:
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    args.out.mkdir(parents=True, exist_ok=True)
    learnable_task(args.out / "learnable")  # once, before the workers share it
    load = os.getloadavg()[0]
    began = time.perf_counter()
    with multiprocessing.get_context("spawn").Pool(args.workers) as pool:
        tables = pool.starmap(search, [(m, args) for m in models])
    summary = (f"with {args.workers} workers (load average {load:.1f} at the start, "
               f"{os.getloadavg()[0]:.1f} at the end)")
    return [row for t in tables for row in t], (time.perf_counter() - began) / 60, summary


if __name__ == "__main__":
    main(get_args_parser().parse_args())
