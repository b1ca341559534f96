"""`vprom export`: the data set as JSON lines, or in the original V-PROM release's layout.

jsonl — one JSON object per matrix, in file order, carrying its full provenance:

    {"id", "relation", "element_type", "super_attribute", "answer" (0..7),
     "answer_label" (9..16), "splits": {split: part},
     "panels": 16 × {"crop_id", "element", "image_id", "box": [x, y, w, h], "source_id",
                     "phrase" ("" except for counts), "labels": [...]}}

Lines are streamed to a temporary file (each crop's JSON fragment is built once, as crops
are shared between matrices) and renamed into place when complete; `OUT.manifest.json`
records the source's sha256. `matrix_of(record)` turns a line back into a `Matrix`.

original — one folder per problem, as the original release's models expect:

    OUT/problems/<id>/1.jpg … 16.jpg   8 context panels row-major, then the 8 candidates
    OUT/problems/<id>/label.txt        the answer as a panel number, 9..16
    OUT/problems/<id>/meta.json        relation, element type, super-attribute, elements,
                                       answer label and splits of the problem
    OUT/splits/<split>/{train,val,test}.txt   problem folder names, one per line
    OUT/crops/<crop_id>.jpg            with --symlink: each distinct crop once, and the
                                       problem files are relative symlinks to these
    OUT/README.txt, OUT/manifest.json

Each distinct crop is cut from its VG image once (images are decoded once each, on a
thread pool), saved as JPEG (quality 95) and then copied or linked into every problem that
shows it. The folder is built under a temporary name and renamed when complete.
"""

from __future__ import annotations

import json
import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from PIL import Image
from tqdm import tqdm

from vprom.errors import VpromError
from vprom.images import ImageIndex, clip_box
from vprom.io import (
    atomic_dir,
    atomic_path,
    make_manifest,
    manifest_path,
    sha256_file,
    write_json,
)
from vprom.records import LABEL_SEPARATOR, N_CONTEXT, N_PANELS, Matrix
from vprom.tables import (
    CropTable,
    MatrixTable,
    crop_rows,
    read_crop_table,
    read_matrix_table,
)

FORMATS = ("jsonl", "original")
JPEG_QUALITY = 95
FIRST_CANDIDATE_LABEL = N_CONTEXT + 1  # candidates are panels 9..16
MATRIX_KEYS = ("id", "relation", "element_type", "super_attribute", "answer", "splits")


def export(dataset: str | Path, fmt: str, out: str | Path, vg_dir: str | Path | None = None,
           symlink: bool = False) -> Path:
    """Export DATASET.h5 as `fmt` ('jsonl' or 'original') to `out`; returns `out`."""
    dataset, out = Path(dataset), Path(out)
    if fmt not in FORMATS:
        raise VpromError(f"unknown export format {fmt!r}; choose one of {', '.join(FORMATS)}")
    if fmt == "original" and vg_dir is None:
        raise VpromError(f"{dataset}: the 'original' layout holds the crops as JPEGs; pass "
                         "--vg DIR (the Visual Genome folder holding VG_100K/)")
    crops, matrices = read_crop_table(dataset), read_matrix_table(dataset)
    rows = crop_rows(crops.crop_id, matrices.panels)
    if (rows < 0).any():
        bad = int(matrices.id[np.flatnonzero((rows < 0).any(axis=1))[0]])
        raise VpromError(f"{dataset}: matrix {bad} shows a crop that is not in crops; run "
                         "`vprom verify` and regenerate the data set")
    manifest = make_manifest(f"export-{fmt}", {"format": fmt, "symlink": symlink},
                             inputs={dataset.name: sha256_file(dataset)},
                             counts={"matrices": len(matrices)})
    if fmt == "jsonl":
        write_jsonl(crops, matrices, rows, out)
        write_json(manifest_path(out), manifest)
    else:
        write_original(crops, matrices, rows, out, Path(vg_dir), symlink, manifest)
    return out


# ---------------------------------------------------------------- jsonl
def crop_fragments(crops: CropTable) -> list[str]:
    """Per crop, the JSON of its panel fields after "element" (the same in every matrix)."""
    out = []
    for i in range(len(crops)):
        tail = {"image_id": int(crops.image_id[i]),
                "box": [int(crops.x[i]), int(crops.y[i]), int(crops.w[i]), int(crops.h[i])],
                "source_id": int(crops.source_id[i]), "phrase": crops.phrase[i],
                "labels": [l for l in crops.labels[i].split(LABEL_SEPARATOR) if l]}
        out.append(json.dumps(tail, ensure_ascii=False)[1:-1])
    return out


def matrix_lines(crops: CropTable, m: MatrixTable, rows: np.ndarray):
    """Yield one JSON line per matrix (without building them all in memory)."""
    fragments = crop_fragments(crops)
    columns = m.part_columns()
    splits = m.ordered_splits()
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


def write_jsonl(crops: CropTable, m: MatrixTable, rows: np.ndarray, out: Path) -> None:
    with atomic_path(out) as tmp, open(tmp, "w", encoding="utf-8") as f:
        for line in tqdm(matrix_lines(crops, m, rows), total=len(m), desc="export jsonl",
                         unit="matrix", disable=None):
            f.write(line)


