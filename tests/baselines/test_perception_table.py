"""Perception against reasoning: feature sources read from the runs' records, set side by side
per split beside chance and the perception-only ceiling, and kept out of Table 2."""

from __future__ import annotations

import csv
import io
import json
import re

import h5py
import numpy as np
from PIL import Image

from tests.baselines.test_report import fake_run
from tests.generation.synthetic_build import synthetic_build  # noqa: F401 (a fixture)
from vprom.app.score import perception_ceilings
from vprom.baselines.perception_table import PERFECT, feature_source
from vprom.baselines.report import load_entry, report
from vprom.generation.verify.ceiling import perception_ceiling
from vprom.manifest import make_manifest, write_manifest
from vprom.statistics import wilson_interval
from vprom.tables import MatrixTable, present_rows, read_matrix_table


def run_on(folder, accuracy, attrs, **config):
    """A fake evaluated run whose config.json records its features file's attributes."""
    run = fake_run(folder, accuracy, 1000, [2.0, 1.0], **config)
    (run / "config.json").write_text(json.dumps({"features_attrs": attrs}))
    metrics = json.loads((run / "metrics.json").read_text())
    metrics["features"] = {"backbone": attrs["backbone"], "weights": attrs.get("weights")}
    metrics["dataset"] = "../dataset.h5"
    (run / "metrics.json").write_text(json.dumps(metrics))
    return run


LABELS = {"backbone": "labels", "symbolic": True, "label_noise": 0.0, "weights": ""}
RANDOM = {"backbone": "resnet18", "weights": "none"}
TRAINED = {"backbone": "resnet18", "weights": "w.pt", "weights_kind": "perception-weights"}


def three_sources(folder):
    """RN +aux on labels (neutral 90%, held_out_objects 60%), trained perception (50%) and
    random weights (20%)."""
    return [run_on(folder / "labels", 0.9, LABELS, aux=True),
            run_on(folder / "labels-held", 0.6, LABELS, aux=True, split="held_out_objects"),
            run_on(folder / "trained", 0.5, TRAINED, aux=True),
            run_on(folder / "random", 0.2, RANDOM, aux=True)]


def test_a_runs_feature_source_comes_from_its_features_files_record(tmp_path):
    assert feature_source(LABELS, "labels") == PERFECT == "perfect perception (labels)"
    # the file's manifest says it too, where the attributes were not kept
    assert feature_source({"manifest": {"config": {"symbolic": True}}}, "labels") == PERFECT
    assert feature_source({**LABELS, "label_noise": 0.1}, "labels") == "labels, noise 0.1"
    assert feature_source(RANDOM, "resnet18") == "random weights (resnet18)"
    assert feature_source(TRAINED, "resnet18") == "trained perception model (resnet18)"
    assert (feature_source({**TRAINED, "pool": "heads"}, "resnet18")
            == "trained perception model (resnet18, predicted labels)")
    weights = tmp_path / "perceived.pt"
    weights.write_bytes(b"weights")
    write_manifest(weights, make_manifest("perception-weights", {}))
    assert (feature_source({"weights": str(weights)}, "resnet18")
            == "trained perception model (resnet18)")
    assert feature_source({"weights": "imagenet:IMAGENET1K_V2"}, "resnet101") == "ResNet"
    assert feature_source({"weights": "imagenet:x"}, "resnet50") == "resnet50"


def test_the_sources_are_set_side_by_side_beside_chance_and_the_ceiling(tmp_path):
    (tmp_path / "dataset.h5").write_bytes(b"")
    runs = [*three_sources(tmp_path),
            run_on(tmp_path / "control", 0.125, RANDOM, shuffle_context=True),
            run_on(tmp_path / "pretrained", 0.55, {"backbone": "resnet101",
                                                    "weights": "imagenet:x"})]
    assert load_entry(runs[0]).label == "RN perfect perception (labels) +aux"
    asked = []

    def ceilings(dataset, splits):
        asked.append((dataset, splits))
        return {"neutral": (0.868, 1000), "held_out_objects": (0.95, 500)}

    report(runs, tmp_path / "out", ceilings=ceilings)
    assert asked == [((tmp_path / "dataset.h5").resolve(), ["held_out_objects", "neutral"])]
    text = (tmp_path / "out" / "perception.md").read_text()
    lines = [line for line in text.splitlines() if line.startswith("| ")]
    assert lines[0] == "| feature source | model | neutral | held_out_objects |"
    low, high = (100 * x for x in wilson_interval(900, 1000))
    assert [line.split(" | ")[0] for line in lines[1:]] == [
        "| random weights (resnet18)", "| ResNet", "| trained perception model (resnet18)",
        "| perfect perception (labels)", "| chance", "| perception-only ceiling"]
    assert (f"| perfect perception (labels) | RN +aux | 90.0 ({low:.1f}–{high:.1f}) | 60.0 ("
            in text)
    assert "| chance |  | 12.5 | 12.5 |" in text
    assert "| perception-only ceiling |  | 86.8 | 95.0 |" in text
    assert "shuffled" not in text and "computed on each split's test problems" in text
    table2 = (tmp_path / "out" / "table2.md").read_text()
    assert "labels" not in table2 and "random weights" not in table2
    assert "| RN | 55.0 (" in table2 and "| RN (shuffled context) |" not in table2
    rows = list(csv.DictReader(io.StringIO((tmp_path / "out" / "perception.csv").read_text())))
    assert {r["source"] for r in rows} >= {"chance", "perception-only ceiling", PERFECT}
    with Image.open(tmp_path / "out" / "perception.png") as image:
        assert image.format == "PNG"
    page = (tmp_path / "out" / "report.md").read_text()
    assert "## Perception against reasoning" in page and "![perception.png]" in page


