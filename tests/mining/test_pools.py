"""`vprom mine`: pools, filters, purity, counts, labels, determinism, report and bad input."""

from __future__ import annotations

import json

import numpy as np
import pytest

from vprom.mining.pools import mine
from tests.mining.conftest import CORPUS, corpus, write_vg
from vprom.app import cli
from vprom.errors import VpromError
from vprom.tables import read_crop_table, read_manifest


def _crops(table, element_type=None, super_attribute=None):
    rows = [table.row(i) for i in range(len(table))]
    return [c for c in rows if (element_type is None or c.element_type.value == element_type)
            and (super_attribute is None or c.super_attribute == super_attribute)]


def _by_source(table, element_type, super_attribute=None):
    return {c.source_id: c for c in _crops(table, element_type, super_attribute)}


def test_object_pool_elements_and_filters(mined):
    _, table, _ = mined
    objects = _by_source(table, "object")
    assert {k: c.element for k, c in objects.items()} == {
        101: "shirt", 102: "car", 105: "dog", 109: "bench", 201: "horse"}
    # 104 sky (excluded), 106 zero-size, 107 outside, 108 too small, 110 unknown, 111 same box
    # as 101, 401 image missing from image_data.json: none is an object crop
    assert all(c.super_attribute == "" and c.phrase == "" for c in objects.values())


def test_boxes_are_clipped_to_the_image(mined):
    _, table, _ = mined
    assert _by_source(table, "object")[105].box == (700, 500, 100, 100)
    counts = {c.source_id: c for c in _crops(table, "count")}
    assert counts[1006].box == (600, 400, 200, 200)


def test_min_side_rule(tmp_path, vg_dir):
    mine(vg_dir, tmp_path / "p.h5", min_side=121, workers=1)
    table = read_crop_table(tmp_path / "p.h5", "POOLS.h5")
    assert set(table.w) | set(table.h) and min(table.w.min(), table.h.min()) >= 121
    assert 102 not in _by_source(table, "object")  # car is 150x120
    assert 101 in _by_source(table, "object")  # shirt is 200x150


def test_min_side_must_be_positive(tmp_path, vg_dir):
    with pytest.raises(VpromError, match="min-side"):
        mine(vg_dir, tmp_path / "p.h5", min_side=0, workers=1)


def test_purity_red_and_blue_car_is_no_colour_example(mined):
    report, table, _ = mined
    colours = _by_source(table, "object_attribute", "color")
    assert 102 not in colours  # "red" and "blue": impure
    assert _by_source(table, "object")[102].element == "car"  # still an object crop
    assert _by_source(table, "object_attribute", "material")[102].element == "wooden"
    pool = next(p for p in report.data["pools"]
                if (p["element_type"], p["super_attribute"]) == ("object_attribute", "color"))
    assert pool["impure"] == 1
    ages = next(p for p in report.data["pools"]
                if (p["element_type"], p["super_attribute"]) == ("human_attribute", "age"))
    assert ages["impure"] == 1  # woman: old and young


def test_human_and_object_attribute_tables(mined):
    _, table, _ = mined
    human = {(c.source_id, c.super_attribute): c.element for c in _crops(table, "human_attribute")}
    assert human == {(103, "age"): "young", (103, "action"): "standing",
                     (103, "clothing color"): "red", (202, "hair style"): "blond"}
    obj = {(c.source_id, c.super_attribute): c.element for c in _crops(table, "object_attribute")}
    assert obj == {(101, "color"): "red", (101, "texture"): "striped", (102, "material"): "wooden"}


def test_merged_object_ids_and_same_box_give_one_region(mined):
    report, table, _ = mined
    sources = [c.source_id for c in _crops(table)]
    assert 150 not in sources and 111 not in sources
    shirt = [c for c in _crops(table) if c.source_id == 101]
    assert sorted((c.element_type.value, c.element) for c in shirt) == [
        ("object", "shirt"), ("object_attribute", "red"), ("object_attribute", "striped")]
    assert report.data["objects"]["merged_object_ids_folded"] == 1
    assert report.data["objects"]["same_box_merged"] == 1


