"""`vprom stats`: the data set's Table 1 (distinct elements, VG images and matrices per type),
relations, split sizes and perception-only ceiling, beside the paper's figures."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from vprom.generation.verify.ceiling import format_ceiling, perception_ceiling
from vprom.files import write_json
from vprom.domain import PAPER_TABLE1 as RECORDS_TABLE1
from vprom.domain import RELATIONS_OF, SPLITS, ElementType, Relation
from vprom.tables import read_crop_table, read_matrix_table

#: Table 1 of the paper, as `stats` lays it out (with its total row).
PAPER_TABLE1 = {t.value: dict(row) for t, row in RECORDS_TABLE1.items()} | {
    "total": {"elements": None, "images": None,
              "matrices": sum(row["matrices"] for row in RECORDS_TABLE1.values())}}
COLUMNS = ("elements", "(paper)", "images", "(paper)", "matrices", "(paper)")
TYPE_NAMES = {"object_attribute": "object attributes", "human_attribute": "human attributes",
              "object": "objects", "count": "counts", "total": "total"}


def stats(dataset: str | Path) -> dict:
    """The figures of one DATASET.h5 as a JSON-ready dict."""
    dataset = Path(dataset)
    crops, m = read_crop_table(dataset), read_matrix_table(dataset)
    table = {}
    for t in ElementType:
        of_type = crops.element_type == t.value
        # a set of the strings: faster than sorting millions of Python objects
        table[t.value] = {"elements": len(set(m.elements[m.element_type == t.value].ravel()
                                              .tolist())),
                          "images": int(len(np.unique(crops.image_id[of_type]))),
                          "matrices": int((m.element_type == t.value).sum())}
    table["total"] = {"elements": sum(r["elements"] for r in table.values()),
                      "images": int(len(np.unique(crops.image_id))), "matrices": len(m)}
    relations = {r.value: {t.value: int(((m.relation == r.value) &
                                         (m.element_type == t.value)).sum())
                           for t in ElementType if r in RELATIONS_OF[t]} for r in Relation}
    splits = {}
    for split in SPLITS:
        parts = m.splits.get(split)
        if parts is None:
            continue
        sizes = {p: int(len(parts.get(p, ()))) for p in ("train", "val", "test")}
        sizes["excluded"] = len(m) - sum(sizes.values())
        splits[split] = sizes
    return {"dataset": dataset.name, "table1": table, "paper_table1": PAPER_TABLE1,
            "relations": relations, "splits": splits, "crops": len(crops),
            "perception_ceiling": perception_ceiling(m)}


def _n(value) -> str:
    return "—" if value is None else f"{value:,}"


def format_stats(figures: dict) -> str:
    """Terminal tables: Table 1 with the paper's figures beside, relations, splits."""
    lines = [f"{figures['dataset']}: {figures['table1']['total']['matrices']:,} matrices, "
             f"{figures['crops']:,} crops", "",
             f"{'Table 1':20s}" + "".join(f"{h:>{10 + (h[0] == '(')}s}" for h in COLUMNS)]
    for key, row in figures["table1"].items():
        paper = figures["paper_table1"].get(key, {})
        lines.append(f"{TYPE_NAMES.get(key, key):20s}" + "".join(
            f"{_n(row[c]):>10s}{'(' + _n(paper.get(c)) + ')':>11s}"
            for c in ("elements", "images", "matrices")))
    types = [t.value for t in ElementType]
    lines += ["", "matrices per relation   " + "".join(f"{TYPE_NAMES[t]:>19s}" for t in types)]
    for relation, row in figures["relations"].items():
        lines.append(f"{relation:24s}" + "".join(f"{_n(row.get(t)):>19s}" for t in types))
    lines += ["", f"{'split':36s}{'train':>9s}{'val':>9s}{'test':>9s}{'excluded':>10s}"]
    for split, sizes in figures["splits"].items():
        lines.append(f"{split:36s}" + "".join(f"{sizes[p]:>9,}" for p in ("train", "val", "test"))
                     + f"{sizes['excluded']:>10,}")
    if "perception_ceiling" in figures:
        lines += ["", "perception-only ceiling (not a failure: inherent to V-PROM's relations):",
                  "  " + format_ceiling(figures["perception_ceiling"])]
    return "\n".join(lines)


def write_stats(figures: dict, path: str | Path) -> None:
    """The figures as JSON, written atomically."""
    write_json(path, {"kind": "stats", **figures})
