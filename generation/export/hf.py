"""`vprom export --format hf`: the data set as a Hugging Face data set (Parquet and a dataset
card), for `datasets.load_dataset(OUT)` and for the Hub.

`OUT/data/crops/crops-<k>.parquet` holds one row per distinct crop with its JPEG, and
`OUT/data/<split>/<part>-<k>.parquet` one row per problem, referring to its 16 crops by id:
a crop shows in several problems and each split holds every problem again, so inlining the
JPEGs would multiply the bytes. Each file's schema metadata carries the `datasets` feature
types (`huggingface`), so `load_dataset` decodes `image` as a PIL image. Shards close at
`SHARD_BYTES`. The folder fills as `OUT.partial/` (`generation.export.resumable`): a rerun
keeps the finished shards (a crops shard's row count is read from its Parquet footer) and
renames the folder when all are there. pyarrow is optional (`pip install 'vprom[hf]'`).
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
from PIL import Image

from vprom.errors import VpromError
from vprom.files import write_json
from vprom.generation.export.crops import cut_crops
from vprom.generation.export.hf_card import card
from vprom.generation.export.resumable import resumable_dir, write_once
from vprom.domain import LABEL_SEPARATOR
from vprom.tables import SPLIT_PARTS, CropTable, MatrixTable

SHARD_BYTES = 500_000_000
JPEG_QUALITY = 95
CROP_BATCH = 2000  # crops cut (and held as JPEG bytes) at a time
PROBLEM_ROW_BYTES = 600  # a problem row's Parquet size, roughly: sizes its shards
STRING = {"dtype": "string", "_type": "Value"}
INT = {"dtype": "int64", "_type": "Value"}
CROP_FEATURES = {"crop_id": INT, "image": {"_type": "Image"}, "image_id": INT,
                 "box": [INT], "element_type": STRING, "element": STRING,
                 "super_attribute": STRING, "phrase": STRING, "source_id": INT,
                 "labels": [STRING]}
PROBLEM_FEATURES = {"id": INT, "relation": STRING, "element_type": STRING,
                    "super_attribute": STRING, "answer": INT, "answer_element": STRING,
                    "panels": [INT], "elements": [STRING], "image_ids": [INT],
                    "boxes": [[INT]]}


def pyarrow_modules():
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise VpromError("--format hf and vlm write Parquet with pyarrow, which is not "
                         "installed: pip install 'vprom[hf]' (or pip install pyarrow)") from None
    return pa, pq


def arrow_type(feature, pa):
    """The Arrow type `datasets` stores a feature as."""
    if isinstance(feature, list):
        return pa.list_(arrow_type(feature[0], pa))
    if feature["_type"] == "Image":
        return pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    return pa.int64() if feature["dtype"] == "int64" else pa.string()


def write_table(path: Path, columns: dict, features: dict) -> None:
    """One Parquet file whose schema metadata carries the `datasets` features."""
    pa, pq = pyarrow_modules()
    schema = pa.schema([(k, arrow_type(f, pa)) for k, f in features.items()])
    table = pa.table(columns, schema=schema)
    meta = {b"huggingface": json.dumps({"info": {"features": features}}).encode()}
    write_once(path, lambda tmp: pq.write_table(
        table.replace_schema_metadata(meta), tmp, compression="zstd"))


def jpeg(crop: Image.Image) -> bytes:
    buffer = io.BytesIO()
    crop.save(buffer, format="JPEG", quality=JPEG_QUALITY)
    return buffer.getvalue()


def box(crops: CropTable, r: int) -> list[int]:
    return [int(crops.x[r]), int(crops.y[r]), int(crops.w[r]), int(crops.h[r])]


def crop_columns(crops: CropTable, rows: list[int], data: dict[int, bytes]) -> dict:
    return {
        "crop_id": [int(crops.crop_id[r]) for r in rows],
        "image": [{"bytes": data[r], "path": f"{int(crops.crop_id[r])}.jpg"} for r in rows],
        "image_id": [int(crops.image_id[r]) for r in rows],
        "box": [box(crops, r) for r in rows],
        "element_type": [str(crops.element_type[r]) for r in rows],
        "element": [str(crops.element[r]) for r in rows],
        "super_attribute": [str(crops.super_attribute[r]) for r in rows],
        "phrase": [str(crops.phrase[r]) for r in rows],
        "source_id": [int(crops.source_id[r]) for r in rows],
        "labels": [[lab for lab in str(crops.labels[r]).split(LABEL_SEPARATOR) if lab]
                   for r in rows],
    }


def write_crops(crops: CropTable, used: np.ndarray, vg_dir: Path, folder: Path) -> int:
    """The crops table's shards; returns how many were written now (not resumed)."""
    _, pq = pyarrow_modules()
    folder.mkdir(parents=True, exist_ok=True)
    start, shard, written = 0, 0, 0
    while start < len(used):
        path = folder / f"crops-{shard:05d}.parquet"
        if path.exists():  # resumed: this shard ended where its footer says
            start += pq.read_metadata(path).num_rows
            shard += 1
            continue
        rows, data, size = [], {}, 0
        while start < len(used) and size < SHARD_BYTES:
            batch = used[start:start + CROP_BATCH]
            got: dict[int, bytes] = {}
            cut_crops(crops, batch, vg_dir, lambda r, im: got.__setitem__(r, jpeg(im)),
                      desc=f"crops shard {shard}")
            for r in batch.tolist():  # stop inside the batch once the shard is full
                if size >= SHARD_BYTES:
                    break
                rows.append(r)
                data[r] = got[r]
                size += len(got[r])
                start += 1
        write_table(path, crop_columns(crops, rows, data), CROP_FEATURES)
        shard, written = shard + 1, written + 1
    return written