def test_excluded_objects_and_attributes_and_unknown_labels(mined):
    report, table, _ = mined
    assert 104 not in {c.source_id for c in _crops(table)}  # sky feeds no pool at all
    assert "nice" not in set(table.element)
    d = report.data
    assert d["objects"]["excluded_object"] == 1
    assert d["excluded_attributes"]["top"] == [["nice", 1]]
    assert d["unknown_labels"]["names"]["top"] == [["thingamajig", 1]]
    assert d["unknown_labels"]["attributes"]["top"] == [["shiny", 1]]


def test_filter_counts_in_report(mined):
    report, _, _ = mined
    o, r = report.data["objects"], report.data["regions"]
    assert (o["zero_size"], o["outside_image"], o["too_small"], o["clipped"]) == (1, 1, 1, 1)
    assert o["missing_image"] == 1 and r["missing_image"] == 1
    assert report.data["missing_image_ids"] == [4]
    assert r["zero_size"] == 1 and r["clipped"] == 1
    assert report.data["images"] == 3


def test_counts_pool(mined):
    report, table, path = mined
    counts = {c.source_id: c for c in _crops(table, "count")}
    assert {k: c.element for k, c in counts.items()} == {1001: "3", 1006: "2", 2001: "4"}
    assert counts[1001].phrase == "three dogs on the grass"
    assert counts[1001].labels == ("3", "dog")
    c = report.data["counts"]
    assert c["too_small"] == {"5": 1}  # "Five bowls of oatmeal" is 50x50
    assert c["excluded_by_reason"] == {"age": 1, "time": 1}
    assert c["samples"]["time"] == ["the clock says five o'clock"]
    tsv = path.with_name(path.name + ".excluded_counts.tsv").read_text().splitlines()
    assert tsv[0] == "region_id\timage_id\treason\tnumber\tphrase"
    assert sorted(line.split("\t")[0] for line in tsv[1:]) == ["1003", "1004"]
    assert all(line.split("\t")[2] for line in tsv[1:])  # every exclusion has its reason


def test_labels_column_holds_every_label_of_the_source(mined):
    _, table, _ = mined
    shirt = _by_source(table, "object")[101]
    assert shirt.labels == ("red", "shirt", "striped")
    car = _by_source(table, "object")[102]
    assert car.labels == ("blue", "car", "red", "wooden")
    unknown = _by_source(table, "human_attribute", "hair style")[202]
    assert unknown.labels == ("blond", "old", "woman", "young")


def test_crop_ids_sequential_by_element_type_then_input(mined):
    _, table, _ = mined
    assert list(table.crop_id) == list(range(len(table)))
    order = ["object_attribute", "human_attribute", "object", "count"]
    ranks = [order.index(t) for t in table.element_type]
    assert ranks == sorted(ranks)
    assert list(_by_source(table, "object")) == [101, 102, 105, 109, 201]


def test_manifest_and_report_files(mined):
    report, table, path = mined
    manifest = read_manifest(path)
    assert manifest["kind"] == "pools"
    assert set(manifest["inputs"]) == {"image_data.json", "objects.json", "attributes.json",
                                       "region_descriptions.json"}
    assert manifest["counts"]["crops"] == len(table)
    assert manifest["config"]["min_side"] == 100 and manifest["config"]["vocabulary_sha256"]
    on_disk = json.loads(path.with_name(path.name + ".report.json").read_text())
    assert on_disk == json.loads(report.to_json())
    md = path.with_name(path.name + ".report.md").read_text()
    assert "| object_attribute | color |" in md and "thingamajig" in md
    summary = report.summary()
    assert f"{len(table):,} crops" in summary and len(summary.splitlines()) <= 6


