"""Reports: Table 2 beside the paper, models × splits, CSVs and plots over real runs."""

from __future__ import annotations

import csv
import io
import json

import pytest
from PIL import Image

from baselines.evaluate import evaluate
from baselines.paper import TABLE2_NEUTRAL, feature_type
from baselines.report import report
from baselines.train import train
from tests.baselines.conftest import small_config, write_pair
from vprom.errors import VpromError


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Five evaluated 1-epoch runs: ResNet and bottom-up features, aux, two splits, a control."""
    root = tmp_path_factory.mktemp("report")
    resnet = write_pair(root / "resnet", backbone="resnet101")
    bottomup = write_pair(root / "bottomup", backbone="bottomup-r101")
    cells = [
        (resnet, dict(model="rn"), "rn-resnet"),
        (resnet, dict(model="rn", aux=True), "rn-resnet-aux"),
        (bottomup, dict(model="rn"), "rn-bottomup"),
        (resnet, dict(model="rn", split="interpolation"), "rn-resnet-interp"),
        (resnet, dict(model="rn", shuffle_context=True), "rn-shuffled"),
    ]
    folders = []
    for (dataset, features), overrides, name in cells:
        run = train(small_config(dataset, features, root / "runs" / name, epochs=1,
                                 **overrides))
        evaluate(run, device="cpu")
        folders.append(run)
    return root, folders


@pytest.fixture(scope="module")
def written(runs):
    """The report over the five runs, written once: (its folder, the summary it returned)."""
    root, folders = runs
    return root / "report", report(folders, root / "report")


def rows(path) -> list[dict]:
    return list(csv.DictReader(io.StringIO(path.read_text())))


def accuracy(run) -> float:
    return round(100 * json.loads((run / "metrics.json").read_text())["test"]["accuracy"], 2)


def test_feature_type_follows_the_backbone_name():
    assert feature_type("resnet101") == feature_type("resnet18") == "ResNet"
    assert feature_type("bottomup-r101") == "bottom-up"
    assert feature_type("clip") == "clip"


def test_report_writes_table2_beside_the_paper(runs, written):
    _, folders = runs
    out, summary = written
    for name in ("report.md", "table2.md", "table2.csv", "splits.md", "splits.csv",
                 "by_relation.png", "by_element_type.png", "curves.png"):
        assert str(out / name) in summary
    table = rows(out / "table2.csv")
    cell = {(r["model"], r["features"], r["aux"], r["control"]): r for r in table}
    # every paper number is there, beside ours where we have a run
    for model, per_cell in TABLE2_NEUTRAL.items():
        for (features, aux), value in per_cell.items():
            assert float(cell[(model, features, str(aux), "")]["paper"]) == value
    assert float(cell[("rn", "ResNet", "False", "")]["ours"]) == accuracy(folders[0])
    assert float(cell[("rn", "ResNet", "True", "")]["ours"]) == accuracy(folders[1])
    assert float(cell[("rn", "bottom-up", "False", "")]["ours"]) == accuracy(folders[2])
    assert cell[("rn", "bottom-up", "True", "")]["ours"] == ""  # not run
    assert cell[("vqa", "ResNet", "False", "")]["ours"] == ""
    control = cell[("rn", "ResNet", "False", "shuffled context")]
    assert float(control["ours"]) == accuracy(folders[4]) and control["paper"] == ""
    assert float(cell[("humans", "", "", "")]["paper"]) == 77.8

    markdown = (out / "table2.md").read_text()
    assert "| model | ResNet | paper | ResNet +aux | paper | bottom-up | paper |" in markdown
    assert "| RN | " in markdown and "| 51.2 |" in markdown and "| 61.3 |" in markdown
    assert "| RN (shuffled context) |" in markdown
    assert "Humans (paper): 77.8%" in markdown


def test_report_writes_models_by_splits(runs, written):
    _, folders = runs
    out, _ = written
    table = rows(out / "splits.csv")
    assert len(table) == 5
    cell = {(r["features"], r["aux"], r["control"], r["split"]): r for r in table}
    assert float(cell[("ResNet", "False", "", "interpolation")]["accuracy"]) == accuracy(
        folders[3])
    assert int(cell[("ResNet", "False", "", "neutral")]["n_test"]) == 40
    markdown = (out / "splits.md").read_text()
    assert "| model | features | aux | neutral | interpolation |" in markdown


def test_report_plots_are_pngs(written):
    out, _ = written
    for name in ("by_relation.png", "by_element_type.png", "curves.png"):
        with Image.open(out / name) as image:
            assert image.format == "PNG" and image.width > 300
    page = (out / "report.md").read_text()
    assert "![curves.png](curves.png)" in page and "5 runs" in page
    # the fixtures' features come from random weights: the page must say so
    assert "weights none" in page and "not comparable with the paper" in page


def test_seeds_of_one_cell_are_averaged(runs, tmp_path):
    root, folders = runs
    dataset, features = root / "resnet" / "dataset.h5", root / "resnet" / "feats.h5"
    other = train(small_config(dataset, features, root / "extra" / "rn-seed1", model="rn",
                               epochs=1, seed=1))
    evaluate(other, device="cpu")
    report([folders[0], other], tmp_path / "out")
    cell = [r for r in rows(tmp_path / "out" / "table2.csv") if r["ours"]]
    assert len(cell) == 1 and cell[0]["runs"] == "2"
    assert float(cell[0]["ours"]) == pytest.approx((accuracy(folders[0]) + accuracy(other)) / 2,
                                                   abs=0.01)


def test_a_folder_of_runs_is_searched_for_runs(runs, tmp_path):
    root, folders = runs
    summary = report([root / "runs"], tmp_path / "out")
    assert summary.startswith(f"report over {len(folders)} runs")
    assert len(rows(tmp_path / "out" / "splits.csv")) == len(folders)


def test_report_refuses_runs_without_metrics(runs, tmp_path):
    with pytest.raises(VpromError, match="no metrics.json; evaluate the run first"):
        report([tmp_path], tmp_path / "out")
    with pytest.raises(VpromError, match="at least one run"):
        report([], tmp_path / "out")
