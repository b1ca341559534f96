"""Provenance: features and runs are refused on another data set; each check path is exercised."""

from __future__ import annotations

import json
import shutil

import h5py
import numpy as np
import pytest

from tests.baselines.conftest import write_pair
from vprom.errors import VpromError
from vprom.provenance import (
    check_features_source,
    dataset_content_hash,
    dataset_identity,
    same_dataset,
)
from vprom.tables import content_hash


def set_manifest(features, **changes) -> None:
    """Rewrite what a features file's manifest says about its source."""
    with h5py.File(features, "r+") as h5:
        manifest = json.loads(h5.attrs["manifest"])
        manifest.update(changes)
        h5.attrs["manifest"] = json.dumps(manifest)


@pytest.fixture
def pairs(tmp_path):
    """This data set and its features; another data set (other boxes) and its features."""
    mine = write_pair(tmp_path / "mine", n=20)
    other = write_pair(tmp_path / "other", n=20, seed=1, side=150)
    return mine, other


def test_features_of_this_data_set_pass_by_their_recorded_file_hash(pairs):
    (dataset, features), _ = pairs
    assert check_features_source(dataset, features) == "dataset file sha256"


def test_features_of_another_data_set_are_refused_though_their_ids_cover_it(pairs):
    (dataset, _), (_, foreign) = pairs
    with pytest.raises(VpromError, match="extracted from another data set: the crop boxes .*"
                                         "vprom extract"):
        check_features_source(dataset, foreign)


def test_a_recorded_content_hash_decides(pairs):
    (dataset, features), (other, foreign) = pairs
    set_manifest(features, inputs={}, dataset_content_hash=content_hash(dataset))
    assert check_features_source(dataset, features) == "content hash"
    set_manifest(foreign, inputs={"dataset": content_hash(other)})  # the "sha256:" form
    with pytest.raises(VpromError, match="another data set \\(content hash sha256:"):
        check_features_source(dataset, foreign)


def test_a_rewritten_copy_is_recognised_by_its_crop_boxes(pairs, tmp_path):
    (dataset, features), (other, _) = pairs
    copy = tmp_path / "copy.h5"
    with h5py.File(dataset) as src, h5py.File(copy, "w") as dst:  # same data, other bytes
        for group in src:
            src.copy(src[group], dst, name=group)
        dst.attrs["note"] = "relaid"
    assert content_hash(copy) == content_hash(dataset)
    assert check_features_source(copy, features) == "crop boxes"  # via the source named
    # same crop ids, other boxes: refused
    with pytest.raises(VpromError, match="crop boxes of its source .* differ"):
        check_features_source(other, features)


def test_without_the_source_file_a_different_file_is_refused(pairs, tmp_path):
    (dataset, features), _ = pairs
    moved = tmp_path / "moved.h5"
    shutil.copy(dataset, moved)
    with h5py.File(moved, "r+") as h5:
        h5.attrs["note"] = "other bytes"
    dataset.unlink()
    with pytest.raises(VpromError, match="crop boxes it was made from are not at hand"):
        check_features_source(moved, features)


def test_boxes_stored_in_the_features_file_are_compared(pairs):
    (dataset, features), (other, _) = pairs
    set_manifest(features, inputs={}, config={})
    with h5py.File(dataset) as src, h5py.File(features, "r+") as h5:
        group = h5.create_group("crops")
        for column in ("crop_id", "image_id", "x", "y", "w", "h"):
            group[column] = src["crops"][column][()]
    assert check_features_source(dataset, features) == "crop boxes"
    with pytest.raises(VpromError, match="crop boxes of .*feats.h5's crops differ"):
        check_features_source(other, features)


def test_a_file_that_records_no_source_cannot_be_checked_and_says_so(pairs):
    (dataset, features), _ = pairs
    set_manifest(features, inputs={}, config={})
    assert check_features_source(dataset, features).startswith("unchecked")


def test_a_run_record_names_its_data_set(pairs):
    (dataset, _), (other, _) = pairs
    recorded = dataset_identity(dataset)
    assert recorded["content_hash"] == dataset_content_hash(dataset) == content_hash(dataset)
    same_dataset(recorded, dataset, "the run R")
    with pytest.raises(VpromError, match="another data set than the one the run R was trained"):
        same_dataset(recorded, other, "the run R")
    with pytest.raises(VpromError, match="is not the file the run R was trained on"):
        same_dataset({"sha256": recorded["sha256"]}, other, "the run R")


def test_verify_refuses_features_of_another_data_set(tmp_path):
    from vprom.generation.verify import verify
    from vprom.splits import load_rules
    from tests.dataset_fixture import build_records, fixture_assign, write_dataset

    paths = []
    for seed in (3, 4):
        crops, matrices = build_records(25, seed=seed)
        paths.append(write_dataset(tmp_path / f"d{seed}.h5", crops, matrices))
    features = tmp_path / "feats.h5"
    with h5py.File(features, "w") as h5:  # features of d4, keyed by ids d3 also has
        h5["crop_id"] = np.array([c.crop_id for c in crops])
        h5["features"] = np.zeros((len(crops), 4), np.float32)
        h5.attrs["manifest"] = json.dumps({"inputs": {"d4.h5": content_hash(paths[1])}})
    with pytest.raises(VpromError, match="extracted from another data set"):
        verify(paths[0], load_rules(), features=features, assigner=fixture_assign,
               check_matrix=lambda *a: None)


def test_boxes_are_compared_as_numbers(pairs):
    # integer and float columns of the same boxes are the same boxes
    (dataset, features), _ = pairs
    set_manifest(features, inputs={}, config={})
    with h5py.File(dataset) as src, h5py.File(features, "r+") as h5:
        group = h5.create_group("crops")
        group["crop_id"] = src["crops/crop_id"][()]
        for column in ("image_id", "x", "y", "w", "h"):
            group[column] = np.asarray(src["crops"][column][()], dtype=np.float32)
    assert check_features_source(dataset, features) == "crop boxes"
