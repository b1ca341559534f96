"""`vprom export --format npz`: one compressed `.npz` per problem of one split, for loaders that
glob `*<part>*.npz`. Styles `pgm` and `raven`: `pgm.py`; `color`: `vprom_<split>_<part>_<id>.npz`
with RGB `image` (16, S, S, 3) and a one-hot `meta_target` (relation, element type). Each crop
is stretched to S x S once into a memory map (flat memory); a thread pool writes the problems.
"""

from __future__ import annotations

import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from PIL import Image
from tqdm import tqdm

import vprom.generation.export.pgm as pgm  # noqa: PLR0402 (not via the package: a cycle)
from vprom.generation.export.crops import (
    WORKERS,
    check_split,
    cut_crops,
    template_text,
)
from vprom.generation.export.npy_pickle import npy_bytes
from vprom.errors import VpromError
from vprom.files import atomic_dir, free_space_for, preallocate, write_json
from vprom.domain import N_PANELS, ElementType, Relation
from vprom.tables import SPLIT_PARTS, CropTable, MatrixTable

DEFAULT_SIZE = 160
PREFIX = "vprom"
META_TARGET_NAMES = tuple(r.value for r in Relation) + tuple(e.value for e in ElementType)
RESAMPLE = Image.Resampling.BILINEAR
ZLIB_LEVEL = 1


def npz_name(split: str, part: str, matrix_id: int) -> str:
    return f"{PREFIX}_{split}_{part}_{matrix_id}.npz"


def panel_tile(crop: Image.Image, size: int, mode: str = "RGB") -> np.ndarray:
    """The crop stretched to size×size, uint8 in `mode` ("RGB" or "L")."""
    return np.asarray(crop.convert(mode).resize((size, size), RESAMPLE), dtype=np.uint8)


def meta_target(relation: str, element_type: str) -> np.ndarray:
    one_hot = np.zeros(len(META_TARGET_NAMES), dtype=np.int64)
    one_hot[META_TARGET_NAMES.index(relation)] = 1
    one_hot[META_TARGET_NAMES.index(element_type)] = 1
    return one_hot


def save_npz(path: Path, **arrays: np.ndarray) -> None:
    """`np.savez_compressed`'s format (a zip of .npy members) at zlib level 1: half the CPU
    time of its default level for about 7% more bytes, on panels of photographs."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=ZLIB_LEVEL) as z:
        for key, value in arrays.items():
            with z.open(f"{key}.npy", "w", force_zip64=True) as f:
                np.lib.format.write_array(f, np.asanyarray(value), allow_pickle=False)


def write_npz(crops: CropTable, m: MatrixTable, rows: np.ndarray, out: Path, vg_dir: Path,
              split: str, size: int, manifest: dict, style: str = "pgm") -> dict:
    """Write split `split`'s problems to folder `out` in `style`; returns the counts."""
    if style not in pgm.STYLES:
        raise VpromError(f"unknown npz style {style!r}; choose one of {', '.join(pgm.STYLES)}")
    check_split(m, split)
    if size < 8:
        raise VpromError(f"--size {size}: a panel needs at least 8×8 pixels")
    columns = m.part_columns()[split]
    chosen = [i for i in range(len(m)) if columns[i] in SPLIT_PARTS]
    used = np.unique(rows[chosen]) if chosen else np.zeros(0, np.int64)
    tile_of = {int(r): k for k, r in enumerate(used.tolist())}
    gray = style != "color"
    shape = (max(len(used), 1), size, size, *(() if gray else (3,)))
    free_space_for(out, 3 * int(np.prod(shape[:3])) + len(chosen) * (
        N_PANELS * size * size * 3 + 4096), " for the panel tiles and the npz files")
    names = np.array(META_TARGET_NAMES)
    with atomic_dir(out) as tmp:
        tiles_path = tmp / ".tiles.u8"
        tiles = np.lib.format.open_memmap(tiles_path, mode="w+", dtype=np.uint8, shape=shape)
        preallocate(tiles_path)  # a full disk fails here, not as SIGBUS in the mmap

        def store(r: int, crop: Image.Image) -> None:
            tiles[tile_of[r]] = panel_tile(crop, size, "L" if gray else "RGB")

        n_crops = cut_crops(crops, used, vg_dir, store, desc="tiles") if len(used) else 0
        if gray:
            (tmp / pgm.regime(split)).mkdir()
        if style == "raven":
            (tmp / "embedding.npy").write_bytes(npy_bytes(pgm.raven_embedding()))

        def write(i: int) -> None:
            mid, part = int(m.id[i]), columns[i]
            rule = (m.relation[i], m.element_type[i], m.super_attribute[i])
            keys = (pgm.pgm_arrays(*rule) if style == "pgm" else pgm.raven_arrays(*rule)
                    if style == "raven" else
                    {"meta_target": meta_target(*rule[:2]), "meta_target_names": names})
            save_npz(
                tmp / (pgm.problem_name(style, split, part, mid) if gray
                       else npz_name(split, part, mid)),
                image=tiles[[tile_of[int(r)] for r in rows[i]]], target=np.int64(m.answer[i]),
                **keys, relation=np.str_(m.relation[i]), element_type=np.str_(m.element_type[i]),
                super_attribute=np.str_(m.super_attribute[i]), id=np.int64(mid),
                panels=m.panels[i].astype(np.int64), elements=m.elements[i].astype(str))

        with ThreadPoolExecutor(WORKERS) as pool:
            for _ in tqdm(pool.map(write, chosen), total=len(chosen), desc="npz",
                          unit="problem", disable=None):
                pass
        del tiles
        tiles_path.unlink()
        per_part = {p: int(sum(columns[i] == p for i in chosen)) for p in SPLIT_PARTS}
        counts = {"split": split, "size": size, "style": style, "crops": n_crops,
                  "problems": len(chosen), **per_part}
        write_json(tmp / "manifest.json", {**manifest, "counts": {**manifest["counts"],
                                                                    **counts}})
        (tmp / "README.txt").write_text(template_text(f"npz_{style}.txt").format(
            style=style, split=split, size=size, regime=pgm.regime(split),
            rgb="" if gray else ", 3", **per_part), encoding="utf-8")
    return counts

