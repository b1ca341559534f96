"""The perception-only ceiling of each split's test problems, for `vprom report`.

`generation.verify.ceiling.perception_hits` gives, per matrix, the probability that perfect
recognition without the relation picks the answer; a split's ceiling is its mean over that
split's test matrices (an expected accuracy, ties split evenly). The report's floor cannot
import generation, so the command passes this function to it.
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
