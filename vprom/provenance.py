"""Which data set a features file, or a trained run, was made from: checked, not assumed.

Features are keyed by crop id, and crop ids are small integers that every DATASET.h5 reuses,
so the features of another data set (other images, other boxes) usually cover this one's ids
and would be read without complaint. `check_features_source` refuses them. It compares what
the features file's manifest records about its source with this data set, strongest first:

1. a content hash (`vprom.tables.content_hash`: "sha256:...", layout-independent), recorded
   in the manifest as `dataset_content_hash` or among its `inputs`: equal content hashes mean
   the same data set; different ones, another data set;
2. the sha256 of the DATASET.h5 file, as `vprom extract` records it among its `inputs`: equal
   file hashes mean the same data set. Different ones do not prove another data set (the
   same data written anew has other bytes), so then
3. the crop boxes: the boxes (image id, x, y, w, h) of every crop of this data set must equal
   those the features were computed from: stored in the features file (`crops/` columns, if
   it has them), or else read from the source DATASET.h5 the manifest names, provided that
   file still holds the very bytes the features were made from.

When the manifest records nothing about its source (a file from another tool), the check
cannot be made; `check_features_source` says so in its returned note rather than guessing.

A run records the content hash of the data set it was trained on (`dataset_identity`);
`same_dataset` compares a run's record with a DATASET.h5, so a run is never evaluated against
another data set. Hashes are cached per (path, size, modification time) within a process.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from types import SimpleNamespace

import h5py
import numpy as np

from vprom.errors import VpromError
from vprom.io import sha256_file
from vprom.tables import content_hash, open_h5, read_crop_table

CONTENT_PREFIX = "sha256:"
BOX_COLUMNS = ("image_id", "x", "y", "w", "h")


def _stamp(path: Path) -> tuple[str, int, int]:
    stat = path.stat()
    return str(path.resolve()), stat.st_size, stat.st_mtime_ns


@lru_cache(maxsize=64)
def _file_sha(stamp: tuple[str, int, int]) -> str:
    return sha256_file(stamp[0])


@lru_cache(maxsize=64)
def _content(stamp: tuple[str, int, int]) -> str:
    with open_h5(stamp[0]) as h5:
        recorded = _manifest(h5).get("outputs", {}).get("content_hash")
    # the manifest's own record (written with the file, re-checked by `vprom verify`)
    return recorded if isinstance(recorded, str) else content_hash(stamp[0])


def file_sha256(path: str | Path) -> str:
    """sha256 of a file (hex), cached per path, size and modification time."""
    return _file_sha(_stamp(Path(path)))


def dataset_content_hash(dataset: str | Path) -> str:
    """A DATASET.h5's content hash: as its manifest records it, else computed."""
    return _content(_stamp(Path(dataset)))


def dataset_identity(dataset: str | Path) -> dict:
    """What a run records about the data set it was trained on."""
    return {"content_hash": dataset_content_hash(dataset), "sha256": file_sha256(dataset)}


def _manifest(h5: h5py.File) -> dict:
    try:
        value = h5.attrs.get("manifest")
        return json.loads(value) if isinstance(value, (str, bytes)) else {}
    except ValueError:
        return {}


def _source_records(manifest: dict) -> tuple[str | None, list[str], str | None]:
    """(content hash, file hashes, source path) that a features manifest records."""
    inputs = manifest.get("inputs") or {}
    values = [v for v in inputs.values() if isinstance(v, str)]
    content = manifest.get("dataset_content_hash")
    if not isinstance(content, str):
        content = next((v for v in values if v.startswith(CONTENT_PREFIX)), None)
    files = [v for v in values if not v.startswith(CONTENT_PREFIX)]
    source = (manifest.get("config") or {}).get("dataset")
    return content, files, source if isinstance(source, str) else None


