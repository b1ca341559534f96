"""What `vprom report` needs from the floors below it: the perception-only ceiling of each
split's test problems, and what `vprom verify` found on the runs' data set.

`generation.verify.ceiling.perception_hits` gives, per matrix, the probability that perfect
recognition without the relation picks the answer; a split's ceiling is its mean over that
split's test matrices (an expected accuracy, ties split evenly). The report's floor cannot
import generation, so the command passes these functions to it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from vprom.generation.verify.ceiling import perception_hits
from vprom.tables import present_rows, read_matrix_table


def perception_ceilings(dataset: Path, splits: list[str]) -> dict[str, tuple[float, int]]:
    """{split: (ceiling 0..1, test matrices)} for the splits of `dataset` that have tests."""
    table = read_matrix_table(dataset)
    out = {}
    for split in splits:
        rows = present_rows(table.id, table.splits.get(split, {}).get("test", []))
        if len(rows):
            hits = perception_hits(table.elements[rows], table.answer[rows].astype(np.int64))
            out[split] = (float(hits.mean()), len(rows))
    return out


def verify_result(dataset: Path) -> str:
    """The verdict of the `verify.txt` that `vprom build` writes beside DATASET.h5, if it is
    newer than the data set; the report does not verify again (seconds to minutes)."""
    written = dataset.parent / "verify.txt"
    if written.is_file() and written.stat().st_mtime >= dataset.stat().st_mtime:
        last = written.read_text(encoding="utf-8").strip().rsplit("\n", 1)[-1]
        if last in ("verdict: PASS", "verdict: FAIL"):
            return f"`vprom verify` {last.split()[-1]} ({written})"
    return f"no verify report beside it; run `vprom verify {dataset}`"
