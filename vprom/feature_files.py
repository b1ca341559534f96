"""Reading a FEATS.h5 file written by `vprom extract` (plain h5py reads it too).

It holds `crop_id` (int64, ascending), `features` (N, D) or `maps` (N, C, H, W, `--pool none`),
`missing_crop_id` (crops whose image was missing: NaN rows), attributes naming how it was made,
`complete` and the manifest. `load_features` loads a pooled file whole, `open_maps` reads maps
lazily. Reads refuse unfinished files, non-finite rows and features of another data set.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from vprom.errors import VpromError
from vprom.file_kinds import FEATS, MAPS, check_kind
from vprom.manifest import check_made_from, manifest_of
from vprom.tables import open_h5


class _Rows:
    """Rows keyed by the sorted `self.crop_id` of the file at `self.path`."""

    def __len__(self) -> int:
        return len(self.crop_id)

    def index_of(self, crop_ids) -> np.ndarray:
        return rows_of(self.crop_id, crop_ids, self.path)


class OpenFile(_Rows):
    """A reader of one open file (`self._h5`)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._h5.close()


@dataclass
class Features(_Rows):
    path: Path
    crop_id: np.ndarray  # int64 (N,), sorted
    features: np.ndarray  # float32 (N, D)
    attrs: dict
    missing_crop_id: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))


def rows_of(crop_id: np.ndarray, crop_ids, path: Path) -> np.ndarray:
    """Rows of `crop_ids` (any shape) in the sorted `crop_id` column of `path`."""
    flat = np.asarray(crop_ids, dtype=np.int64).reshape(-1)
    rows = np.searchsorted(crop_id, flat).clip(max=max(len(crop_id) - 1, 0))
    found = crop_id[rows] == flat if len(crop_id) else np.zeros(len(flat), bool)
    if not found.all():
        raise VpromError(f"{path}: no features for crop id {int(flat[np.argmin(found)])} "
                         f"({int((~found).sum())} of {len(flat)} ids absent); was it extracted "
                         "from another DATASET.h5? Re-run `vprom extract` on the dataset you "
                         "train on")
    return rows.reshape(np.shape(crop_ids))


def _header(h5, path: Path) -> tuple[np.ndarray, np.ndarray, dict]:
    crop_id = h5["crop_id"][()].astype(np.int64)
    if len(crop_id) > 1 and not np.all(crop_id[1:] > crop_id[:-1]):
        raise VpromError(f"{path}: crop_id is not strictly increasing; the file was not "
                         "written by `vprom extract`, extract it again")
    missing = (h5["missing_crop_id"][()].astype(np.int64) if "missing_crop_id" in h5
               else np.zeros(0, np.int64))
    attrs = {key: value.tolist() if isinstance(value, (np.generic, np.ndarray)) else value
             for key, value in h5.attrs.items()}
    if isinstance(attrs.get("manifest"), str):
        attrs["manifest"] = json.loads(attrs["manifest"])
    return crop_id, missing, attrs


def check_complete(path: str | Path) -> None:
    """Refuse `path` unless it is a finished FEATS.h5."""
    path = Path(path)
    if path.name.endswith(".partial"):
        raise VpromError(f"{path}: this is a partial extraction; pass the final file, which "
                         "appears when `vprom extract` completes")
    check_kind(path, (FEATS, MAPS))
    with open_h5(path) as h5:
        names = [name for name in ("features", "maps") if name in h5]
        if "crop_id" not in h5 or len(names) != 1:
            raise VpromError(f"{path}: needs a 'crop_id' dataset and one of 'features' or "
                             "'maps'; not a FEATS.h5 from `vprom extract`")
        if not bool(h5.attrs.get("complete", False)):
            raise VpromError(f"{path}: incomplete feature file (extraction was interrupted or "
                             "is still running); re-run `vprom extract` with the same options "
                             "to resume it")
        n, stored = h5["crop_id"].shape[0], h5[names[0]].shape[0]
        if stored != n:
            raise VpromError(f"{path}: {names[0]} has {stored} rows but crop_id has {n}; the "
                             "file is corrupt, extract it again")