def test_pools_record_the_vocabulary_generation_needs(mined):
    import h5py

    from vprom.mining.vocab import load_vocabulary

    _, _, path = mined
    vocab = load_vocabulary()
    with h5py.File(path, "r") as h5:
        g = h5["vocabulary"]
        assert set(g["objects"].asstr()[()]) == vocab.objects
        human = dict(zip(g["human_attribute/label"].asstr()[()],
                         g["human_attribute/super_attribute"].asstr()[()]))
        assert human == dict(vocab.human_attributes)
        pairs = set(zip(g["implied/label"].asstr()[()], g["implied/value"].asstr()[()]))
    assert {("man", "male"), ("man", "adult"), ("girl", "young")} <= pairs
    assert pairs == {(n, v) for n, vs in vocab.implied_labels.items() for v in vs}


def test_report_lists_elements_with_few_crops(mined):
    report, _, _ = mined
    objects = next(p for p in report.data["pools"] if p["element_type"] == "object")
    assert ["car", 1] in objects["few_crops"] and objects["elements"] == 5
    assert objects["crops"] == 5 and objects["per_element"]["shirt"] == 1


def test_deterministic_and_independent_of_workers(tmp_path, vg_dir):
    a = mine(vg_dir, tmp_path / "a" / "pools.h5", workers=1)
    b = mine(vg_dir, tmp_path / "b" / "pools.h5", workers=2)
    ta, tb = read_crop_table(tmp_path / "a" / "pools.h5", "POOLS.h5"), read_crop_table(tmp_path / "b" / "pools.h5", "POOLS.h5")
    for name in ("crop_id", "image_id", "x", "y", "w", "h", "element_type", "element",
                 "super_attribute", "source_id", "phrase", "labels"):
        assert np.array_equal(getattr(ta, name), getattr(tb, name)), name
    assert a.to_json() == b.to_json()
    assert a.to_markdown() == b.to_markdown()
    tsv = [(p / "pools.h5.excluded_counts.tsv").read_bytes() for p in (tmp_path / "a", tmp_path / "b")]
    assert tsv[0] == tsv[1]


def test_zipped_corpus_mines_the_same_crops(tmp_path, mined):
    _, table, _ = mined
    vg = write_vg(tmp_path / "zip", zipped=("objects", "attributes", "region_descriptions"))
    mine(vg, tmp_path / "z.h5", workers=1)
    z = read_crop_table(tmp_path / "z.h5", "POOLS.h5")
    assert np.array_equal(z.labels, table.labels) and np.array_equal(z.x, table.x)


# ---------------------------------------------------------------- bad input
@pytest.fixture
def existing(tmp_path):
    """A previous POOLS.h5 (its manifest beside it says so: only then may `mine` replace it)."""
    out = tmp_path / "pools.h5"
    out.write_bytes(b"previous complete file")
    out.with_name("pools.h5.manifest.json").write_text('{"kind": "pools"}')
    return out


def _assert_untouched(out):
    assert out.read_bytes() == b"previous complete file"
    assert sorted(p.name for p in out.parent.iterdir() if p.name.startswith(".pools")) == []
    assert not out.with_name(out.name + ".report.json").exists()


@pytest.mark.parametrize("workers", [1, 2])
def test_truncated_json_fails_clearly_and_leaves_no_output(tmp_path, existing, workers):
    text = json.dumps(CORPUS["attributes"])
    vg = write_vg(tmp_path / "vg", corpus(attributes=text[:-60]))
    with pytest.raises(VpromError, match=r"attributes\.json: invalid or truncated JSON after "
                                         r"image record #\d+ \(image id \d+\)"):
        mine(vg, existing, workers=workers)
    _assert_untouched(existing)


def test_wrong_schema_names_file_image_and_object(tmp_path, existing):
    files = corpus()
    del files["attributes"][0]["attributes"][3]["w"]
    vg = write_vg(tmp_path / "vg", files)
    with pytest.raises(VpromError, match=r"attributes\.json: image 1, object 103 has no 'w' key"):
        mine(vg, existing, workers=1)
    _assert_untouched(existing)


