"""Reading a FEATS.h5 file written by `vprom extract`.

Layout (plain h5py can read it without vprom):

    crop_id            int64 (N,)      sorted ascending, one row per crop id of the dataset
    features           float16|float32 (N, D), average-pooled then L2-normalised (--pool avg)
      or maps          float16|float32 (N, C, H, W), the last conv map per crop (--pool none),
                       HDF5-chunked by a few crops, optionally gzip/lzf compressed
    missing_crop_id    int64 (M,)      crops whose image was missing/corrupt (rows are NaN)
    attrs              backbone, weights, weights_sha256, input_size, region, decode, pool,
                       pooling, normalisation, resize, dtype, compression, feature_dim,
                       map_shape (maps only), torch/torchvision/timm/vprom versions,
                       complete (bool), manifest (JSON: its input is the data set's content
                       hash, its config the settings, its output the features' content hash)

Only a complete file ever gets its final name (`vprom extract` assembles it from the chunk
files under `<out>.partial/` and renames it into place); `check_complete` also refuses a
file without the `complete` attribute or with missing rows, and the `.partial` folder.

- `load_features` returns the whole pooled table as float32 with an `index_of` that maps crop
  ids to rows by binary search over the sorted `crop_id` column. It refuses a maps file.
- `open_maps` opens a maps file without loading it (2048 x 7 x 7 float16 is ~200 KB a crop,
  ~22 GB for 110,000 crops): `gather` reads the maps of any crop ids, `batches` iterates over
  the file in row order, both reading only the HDF5 chunks they need.
- Every read refuses rows holding inf or NaN (`check_finite`), except the rows of missing
  crops, which are NaN by design: the whole table at `load_features`, the rows read at
  `gather` and `batches`.
- `check_features_source` refuses features (or maps, or a crop store) made from another data
  set: crop ids are small integers every DATASET.h5 reuses, so another data set's features
  usually cover this one's ids and would be read without complaint.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from vprom.errors import VpromError
from vprom.manifest import check_made_from, manifest_of
from vprom.tables import open_h5

STORED = ("features", "maps")  # one of them: pooled vectors, or spatial maps


class OpenFile:
    """A reader over one open file (`self._h5`) of rows keyed by `self.crop_id`: usable in a
    `with` block, closed by `close()`, as long as its rows."""

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._h5.close()

    def __len__(self) -> int:
        return len(self.crop_id)


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
        return rows_of(self.crop_id, crop_ids, self.path)


def rows_of(crop_id: np.ndarray, crop_ids, path: Path) -> np.ndarray:
    """Rows of `crop_ids` (any shape) in the sorted `crop_id` column of `path`."""
    ids = np.asarray(crop_ids, dtype=np.int64)
    flat = ids.reshape(-1)
    rows = np.searchsorted(crop_id, flat)
    rows = np.minimum(rows, max(len(crop_id) - 1, 0))
    found = (crop_id[rows] == flat) if len(crop_id) else np.zeros(len(flat), bool)
    if not found.all():
        first = int(flat[np.argmin(found)])
        raise VpromError(f"{path}: no features for crop id {first} "
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


def _stored(h5, path: Path) -> str:
    """Which of `features` / `maps` the file holds."""
    names = [name for name in STORED if name in h5]
    if "crop_id" not in h5 or len(names) != 1:
        raise VpromError(f"{path}: needs a 'crop_id' dataset and one of 'features' or 'maps'; "
                         "not a FEATS.h5 from `vprom extract`")
    return names[0]


def _check_open(h5, path: Path) -> None:
    stored = _stored(h5, path)
    if not bool(h5.attrs.get("complete", False)):
        raise VpromError(f"{path}: incomplete feature file (extraction was interrupted or is "
                         "still running); re-run `vprom extract` with the same options to "
                         "resume it")
    if "done" in h5 and not bool(np.all(h5["done"][()])):
        raise VpromError(f"{path}: {int((~h5['done'][()]).sum())} rows were never extracted; "
                         "re-run `vprom extract` to finish it")
    n = h5["crop_id"].shape[0]
    if h5[stored].shape[0] != n:
        raise VpromError(f"{path}: {stored} has {h5[stored].shape[0]} rows but crop_id "
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
        if "maps" in h5:
            shape = "x".join(str(v) for v in h5["maps"].shape[1:])
            raise VpromError(f"{path}: holds spatial maps ({shape} per crop, `vprom extract "
                             "--pool none`), not pooled vectors: extract them without "
                             "--pool none, train a model of maps with --maps, or read it "
                             "with vprom.feature_files.open_maps")
        crop_id = h5["crop_id"][()].astype(np.int64)
        features = h5["features"][()].astype(np.float32)
        missing = (h5["missing_crop_id"][()].astype(np.int64) if "missing_crop_id" in h5
                   else np.zeros(0, np.int64))
        attrs = _attrs(h5)
    _check_sorted(crop_id, path)
    check_finite(features, crop_id, missing, path)
    return Features(path=path, crop_id=crop_id, features=features, attrs=attrs,
                    missing_crop_id=missing)


def _not_finite(values: np.ndarray, crop_ids: np.ndarray, missing: np.ndarray
                ) -> tuple[int, np.ndarray]:
    """(how many values are inf or NaN, the crop ids of their rows), rows of `missing` crops
    (NaN by design) left out; `values` holds one row per crop id."""
    # a row's float64 sum is finite exactly when its values are (float32 cannot overflow it)
    bad = ~np.isfinite(values.reshape(len(values), -1).sum(axis=1, dtype=np.float64))
    if bad.any() and len(missing):
        bad &= ~np.isin(crop_ids, missing)
    if not bad.any():
        return 0, crop_ids[:0]
    return int((~np.isfinite(values[bad])).sum()), crop_ids[bad]


def _refuse_not_finite(path: Path, count: int, crops: np.ndarray) -> None:
    raise VpromError(f"{path}: {count:,} stored values are not finite (inf or NaN), in "
                     f"{len(crops):,} crops (first: crop {int(crops[0])}); extract the file "
                     "again (with --dtype float32 where float16 overflowed)")


def check_finite(values: np.ndarray, crop_ids: np.ndarray, missing: np.ndarray,
                 path: Path) -> None:
    """Refuse (one line, naming `path` and the count) rows of `values` (one per crop id)
    holding inf or NaN, except those of `missing` crops."""
    count, crops = _not_finite(values, crop_ids, missing)
    if count:
        _refuse_not_finite(path, count, crops)


def _check_sorted(crop_id: np.ndarray, path: Path) -> None:
    if len(crop_id) > 1 and not np.all(crop_id[1:] > crop_id[:-1]):
        raise VpromError(f"{path}: crop_id is not strictly increasing; the file was not "
                         "written by `vprom extract`, extract it again")


class SpatialMaps(OpenFile):
    """An open maps file (`--pool none`); read lazily. Use as a context manager or `close()`.

        with open_maps("feats/resnet101-maps.h5") as maps:
            x = maps.gather([12, 7, 12])            # (3, 2048, 7, 7) float32, in that order
            for ids, block in maps.batches(256):    # the whole file, in row order
                ...
    """

    def __init__(self, path: Path):
        self.path = path
        check_complete(path)
        self._h5 = open_h5(path)
        try:
            if "maps" not in self._h5:
                raise VpromError(f"{path}: holds pooled features, not spatial maps; read it "
                                 "with vprom.feature_files.load_features, or extract maps with "
                                 "`vprom extract --pool none`")
            self.maps = self._h5["maps"]
            self.crop_id = self._h5["crop_id"][()].astype(np.int64)
            self.missing_crop_id = (self._h5["missing_crop_id"][()].astype(np.int64)
                                    if "missing_crop_id" in self._h5 else np.zeros(0, np.int64))
            self.attrs = _attrs(self._h5)
            _check_sorted(self.crop_id, path)
        except BaseException:
            self._h5.close()
            raise

    @property
    def shape(self) -> tuple:
        """(N, C, H, W)."""
        return tuple(self.maps.shape)

    @property
    def dtype(self) -> np.dtype:
        return self.maps.dtype

    def index_of(self, crop_ids) -> np.ndarray:
        return rows_of(self.crop_id, crop_ids, self.path)

    def gather(self, crop_ids, dtype=np.float32) -> np.ndarray:
        """The maps of `crop_ids` (1-D, any order, repeats allowed): (len, C, H, W)."""
        rows = self.index_of(np.asarray(crop_ids, dtype=np.int64).reshape(-1))
        if len(rows) == 0:
            return np.zeros((0, *self.shape[1:]), dtype=dtype)
        unique, back = np.unique(rows, return_inverse=True)
        # one slice per run of consecutive rows: h5py's fancy indexing (maps[[r1, r2, ...]])
        # makes one hyperslab per index and is ~50x slower for a few hundred scattered rows
        starts = np.flatnonzero(np.diff(unique, prepend=-2) != 1)
        stops = np.r_[starts[1:], len(unique)]
        block = np.concatenate([self.maps[unique[a]:unique[b - 1] + 1]
                                for a, b in zip(starts, stops)])
        check_finite(block, self.crop_id[unique], self.missing_crop_id, self.path)
        return block.astype(dtype, copy=False)[back.reshape(-1)]

    def check_finite(self, batch_size: int = 1024) -> None:
        """Refuse the file (one line with the whole count) if any crop's map that is not a
        missing crop's holds inf or NaN: one pass over the file."""
        count, crops = 0, []
        for start in range(0, len(self), batch_size):
            stop = min(start + batch_size, len(self))
            n, bad = _not_finite(self.maps[start:stop], self.crop_id[start:stop],
                                 self.missing_crop_id)
            count, crops = count + n, crops + [bad]
        if count:
            _refuse_not_finite(self.path, count, np.concatenate(crops))

    def batches(self, batch_size: int = 256, dtype=np.float32):
        """Yield (crop ids, maps) blocks over the whole file in row order."""
        for start in range(0, len(self), batch_size):
            stop = min(start + batch_size, len(self))
            block = self.maps[start:stop]
            check_finite(block, self.crop_id[start:stop], self.missing_crop_id, self.path)
            yield self.crop_id[start:stop], block.astype(dtype, copy=False)


def open_maps(path: str | Path) -> SpatialMaps:
    """Open a finished maps FEATS.h5 (refuses partial, incomplete and pooled files)."""
    return SpatialMaps(Path(path))


def check_features_source(dataset: str | Path, features: str | Path,
                          fix: str | None = None) -> str:
    """Refuse (one line) a features file made from another data set than `dataset`, by what
    its manifest records of its input; returns how it was decided."""
    recorded = (manifest_of(features) or {}).get("inputs")
    fix = fix or (f"extract features from this data set: `vprom extract {dataset} --vg DIR "
                  "--backbone NAME --out FEATS.h5`")
    return check_made_from(recorded, dataset, str(features), fix)
