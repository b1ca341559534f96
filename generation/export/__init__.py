"""`vprom export`: the data set as JSON lines (one object per matrix with its full provenance)
or as a folder: the original release's layout (`release`), npz per problem (`npz`), a Hugging
Face data set (`hf`), VLM harness files (`vlm`) or SAViR-T's feature files (`savir`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from tqdm import tqdm

from vprom.claim import writes
from vprom.domain import N_PANELS
from vprom.errors import VpromError
from vprom.files import atomic_path
from vprom.generation.export.crops import box, labels, template_text
from vprom.generation.export.hf import write_hf
from vprom.generation.export.npz import DEFAULT_SIZE, write_npz
from vprom.generation.export.release import FIRST_CANDIDATE_LABEL, write_release
from vprom.generation.export.vlm import open_store, vlm_options, write_vlm
from vprom.manifest import input_hashes, make_manifest, write_manifest
from vprom.tables import (
    CropTable,
    MatrixTable,
    crop_rows,
    read_crop_table,
    read_manifest,
    read_matrix_table,
)

#: format -> what it writes (the command line's help) and what `export` wrote (its counts)
_TEXTS = json.loads(template_text("formats.json"))
FORMATS, SUMMARIES, EXAMPLES = _TEXTS["help"], _TEXTS["summaries"], tuple(_TEXTS["examples"])


@dataclass
class ExportSummary:
    out: Path
    format: str
    counts: dict = field(default_factory=dict)

    def __str__(self) -> str:
        c, splits = self.counts, self.counts.get("splits", {})
        where = f"{self.out}/V-PROM" if self.format == "original" else self.out
        return f"wrote {where}: " + SUMMARIES[self.format].format(
            **c, out=self.out, plural="" if c.get("buckets") == 1 else "s",
            configurations=len(splits), parts=sum(len(p) for p in splits.values()))


@writes("out", lambda a: (f"export-{a['fmt']}",),
        inputs=lambda a: (a["dataset"], a["vg_dir"], a["crop_store"]))
def export(dataset: str | Path, fmt: str, out: str | Path, vg_dir: str | Path | None = None,
           copy: bool = False, split: str = "neutral", size: int = DEFAULT_SIZE,
           style: str = "pgm", verify_text: str | None = None, part: str = "test",
           layout: str = "grid", prompt: str | Path | None = None, limit: int | None = None,
           seed: int = 0, crop_store: str | Path | None = None) -> ExportSummary:
    """Export DATASET.h5 as `fmt` to `out` with `vprom export`'s options (`crop_store`:
    --crops); `verify_text` is the `vprom verify` report the hf card quotes."""
    dataset, out = Path(dataset), Path(out)
    if fmt not in FORMATS:
        raise VpromError(f"unknown export format {fmt!r}; choose one of {', '.join(FORMATS)}")
    if crop_store is not None and fmt != "vlm":
        raise VpromError(f"--crops {crop_store}: only --format vlm reads a crop store; pass "
                         f"--vg DIR for the {fmt!r} export")
    pictures = fmt != "jsonl" and (fmt, layout) != ("vlm", "text")
    if pictures and vg_dir is None and crop_store is None:
        raise VpromError(f"{dataset}: the {fmt!r} export holds the crops' pixels; pass --vg "
                         "DIR (the Visual Genome folder holding VG_100K/)"
                         + (" or --crops STORE (`vprom crops`)" if fmt == "vlm" else ""))
    crops, matrices = read_crop_table(dataset), read_matrix_table(dataset)
    config = {"format": fmt}
    if fmt == "vlm":  # before any work
        vlm = vlm_options(matrices, split, part, layout, prompt, limit, seed)
        config.update(split=split, part=part, layout=layout, limit=limit, seed=seed,
                      prompt=vlm.template)
    elif fmt in ("original", "npz"):
        config.update({"copy": copy} if fmt == "original" else
                      {"split": split, "size": size, "style": style})
    rows = crop_rows(crops.crop_id, matrices.panels)
    if (rows < 0).any():
        bad = int(matrices.id[np.flatnonzero((rows < 0).any(axis=1))[0]])
        raise VpromError(f"{dataset}: matrix {bad} shows a crop that is not in crops; run "
                         "`vprom verify` and regenerate the data set")
    source = vg_dir and Path(vg_dir)
    if pictures and crop_store is not None:
        source = open_store(Path(crop_store), dataset, crops, rows, layout)
    inputs = [dataset, *([crop_store] if isinstance(source, tuple) else [])]
    manifest = make_manifest(f"export-{fmt}", config, inputs=input_hashes(inputs),
                             counts={"matrices": len(matrices)})
    if fmt == "jsonl":
        with atomic_path(out) as tmp, open(tmp, "w", encoding="utf-8") as f:
            f.writelines(tqdm(matrix_lines(crops, matrices, rows), total=len(matrices),
                              desc="export jsonl", unit="matrix", disable=None))
        write_manifest(out, manifest)
        return ExportSummary(out, fmt, {"matrices": len(matrices)})
    if fmt == "hf":
        settings = {"format": "hf", "dataset": manifest["inputs"][dataset.name]}
        about = {"manifest": read_manifest(dataset), "verify": verify_text}
        counts = write_hf(crops, matrices, rows, out, source, settings, about)
    elif fmt == "original":
        counts = write_release(crops, matrices, rows, out, source, copy, manifest)
    elif fmt == "npz":
        counts = write_npz(crops, matrices, rows, out, source, split, size, manifest, style)
    else:
        try:
            counts = write_vlm(crops, matrices, rows, out, source, vlm, manifest)
        finally:
            if isinstance(source, tuple):
                source[0].close()
    return ExportSummary(out, fmt, counts)


def matrix_lines(crops: CropTable, m: MatrixTable, rows: np.ndarray):
    # per crop, the JSON of its panel fields after "element", built once for all matrices
    fragments = [json.dumps({"image_id": int(crops.image_id[i]), "box": box(crops, i),
                             "source_id": int(crops.source_id[i]), "phrase": crops.phrase[i],
                             "labels": labels(crops, i)}, ensure_ascii=False)[1:-1]
                 for i in range(len(crops))]
    columns, splits = m.part_columns(), m.ordered_splits()
    for i in range(len(m)):
        answer = int(m.answer[i])
        head = {"id": int(m.id[i]), "relation": m.relation[i], "element_type": m.element_type[i],
                "super_attribute": m.super_attribute[i], "answer": answer,
                "answer_label": FIRST_CANDIDATE_LABEL + answer,
                "splits": {s: columns[s][i] for s in splits}}
        panels = ", ".join(
            f'{{"crop_id": {int(m.panels[i, k])}, "element": '
            f'{json.dumps(m.elements[i, k], ensure_ascii=False)}, {fragments[rows[i, k]]}}}'
            for k in range(N_PANELS))
        yield json.dumps(head, ensure_ascii=False)[:-1] + f', "panels": [{panels}]}}\n'
