"""Evaluation: breakdowns that partition the test set, metrics.json."""

from __future__ import annotations

import io
import json
import os

import h5py
import numpy as np
import pytest
import torch

from vprom.baselines.data import load_split
from vprom.baselines.evaluate import breakdowns, evaluate, format_metrics
from vprom.baselines.run_folder import load_checkpoint
from vprom.baselines.train import build_model, train
from tests.baselines.conftest import small_config, write_pair
from vprom.errors import VpromError
from vprom.statistics import clustered_interval, wilson_interval


def test_breakdowns_partition_the_test_set():
    rng = np.random.default_rng(0)
    relation = rng.choice(["and", "or", "union", "progression"], size=300)
    element_type = rng.choice(["object", "count", "human_attribute"], size=300)
    correct = rng.random(300) < 0.4
    m = breakdowns(correct, relation, element_type)
    total = m["test"]
    assert (total["n"], total["correct"]) == (300, int(correct.sum()))
    for key in ("by_relation", "by_element_type"):
        assert sum(s["n"] for s in m[key].values()) == 300
        assert sum(s["correct"] for s in m[key].values()) == total["correct"]
    pairs = [s for per in m["by_relation_element_type"].values() for s in per.values()]
    assert sum(s["n"] for s in pairs) == 300
    assert sum(s["correct"] for s in pairs) == total["correct"]
    for r, s in m["by_relation"].items():
        assert s["n"] == sum(p["n"] for p in m["by_relation_element_type"][r].values())
    assert list(m["by_relation"]) == ["and", "or", "union", "progression"]
    assert "object_attribute" not in m["by_element_type"]  # absent groups are not listed
    s = m["by_relation"]["or"]
    assert s["accuracy"] == s["correct"] / s["n"]
    assert s["ci95"] == list(wilson_interval(s["correct"], s["n"]))

    # problems that share an answer crop count as one cluster: a wider interval
    shared = breakdowns(correct, relation, element_type, answer_crop=np.arange(300) // 10)
    assert shared["test"]["design_effect"] >= 1
    assert shared["test"]["accuracy"] == total["accuracy"]
    wide, narrow = shared["test"]["ci95"], total["ci95"]
    assert wide[0] <= narrow[0] and wide[1] >= narrow[1]


def test_evaluate_scores_the_best_checkpoint_on_the_test_set(tiny_pair, tmp_path):
    dataset, features = tiny_pair
    config = small_config(dataset, features, tmp_path / "run", model="rn", epochs=3,
                          optimizer="adam", lr=3e-3)
    run = train(config)
    metrics = evaluate(run, device="cpu")
    from vprom.baselines.evaluate import published_metrics

    written = json.loads((run / "metrics.json").read_text())
    assert written == json.loads(json.dumps(published_metrics(metrics, run)))
    assert written["run"] == "." and not os.path.isabs(written["dataset"])  # no home path

    # the same figure, computed independently from best.pt
    data = load_split(dataset, features, "neutral")
    model, _ = build_model(config, 16)
    model.load_state_dict(load_checkpoint(run / "best.pt")["model"])
    model.eval()
    test = data.parts["test"]
    with torch.no_grad():
        predicted = model(data.panels(test, torch.arange(len(test)))).scores.argmax(1)
    correct = int((predicted == test.answer).sum())
    assert metrics["test"]["n"] == len(test) == 40
    assert metrics["test"]["correct"] == correct
    assert metrics["features"]["backbone"] == "resnet18"
    assert metrics["model"] == "rn" and metrics["split"] == "neutral"
    assert metrics["checkpoint"]["epoch"] == load_checkpoint(run / "best.pt")["epoch"] + 1
    # the interval counts the problems' answer crops: clustered by the crop each answer shows
    answer_crop = test.rows[torch.arange(len(test)), 8 + test.answer].numpy()
    low, high, _ = clustered_interval((predicted == test.answer).numpy(), answer_crop)
    assert metrics["test"]["ci95"] == [low, high]

    text = format_metrics(metrics)
    assert "test accuracy" in text and "progression / count" in text
    assert f"({correct}/40)" in text


def test_evaluate_refuses_a_folder_without_a_checkpoint(tmp_path):
    with pytest.raises(VpromError, match="no config.json"):
        evaluate(tmp_path)
    (tmp_path / "config.json").write_text('{"config": {}}')
    with pytest.raises(VpromError, match="best.pt: no such checkpoint"):
        evaluate(tmp_path)


def test_a_checkpoint_of_another_run_or_shape_is_refused_in_one_line(tiny_pair, tmp_path):
    """best.pt copied from another model's run is not scored as this run's; one whose weights
    do not fit the model is refused naming the file, never a torch traceback."""
    dataset, features = tiny_pair
    run = train(small_config(dataset, features, tmp_path / "run", epochs=1))
    other = train(small_config(dataset, features, tmp_path / "other", model="rn", epochs=1))
    best = run / "best.pt"
    own = best.read_bytes()
    best.write_bytes((other / "best.pt").read_bytes())
    with pytest.raises(VpromError, match=f"^{best}: not this run's checkpoint \\(model, "):
        evaluate(run, device="cpu")
    state = torch.load(io.BytesIO(own), weights_only=True)
    key = next(iter(state["model"]))
    state["model"][key] = torch.zeros(3, 5)
    torch.save(state, best)
    with pytest.raises(VpromError, match=f"^{best}: its weights do not fit .*{key}"):
        evaluate(run, device="cpu")
    assert not (run / "metrics.json").exists()


def test_a_run_is_not_evaluated_against_another_data_set(tmp_path):
    dataset, features = write_pair(tmp_path / "pair", n=40)
    run = train(small_config(dataset, features, tmp_path / "run", epochs=1))
    evaluate(run, device="cpu")
    write_pair(tmp_path / "pair", n=40, seed=5)  # the same paths now hold another data set
    with pytest.raises(VpromError, match="the run .* was made from another data set than "
                                         ".*train a new run"):
        evaluate(run, device="cpu")


def test_a_run_is_not_evaluated_on_other_features(tmp_path):
    dataset, features = write_pair(tmp_path / "pair", n=40)
    run = train(small_config(dataset, features, tmp_path / "run", epochs=1))
    with h5py.File(features, "r+") as h5:
        h5.attrs["weights"] = "imagenet"  # as if re-extracted with other weights
    with pytest.raises(VpromError, match="not the features file the run .* was trained on "
                                         r"\(weights differ\)"):
        evaluate(run, device="cpu")


def test_metrics_record_the_settings_and_whether_the_run_learned(tiny_pair, tmp_path):
    dataset, features = tiny_pair
    run = train(small_config(dataset, features, tmp_path / "run", epochs=1, lr=1e-12,
                             optimizer="adam"))
    metrics = evaluate(run, device="cpu")
    assert metrics["config"]["lr"] == 1e-12 and metrics["config"]["optimizer"] == "adam"
    assert any("never left ln 8" in reason for reason in metrics["did_not_learn"])
    assert "DID NOT LEARN: its training answer loss never left ln 8" in format_metrics(metrics)


def test_a_control_is_checked_against_chance_not_flagged(tiny_pair, tmp_path):
    dataset, features = tiny_pair
    run = train(small_config(dataset, features, tmp_path / "blind", model="context-blind",
                             epochs=1))
    metrics = evaluate(run, device="cpu")
    assert metrics["did_not_learn"] == []
    control = metrics["control"]
    assert control["expected"] == "chance" and isinstance(control["passed"], bool)
    low = metrics["test"]["ci95"][0]
    assert control["passed"] == (low <= 0.145)
    assert f"CONTROL {'PASS' if control['passed'] else 'FAIL'}: " in format_metrics(metrics)
    assert json.loads((run / "metrics.json").read_text())["control"] == control