def load_features(path: str | Path) -> Features:
    """Load a finished FEATS.h5 into memory as float32 (235k × 2048 × 4 B ≈ 1.9 GB at full size)."""
    path = Path(path)
    check_complete(path)
    with open_h5(path) as h5:
        if "maps" in h5:
            shape = "x".join(str(v) for v in h5["maps"].shape[1:])
            raise VpromError(f"{path}: holds spatial maps ({shape} per crop, `vprom extract "
                             "--pool none`), not pooled vectors: extract them without "
                             "--pool none, train a model of maps with --maps, or read it "
                             "with vprom.feature_files.open_maps")
        crop_id, missing, attrs = _header(h5, path)
        features = h5["features"][()].astype(np.float32)
    check_finite(path, [(features, crop_id)], missing)
    return Features(path=path, crop_id=crop_id, features=features, attrs=attrs,
                    missing_crop_id=missing)


def check_finite(path: Path, blocks: Iterable, missing: np.ndarray) -> None:
    """Refuse `blocks` of (values, their crop ids) holding inf or NaN, `missing` crops aside."""
    count, crops = 0, []
    for values, crop_ids in blocks:
        # a row's float64 sum is finite exactly when its values are (float32 cannot overflow it)
        bad = ~np.isfinite(values.reshape(len(values), -1).sum(axis=1, dtype=np.float64))
        if bad.any() and len(missing):
            bad &= ~np.isin(crop_ids, missing)
        count += int((~np.isfinite(values[bad])).sum())
        crops.extend(crop_ids[bad].tolist())
    if count:
        raise VpromError(f"{path}: {count:,} stored values are not finite (inf or NaN), in "
                         f"{len(crops):,} crops (first: crop {crops[0]}); extract the file "
                         "again (with --dtype float32 where float16 overflowed)")


class SpatialMaps(OpenFile):
    """An open maps file (`--pool none`), read lazily."""

    def __init__(self, path: str | Path):
        self.path = path = Path(path)
        check_complete(path)
        self._h5 = open_h5(path)
        try:
            if "maps" not in self._h5:
                raise VpromError(f"{path}: holds pooled features, not spatial maps; read it "
                                 "with vprom.feature_files.load_features, or extract maps with "
                                 "`vprom extract --pool none`")
            self.maps = self._h5["maps"]
            self.crop_id, self.missing_crop_id, self.attrs = _header(self._h5, path)
        except BaseException:
            self._h5.close()
            raise

    @property
    def shape(self) -> tuple:  # (N, C, H, W)
        return tuple(self.maps.shape)

    @property
    def dtype(self) -> np.dtype:
        return self.maps.dtype

    def gather(self, crop_ids, dtype=np.float32) -> np.ndarray:
        """The maps of `crop_ids` (1-D, any order, repeats allowed)."""
        rows = self.index_of(np.asarray(crop_ids, dtype=np.int64).reshape(-1))
        if len(rows) == 0:
            return np.zeros((0, *self.shape[1:]), dtype=dtype)
        unique, back = np.unique(rows, return_inverse=True)
        # one slice per run of consecutive rows: h5py's fancy indexing is ~50x slower
        starts = np.flatnonzero(np.diff(unique, prepend=-2) != 1)
        stops = np.r_[starts[1:], len(unique)]
        block = np.concatenate([self.maps[unique[a]:unique[b - 1] + 1]
                                for a, b in zip(starts, stops)])
        check_finite(self.path, [(block, self.crop_id[unique])], self.missing_crop_id)
        return block.astype(dtype, copy=False)[back.reshape(-1)]

    def check_finite(self, batch_size: int = 1024) -> None:
        """Refuse the file if a map (of a crop not missing) holds inf or NaN."""
        check_finite(self.path, ((self.maps[a:a + batch_size], self.crop_id[a:a + batch_size])
                                  for a in range(0, len(self), batch_size)),
                     self.missing_crop_id)

    def batches(self, batch_size: int = 256, dtype=np.float32):
        """Yield (crop ids, maps) blocks over the whole file in row order."""
        for start in range(0, len(self), batch_size):
            stop = min(start + batch_size, len(self))
            block = self.maps[start:stop]
            check_finite(self.path, [(block, self.crop_id[start:stop])], self.missing_crop_id)
            yield self.crop_id[start:stop], block.astype(dtype, copy=False)


open_maps = SpatialMaps


def check_features_source(dataset: str | Path, features: str | Path) -> str:
    """Refuse features made from another data set than `dataset`; says how it decided."""
    return check_made_from((manifest_of(features) or {}).get("inputs"), dataset, str(features),
                           f"extract features from this data set: `vprom extract {dataset} "
                           "--vg DIR --backbone NAME --out FEATS.h5`")