def _boxes(crops, wanted: np.ndarray) -> np.ndarray | None:
    """[len(wanted), 5] boxes of the crop ids `wanted` in `crops`, None if any is absent."""
    order = np.argsort(crops.crop_id, kind="stable")
    ids = np.asarray(crops.crop_id)[order]
    pos = np.minimum(np.searchsorted(ids, wanted), max(len(ids) - 1, 0))
    if len(ids) == 0 or not np.array_equal(ids[pos], wanted):
        return None
    return np.stack([np.asarray(getattr(crops, c))[order][pos].astype(np.float64)
                     for c in BOX_COLUMNS], axis=1)


def _stored_boxes(features: Path):
    """The crops/ box columns a features file may carry, or None."""
    with open_h5(features) as h5:
        group = h5.get("crops")
        if not isinstance(group, h5py.Group) or not all(
                c in group for c in ("crop_id", *BOX_COLUMNS)):
            return None
        return SimpleNamespace(**{c: group[c][()] for c in ("crop_id", *BOX_COLUMNS)})


def check_features_source(dataset: str | Path, features: str | Path) -> str:
    """Refuse (VpromError) features made from another data set; returns how it was checked."""
    dataset, features = Path(dataset), Path(features)
    with open_h5(features) as h5:
        manifest = _manifest(h5)
    content, files, source = _source_records(manifest)
    fix = (f"extract features from this data set: `vprom extract {dataset} --vg DIR --backbone "
           f"NAME --out FEATS.h5`")
    if content is not None:
        mine = dataset_content_hash(dataset)
        if content != mine:
            raise VpromError(f"{features} was extracted from another data set (content hash "
                             f"{content[:19]}…, but {dataset} has {mine[:19]}…); {fix}")
        return "content hash"
    if files and file_sha256(dataset) in files:
        return "dataset file sha256"
    crops = read_crop_table(dataset)
    wanted = np.sort(np.asarray(crops.crop_id, dtype=np.int64))
    theirs, where = _stored_boxes(features), f"{features}'s crops"
    if source and not Path(source).is_absolute():  # manifests name it from the file's folder
        source = str(Path(features).parent / source)
    if theirs is None and source and files and Path(source).is_file() and (
            file_sha256(source) in files):
        theirs, where = read_crop_table(source), f"its source {source}"
    if theirs is None:
        if files:
            raise VpromError(f"{features} was extracted from a DATASET.h5 with sha256 "
                             f"{files[0][:12]}…, not {dataset} ({file_sha256(dataset)[:12]}…), "
                             "and the crop boxes it was made from are not at hand to compare; "
                             f"{fix}")
        return "unchecked: the features file records no source data set"
    mine_boxes, their_boxes = _boxes(crops, wanted), _boxes(theirs, wanted)
    if their_boxes is None or not np.array_equal(mine_boxes, their_boxes):
        raise VpromError(f"{features} was extracted from another data set: the crop boxes of "
                         f"{where} differ from {dataset}'s; {fix}")
    return "crop boxes"


def same_dataset(recorded: dict, dataset: str | Path, what: str) -> None:
    """Refuse when `dataset` is not the data set `recorded` (from `dataset_identity`) names."""
    dataset = Path(dataset)
    if not dataset.is_file():
        raise VpromError(f"{dataset}: no such file; {what} was made from it")
    content = recorded.get("content_hash")
    if content:
        if content != dataset_content_hash(dataset):
            raise VpromError(f"{dataset} now holds another data set than the one {what} was "
                             f"trained on (content hash {content[:19]}…, now "
                             f"{dataset_content_hash(dataset)[:19]}…); restore that data set, "
                             "or train a new run on this one")
        return
    sha = recorded.get("sha256")
    if sha and sha != file_sha256(dataset):
        raise VpromError(f"{dataset} is not the file {what} was trained on (sha256 {sha[:12]}…, "
                         f"now {file_sha256(dataset)[:12]}…); restore that data set, or train a "
                         "new run on this one")

