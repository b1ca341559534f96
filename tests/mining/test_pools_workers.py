"""Mining in byte ranges on N workers gives the crops, report and side files of one process."""

from __future__ import annotations

import json
from pathlib import Path

import h5py
import numpy as np
import pytest

from vprom.errors import VpromError
from vprom.mining import byte_ranges, pools, synth
from vprom.mining.pools import mine

from .conftest import CORPUS, corpus, write_vg


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("jobs") / "vg"
    synth.write_corpus(out, images=40, seed=3)
    return out


def _products(out: Path) -> tuple:
    """Every dataset of POOLS.h5 (bytes), its manifest less the time, and the side files."""
    with h5py.File(out, "r") as f:
        data = {}
        f.visititems(lambda name, obj: data.update({name: np.asarray(obj[()]).tobytes()
                                                    if obj.dtype.kind != "O" else
                                                    repr(obj[()].tolist())})
                     if isinstance(obj, h5py.Dataset) else None)
        manifest = json.loads(f.attrs["manifest"])
    manifest = {k: v for k, v in manifest.items() if k not in ("created", "created_at")}
    sides = [out.with_name(out.name + s).read_bytes() for s in
             (".report.json", ".report.md", ".excluded_counts.tsv")]
    return data, manifest, sides


def _streamed_passes(monkeypatch) -> list:
    """The passes read by the streaming reader from now on, in order."""
    streamed = []
    real = pools._streamed
    monkeypatch.setattr(pools, "_streamed", lambda kind, setup: streamed.append(kind)
                        or real(kind, setup))
    return streamed


def _copy(corpus: Path, folder: Path) -> Path:
    folder.mkdir()
    for f in corpus.glob("*.json"):
        (folder / f.name).write_bytes(f.read_bytes())
    return folder


def test_any_number_of_workers_gives_identical_pools(tmp_path, synthetic, monkeypatch):
    monkeypatch.setattr(byte_ranges, "TARGET", 2_000)  # many chunks even in a small corpus
    paths = {s: synthetic / f"{s}.json" for s in ("objects", "attributes", "region_descriptions")}
    jobs = list(pools._jobs({kind: pools._scans(paths, kind)
                                 for kind in ("objects", "counts")}))
    assert sum(kind == "objects" and chunks is not None for kind, chunks in jobs) > 5
    assert sum(kind == "counts" and chunks is not None for kind, chunks in jobs) > 5
    products = []
    for workers in (1, 2, 3):
        out = tmp_path / f"w{workers}" / "pools.h5"
        mine(synthetic, out, workers=workers)
        products.append(_products(out))
    monkeypatch.setattr(byte_ranges, "TARGET", 1 << 30)  # one chunk per file
    mine(synthetic, tmp_path / "whole" / "pools.h5", workers=1)
    products.append(_products(tmp_path / "whole" / "pools.h5"))
    assert all(p == products[0] for p in products[1:])
    assert len(products[0][0]["crops/crop_id"]) > 0


def test_records_in_another_layout_mine_in_chunks_as_when_streamed(tmp_path, synthetic,
                                                                    monkeypatch, capsys):
    """Float boxes and v1.0 keys do not fit the record structs: their chunks are read as
    dicts, and mine what the streaming reader mines."""
    other = _copy(synthetic, tmp_path / "other")
    for stem, key in (("objects", "objects"), ("attributes", "attributes"),
                      ("region_descriptions", "regions")):
        records = json.loads((other / f"{stem}.json").read_text())
        for record in records[::3]:
            for item in record[key]:
                item["x"] = float(item["x"])
                item["id" if key != "regions" else "region_id"] = item.pop(
                    "object_id" if key != "regions" else "region_id")
        (other / f"{stem}.json").write_text(json.dumps(records))
    monkeypatch.setattr(byte_ranges, "TARGET", 2_000)
    streamed = _streamed_passes(monkeypatch)
    mine(other, tmp_path / "chunks" / "pools.h5", workers=1)
    assert streamed == [] and "streaming reader" not in capsys.readouterr().err
    packed = write_vg(tmp_path / "zip", {stem: (other / f"{stem}.json").read_text() for stem in
                                         ("image_data", "objects", "attributes",
                                          "region_descriptions")},
                      zipped=("objects", "attributes", "region_descriptions"))
    mine(packed, tmp_path / "streamed" / "pools.h5", workers=1)
    assert sorted(streamed) == ["counts", "objects"]
    a = _products(tmp_path / "chunks" / "pools.h5")
    b = _products(tmp_path / "streamed" / "pools.h5")
    assert a[0] == b[0] and a[2][2] == b[2][2]  # the reports differ in the inputs only


