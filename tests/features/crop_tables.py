"""Small data sets of crops only: what extraction reads. Imports only vprom and libraries, so
the benchmarks load this file too (bench/suite_builders.py)."""

from __future__ import annotations

from pathlib import Path

import h5py

from vprom.manifest import make_manifest
from vprom.tables import CropTable, set_manifest


def crop_table(rows: list[tuple[int, int, int, int, int, int]]) -> CropTable:
    """rows: (crop_id, image_id, x, y, w, h)."""
    n = len(rows)
    cols = list(zip(*rows))
    return CropTable(crop_id=cols[0], image_id=cols[1], x=cols[2], y=cols[3], w=cols[4],
                     h=cols[5], element_type=["object"] * n, element=["thing"] * n,
                     super_attribute=[""] * n, source_id=list(range(n)), phrase=[""] * n,
                     labels=["thing"] * n)


def write_dataset(path: Path, crops: CropTable) -> Path:
    with h5py.File(path, "w") as h5:
        crops.write(h5.create_group("crops"))
        set_manifest(h5, make_manifest("dataset", config={}, counts={"crops": len(crops)}))
    return path
