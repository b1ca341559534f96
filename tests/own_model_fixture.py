"""One small build for the tests of `vprom.data`, the crop store and the worked example:
a DATASET.h5 with images (tests/dataset_fixture.py), its crop store and its features.

`own_build` is session-scoped (tests must not modify it): the hand-checkable data set of
tests/dataset_fixture.py (26 matrices, 416 crops, 104 images), a crop store at 16 px, and
pooled features and maps in FEATS.h5's layout (vprom/feature_files.py), written here because
extracting them takes a minute on a loaded machine: random 8-d vectors and 4x2x2 maps per
crop, with the manifest `vprom extract` writes (the data set's name and sha256). `other` is a
second data set of the same shape made with another seed, for the refusals.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np
import pytest

from tests.dataset_fixture import build_records, write_dataset, write_images

STORE_SIZE = 16
DIM = 8
MAP_SHAPE = (4, 2, 2)


@dataclass(frozen=True)
class OwnBuild:
    dataset: Path
    vg: Path
    crops: Path
    features: Path
    maps: Path
    other: Path  # another data set (seed 1), with its own crop store beside it
    other_crops: Path


def make_build(root: Path, seed: int) -> tuple[Path, Path, Path]:
    from vprom.features.crop_store import StoreJob, build_crop_store

    root.mkdir(parents=True, exist_ok=True)
    crops, matrices = build_records(2, seed)
    dataset = write_dataset(root / "dataset.h5", crops, matrices)
    vg = write_images(root / "vg", crops)
    store = build_crop_store(StoreJob(dataset, vg, STORE_SIZE, root / "crops.h5", workers=1),
                             log=lambda _: None)
    return dataset, vg, store


def write_features(dataset: Path, out: Path, maps: bool, seed: int = 0) -> Path:
    """A finished FEATS.h5 (pooled vectors, or maps as `--pool none` stores them) for every
    crop of `dataset`, recording its source as `vprom extract` does."""
    from vprom.manifest import input_hashes, make_manifest
    from vprom.tables import read_crop_table, set_manifest

    crop_id = np.sort(read_crop_table(dataset).crop_id)
    rng = np.random.default_rng(seed)
    with h5py.File(out, "w") as h5:
        h5.create_dataset("crop_id", data=crop_id)
        if maps:
            h5.create_dataset("maps", data=rng.normal(size=(len(crop_id), *MAP_SHAPE)).astype(
                np.float16), chunks=(4, *MAP_SHAPE))
        else:
            h5.create_dataset("features", data=rng.normal(size=(len(crop_id), DIM)))
        h5.attrs.update({"backbone": "resnet18", "weights": "none", "complete": True,
                         "pool": "none" if maps else "avg"})
        set_manifest(h5, make_manifest("features", {"dataset": str(dataset)},
                                       inputs=input_hashes([dataset])))
    return out


@pytest.fixture(scope="session")
def own_build(tmp_path_factory) -> OwnBuild:
    root = tmp_path_factory.mktemp("own")
    dataset, vg, store = make_build(root / "a", 0)
    other, _, other_store = make_build(root / "b", 1)
    return OwnBuild(dataset, vg, store, write_features(dataset, root / "feats.h5", False),
                    write_features(dataset, root / "maps.h5", True), other, other_store)
