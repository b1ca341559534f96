"""The manifest: one schema stored one way per kind of output, the one `is_current` rule, and
features or runs refused on another data set than the one they were made from."""

from __future__ import annotations

import json

import h5py
import numpy as np
import pytest

from tests.baselines.conftest import write_pair
from vprom.errors import VpromError
from vprom.feature_files import check_features_source
from vprom.manifest import (
    FORMAT_VERSION,
    check_made_from,
    input_hash,
    input_hashes,
    make_manifest,
    manifest_of,
    why_stale,
    write_manifest,
)
from vprom.tables import content_hash


def test_a_manifest_holds_the_schema_and_lives_where_its_output_says(tmp_path):
    data = tmp_path / "x.bin"
    data.write_bytes(b"abc")
    m = make_manifest("pools", {"min_side": 100}, seed=3, inputs=input_hashes([data]),
                      counts={"crops": 2})
    assert set(m) == {"format_version", "vprom_version", "kind", "config", "seed", "inputs",
                      "counts", "outputs"}
    assert m["format_version"] == FORMAT_VERSION and m["vprom_version"]
    abc = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"  # sha256 of abc
    assert m["inputs"] == {"x.bin": abc}
    folder, h5_file, text = tmp_path / "folder", tmp_path / "f.h5", tmp_path / "t.jsonl"
    folder.mkdir()
    text.write_text("{}\n")
    with h5py.File(h5_file, "w") as h5:
        write_manifest(h5, m)
    for output in (folder, text):
        write_manifest(output, m)
    assert (folder / "manifest.json").is_file() and (tmp_path / "t.jsonl.manifest.json").is_file()
    assert manifest_of(folder) == manifest_of(h5_file) == manifest_of(text) == m
    assert manifest_of(tmp_path / "none") is None and manifest_of(data) is None


def made(tmp_path, config: dict, *inputs):
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    write_manifest(out, make_manifest("x", config, inputs=input_hashes(inputs)))
    return out


def test_an_output_is_current_for_the_same_input_contents_and_settings(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text("[1]")
    b.write_text("[2]")
    out = made(tmp_path, {"scale": 0.5, "size": [1, 2]}, a, b)
    assert why_stale(out, [b, a], {"scale": 0.5, "size": (1, 2)}) is None
    assert why_stale(out, [a, b], {"scale": 0.5, "shard": None}) is None  # unrecorded: null
    renamed = tmp_path / "c.json"
    a.rename(renamed)
    assert why_stale(out, [renamed, b], {}) is None  # inputs count by content, not name
    renamed.write_text("[3]")
    assert why_stale(out, [renamed, b], {}) == "its inputs changed: c.json"
    assert why_stale(out, [b], {}) == "its inputs changed: a.json"  # one input fewer
    assert why_stale(out, [b, renamed], {"scale": 1}) == ("its inputs changed: c.json; its "
                                                          "settings changed: scale 0.5 vs 1")


def test_without_a_readable_manifest_nothing_is_current(tmp_path):
    assert why_stale(tmp_path / "never", [], {}) == "not made yet"
    (tmp_path / "plain").mkdir()
    assert why_stale(tmp_path / "plain", [], {}) == "no manifest"
    out = made(tmp_path, {})
    manifest = json.loads((out / "manifest.json").read_text())
    (out / "manifest.json").write_text(json.dumps({**manifest, "format_version": 99}))
    assert "format" in why_stale(out, [], {})


@pytest.fixture
def pairs(tmp_path):
    """This data set and its features; another data set (other boxes) and its features."""
    mine = write_pair(tmp_path / "mine", n=20)
    other = write_pair(tmp_path / "other", n=20, seed=1, side=150)
    return mine, other


def rewritten(dataset, copy):
    """`dataset`'s data in a file of other bytes."""
    with h5py.File(dataset) as src, h5py.File(copy, "w") as dst:
        for group in src:
            src.copy(src[group], dst, name=group)
        dst.attrs["note"] = "relaid"
    return copy


def test_a_data_set_is_named_by_its_content_and_other_files_by_their_bytes(pairs, tmp_path):
    (dataset, features), _ = pairs
    copy = rewritten(dataset, tmp_path / "copy.h5")
    assert input_hash(copy) == input_hash(dataset) == content_hash(dataset)
    with h5py.File(dataset, "r+") as h5:  # the content hash a manifest records is taken
        manifest = json.loads(h5.attrs["manifest"])
        write_manifest(h5, {**manifest, "outputs": {"content_hash": "sha256:recorded"}})
    assert input_hash(dataset) == "sha256:recorded"
    assert len(input_hash(features)) == 64 and ":" not in input_hash(features)


def test_features_of_another_data_set_are_refused_though_their_ids_cover_it(pairs, tmp_path):
    (dataset, features), (other, foreign) = pairs
    assert check_features_source(dataset, features) == "recorded hash"
    assert check_features_source(rewritten(dataset, tmp_path / "copy.h5"), features) == (
        "recorded hash")
    with pytest.raises(VpromError, match=r"feats.h5 was made from another data set than "
                                         r".*vprom extract") as refused:
        check_features_source(dataset, foreign)
    assert "\n" not in str(refused.value)


def test_a_record_of_a_files_bytes_matches_that_file_only(pairs):
    (dataset, _), (other, _) = pairs
    from vprom.files import sha256_file

    assert check_made_from({"dataset.h5": sha256_file(dataset)}, dataset, "F", "fix") == (
        "recorded hash")
    with pytest.raises(VpromError, match="F was made from another data set"):
        check_made_from({"dataset.h5": sha256_file(dataset)}, other, "F", "fix")


def test_a_file_that_records_no_source_cannot_be_checked_and_says_so(pairs):
    (dataset, features), _ = pairs
    with h5py.File(features, "r+") as h5:
        write_manifest(h5, make_manifest("features", {}))
    assert check_features_source(dataset, features).startswith("unchecked")


def test_a_run_record_names_its_data_set(pairs, tmp_path):
    (dataset, _), (other, _) = pairs
    recorded = {"content_hash": input_hash(dataset)}
    check_made_from(recorded, dataset, "the run R", "train a new run")
    with pytest.raises(VpromError, match="the run R was made from another data set than .*; "
                                         "train a new run"):
        check_made_from(recorded, other, "the run R", "train a new run")
    with pytest.raises(VpromError, match="no such file; the run R was made from it"):
        check_made_from(recorded, tmp_path / "gone.h5", "the run R", "train a new run")


def test_verify_refuses_features_of_another_data_set(tmp_path):
    from vprom.generation.verify import verify
    from vprom.splits import load_rules

    from tests.dataset_fixture import build_records, write_dataset

    paths = []
    for seed in (3, 4):
        crops, matrices = build_records(25, seed=seed)
        paths.append(write_dataset(tmp_path / f"d{seed}.h5", crops, matrices))
    features = tmp_path / "feats.h5"
    with h5py.File(features, "w") as h5:  # features of d4, keyed by ids d3 also has
        h5["crop_id"] = np.array([c.crop_id for c in crops])
        h5["features"] = np.zeros((len(crops), 4), np.float32)
        h5.attrs["manifest"] = json.dumps({"inputs": {"d4.h5": content_hash(paths[1])}})
    with pytest.raises(VpromError, match="made from another data set"):
        verify(paths[0], load_rules(), features=features)
