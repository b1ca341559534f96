"""examples/own_model.py runs end to end on the synthetic build: a crop store, a model of
one's own trained on `vprom.data.VPROM`, predictions scored by `vprom score`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.own_model_fixture import write_features
from vprom.features.crop_store import StoreJob, build_crop_store
from vprom.tables import read_matrix_table

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("source", ["crops", "features"])
def test_the_worked_example_trains_predicts_and_scores(synthetic_build, tmp_path, source):
    dataset, vg = synthetic_build
    if source == "crops":
        store = build_crop_store(StoreJob(dataset, vg, 24, tmp_path / "crops.h5", workers=2),
                                 log=lambda _: None)
    else:  # pooled features in FEATS.h5's layout (random values: the run, not the accuracy)
        store = write_features(dataset, tmp_path / "feats.h5", maps=False)
    env = os.environ | {"PYTHONPATH": os.pathsep.join(
        [str(ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p])}
    done = subprocess.run([sys.executable, str(ROOT / "examples" / "own_model.py"),
                           str(dataset), str(store), "--out", str(tmp_path / "mine"),
                           "--epochs", "1"], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert "test accuracy" in done.stdout and "by element type:" in done.stdout
    metrics = json.loads((tmp_path / "mine" / "metrics.json").read_text())
    test = read_matrix_table(dataset).splits["neutral"]["test"]
    assert metrics["model"] == "row-scorer" and metrics["test"]["n"] == len(test)
    assert len(Path(ROOT / "examples" / "own_model.py").read_text().splitlines()) <= 80
