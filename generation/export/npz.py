"""`vprom export --format npz`: one compressed `.npz` per problem of one split, for loaders that
glob `*<part>*.npz`: `image` (16, S, S) uint8, `target` and meta vectors. Grayscale styles as
DeepMind PGM's loaders (SRAN, WReN-PyTorch, TFDS) and RAVEN's read them, in `<regime>/` (the
split with '_' -> '.': PGM's tooling splits names on '_'): `pgm` sets PGM's 12 slots (0-6 what a
rule acts on, 7-11 its relation), `raven` RAVEN's rule (`or` is none of RAVEN's) and attribute
(a panel is RAVEN's `center_single`); `color`: RGB panels and a one-hot `meta_target`.
"""

from __future__ import annotations

import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from PIL import Image
from tqdm import tqdm

from vprom.generation.export.crops import (
    WORKERS,
    check_split,
    cut_crops,
    npy_bytes,
    template_text,
)
from vprom.errors import VpromError
from vprom.files import atomic_dir, free_space_for, preallocate, write_json
from vprom.domain import N_PANELS, ElementType, Relation
from vprom.tables import SPLIT_PARTS, CropTable, MatrixTable

#: style -> a problem's file name (the `regime` of `split`, its `part`, the matrix `id`)
FILE_NAMES = {"pgm": "{regime}/PGM_{regime}_{part}_{id}.npz",
              "raven": "{regime}/RAVEN_{id}_{part}.npz", "color": "vprom_{split}_{part}_{id}.npz"}
STYLES = tuple(FILE_NAMES)
N_SLOTS = 12
MAX_RULES = 4  # PGM's relation_structure_encoded rows
UNUSED = "(unused)"
#: slot -> what it means in a V-PROM export (PGM's slot meanings in the docstring)
SLOT_NAMES = (tuple(e.value for e in ElementType) + (UNUSED,) * 3
              + (Relation.PROGRESSION.value, UNUSED, Relation.OR.value, Relation.AND.value,
                 Relation.UNION.value))

#: RAVEN's META_TARGET_FORMAT and META_STRUCTURE_FORMAT (src/dataset/const.py)
RAVEN_TARGET_NAMES = ("Constant", "Progression", "Arithmetic", "Distribute_Three", "Number",
                      "Position", "Type", "Size", "Color")
RAVEN_STRUCTURE_NAMES = (
    "Singleton", "Left_Right", "Up_Down", "Out_In", "Left", "Right", "Up", "Down", "Out", "In",
    "Grid", "Center_Single", "Distribute_Four", "Distribute_Nine", "Left_Center_Single",
    "Right_Center_Single", "Up_Center_Single", "Down_Center_Single", "Out_Center_Single",
    "In_Center_Single", "In_Distribute_Four")
RAVEN_RULE = {Relation.AND.value: "Constant", Relation.UNION.value: "Distribute_Three",
              Relation.PROGRESSION.value: "Progression"}
#: an element type's RAVEN attribute, else its super-attribute's
RAVEN_ATTRIBUTE = {ElementType.COUNT.value: "Number", ElementType.OBJECT.value: "Type",
                   "shape": "Type", "color": "Color", "clothing color": "Color"}
#: RAVEN's serialize_aot of center_single: the tree Scene/Singleton/Grid/Center_Single
RAVEN_STRUCTURE = ("Scene", "Singleton", "Grid", "Center_Single", "/", "/", "/", "/")
RAVEN_MAX_RULES = 8  # meta_matrix rows
EMBEDDING_DIM = 300  # RAVEN's loader: torch.zeros((6, 300))
DEFAULT_SIZE = 160
META_TARGET_NAMES = tuple(r.value for r in Relation) + tuple(e.value for e in ElementType)
RESAMPLE = Image.Resampling.BILINEAR
ZLIB_LEVEL = 1


def regime(split: str) -> str:
    return split.replace("_", ".")


def raven_embedding() -> dict[str, list[float]]:
    """embedding.npy's content: each structure word -> its one-hot code (plain Python)."""
    words = ("Scene",) + RAVEN_STRUCTURE_NAMES
    return {w: [float(j == k) for j in range(EMBEDDING_DIM)] for k, w in enumerate(words)}