def test_without_the_data_set_the_table_says_why_it_has_no_ceiling(tmp_path):
    run = run_on(tmp_path / "labels", 0.9, LABELS)
    report([run], tmp_path / "out", ceilings=lambda dataset, splits: {})
    text = (tmp_path / "out" / "perception.md").read_text()
    assert "No perception-only ceiling: the runs' data set" in text and "is not there" in text
    assert "| perception-only ceiling |" not in text


def test_the_reports_ceiling_is_verifys_on_each_splits_test_problems(synthetic_build):  # noqa: F811
    dataset, _ = synthetic_build
    table = read_matrix_table(dataset)
    found = perception_ceilings(dataset, ["neutral", "held_out_attributes", "no_such_split"])
    assert set(found) == {"neutral", "held_out_attributes"}
    for split, (ceiling, n) in found.items():
        rows = present_rows(table.id, table.splits[split]["test"])
        test = MatrixTable(table.id[rows], table.relation[rows], table.element_type[rows],
                           table.super_attribute[rows], table.answer[rows], table.panels[rows],
                           table.elements[rows], {})
        assert n == len(rows) > 0
        assert ceiling == perception_ceiling(test)["all"]
    with h5py.File(dataset, "r") as h5:
        assert len(np.unique(h5["splits/neutral/test"][()])) == found["neutral"][1]


def test_the_report_ends_with_a_verdict_on_the_order_of_the_sources(tmp_path):
    (tmp_path / "dataset.h5").write_bytes(b"")
    good = [*three_sources(tmp_path),
            run_on(tmp_path / "shuffled", 0.125, RANDOM, aux=True, shuffle_context=True),
            run_on(tmp_path / "blind", 0.13, RANDOM, model="context-blind")]
    checked = []

    def verified(dataset):
        checked.append(dataset)
        return "`vprom verify` PASS"

    printed = report(good, tmp_path / "out", ceilings=lambda d, s: {"neutral": (0.868, 1000)},
                     verified=verified)
    assert checked == [(tmp_path / "dataset.h5").resolve()]
    table, verdict = printed.split("perception against reasoning (")[1].split("\nverdict:\n")
    assert "| perfect perception (labels) | RN +aux | 90.0 (" in table
    lines = verdict.splitlines()
    assert lines[0] == "  data set: `vprom verify` PASS"
    assert lines[1] == "  neutral: chance 12.5%, perception-only ceiling 86.8%"
    low, high = (100 * x for x in wilson_interval(900, 1000))
    assert lines[2] == f"    perfect perception (labels), RN +aux: 90.0 ({low:.1f}–{high:.1f})"
    names = [line.split(":")[0].strip() for line in lines[3:7]]
    assert names[:2] == ["trained perception model (resnet18), RN +aux",
                         "random weights (resnet18), RN +aux"]
    assert set(names[2:]) == {"control RN +aux, shuffled context", "control context-blind"}
    assert lines[7].startswith("  held_out_objects: perfect perception (labels), RN +aux 60.0 (")
    assert lines[7].endswith(", 30.0 points below neutral")
    assert lines[-1] == "  here: the order holds"

    # the random-weights run no better than a control, a control above chance, no data set
    bad = [run_on(tmp_path / "bad" / "labels", 0.9, LABELS, aux=True),
           run_on(tmp_path / "bad" / "random", 0.14, RANDOM, aux=True),
           run_on(tmp_path / "bad" / "blind", 0.3, RANDOM, model="context-blind")]
    printed = report(bad, tmp_path / "bad-out", verified=verified)
    assert "data set: not checked (the runs' data set" in printed
    assert re.search(r"here: random weights is not clear above controls; control context-blind "
                     r"random weights \(resnet18\) misses chance \(\d+\.\d\d–\d+\.\d\d%\)$",
                     printed)