def test_a_zipped_pass_is_streamed_and_mines_the_same(tmp_path, monkeypatch):
    monkeypatch.setattr(byte_ranges, "TARGET", 200)
    plain = write_vg(tmp_path / "plain")
    packed = write_vg(tmp_path / "zip", zipped=("region_descriptions",))
    mine(plain, tmp_path / "a" / "pools.h5", workers=2)
    mine(packed, tmp_path / "b" / "pools.h5", workers=2)
    a, b = _products(tmp_path / "a" / "pools.h5"), _products(tmp_path / "b" / "pools.h5")
    assert a[0] == b[0] and a[2][2] == b[2][2]  # the reports differ in the inputs only


@pytest.mark.parametrize("workers", [1, 2])
def test_an_error_in_a_later_chunk_names_the_file_and_record(tmp_path, monkeypatch, workers):
    monkeypatch.setattr(byte_ranges, "TARGET", 100)
    files = corpus()
    del files["attributes"][3]["attributes"][0]["x"]  # image 4: the last chunk
    vg = write_vg(tmp_path / "vg", files)
    with pytest.raises(VpromError, match=r"attributes\.json: image 4, object 401 has no 'x' key"):
        mine(vg, tmp_path / "pools.h5", workers=workers)
    text = json.dumps(CORPUS["region_descriptions"])
    vg = write_vg(tmp_path / "vg2", corpus(region_descriptions=text[:-30]))
    with pytest.raises(VpromError, match=r"region_descriptions\.json: invalid or truncated JSON "
                                         r"after image record #\d+ \(image id \d+\)"):
        mine(vg, tmp_path / "pools2.h5", workers=workers)


def test_a_record_joined_otherwise_sends_its_pass_to_the_streaming_reader(
        tmp_path, synthetic, monkeypatch, capsys):
    """Chunks cut at the join between records mine what one chunk per file mines; a record
    joined otherwise (another key order) sends its pass to the streaming reader, with the
    same result and a note saying so."""
    monkeypatch.setattr(byte_ranges, "TARGET", 1 << 30)
    mine(synthetic, tmp_path / "whole" / "pools.h5", workers=1)
    want = _products(tmp_path / "whole" / "pools.h5")
    monkeypatch.setattr(byte_ranges, "TARGET", 2_000)
    monkeypatch.setattr(byte_ranges, "BLOCK", 4_096)
    streamed = _streamed_passes(monkeypatch)
    mine(synthetic, tmp_path / "cut" / "pools.h5", workers=1)
    assert streamed == [] and "streaming reader" not in capsys.readouterr().err
    assert _products(tmp_path / "cut" / "pools.h5") == want

    stray = _copy(synthetic, tmp_path / "stray")
    regions = json.loads((stray / "region_descriptions.json").read_text())
    regions[30] = dict(reversed(regions[30].items()))  # its first key is no longer "regions"
    (stray / "region_descriptions.json").write_text(json.dumps(regions))
    mine(stray, tmp_path / "s" / "pools.h5", workers=2)
    assert streamed == ["counts"]
    assert "mine: region_descriptions.json: a byte range did not hold the records" in \
        capsys.readouterr().err
    monkeypatch.setattr(byte_ranges, "TARGET", 1 << 30)
    mine(stray, tmp_path / "s1" / "pools.h5", workers=1)
    assert _products(tmp_path / "s" / "pools.h5") == _products(tmp_path / "s1" / "pools.h5")