def pgm_arrays(relation: str, element_type: str, super_attribute: str) -> dict[str, np.ndarray]:
    """PGM's keys of one problem (besides image and target)."""
    encoded = np.zeros((MAX_RULES, N_SLOTS), dtype=np.int64)  # one rule: rows 1-3 stay 0
    encoded[0, [SLOT_NAMES.index(element_type), SLOT_NAMES.index(relation)]] = 1
    return {"meta_target": encoded.max(axis=0), "relation_structure_encoded": encoded,
            "relation_structure": np.array([[element_type, super_attribute, relation]],
                                           dtype=np.bytes_),
            "meta_target_names": np.array(SLOT_NAMES)}


def raven_arrays(relation: str, element_type: str, super_attribute: str) -> dict[str, np.ndarray]:
    """RAVEN's keys of one problem (besides image and target), uint8 like RAVEN's."""
    matrix = np.zeros((RAVEN_MAX_RULES, len(RAVEN_TARGET_NAMES)), dtype=np.uint8)
    for word in (RAVEN_RULE.get(relation),
                 RAVEN_ATTRIBUTE.get(element_type, RAVEN_ATTRIBUTE.get(super_attribute))):
        if word:
            matrix[0, RAVEN_TARGET_NAMES.index(word)] = 1
    meta_structure = np.isin(RAVEN_STRUCTURE_NAMES, RAVEN_STRUCTURE).astype(np.uint8)
    return {"meta_matrix": matrix, "meta_target": np.bitwise_or.reduce(matrix),
            "structure": np.array(RAVEN_STRUCTURE), "meta_structure": meta_structure,
            "meta_target_names": np.array(RAVEN_TARGET_NAMES),
            "meta_structure_names": np.array(RAVEN_STRUCTURE_NAMES)}


def panel_tile(crop: Image.Image, size: int, mode: str = "RGB") -> np.ndarray:
    """The crop stretched to size×size, uint8 in `mode` ("RGB" or "L")."""
    return np.asarray(crop.convert(mode).resize((size, size), RESAMPLE), dtype=np.uint8)


def save_npz(path: Path, **arrays: np.ndarray) -> None:
    """`np.savez_compressed`'s format (a zip of .npy members) at zlib level 1: half the CPU
    time of its default level for about 7% more bytes, on panels of photographs."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=ZLIB_LEVEL) as z:
        for key, value in arrays.items():
            with z.open(f"{key}.npy", "w", force_zip64=True) as f:
                np.lib.format.write_array(f, np.asanyarray(value), allow_pickle=False)


def write_npz(crops: CropTable, m: MatrixTable, rows: np.ndarray, out: Path, vg_dir: Path,
              split: str, size: int, manifest: dict, style: str = "pgm") -> dict:
    if style not in STYLES:
        raise VpromError(f"unknown npz style {style!r}; choose one of {', '.join(STYLES)}")
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
            (tmp / regime(split)).mkdir()
        if style == "raven":
            (tmp / "embedding.npy").write_bytes(npy_bytes(raven_embedding()))

        def write(i: int) -> None:
            mid, part = int(m.id[i]), columns[i]
            rule = (m.relation[i], m.element_type[i], m.super_attribute[i])
            keys = (pgm_arrays(*rule) if style == "pgm" else raven_arrays(*rule)
                    if style == "raven" else
                    {"meta_target": np.isin(names, rule[:2]).astype(np.int64),
                     "meta_target_names": names})
            name = FILE_NAMES[style].format(regime=regime(split), split=split, part=part, id=mid)
            save_npz(tmp / name, image=tiles[[tile_of[int(r)] for r in rows[i]]],
                     target=np.int64(m.answer[i]), **keys, relation=np.str_(m.relation[i]),
                     element_type=np.str_(m.element_type[i]),
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
            style=style, split=split, size=size, regime=regime(split),
            rgb="" if gray else ", 3", **per_part), encoding="utf-8")
    return counts

