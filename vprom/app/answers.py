"""The prediction files `vprom score` reads; the file itself tells its format.

- `.xlsx`: VLMEvalKit's predictions; `.tsv` or a tab-separated header naming `prediction`:
  the same as TSV; a first character `[`: as JSON. `index` is the matrix id, `prediction` text.
- a first character `{`: JSON lines, told by the first line's fields: choices
  `{"matrix_id": 17, "choice": 3}` (or `"scores"`: 8 numbers, the highest taken), free text
  `{"matrix_id": 17, "response": "C"}`, or lmms-eval's `--log_samples` lines (`doc_id`; the
  id `vprom_accuracy.matrix_id` or `doc.matrix_id`; the response `filtered_resps` or `resps`).
- else CSV `matrix_id,choice[,score_0..score_7]` with its header row.

UTF-8 text (a byte-order mark allowed). A bad record is refused with its file and line. Free
text is read by `extract_letter`, as the exported lmms-eval task scores it.
"""

from __future__ import annotations

import csv
import io
import json
import math
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from vprom.domain import N_CANDIDATES
from vprom.errors import VpromError
from vprom.generation.export.vlm_task import LETTERS, UNPARSED, extract_letter  # noqa: F401

CHOICE = "choice"
FORMATS = {CHOICE: f"each line needs a matrix id and a choice 0..{N_CANDIDATES - 1} "
                   f"(or {N_CANDIDATES} scores)",
           "response": 'each line needs "matrix_id" and "response"',
           "lmms-eval": "each line needs vprom_accuracy.matrix_id (the vprom task's "
                        "process_results) and filtered_resps",
           "vlmevalkit": "each row needs an index (the matrix id) and a prediction"}

@dataclass(frozen=True)
class Predictions:
    path: Path
    format: str  # a key of FORMATS
    matrix_id: np.ndarray  # int64 (n,)
    choice: np.ndarray  # int64 (n,), 0..7, or UNPARSED
    line: np.ndarray  # int64 (n,), each prediction's line (row, record) in the file
    unit: str = "line"  # "row" of a spreadsheet, "record" of a JSON list


@dataclass(frozen=True)
class _At:
    """Where a record is, for the one line that refuses it."""

    path: Path
    line: int
    format: str = CHOICE
    unit: str = "line"

    def bad(self, what: str) -> VpromError:
        return VpromError(f"{self.path}, {self.unit} {self.line}: {what}; {FORMATS[self.format]}")


def _integer(value, at: _At, name: str) -> int:
    """A whole number in 0..2**63-1, read exactly: 17, "17" or "17.0"."""
    if value is None:
        raise at.bad(f"no {name}")
    text = str(value).strip()
    if len(text) > 40:
        raise at.bad(f"{name} of {len(text):,} characters is not a number")
    try:
        number = int(text) if text.isdigit() else float(text)
    except ValueError:
        raise at.bad(f"{name} {value!r} is not a number") from None
    if isinstance(number, float) and not number.is_integer():
        raise at.bad(f"{name} {value!r} is not a whole number")
    if not 0 <= number <= np.iinfo(np.int64).max:
        raise at.bad(f"{name} {value} is out of range (0 to 2**63-1)")
    return int(number)


def _record(at: _At, matrix_id, choice, scores) -> tuple[int, int]:
    """(matrix id, choice) of a line of choices, checked."""
    if scores is not None:
        try:
            scores = [float(v) for v in scores]
        except (TypeError, ValueError):
            raise at.bad(f"scores {scores!r} are not numbers") from None
        if len(scores) != N_CANDIDATES or not all(math.isfinite(v) for v in scores):
            raise at.bad(f"scores need {N_CANDIDATES} finite numbers")
    if choice is None or choice == "":
        if scores is None:
            raise at.bad("no choice and no scores")
        choice = int(np.argmax(scores))
    matrix_id, choice = _integer(matrix_id, at, "matrix_id"), _integer(choice, at, "choice")
    if not 0 <= choice < N_CANDIDATES:
        raise at.bad(f"choice {choice} is not a candidate")
    return matrix_id, choice


def _response(at: _At, value) -> int:
    """The choice of one response; lmms-eval logs it as a string or a list of one."""
    while isinstance(value, list) and len(value) == 1:
        value = value[0]
    if isinstance(value, list):
        raise at.bad(f"{len(value)} responses to one problem; vprom scores one per problem")
    return extract_letter(value)


def _lmms_eval(at: _At, row: dict) -> tuple[int, int]:
    matrix_id = next((d["matrix_id"] for d in (row.get("vprom_accuracy"), row.get("doc"))
                      if isinstance(d, dict) and "matrix_id" in d), None)
    response = row["filtered_resps"] if "filtered_resps" in row else row["resps"]
    return _integer(matrix_id, at, "matrix_id"), _response(at, response)


_JSON_READERS = {
    CHOICE: lambda at, row: _record(at, row.get("matrix_id"), row.get(CHOICE), row.get("scores")),
    "response": lambda at, row: (_integer(row.get("matrix_id"), at, "matrix_id"),
                                 _response(at, row["response"])),
    "lmms-eval": _lmms_eval,
    "vlmevalkit": lambda at, row: (_integer(row.get("index"), at, "index"),
                                   _response(at, row.get("prediction"))),
}


