"""Scoring anyone's predictions with the paper's protocol (`vprom score DATASET.h5 PREDICTIONS`).

A model trained outside vprom writes one prediction per test problem of a split, as CSV

    matrix_id,choice                      (a header row; optional columns score_0..score_7)
    17,3

or as JSON lines, `{"matrix_id": 17, "choice": 3}` with an optional `"scores": [8 numbers]`.
`choice` is the candidate picked, 0..7; when it is left out, the highest score is taken.
Either is UTF-8, with or without a byte-order mark (Excel's "CSV UTF-8" writes one). A line
that cannot be read (a field over the csv module's 128 KB, an id outside int64, a number of
thousands of digits, nesting too deep) is refused with its file and line number.

The file is checked against the split's test part before anything is scored; each problem
found is one line of the refusal, with counts and examples: test problems left out, problems
listed twice, ids that are not matrices of the data set. Predictions of matrices outside the
test part (a file covering every problem) are allowed and not scored.

Scoring is `vprom evaluate`'s own (`baselines.metrics.breakdowns`): accuracy with 95% Wilson
intervals overall, per relation, per element type and per pair; printed beside chance and the
perception-only ceiling of the same problems (`generation.verify.ceiling`: what perfect recognition
scores without finding the relation). The metrics are written atomically as `metrics.json` in
`evaluate`'s schema (the run's model fields filled from what is known, the rest null), so
`vprom report` lists the outside model beside the baselines; as in a run's, the data set and
the predictions are named relative to the metrics file.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from vprom.baselines.metrics import breakdowns, format_breakdowns, format_score
from vprom.baselines.run_checks import did_not_learn
from vprom.errors import VpromError
from vprom.generation.verify.ceiling import perception_hits
from vprom.files import sha256_file, write_json
from vprom.manifest import input_hash
from vprom.domain import CHANCE, N_CANDIDATES, SPLITS
from vprom.tables import crop_rows, read_matrix_table

SCORED_BY = "vprom score"
EXAMPLES = 3
MAX_ID = np.iinfo(np.int64).max


@dataclass(frozen=True)
class Predictions:
    path: Path
    matrix_id: np.ndarray  # int64 (n,)
    choice: np.ndarray  # int64 (n,), 0..7


def _bad(path: Path, line: int, what: str) -> VpromError:
    return VpromError(f"{path}, line {line}: {what}; each line needs a matrix id and a choice "
                      f"0..{N_CANDIDATES - 1} (or {N_CANDIDATES} scores)")


def _integer(value, path: Path, line: int, name: str) -> int:
    """A whole number in 0..2**63-1, read exactly: 17, "17" or "17.0"."""
    text = str(value).strip()
    if len(text) > 40:
        raise _bad(path, line, f"{name} of {len(text):,} characters is not a number")
    try:
        number = int(text) if text.isdigit() else float(text)
    except ValueError:
        raise _bad(path, line, f"{name} {value!r} is not a number") from None
    if isinstance(number, float) and not number.is_integer():
        raise _bad(path, line, f"{name} {value!r} is not a whole number")
    if not 0 <= number <= MAX_ID:
        raise _bad(path, line, f"{name} {value} is out of range (0 to 2**63-1)")
    return int(number)


def _record(path: Path, line: int, matrix_id, choice, scores) -> tuple[int, int]:
    """(matrix id, choice) of one line, checked."""
    if matrix_id is None:
        raise _bad(path, line, "no matrix_id")
    if scores is not None:
        try:
            scores = [float(v) for v in scores]
        except (TypeError, ValueError):
            raise _bad(path, line, f"scores {scores!r} are not numbers") from None
        if len(scores) != N_CANDIDATES or not all(math.isfinite(v) for v in scores):
            raise _bad(path, line, f"scores need {N_CANDIDATES} finite numbers")
    if choice is None or choice == "":
        if scores is None:
            raise _bad(path, line, "no choice and no scores")
        choice = int(np.argmax(scores))
    choice = _integer(choice, path, line, "choice")
    if not 0 <= choice < N_CANDIDATES:
        raise _bad(path, line, f"choice {choice} is not a candidate")
    return _integer(matrix_id, path, line, "matrix_id"), choice


def _json_lines(path: Path, text: str):
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            raise _bad(path, number, "not a JSON object") from None
        except (ValueError, RecursionError):  # a number of over 4,300 digits, deep nesting
            raise _bad(path, number, "a number too long or nesting too deep") from None
        if not isinstance(row, dict):
            raise _bad(path, number, "not a JSON object")
        yield _record(path, number, row.get("matrix_id"), row.get("choice"), row.get("scores"))


def _csv_lines(path: Path, text: str):
    reader = csv.reader(io.StringIO(text))
    try:
        yield from _csv_records(path, reader)
    except csv.Error as e:  # a field over csv.field_size_limit(), a stray NUL
        raise _bad(path, reader.line_num, str(e)) from None


def _csv_records(path: Path, reader):
    head = next(reader, [])
    if head[:1] != ["matrix_id"]:
        raise VpromError(f"{path}: a CSV of predictions starts with the header "
                         "`matrix_id,choice` (optionally then score_0..score_7)")
    score_columns = [head.index(f"score_{k}") for k in range(N_CANDIDATES)
                     if f"score_{k}" in head]
    if score_columns and len(score_columns) != N_CANDIDATES:
        raise VpromError(f"{path}: the header names {len(score_columns)} score columns; give "
                         f"all {N_CANDIDATES} (score_0..score_{N_CANDIDATES - 1}) or none")
    at = head.index("choice") if "choice" in head else None
    for row in reader:
        if not any(cell.strip() for cell in row):
            continue
        if len(row) != len(head):
            raise _bad(path, reader.line_num, f"{len(row)} fields, the header has {len(head)}")
        scores = [row[k] for k in score_columns] if score_columns else None
        yield _record(path, reader.line_num, row[0], row[at] if at is not None else None,
                      scores)


def read_predictions(path: str | Path) -> Predictions:
    """The predictions of a CSV or JSON-lines file (told apart by their first character)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8-sig")  # a byte-order mark is not data
    except FileNotFoundError:
        raise VpromError(f"{path}: no such file") from None
    except UnicodeDecodeError:
        raise VpromError(f"{path}: not UTF-8 text; write predictions as CSV or JSON lines")
    reader = _json_lines if text.lstrip().startswith("{") else _csv_lines
    pairs = list(reader(path, text))
    ids = np.array([p[0] for p in pairs], dtype=np.int64)
    return Predictions(path, ids, np.array([p[1] for p in pairs], dtype=np.int64))


