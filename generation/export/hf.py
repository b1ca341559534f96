"""`vprom export --format hf`: a Hugging Face data set (Parquet and a card) for
`datasets.load_dataset(OUT)`. `data/crops/` has a row per distinct crop with its JPEG,
`data/<split>/<part>-<k>.parquet` a row per problem naming its 16 crops by id (inlined JPEGs
would repeat). Schema metadata carries the `datasets` features (`image` decodes as PIL); a
rerun resumes the finished shards. The card (`README.md`, `templates/hf_card.md`) has YAML
front matter (licence, tags, a configuration per split and `crops`; `datasets` reads `configs:`
from 2.14.0), the rows, how panels join crops, how the data were built and what to cite.
"""

from __future__ import annotations

import json
from pathlib import Path
from string import Template

import numpy as np

from vprom.errors import VpromError
from vprom.files import write_json
from vprom.generation.export.crops import box, cut_crops, jpeg, labels, resumable_dir
from vprom.generation.export.crops import template_text, write_once
from vprom.domain import N_CONTEXT
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
MIN_DATASETS = (2, 14)


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


def crop_columns(crops: CropTable, rows: list[int], data: dict[int, bytes]) -> dict:
    plain = [k for k in CROP_FEATURES if k not in ("image", "box", "labels")]
    return {**{k: getattr(crops, k)[rows].tolist() for k in plain},
            "image": [{"bytes": data[r], "path": f"{int(crops.crop_id[r])}.jpg"} for r in rows],
            "box": [box(crops, r) for r in rows], "labels": [labels(crops, r) for r in rows]}


def write_crops(crops: CropTable, used: np.ndarray, vg_dir: Path, folder: Path) -> int:
    """The crops table's shards; how many were written now (not resumed)."""
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
            cut_crops(crops, batch, vg_dir,
                      lambda r, im: data.__setitem__(r, jpeg(im, JPEG_QUALITY)),
                      desc=f"crops shard {shard}")
            for r in batch.tolist():  # stop inside the batch once the shard is full
                if size >= SHARD_BYTES:
                    break
                rows.append(r)
                size += len(data[r])
                start += 1
        write_table(path, crop_columns(crops, rows, data), CROP_FEATURES)
        shard, written = shard + 1, written + 1
    return written


def problem_columns(crops: CropTable, m: MatrixTable, rows: np.ndarray, chosen) -> dict:
    chosen = np.asarray(chosen, dtype=np.int64)
    answer = m.answer[chosen].astype(np.int64)
    return {**{k: getattr(m, k)[chosen].tolist() for k in ("id", "relation", "element_type",
                                                           "super_attribute", "elements")},
            "answer": answer.tolist(),
            "answer_element": m.elements[chosen, N_CONTEXT + answer].tolist(),
            "panels": m.panels[chosen].astype(np.int64).tolist(),
            "image_ids": crops.image_id[rows[chosen]].astype(np.int64).tolist(),
            "boxes": [[box(crops, r) for r in rows[i]] for i in chosen]}


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


def configs(splits: list[str]) -> str:
    """The front matter's configurations of the splits (`neutral`, the first, the default)."""
    lines = ["configs:"]
    for k, split in enumerate(splits):
        lines.append(f"- config_name: {split}")
        if k == 0:
            lines.append("  default: true")
        lines.append("  data_files:")
        for part in SPLIT_PARTS:
            lines += [f"  - split: {part}", f"    path: data/{split}/{part}-*.parquet"]
    return "\n".join(lines)


def card(summary: dict, about: dict) -> str:
    splits = list(summary["splits"])
    table = "\n".join(f"| {s} | " + " | ".join(f"{summary['splits'][s][p]:,}"
                                               for p in SPLIT_PARTS) + " |" for s in splits)
    manifest = about.get("manifest", {})
    built = {k: manifest.get(k) for k in ("kind", "config", "seed", "inputs", "counts")
             if k in manifest}
    return Template(template_text("hf_card.md")).substitute(
        configs=configs(splits), version=str(manifest.get("vprom_version", "")),
        problems=f"{summary['problems']:,}", crops=f"{summary['crops']:,}", table=table,
        need="{}.{}".format(*MIN_DATASETS), min_datasets=str(MIN_DATASETS),
        build_manifest=json.dumps(built, indent=2, sort_keys=True),
        verify=about.get("verify") or "(not run for this export)")


def write_hf(crops: CropTable, m: MatrixTable, rows: np.ndarray, out: Path, vg_dir: Path,
             settings: dict, about: dict) -> dict:
    """Write folder `out`; `about` (manifest, verify text) feeds the card."""
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