def matrix_of(record: dict) -> Matrix:
    """The `Matrix` of one exported jsonl record."""
    part = {k: record[k] for k in MATRIX_KEYS}
    part["panels"] = [p["crop_id"] for p in record["panels"]]
    part["elements"] = [p["element"] for p in record["panels"]]
    return Matrix.from_record(part)


# ---------------------------------------------------------------- original layout
def problem_names(ids: np.ndarray) -> list[str]:
    """Zero-padded problem folder names that sort in id order."""
    width = max(6, len(str(int(ids.max())))) if len(ids) else 6
    return [f"{int(i):0{width}d}" for i in ids]


def write_crop_files(crops: CropTable, used: np.ndarray, folder: Path, vg_dir: Path) -> None:
    """crops/<crop_id>.jpg for every crop row in `used`; each VG image is decoded once."""
    index = ImageIndex(vg_dir)
    folder.mkdir(parents=True)
    by_image: dict[int, list[int]] = {}
    for r in used.tolist():
        by_image.setdefault(int(crops.image_id[r]), []).append(r)

    def cut(item):
        image_id, members = item
        path = index.path(image_id)
        try:
            with Image.open(path) as im:
                im = im.convert("RGB")
        except (OSError, ValueError) as e:
            raise VpromError(f"{path}: cannot read image ({e}); re-download it") from None
        for r in members:
            box = clip_box((crops.x[r], crops.y[r], crops.w[r], crops.h[r]), im.width, im.height)
            if box is None:
                raise VpromError(f"{path}: crop {int(crops.crop_id[r])} lies outside the "
                                 "image; the data set does not match these images")
            im.crop(box).save(folder / f"{int(crops.crop_id[r])}.jpg", quality=JPEG_QUALITY)
        return len(members)

    workers = min(4, os.cpu_count() or 1)  # Pillow releases the GIL while decoding/encoding
    with ThreadPoolExecutor(workers) as pool, tqdm(total=len(used), desc="crops", unit="crop",
                                                   disable=None) as bar:
        for n in pool.map(cut, sorted(by_image.items())):
            bar.update(n)


def problem_meta(m: MatrixTable, i: int, columns: dict[str, np.ndarray]) -> dict:
    return {"id": int(m.id[i]), "relation": m.relation[i], "element_type": m.element_type[i],
            "super_attribute": m.super_attribute[i], "elements": list(m.elements[i]),
            "crop_ids": [int(p) for p in m.panels[i]],
            "answer_label": FIRST_CANDIDATE_LABEL + int(m.answer[i]),
            "splits": {s: columns[s][i] for s in sorted(columns)}}


def write_original(crops: CropTable, m: MatrixTable, rows: np.ndarray, out: Path,
                   vg_dir: Path, symlink: bool, manifest: dict) -> None:
    names = problem_names(m.id)
    columns = m.part_columns()
    with atomic_dir(out) as tmp:
        crop_dir = tmp / ("crops" if symlink else ".crops")
        write_crop_files(crops, np.unique(rows), crop_dir, vg_dir)
        for i in tqdm(range(len(m)), desc="problems", unit="problem", disable=None):
            folder = tmp / "problems" / names[i]
            folder.mkdir(parents=True)
            for k in range(N_PANELS):
                source = crop_dir / f"{int(m.panels[i, k])}.jpg"
                target = folder / f"{k + 1}.jpg"
                if symlink:
                    target.symlink_to(os.path.relpath(source, folder))
                else:
                    shutil.copyfile(source, target)
            (folder / "label.txt").write_text(f"{FIRST_CANDIDATE_LABEL + int(m.answer[i])}\n")
            (folder / "meta.json").write_text(json.dumps(problem_meta(m, i, columns),
                                                         ensure_ascii=False) + "\n")
        if not symlink:
            shutil.rmtree(crop_dir)
        write_split_lists(tmp / "splits", m, names)
        (tmp / "README.txt").write_text(README.format(n=len(m)), encoding="utf-8")
        (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")


def write_split_lists(folder: Path, m: MatrixTable, names: list[str]) -> None:
    name_of = dict(zip(m.id.tolist(), names))
    for split, parts in sorted(m.splits.items()):
        (folder / split).mkdir(parents=True)
        for part in ("train", "val", "test"):
            ids = parts.get(part, np.zeros(0, np.int64))
            text = "".join(f"{name_of[int(i)]}\n" for i in sorted(ids.tolist()) if int(i) in
                           name_of)
            (folder / split / f"{part}.txt").write_text(text)


README = """V-PROM problems exported by `vprom export --format original` ({n:,} problems).

problems/<id>/1.jpg ... 16.jpg  panels 1-8: the context, row-major (the 9th cell is missing);
                                panels 9-16: the 8 candidate answers
problems/<id>/label.txt         the correct panel, 9..16
problems/<id>/meta.json         relation, element type, super-attribute, elements, splits
splits/<split>/<part>.txt       the problem folders of each part (train, val, test)
"""