def _json_lines(path: Path, text: str):
    """JSON lines; the first line's fields tell choices, responses or lmms-eval samples."""
    kind = None
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        at = _At(path, number, kind or CHOICE)
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            raise at.bad("not a JSON object") from None
        except (ValueError, RecursionError):  # a number of over 4,300 digits, deep nesting
            raise at.bad("a number too long or nesting too deep") from None
        if not isinstance(row, dict):
            raise at.bad("not a JSON object")
        if kind is None:
            lmms = "doc_id" in row and ("filtered_resps" in row or "resps" in row)
            kind = "lmms-eval" if lmms else "response" if "response" in row else CHOICE
        yield number, *_JSON_READERS[kind](_At(path, number, kind), row), kind


def _vlmevalkit(path: Path, rows, unit: str):
    """VLMEvalKit's predictions: rows of cells under a header naming index and prediction."""
    _, head = next(rows, (0, ()))
    head = [str(name or "").strip() for name in head]
    if not {"index", "prediction"} <= set(head):
        raise VpromError(f"{path}: a VLMEvalKit prediction file has a header row with the "
                         f"columns index and prediction; found {', '.join(head[:10]) or 'none'}")
    for number, cells in rows:
        if any(cell not in (None, "") for cell in cells):
            at = _At(path, number, "vlmevalkit", unit)
            if len(cells) != len(head):
                raise at.bad(f"{len(cells)} fields, the header has {len(head)}")
            yield number, *_JSON_READERS["vlmevalkit"](at, dict(zip(head, cells))), "vlmevalkit"


def _choices_csv(path: Path, rows):
    _, head = next(rows, (0, []))
    if head[:1] != ["matrix_id"]:
        raise VpromError(f"{path}: a CSV of predictions starts with the header "
                         "`matrix_id,choice` (optionally then score_0..score_7)")
    score_columns = [head.index(f"score_{k}") for k in range(N_CANDIDATES)
                     if f"score_{k}" in head]
    if score_columns and len(score_columns) != N_CANDIDATES:
        raise VpromError(f"{path}: the header names {len(score_columns)} score columns; give "
                         f"all {N_CANDIDATES} (score_0..score_{N_CANDIDATES - 1}) or none")
    at_choice = head.index(CHOICE) if CHOICE in head else None
    for number, row in rows:
        if not any(cell.strip() for cell in row):
            continue
        at = _At(path, number)
        if len(row) != len(head):
            raise at.bad(f"{len(row)} fields, the header has {len(head)}")
        scores = [row[k] for k in score_columns] if score_columns else None
        yield number, *_record(at, row[0], row[at_choice] if at_choice is not None else None,
                               scores), CHOICE


def _delimited(path: Path, text: str, delimiter: str, records, kind: str):
    reader = csv.reader(io.StringIO(text), delimiter=delimiter)
    try:
        yield from records(path, ((reader.line_num, row) for row in reader))
    except csv.Error as e:  # a field over csv.field_size_limit(), a stray NUL
        raise _At(path, reader.line_num, kind).bad(str(e)) from None


def _xlsx_rows(path: Path) -> list:
    try:
        import openpyxl
        from openpyxl.utils.exceptions import InvalidFileException
    except ImportError:
        raise VpromError(f"{path}: reading .xlsx needs openpyxl (pip install openpyxl); or let "
                         "VLMEvalKit write .tsv (PRED_FORMAT=tsv)") from None
    try:
        book = openpyxl.load_workbook(path, read_only=True, data_only=True)
    except (OSError, KeyError, ValueError, zipfile.BadZipFile, InvalidFileException) as e:
        raise VpromError(f"{path}: not a readable .xlsx file ({type(e).__name__})") from None
    try:
        return list(enumerate(book.worksheets[0].iter_rows(values_only=True), 1))
    finally:
        book.close()


def _records(path: Path):
    """The unit of the file's places, and (place, matrix id, choice, format) of each one."""
    if not path.exists():
        raise VpromError(f"{path}: no such file")
    if path.suffix.lower() == ".xlsx":
        return "row", _vlmevalkit(path, iter(_xlsx_rows(path)), "row")
    try:
        text = path.read_text(encoding="utf-8-sig")  # a byte-order mark is not data
    except UnicodeDecodeError:
        raise VpromError(f"{path}: not UTF-8 text; write predictions as CSV or JSON lines")
    head, start = text.split("\n", 1)[0], text.lstrip()[:1]
    if start == "{":
        return "line", _json_lines(path, text)
    if path.suffix.lower() == ".tsv" or ("\t" in head and "prediction" in head):
        return "line", _delimited(path, text, "\t", lambda p, rows: _vlmevalkit(p, rows, "line"),
                                  "vlmevalkit")
    if start == "[":
        try:
            rows = json.loads(text)
        except (ValueError, RecursionError):
            raise VpromError(f"{path}: not JSON; VLMEvalKit's .json holds a list of records")
        rows = rows if isinstance(rows, list) else []
        head = list(rows[0]) if rows and isinstance(rows[0], dict) else []
        return "record", _vlmevalkit(path, iter([(0, head)] + [
            (n, [r.get(k) for k in head] if isinstance(r, dict) else [])
            for n, r in enumerate(rows, 1)]), "record")
    return "line", _delimited(path, text, ",", _choices_csv, CHOICE)


def read_predictions(path: str | Path) -> Predictions:
    """The predictions of any format the module text lists."""
    path = Path(path)
    unit, records = _records(path)
    found = list(records)
    ids, choices, lines = (np.array([f[k] for f in found], dtype=np.int64) for k in (1, 2, 0))
    return Predictions(path, found[0][3] if found else CHOICE, ids, choices, lines, unit)