def problem_columns(crops: CropTable, m: MatrixTable, rows: np.ndarray, chosen) -> dict:
    return {
        "id": [int(m.id[i]) for i in chosen],
        "relation": [str(m.relation[i]) for i in chosen],
        "element_type": [str(m.element_type[i]) for i in chosen],
        "super_attribute": [str(m.super_attribute[i]) for i in chosen],
        "answer": [int(m.answer[i]) for i in chosen],
        "answer_element": [str(m.elements[i, 8 + int(m.answer[i])]) for i in chosen],
        "panels": [m.panels[i].astype(np.int64).tolist() for i in chosen],
        "elements": [[str(e) for e in m.elements[i]] for i in chosen],
        "image_ids": [crops.image_id[rows[i]].astype(np.int64).tolist() for i in chosen],
        "boxes": [[box(crops, r) for r in rows[i]] for i in chosen],
    }


def write_problems(crops: CropTable, m: MatrixTable, rows: np.ndarray, data: Path) -> dict:
    """Every split's parts; returns {split: {part: problems}}."""
    per_shard = SHARD_BYTES // PROBLEM_ROW_BYTES
    columns, counts = m.part_columns(), {}
    for split in m.ordered_splits():
        folder = data / split
        folder.mkdir(exist_ok=True)
        counts[split] = {}
        for part in SPLIT_PARTS:
            chosen = [i for i in range(len(m)) if columns[split][i] == part]
            counts[split][part] = len(chosen)
            for k, first in enumerate(range(0, max(len(chosen), 1), per_shard)):
                block = chosen[first:first + per_shard]
                write_table(folder / f"{part}-{k:05d}.parquet",
                            problem_columns(crops, m, rows, block), PROBLEM_FEATURES)
    return counts


def write_hf(crops: CropTable, m: MatrixTable, rows: np.ndarray, out: Path, vg_dir: Path,
             settings: dict, about: dict) -> dict:
    """Write the data set to folder `out`; `about` feeds the card (manifest, verify text)."""
    pyarrow_modules()  # before any work
    used = np.unique(rows)
    with resumable_dir(out, settings) as tmp:
        data = tmp / "data"
        new_shards = write_crops(crops, used, vg_dir, data / "crops")
        counts = write_problems(crops, m, rows, data)
        summary = {"problems": len(m), "crops": len(used), "splits": counts,
                   "crop_shards": len(list((data / "crops").glob("*.parquet"))),
                   "new_crop_shards": new_shards}
        (tmp / "README.md").write_text(card(summary, about), encoding="utf-8")
        write_json(tmp / "manifest.json", {**about.get("manifest", {}), "counts": summary})
    return summary