def test_objects_and_attributes_out_of_step(tmp_path, existing):
    files = corpus()
    files["attributes"][1], files["attributes"][2] = files["attributes"][2], files["attributes"][1]
    vg = write_vg(tmp_path / "vg", files)
    with pytest.raises(VpromError, match=r"record #1 is image 3 but record #1 of objects\.json "
                                         "is image 2"):
        mine(vg, existing, workers=1)
    files = corpus()
    files["attributes"] = files["attributes"][:2]
    vg = write_vg(tmp_path / "vg2", files)
    with pytest.raises(VpromError, match=r"objects\.json: image record #2 \(image 3\) has no "
                                         r"counterpart in attributes\.json"):
        mine(vg, existing, workers=1)
    _assert_untouched(existing)


def test_missing_file(tmp_path, existing):
    vg = write_vg(tmp_path / "vg", {k: v for k, v in CORPUS.items() if k != "attributes"})
    with pytest.raises(VpromError, match=r"neither attributes\.json nor attributes\.json\.zip"):
        mine(vg, existing, workers=1)
    _assert_untouched(existing)


def test_cli_mine_ok_and_bad_input(tmp_path, vg_dir, capsys):
    out = tmp_path / "pools.h5"
    assert cli.main(["mine", "--vg", str(vg_dir), "--out", str(out), "--workers", "1"]) == 0
    assert "crops" in capsys.readouterr().out and out.is_file()
    broken = write_vg(tmp_path / "broken", corpus(objects="[{\"image_id\": 1, \"objects\": ["))
    before = out.read_bytes()
    assert cli.main(["mine", "--vg", str(broken), "--out", str(out), "--workers", "1"]) == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert err.startswith("vprom mine: error: ") and "objects.json" in err
    assert out.read_bytes() == before


def test_a_worker_that_dies_is_reported_not_waited_for():
    import multiprocessing

    from vprom.processes import receive

    class Dead:
        name, exitcode = "vprom-mine-1", -9

        def join(self):
            pass

    receive_end, send = multiprocessing.get_context("spawn").Pipe(duplex=False)
    send.close()  # the worker exited without sending a result
    with pytest.raises(VpromError, match=r"worker vprom-mine-1 died \(exit code -9\)"):
        receive(receive_end, Dead())


def _pass(rng, n: int, strings: list[str]):
    """A PassResult of `n` random crops whose string columns hold `strings`."""
    from vprom.mining.pool_passes import PassResult

    columns = {name: rng.integers(0, 1000, n).astype(np.int64) for name in
               ("image_id", "source_id", "x", "y", "w", "h")}
    columns.update({name: np.array(strings, dtype=object)[rng.integers(0, len(strings), n)]
                    for name in ("element", "super_attribute", "phrase", "labels")})
    columns["element_type"] = rng.integers(0, 4, n).astype(np.int8)
    return PassResult(columns, {}, {"f.json": "0" * 64})


def test_the_merge_orders_by_element_type_then_input():
    from vprom.mining.pool_passes import ELEMENT_TYPES, PassResult
    from vprom.mining.pools import _merge

    rng = np.random.default_rng(0)
    passes = [_pass(rng, 50, ["a", "b", "c"]), _pass(rng, 30, ["c", "d"])]
    want = {}  # the plain formula: concatenate, then a stable sort by element type
    for name in passes[0].columns:
        want[name] = np.concatenate([p.columns[name] for p in passes])
    order = np.argsort(want["element_type"], kind="stable")
    table, inputs = _merge(passes)
    assert np.array_equal(table.crop_id, np.arange(80)) and inputs == {"f.json": "0" * 64}
    for name, values in want.items():
        got = getattr(table, name)
        if name == "element_type":
            values = np.array(ELEMENT_TYPES, dtype=object)[values]
        assert got.tolist() == values[order].tolist(), name
    empty = PassResult({}, {}, {})  # a pass without a single chunk of crops
    alone, _ = _merge([empty, _pass(np.random.default_rng(1), 5, ["x"])])
    assert len(alone) == 5 and set(alone.element.tolist()) == {"x"}
