"""Reading a FEATS.h5 file written by `vprom extract`.

Layout (plain h5py can read it without vprom):

    crop_id            int64 (N,)      sorted ascending, one row per crop id of the dataset
    features           float16|float32 (N, D), average-pooled then L2-normalised
    missing_crop_id    int64 (M,)      crops whose image was missing/corrupt (rows are NaN)
    attrs              backbone, weights, weights_sha256, input_size, pooling, normalisation,
                       resize, dtype, feature_dim, torch/torchvision/vprom versions,
                       complete (bool), config_hash, manifest (JSON)

Only a complete file ever gets its final name (`vprom extract` assembles it from the chunk
files under `<out>.partial/` and renames it into place); `check_complete` also refuses a
file without the `complete` attribute or with missing rows, and the `.partial` folder.
`load_features` returns the whole table as float32 with an `index_of` that maps crop ids to
rows by binary search over the sorted `crop_id` column.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from vprom.errors import VpromError
from vprom.tables import open_h5

REQUIRED = ("crop_id", "features")


@dataclass
class Features:
    """The features of one FEATS.h5: row i of `features` belongs to `crop_id[i]`."""

    path: Path
    crop_id: np.ndarray  # int64 (N,), sorted
    features: np.ndarray  # float32 (N, D)
    attrs: dict
    missing_crop_id: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))

    def __len__(self) -> int:
        return len(self.crop_id)

    @property
    def dim(self) -> int:
        return int(self.features.shape[1])

    def index_of(self, crop_ids) -> np.ndarray:
        """Rows of `crop_ids` (any shape); VpromError naming the first id not in the file."""
        ids = np.asarray(crop_ids, dtype=np.int64)
        flat = ids.reshape(-1)
        rows = np.searchsorted(self.crop_id, flat)
        rows = np.minimum(rows, max(len(self.crop_id) - 1, 0))
        found = (self.crop_id[rows] == flat) if len(self.crop_id) else np.zeros(len(flat), bool)
        if not found.all():
            first = int(flat[np.argmin(found)])
            raise VpromError(f"{self.path}: no features for crop id {first} "
                             f"({int((~found).sum())} of {len(flat)} ids absent); was it "
                             "extracted from another DATASET.h5? Re-run `vprom extract` on "
                             "the dataset you train on")
        return rows.reshape(ids.shape)


def _attrs(h5) -> dict:
    out = {}
    for key, value in h5.attrs.items():
        if isinstance(value, np.generic):
            value = value.item()
        elif isinstance(value, np.ndarray):
            value = value.tolist()
        if key == "manifest" and isinstance(value, str):
            value = json.loads(value)
        out[key] = value
    return out


def _check_open(h5, path: Path) -> None:
    for name in REQUIRED:
        if name not in h5:
            raise VpromError(f"{path}: no '{name}' dataset; not a FEATS.h5 from `vprom extract`")
    if not bool(h5.attrs.get("complete", False)):
        raise VpromError(f"{path}: incomplete feature file (extraction was interrupted or is "
                         "still running); re-run `vprom extract` with the same options to "
                         "resume it")
    if "done" in h5 and not bool(np.all(h5["done"][()])):
        raise VpromError(f"{path}: {int((~h5['done'][()]).sum())} rows were never extracted; "
                         "re-run `vprom extract` to finish it")
    n = h5["crop_id"].shape[0]
    if h5["features"].shape[0] != n:
        raise VpromError(f"{path}: features has {h5['features'].shape[0]} rows but crop_id "
                         f"has {n}; the file is corrupt, extract it again")


def check_complete(path: str | Path) -> None:
    """Raise VpromError unless `path` is a finished FEATS.h5 (partial files are refused)."""
    path = Path(path)
    if path.name.endswith(".partial"):
        raise VpromError(f"{path}: this is a partial extraction; pass the final file, which "
                         "appears when `vprom extract` completes")
    with open_h5(path) as h5:
        _check_open(h5, path)


def load_features(path: str | Path) -> Features:
    """Load a finished FEATS.h5 into memory as float32 (235k × 2048 × 4 B ≈ 1.9 GB at full size)."""
    path = Path(path)
    check_complete(path)
    with open_h5(path) as h5:
        crop_id = h5["crop_id"][()].astype(np.int64)
        features = h5["features"][()].astype(np.float32)
        missing = (h5["missing_crop_id"][()].astype(np.int64) if "missing_crop_id" in h5
                   else np.zeros(0, np.int64))
        attrs = _attrs(h5)
    if len(crop_id) > 1 and not np.all(crop_id[1:] > crop_id[:-1]):
        raise VpromError(f"{path}: crop_id is not strictly increasing; the file was not "
                         "written by `vprom extract`, extract it again")
    return Features(path=path, crop_id=crop_id, features=features, attrs=attrs,
                    missing_crop_id=missing)
