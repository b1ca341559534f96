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
from vprom.errors import VpromError
from vprom.domain import SPLITS


def config(out: Path, **overrides) -> ReproduceConfig:
    options = dict(vg=None, synthetic=True, out=out)
    options.update(overrides)
    return ReproduceConfig(**options)


def test_the_default_grid_is_the_papers(tmp_path):
    specs = grid(config(tmp_path))
    assert len(specs) == 2 * (4 * 2 * len(SPLITS) + 2)
    folders = [s.folder(tmp_path) for s in specs]
    assert len(set(folders)) == len(folders)
    assert {s.backbone for s in specs} == {"resnet101", "bottomup-r101"}
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
    with pytest.raises(VpromError, match="--models predrnet: reproduce trains on the pooled "
                                         "features it extracts, and predrnet reads pixels"):
        grid(config(tmp_path, models="wren,predrnet"))
    assert {spec.model for spec in grid(config(tmp_path, models="wren,scl"))} >= {"wren", "scl"}


def test_reproduce_runs_the_grid_and_skips_finished_runs(tmp_path, monkeypatch, capsys):
    """The build and extraction are replaced by a tiny ready pair; training is real."""
    dataset, features = write_pair(tmp_path / "pair", n=120)
    calls = []
    monkeypatch.setattr(reproduce_module, "_build", lambda c: (dataset, tmp_path))
    monkeypatch.setattr(reproduce_module, "_features",
                        lambda c, d, vg, backbone, w: calls.append(backbone) or features)
    grid_config = config(tmp_path / "repro", backbones="resnet18", weights="none",
                         models="mlp-sum-2", splits="neutral,extrapolation", epochs=1,
                         device="cpu")
    out = reproduce(grid_config)
    assert out == tmp_path / "repro" / "report"
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
def test_reproduce_end_to_end_on_the_synthetic_corpus(tmp_path):
    # small crops keep a random-weight ResNet-18 fast on a CPU; everything else is as shipped
    out = reproduce(ReproduceConfig(vg=None, synthetic=True, out=tmp_path / "repro",
                                    images=2000, scale=0.002, backbones="resnet18",
                                    weights="none", models="mlp-sum-2,rn",
                                    splits="neutral,interpolation", epochs=1, device="cpu",
                                    input_size=64, center_features=True))
    from vprom.feature_files import load_features

    feats = load_features(tmp_path / "repro" / "features" / "resnet18.h5")
    assert list(feats.attrs["input_size"]) == [64, 64]
    configs = sorted((tmp_path / "repro" / "runs").rglob("config.json"))
    assert configs and all(json.loads(p.read_text())["config"]["center_features"]
                           for p in configs)
    assert (tmp_path / "repro" / "features" / "resnet18.h5").is_file()
    table = list(csv.DictReader(io.StringIO((out / "splits.csv").read_text())))
    assert len(table) == 2 * 2 * 2 + 2
    for name in ("table2.md", "report.md", "by_relation.png", "curves.png"):
        assert (out / name).is_file()


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
