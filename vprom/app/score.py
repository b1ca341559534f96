"""Scoring anyone's predictions with the paper's protocol (`vprom score DATASET.h5 PREDICTIONS`).

Ids listed twice, ids not in the data set, or no test problem at all are refused; ids outside
the split's test part are not scored, and a subset of it is said to be a partial sample.
Scoring is `vprom evaluate`'s (an unparsed answer is wrong), beside chance, the paper's
humans, the perception-only ceiling of the same problems, `--baselines` runs and the letters
chosen. metrics.json has `evaluate`'s schema (additions under `config`), so `vprom report`
lists the outside model beside the baselines. Also the ceilings `vprom report` shows.
"""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import numpy as np
from scipy.stats import entropy

from vprom.app.answers import LETTERS, UNPARSED, Predictions, read_predictions
from vprom.baselines.metrics import (INTERVAL, breakdowns, did_not_learn, format_breakdowns,
                                     format_score)
from vprom.baselines.paper import HUMANS
from vprom.baselines.report import expand_runs, load_entry
from vprom.domain import CHANCE, N_CANDIDATES, N_CONTEXT, SPLITS
from vprom.errors import VpromError
from vprom.files import sha256_file, write_json
from vprom.generation.verify.ceiling import perception_hits
from vprom.manifest import input_hash
from vprom.tables import crop_rows, present_rows, read_matrix_table

SCORED_BY = "vprom score"
EXAMPLES = 3


def _examples(values, predictions: Predictions) -> str:
    """The first few of `values` (matrix ids), each with the lines it is on."""
    shown = []
    for value in values[:EXAMPLES]:
        lines = predictions.line[predictions.matrix_id == value].tolist()
        unit = predictions.unit + ("s" if len(lines) > 1 else "")
        shown.append(f"{value} ({unit} {', '.join(map(str, lines))})")
    return ", ".join(shown) + (", …" if len(values) > EXAMPLES else "")


def check_predictions(predictions: Predictions, known: np.ndarray, test: np.ndarray,
                      where: str) -> None:
    """Refuse repeated ids, unknown ids and a file without test problems: one line each."""
    ids, path = predictions.matrix_id, predictions.path
    problems = []
    values, counts = np.unique(ids, return_counts=True)
    twice = values[counts > 1]
    if len(twice):
        problems.append(f"{path}: {len(twice)} matrix ids are listed more than once "
                        f"(e.g. {_examples(twice, predictions)}); give one prediction per problem")
    unknown = np.setdiff1d(values, known)
    if len(unknown):
        problems.append(f"{path}: {len(unknown)} ids are not matrices of {where} (e.g. "
                        f"{_examples(unknown, predictions)}); were the predictions made on "
                        "another data set?")
    if not np.isin(test, values).any():
        problems.append(f"{path}: none of its {len(values):,} predictions is one of the "
                        f"{len(test):,} test problems of {where}; nothing to score")
    if problems:
        raise VpromError("\n".join(problems))


def _baselines(paths, split: str, folder: Path) -> list[dict]:
    """{name, accuracy 0..1, n_test} of each baseline of `split` in `paths`: a `vprom report`
    folder's splits.csv, or runs' metrics.json (not that of `folder`, this score's)."""
    found = []
    for path in map(Path, paths):
        table = path / "splits.csv"
        if not table.is_file():
            runs = [run for run in expand_runs([path]) if run.resolve() != folder.resolve()]
            found += [{"name": e.label, "accuracy": e.accuracy / 100,
                       "n_test": e.metrics["test"]["n"]}
                      for e in map(load_entry, runs) if e.split == split and not e.is_control]
            continue
        try:
            with table.open(newline="", encoding="utf-8") as f:
                rows = [r for r in csv.DictReader(f)
                        if r["split"] == split and not r["control"] and r["accuracy"]]
            found += [{"name": " ".join(filter(None, (r["name"], r["features"],
                                                      "+aux" if r["aux"] == "True" else ""))),
                       "accuracy": float(r["accuracy"]) / 100, "n_test": int(r["n_test"])}
                      for r in rows]
        except (KeyError, ValueError, TypeError):
            raise VpromError(f"{table}: not a splits.csv of `vprom report`; pass the report "
                             "folder or the run folders") from None
    return found


def _ceiling(hits: np.ndarray, relation: np.ndarray, element_type: np.ndarray) -> dict:
    """The perception-only ceiling, grouped as `breakdowns` groups the accuracy."""
    def mean(mask: np.ndarray) -> float:
        return float(hits[mask].mean())

    pairs = dict.fromkeys(zip(relation.tolist(), element_type.tolist()))
    return {"test": {"all": float(hits.mean())},
            "by_relation": {r: mean(relation == r) for r in np.unique(relation).tolist()},
            "by_element_type": {t: mean(element_type == t)
                                for t in np.unique(element_type).tolist()},
            "by_relation_element_type": {(r, t): mean((relation == r) & (element_type == t))
                                         for r, t in pairs}}


def perception_ceilings(dataset: Path, splits: list[str]) -> dict[str, tuple[float, int]]:
    """{split: (ceiling 0..1, test matrices)} for the splits of `dataset` that have tests:
    the mean of `perception_hits` (perfect recognition without the relation) over them."""
    table = read_matrix_table(dataset)
    out = {}
    for split in splits:
        rows = present_rows(table.id, table.splits.get(split, {}).get("test", []))
        if len(rows):
            hits = perception_hits(table.elements[rows], table.answer[rows].astype(np.int64))
            out[split] = (float(hits.mean()), len(rows))
    return out


