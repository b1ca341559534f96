"""`vprom reproduce`: the grid, weights checks, resumability, and a tiny end-to-end run."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
from pathlib import Path

import pytest

import vprom.app.reproduce as reproduce_module
from tests.baselines.conftest import write_pair
from vprom.app.reproduce import ReproduceConfig, backbone_weights, grid, reproduce
from vprom.domain import SPLITS
from vprom.errors import VpromError


def config(out: Path, **overrides) -> ReproduceConfig:
    options = {"vg": None, "synthetic": True, "out": out}
    options.update(overrides)
    return ReproduceConfig(**options)


def test_the_default_grid_is_the_papers(tmp_path):
    specs = grid(config(tmp_path))
    assert len(specs) == 2 * (4 * 2 * len(SPLITS) + 2)
    folders = [s.folder(tmp_path) for s in specs]
    assert len(set(folders)) == len(folders)
    assert {s.panels for s in specs} == {"resnet101", "bottomup-r101"}
    controls = [s for s in specs if s.model == "context-blind" or s.shuffle_context]
    assert {(s.model, s.shuffle_context, s.split) for s in controls} == {
        ("context-blind", False, "neutral"), ("rn", True, "neutral")}


def test_weights_default_to_imagenet_and_bottomup_needs_a_path(tmp_path):
    assert backbone_weights(config(tmp_path, backbones="resnet18,resnet101")) == {
        "resnet18": "imagenet", "resnet101": "imagenet"}
    with pytest.raises(VpromError, match="bottomup-r101 .*converted checkpoint.*--weights "
                                         "imagenet,PATH"):
        backbone_weights(config(tmp_path))
    assert backbone_weights(config(tmp_path, weights="imagenet,/w/bu.pkl")) == {
        "resnet101": "imagenet", "bottomup-r101": "/w/bu.pkl"}
    with pytest.raises(VpromError, match="1 entries for 2 backbones"):
        backbone_weights(config(tmp_path, weights="none"))


def test_timm_backbones_add_columns_with_cached_weights_by_default(tmp_path):
    chosen = config(tmp_path, backbones="resnet101,timm:test_vit")
    assert backbone_weights(chosen) == {"resnet101": "imagenet", "timm:test_vit": "pretrained"}
    folders = {s.folder(tmp_path).relative_to(tmp_path).parts[0] for s in grid(chosen)}
    assert folders == {"resnet101", "timm-test_vit"}  # no colon in a path


def test_bad_grids_are_refused(tmp_path):
    with pytest.raises(VpromError, match="unknown model 'nope'"):
        grid(config(tmp_path, models="rn,nope"))
    with pytest.raises(VpromError, match="unknown split 'nope'"):
        grid(config(tmp_path, splits="neutral,nope"))
    with pytest.raises(VpromError, match="--models is empty"):
        grid(config(tmp_path, models=" , "))
    with pytest.raises(VpromError, match="--crop-size must be a positive"):
        grid(config(tmp_path, models="predrnet", crop_size=0))


def test_every_registered_model_runs_on_the_panels_it_reads(tmp_path):
    """Vector and map models once per backbone, pixel models once on the crop store."""
    from vprom.baselines.registry import input_kind, list_models

    specs = grid(config(tmp_path, backbones="resnet18,resnet101", models=",".join(list_models()),
                        splits="neutral", crop_size=32))
    for model in list_models():
        cells = [s for s in specs if s.model == model and not s.shuffle_context]
        kind = input_kind(model)
        assert {s.kind for s in cells} == {kind}
        expected = {"crops-32"} if kind == "pixels" else {"resnet18", "resnet101"}
        assert {s.panels for s in cells} == expected, model
        assert len(cells) == 2 * len(expected)  # without and with aux
    folders = [s.folder(tmp_path) for s in specs]
    assert len(set(folders)) == len(folders)


def test_reproduce_runs_the_grid_and_skips_finished_runs(tmp_path, monkeypatch, capsys):
    """The build and extraction are replaced by a tiny ready pair; training is real."""
    dataset, features = write_pair(tmp_path / "pair", n=120)
    calls = []
    monkeypatch.setattr(reproduce_module, "_build", lambda c: (dataset, tmp_path))
    monkeypatch.setattr(reproduce_module, "_panels",
                        lambda c, d, vg, kind, panels, w: calls.append(panels) or features)
    grid_config = config(tmp_path / "repro", backbones="resnet18", weights="none",
                         models="mlp-sum-2", splits="neutral,extrapolation", epochs=1,
                         device="cpu")
    out = reproduce(grid_config)
    assert out == tmp_path / "repro" / "report"
    assert calls == ["resnet18"]  # one features file for every run
    runs = sorted(p.parent for p in (tmp_path / "repro" / "runs").rglob("metrics.json"))
    assert len(runs) == 2 * 2 + 2
    table = list(csv.DictReader(io.StringIO((out / "splits.csv").read_text())))
    assert len(table) == len(runs)
    printed = capsys.readouterr().out
    assert "table2.md" in printed and "report.md" in printed
    # one epoch at chance: the runs are flagged in the metrics and the report summary
    assert "DID NOT LEARN" in printed and "runs did not learn:" in printed
    assert "did_not_learn" in table[0]

    # a second run finds everything complete; a deleted result is redone
    stamp = {run: (run / "metrics.json").stat().st_mtime_ns for run in runs}
    (runs[0] / "metrics.json").unlink()
    reproduce(grid_config)
    printed = capsys.readouterr().out
    assert printed.count("complete, skipped") == len(runs) - 1
    for run in runs[1:]:
        assert (run / "metrics.json").stat().st_mtime_ns == stamp[run]
    assert (runs[0] / "metrics.json").is_file()

    # more epochs: no finished run is current for them, so each is continued, none skipped
    reproduce(dataclasses.replace(grid_config, epochs=2))
    assert "complete, skipped" not in capsys.readouterr().out
    assert all(len(json.loads((run / "history.json").read_text())) == 2 for run in runs)


@pytest.mark.slow
def test_reproduce_end_to_end_on_the_synthetic_corpus(tmp_path, capsys):
    """A vector, a map and a pixel model through build, extract (pooled and maps), crops,
    train, evaluate and report; a second run keeps every file it made."""
    from vprom.crop_store import CropStore

    from vprom.feature_files import load_features, open_maps

    root = tmp_path / "repro"
    # small crops keep a random-weight ResNet-18 fast on a CPU; everything else is as shipped
    settings = ReproduceConfig(vg=None, synthetic=True, out=root, images=2000, scale=0.002,
                               backbones="resnet18", weights="none",
                               models="mlp-sum-2,panel-transformer,predrnet",
                               splits="neutral", epochs=1, device="cpu", input_size=64,
                               crop_size=16, center_features=True)
    out = reproduce(settings)
    feats = load_features(root / "features" / "resnet18.h5")
    assert list(feats.attrs["input_size"]) == [64, 64]
    with open_maps(root / "maps" / "resnet18.h5") as maps:
        assert maps.shape[-2:] == (2, 2)  # ResNet-18's stride 32 on 64 px
    with CropStore(root / "crops" / "crops-16.h5") as store:
        assert store.size == 16
    table = list(csv.DictReader(io.StringIO((out / "splits.csv").read_text())))
    assert len(table) == 3 * 2 + 2
    assert {row["model"] for row in table} == {"mlp-sum-2", "panel-transformer", "predrnet",
                                               "context-blind", "rn"}
    assert {row["features"] for row in table if row["model"] == "predrnet"} == {"crops 16px"}
    for name in ("table2.md", "report.md", "by_relation.png", "curves.png"):
        assert (out / name).is_file()
    splits_md = (out / "splits.md").read_text()  # table2 leaves random-weight runs out
    assert "later solvers" in splits_md and "panel-transformer" in splits_md
    assert "predrnet" in splits_md
    # --center-features centres the pooled vectors; maps and pixels train as stored
    centred = {json.loads(p.read_text())["config"]["model"]:
               json.loads(p.read_text())["config"]["center_features"]
               for p in (root / "runs").rglob("config.json")}
    assert centred == {"mlp-sum-2": True, "context-blind": True, "rn": True,
                       "panel-transformer": False, "predrnet": False}

    # the data set, the panels files and the runs; `build` checks its own outputs again
    made = {p: p.stat().st_mtime_ns for folder in ("features", "maps", "crops", "runs")
            for p in (root / folder).rglob("*") if p.is_file()}
    made.update({p: p.stat().st_mtime_ns for p in (root / "build").glob("*.h5")})
    capsys.readouterr()
    reproduce(settings)
    assert capsys.readouterr().out.count("complete, skipped") == len(table)
    assert {p: p.stat().st_mtime_ns for p in made} == made


@pytest.mark.slow
def test_a_timm_backbone_runs_beside_a_resnet_through_train_report_and_verify(tmp_path):
    """Any feature size downstream: 64-d timm test_vit vectors beside 512-d ResNet-18 ones are
    extracted, trained, evaluated, reported as columns of their own and probed by verify."""
    from vprom.generation.verify import verify
    from vprom.splits import load_rules

    root = tmp_path / "repro"
    out = reproduce(ReproduceConfig(vg=None, synthetic=True, out=root, images=2000,
                                    scale=0.002, backbones="resnet18,timm:test_vit",
                                    weights="none,none", models="rn", splits="neutral",
                                    epochs=1, device="cpu", input_size=32))
    perception = (out / "perception.md").read_text()
    assert "random weights (resnet18)" in perception
    assert "random weights (timm:test_vit)" in perception
    assert "| perception-only ceiling |" in perception
    runs = sorted((root / "runs" / "timm-test_vit").rglob("metrics.json"))
    assert len(runs) == 2 + 2  # rn without and with aux, and the two controls
    metrics = json.loads(runs[0].read_text())
    assert metrics["features"]["backbone"] == "timm:test_vit"
    report = verify(root / "build" / "dataset.h5", load_rules(),
                    features=root / "features" / "timm-test_vit.h5")
    assert "bias:probe-features" in [c.name for c in report.checks]