def _examples(values) -> str:
    values = [int(v) for v in values]
    more = ", …" if len(values) > EXAMPLES else ""
    return ", ".join(str(v) for v in values[:EXAMPLES]) + more


def check_predictions(predictions: Predictions, known: np.ndarray, test: np.ndarray,
                      where: str) -> None:
    """Refuse left-out test problems, repeated ids and unknown ids: one line each."""
    ids, path = predictions.matrix_id, predictions.path
    problems = []
    values, counts = np.unique(ids, return_counts=True)
    twice = values[counts > 1]
    if len(twice):
        problems.append(f"{path}: {len(twice)} matrix ids are listed more than once "
                        f"(e.g. {_examples(twice)}); give one prediction per problem")
    unknown = np.setdiff1d(values, known)
    if len(unknown):
        problems.append(f"{path}: {len(unknown)} ids are not matrices of {where} (e.g. "
                        f"{_examples(unknown)}); were the predictions made on another data set?")
    left_out = np.setdiff1d(test, values)
    if len(left_out):
        problems.append(f"{path}: leaves out {len(left_out)} of the {len(test)} test problems "
                        f"of {where} (e.g. {_examples(left_out)}); predict every one")
    if problems:
        raise VpromError("\n".join(problems))


def _ceiling(hits: np.ndarray, relation: np.ndarray, element_type: np.ndarray) -> dict:
    """The perception-only ceiling, grouped as `breakdowns` groups the accuracy."""
    groups = {"test": {"all": hits}, "by_relation": {}, "by_element_type": {},
              "by_relation_element_type": {}}
    for r in np.unique(relation):
        groups["by_relation"][str(r)] = hits[relation == r]
        for t in np.unique(element_type[relation == r]):
            groups["by_relation_element_type"][(str(r), str(t))] = hits[
                (relation == r) & (element_type == t)]
    for t in np.unique(element_type):
        groups["by_element_type"][str(t)] = hits[element_type == t]
    return {k: {name: float(v.mean()) for name, v in g.items()} for k, g in groups.items()}


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


def score_predictions(dataset: str | Path, predictions: str | Path, split: str = "neutral",
                      out: str | Path | None = None, model: str | None = None,
                      features: str = "own") -> tuple[dict, dict]:
    """Score PREDICTIONS on `split`'s test part of DATASET.h5; writes OUT/metrics.json.

    Returns the metrics and the perception-only ceiling of the same groups."""
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
    rows = crop_rows(table.id, test)
    choice = found.choice[crop_rows(found.matrix_id, test)]
    answer = table.answer[rows].astype(np.int64)
    relation, element_type = table.relation[rows], table.element_type[rows]
    hits = perception_hits(table.elements[rows], answer)
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
                   "predictions_sha256": sha256_file(predictions),
                   "not_scored": int(len(found.matrix_id) - len(test)),
                   "perception_ceiling": _ceiling(hits, relation, element_type)["test"]["all"]},
        "checkpoint": None,
        "chance": CHANCE,
        **breakdowns(choice == answer, relation, element_type),
    }
    metrics["did_not_learn"] = did_not_learn(metrics, [])
    folder.mkdir(parents=True, exist_ok=True)
    write_json(folder / "metrics.json", _published(metrics, folder))
    return metrics, _ceiling(hits, relation, element_type)


def _published(metrics: dict, folder: Path) -> dict:
    """metrics.json as written: the run is ".", and the data set and predictions are named
    relative to it, so the file names no home or install folder."""
    def relative(path: str) -> str:
        return os.path.relpath(Path(path).resolve(), folder.resolve())

    config = {**metrics["config"], "predictions": relative(metrics["config"]["predictions"])}
    return {**metrics, "run": ".", "dataset": relative(metrics["dataset"]), "config": config}


def format_scored(metrics: dict, ceiling: dict) -> str:
    """`vprom evaluate`'s summary of scored predictions, the ceiling beside each group."""
    config = metrics["config"]
    lines = [f"{metrics['model']} on {metrics['split']}: {config['predictions']} "
             f"({metrics['test']['n']:,} test problems scored, {config['not_scored']:,} "
             "other predictions not scored)",
             f"test accuracy {format_score(metrics['test'])}   95% Wilson interval; chance "
             f"{100 * CHANCE:.1f}%, perception-only ceiling "
             f"{100 * ceiling['test']['all']:.1f}%"]
    lines += format_breakdowns(
        metrics, lambda key, name: f"ceiling {100 * ceiling[key][name]:5.1f}%")
    for reason in metrics.get("did_not_learn") or []:
        lines.append(f"AT CHANCE: {reason}")
    lines.append(f"written to {Path(metrics['run']) / 'metrics.json'}")
    return "\n".join(lines)
