"""Reports: Table 2 beside the paper, models × splits, CSVs and plots over real runs."""

from __future__ import annotations

import csv
import io
import json

import pytest
from PIL import Image

from vprom.baselines.evaluate import evaluate
from vprom.baselines.paper import TABLE2_NEUTRAL, feature_type
from vprom.baselines.report import load_entry, report
from vprom.baselines.train import train
from tests.baselines.conftest import small_config, write_pair
from vprom.errors import VpromError
from vprom.statistics import wilson_interval


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Five evaluated 1-epoch runs: ResNet and bottom-up features (stand-ins for pretrained
    ones), aux, two splits, a control."""
    root = tmp_path_factory.mktemp("report")
    resnet = write_pair(root / "resnet", backbone="resnet101", weights="r101.pth")
    bottomup = write_pair(root / "bottomup", backbone="bottomup-r101", weights="bu.pth")
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
    assert feature_type("resnet101") == "ResNet"  # the paper's two backbones
    assert feature_type("bottomup-r101") == "bottom-up"
    assert feature_type("resnet18") == "resnet18"  # never shown as the paper's ResNet-101
    assert feature_type("timm:vit_base_patch16_224.dino") == "timm:vit_base_patch16_224.dino"


def test_report_writes_table2_beside_the_paper(runs, written):
    _, folders = runs
    out, summary = written
    for name in ("report.md", "table2.md", "table2.csv", "splits.md", "splits.csv",
                 "perception.md", "perception.csv", "perception.png", "by_relation.png",
                 "by_element_type.png", "curves.png"):
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
    assert ("| model | ResNet | paper | ResNet +aux | paper | bottom-up | paper | bottom-up +aux "
            "| paper |") in markdown
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
    for name in ("perception.png", "by_relation.png", "by_element_type.png", "curves.png"):
        with Image.open(out / name) as image:
            assert image.format == "PNG" and image.width > 300
    page = (out / "report.md").read_text()
    assert "![curves.png](curves.png)" in page and "5 runs" in page
    assert "weights r101.pth" in page and "not comparable with the paper" not in page


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


# ---------------------------------------------------------------- did not learn; settings
def fake_run(folder, accuracy: float, n: int, losses: list[float], **config):
    """A run folder as `vprom evaluate` leaves it, with the figures given."""
    folder.mkdir(parents=True)
    correct = round(accuracy * n)
    score = {"n": n, "correct": correct, "accuracy": correct / n,
             "ci95": list(wilson_interval(correct, n))}
    settings = {"model": "rn", "split": "neutral", "aux": False, "shuffle_context": False,
                "optimizer": "adadelta", "lr": 1.0, "center_features": False, "seed": 0,
                "dataset": "d.h5", "features": "f.h5", **config}
    metrics = {"run": str(folder), "model": settings["model"], "split": settings["split"],
               "aux": settings["aux"], "shuffle_context": settings["shuffle_context"],
               "seed": settings["seed"],
               "features": {"backbone": "resnet101", "weights": "imagenet"},
               "dataset_content_hash": "sha256:abc", "config": settings, "test": score,
               "by_relation": {"and": score}, "by_element_type": {"object": score},
               "by_relation_element_type": {"and": {"object": score}}}
    (folder / "metrics.json").write_text(json.dumps(metrics))
    (folder / "history.json").write_text(json.dumps(
        [{"epoch": i + 1, "train_loss": x, "train_answer_loss": x, "val_acc": 0.1}
         for i, x in enumerate(losses)]))
    return folder


def test_tables_and_legends_name_the_backbone(tmp_path):
    """A random ResNet-18 is not the paper's ResNet, nor is a timm model: each is named in
    tables and plot legends (`Entry.label`); random weights are said, and kept out of Table 2."""
    paper = fake_run(tmp_path / "r101", 0.5, 100, [1.0])
    small = fake_run(tmp_path / "r18", 0.4, 100, [1.0])
    dino = fake_run(tmp_path / "dino", 0.6, 100, [1.0])
    for run, backbone, weights in ((small, "resnet18", "none"),
                                   (dino, "timm:vit_small_patch16_224.dino", "dino.pth")):
        metrics = json.loads((run / "metrics.json").read_text())
        metrics["features"] = {"backbone": backbone, "weights": weights}
        (run / "metrics.json").write_text(json.dumps(metrics))
    assert load_entry(paper).label == "RN ResNet"
    assert load_entry(small).label == "RN random weights (resnet18)"
    assert load_entry(dino).label == "RN timm:vit_small_patch16_224.dino"
    report([paper, small, dino], tmp_path / "out")
    markdown = (tmp_path / "out" / "table2.md").read_text()
    assert ("| ResNet | paper | ResNet +aux | paper | bottom-up | paper | bottom-up +aux | paper "
            "| timm:vit_small_patch16_224.dino | paper |") in markdown
    assert "random weights" not in markdown
    splits = (tmp_path / "out" / "splits.md").read_text()
    assert "| RN | random weights (resnet18) | no | 40.0 |" in splits
    page = (tmp_path / "out" / "report.md").read_text()
    assert "not comparable with the paper's** (they are shown under Perception" in page
    assert "| RN | timm:vit_small_patch16_224.dino | no | 60.0 |" in splits


def test_runs_that_did_not_learn_are_flagged(tmp_path):
    stuck = fake_run(tmp_path / "stuck", 0.40, 1000, [2.0794, 2.0791, 2.0790])
    chance = fake_run(tmp_path / "chance", 0.13, 1000, [2.0, 1.9], aux=True)
    learned = fake_run(tmp_path / "learned", 0.40, 1000, [2.0, 1.5], split="interpolation")
    summary = report([stuck, chance, learned], tmp_path / "out")
    assert "2 of 3 runs did not learn" in summary
    assert "training answer loss never left ln 8 = 2.0794 (lowest 2.0790 in 3 epochs)" in summary
    assert "test accuracy 13.0% is within the chance interval" in summary
    table = {(r["aux"], r["did_not_learn"]) for r in rows(tmp_path / "out" / "table2.csv")
             if r["ours"]}
    assert table == {("False", "1"), ("True", "1")}
    learned_row = [r for r in rows(tmp_path / "out" / "splits.csv")
                   if r["split"] == "interpolation"]
    assert learned_row[0]["did_not_learn"] == "0"
    page = (tmp_path / "out" / "report.md").read_text()
    assert "## Runs that did not learn" in page and "(did not learn)" in page
    assert str(learned) not in page.split("## Runs that did not learn")[1].split("##")[0]


def test_controls_are_shown_as_controls_and_checked_against_chance(tmp_path):
    blind = fake_run(tmp_path / "blind", 0.132, 1000, [2.0794, 2.0794], model="context-blind")
    shuffled = fake_run(tmp_path / "shuffled", 0.12, 1000, [2.08], shuffle_context=True)
    leaky = fake_run(tmp_path / "leaky", 0.20, 1000, [1.9], shuffle_context=True, aux=True)
    learned = fake_run(tmp_path / "learned", 0.40, 1000, [2.0, 1.5])
    summary = report([blind, shuffled, leaky, learned], tmp_path / "out")
    page = (tmp_path / "out" / "report.md").read_text()
    assert "did not learn" not in summary and "## Runs that did not learn" not in page
    controls = page.split("## Controls (expected at chance)")[1].split("\n## ")[0]
    assert f"- pass: `{blind}`" in controls and f"- pass: `{shuffled}`" in controls
    assert f"- FAIL: `{leaky}`" in controls and "above chance: 20.0%" in controls
    assert str(learned) not in controls
    table2 = (tmp_path / "out" / "table2.md").read_text()
    low, high = wilson_interval(132, 1000)
    assert f"13.2 ({100 * low:.1f}–{100 * high:.1f}) (control: pass)" in table2
    assert "(control: FAIL)" in table2 and "(did not learn)" not in table2
    assert "(control: pass)" in (tmp_path / "out" / "splits.md").read_text()


def test_a_control_passes_while_its_interval_reaches_down_to_chance_plus_two_points():
    from vprom.baselines.metrics import control_result

    def at(correct, n):
        return {"test": {"accuracy": correct / n, "ci95": list(wilson_interval(correct, n))}}

    assert control_result(at(125, 1000))[0]
    low = lambda k: wilson_interval(k, 1000)[0]  # noqa: E731
    edge = max(k for k in range(1000) if low(k) <= 0.145)
    assert control_result(at(edge, 1000))[0] and not control_result(at(edge + 1, 1000))[0]


def test_the_chance_interval_is_wilsons_around_one_in_eight():
    from vprom.baselines.metrics import did_not_learn

    low, high = wilson_interval(125, 1000)
    assert low < 0.125 < high
    metrics = lambda acc: {"test": {"n": 1000, "accuracy": acc}}  # noqa: E731
    assert did_not_learn(metrics(high - 1e-9), []) and not did_not_learn(metrics(high + 1e-3), [])
    assert did_not_learn(metrics(low + 1e-9), []) and not did_not_learn(metrics(low - 1e-3), [])
    # far below chance is not "did not learn": the run learned something (a wrong preference)
    assert not did_not_learn(metrics(0.01), [])


def test_runs_of_one_cell_with_other_settings_are_not_averaged(tmp_path):
    a = fake_run(tmp_path / "a", 0.5, 100, [1.0])
    b = fake_run(tmp_path / "b", 0.6, 100, [1.0], seed=1, lr=0.5, center_features=True)
    with pytest.raises(VpromError, match=r"cannot average the runs of RN ResNet on neutral: "
                                         r"their settings differ \(center_features False in "
                                         r".*a vs True in .*b; lr 1.0 in .*a vs 0.5 in .*b\)"):
        report([a, b], tmp_path / "out")
    c = fake_run(tmp_path / "c", 0.6, 100, [1.0], seed=1, device="cuda:0")  # only where/seed
    assert "report over 2 runs" in report([a, c], tmp_path / "out")


def test_a_folder_that_does_not_exist_is_named(tmp_path):
    with pytest.raises(VpromError, match="nosuchdir: no such folder"):
        report([tmp_path / "nosuchdir"], tmp_path / "out")


def test_later_solvers_are_grouped_after_the_papers_models(tmp_path):
    runs = [fake_run(tmp_path / "scl", 0.7, 100, [1.0], model="scl"),
            fake_run(tmp_path / "wren", 0.6, 100, [1.0], model="wren"),
            fake_run(tmp_path / "rn", 0.5, 100, [1.0]),
            fake_run(tmp_path / "blind", 0.12, 100, [2.08], model="context-blind-pixels")]
    report(runs, tmp_path / "out")
    for table in ("table2.md", "splits.md"):
        lines = (tmp_path / "out" / table).read_text().splitlines()
        names = [line.split(" | ")[0].lstrip("| ") for line in lines if line.startswith("| ")]
        opening = "*later solvers* (WReN (Barrett et al. 2018), SCL (Wu et al. 2020))"
        rn = names.index("RN")
        assert names[rn + 1:rn + 4] == [opening, "wren", "scl"], table
        assert names[rn + 4].startswith("context-blind-pixels"), table  # a control, after them
    assert "(control: pass)" in (tmp_path / "out" / "table2.md").read_text()