def _out_folder(predictions: Path, out: Path | None) -> Path:
    """Where metrics.json goes; never over a metrics.json that `vprom score` did not write."""
    folder = Path(out) if out is not None else predictions.resolve().parent
    existing = folder / "metrics.json"
    if existing.is_file():
        try:
            ours = json.loads(existing.read_text()).get("config", {}).get("scored_by")
        except (ValueError, AttributeError):
            ours = None
        if ours != SCORED_BY:
            raise VpromError(f"{existing}: exists and was not written by `vprom score`; pass "
                             "--out with another folder")
    if folder.exists() and not folder.is_dir():
        raise VpromError(f"{folder}: is a file; --out needs a folder")
    return folder


def _letters(choice: np.ndarray) -> dict:
    """The unparsed count, the letters chosen and their entropy in bits (None if none)."""
    counts = np.bincount(choice[choice != UNPARSED], minlength=N_CANDIDATES)
    return {"unparsed": int((choice == UNPARSED).sum()),
            "unparsed_rate": float((choice == UNPARSED).mean()),
            "letters": dict(zip(LETTERS, counts.tolist())),
            "letter_entropy_bits": float(entropy(counts, base=2)) if counts.any() else None}


def score_predictions(dataset: str | Path, predictions: str | Path, split: str,
                      out: str | Path | None, model: str | None, features: str,
                      baselines) -> tuple[dict, dict]:
    """`vprom.app.api.score`, which holds the defaults."""
    dataset, predictions = Path(dataset), Path(predictions)
    if split not in SPLITS:
        raise VpromError(f"unknown split {split!r}; the splits are {', '.join(SPLITS)}")
    table = read_matrix_table(dataset)
    folder = _out_folder(predictions, out)
    test = np.asarray(table.splits.get(split, {}).get("test", np.zeros(0)), np.int64)
    if len(test) == 0:
        raise VpromError(f"{dataset}: split {split!r} has no test problems; nothing to score")
    found = read_predictions(predictions)
    check_predictions(found, table.id, test, f"{dataset} (split {split})")
    scored = np.intersect1d(test, found.matrix_id)
    rows = crop_rows(table.id, scored)
    choice = found.choice[crop_rows(found.matrix_id, scored)]
    answer = table.answer[rows].astype(np.int64)
    relation, element_type = table.relation[rows], table.element_type[rows]
    ceiling = _ceiling(perception_hits(table.elements[rows], answer), relation, element_type)
    metrics = {
        "run": str(folder),
        "model": model or folder.resolve().name,
        "split": split,
        "aux": False,
        "shuffle_context": False,
        "seed": None,
        "features": {"backbone": features, "weights": None, "path": None},
        "dataset": str(dataset),
        "dataset_content_hash": input_hash(dataset),
        "config": {"scored_by": SCORED_BY, "predictions": str(predictions),
                   "predictions_sha256": sha256_file(predictions), "format": found.format,
                   "test_problems": len(test), "partial_sample": len(scored) < len(test),
                   "not_scored": int(len(found.matrix_id) - len(scored)),
                   "perception_ceiling": ceiling["test"]["all"],
                   "humans": HUMANS / 100, **_letters(choice),
                   "baselines": _baselines(baselines, split, folder)},
        "checkpoint": None,
        "chance": CHANCE,
        **breakdowns(choice == answer, relation, element_type,
                     table.panels[rows, N_CONTEXT + answer]),
    }
    metrics["did_not_learn"] = did_not_learn(metrics, [])
    folder.mkdir(parents=True, exist_ok=True)
    # as written, the run is "." and the other paths are relative to it (no home folder)
    here = folder.resolve()
    config = {**metrics["config"], "predictions": os.path.relpath(predictions.resolve(), here)}
    write_json(folder / "metrics.json", {**metrics, "run": ".", "config": config,
                                         "dataset": os.path.relpath(dataset.resolve(), here)})
    return metrics, ceiling


def format_scored(metrics: dict, ceiling: dict) -> str:
    """`vprom evaluate`'s summary of scored predictions, the ceiling beside each group."""
    config, n = metrics["config"], metrics["test"]["n"]
    sample = (f"{n:,} of {config['test_problems']:,} test problems scored: a partial sample"
              if config["partial_sample"] else f"{n:,} test problems scored")
    letters = ", ".join(f"{k} {v:,}" for k, v in config["letters"].items())
    bits = config["letter_entropy_bits"]
    lines = [(f"{metrics['model']} on {metrics['split']}: {config['predictions']} "
              f"({config['format']}; {sample}; {config['not_scored']:,} other predictions not "
              "scored)"),
             (f"test accuracy {format_score(metrics['test'])}   {INTERVAL}; chance "
              f"{100 * CHANCE:.1f}%, humans (paper) {HUMANS:.1f}%, perception-only ceiling "
              f"{100 * ceiling['test']['all']:.1f}%"),
             (f"unparsed {config['unparsed']:,} of {n:,} ({100 * config['unparsed_rate']:.1f}%,"
              f" scored wrong); letters chosen {letters}; entropy "
              f"{'n/a' if bits is None else f'{bits:.2f}'} bits (at most 3)")]
    lines += [(f"baseline {b['name']}: {100 * b['accuracy']:.1f}% on {b['n_test']:,} test "
               "problems") for b in config["baselines"]]
    lines += format_breakdowns(
        metrics, lambda key, name: f"ceiling {100 * ceiling[key][name]:5.1f}%")
    for reason in metrics.get("did_not_learn") or []:
        lines.append(f"AT CHANCE: {reason}")
    lines.append(f"written to {Path(metrics['run']) / 'metrics.json'}")
    return "\n".join(lines)
