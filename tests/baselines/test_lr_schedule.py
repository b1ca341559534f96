"""`vprom train --lr-schedule cosine`: the rate falls to 0 over the run, a resumed run ends as an
unbroken one, and runs trained before the setting existed still resume."""

from __future__ import annotations

import json
import math

import pytest
import torch

import vprom.baselines.train as train_module
from tests.baselines.conftest import small_config
from tests.baselines.test_run_folder import interrupt, same_weights, weights
from vprom.baselines.run_folder import load_checkpoint
from vprom.baselines.train import train
from vprom.errors import VpromError


def history(run) -> list[dict]:
    return json.loads((run / "history.json").read_text())


def test_cosine_falls_from_lr_towards_zero_and_constant_keeps_lr(tiny_pair, tmp_path):
    dataset, features = tiny_pair
    cosine = train(small_config(dataset, features, tmp_path / "cosine", epochs=3, lr=0.5,
                                lr_schedule="cosine"))
    constant = train(small_config(dataset, features, tmp_path / "constant", epochs=3, lr=0.5))
    # 120 training matrices in batches of 16: 8 steps an epoch, the last at (epoch + 7/8) / 3
    assert [h["lr"] for h in history(cosine)] == pytest.approx(
        [0.5 * (1 + math.cos(math.pi * (e + 7 / 8) / 3)) / 2 for e in range(3)])
    assert [h["lr"] for h in history(constant)] == [0.5] * 3
    assert not same_weights(weights(cosine), weights(constant))


@pytest.mark.parametrize("at", [3, 12])  # a step of the first epoch, of the second
def test_a_cosine_run_stopped_mid_epoch_resumes_to_the_unbroken_runs_weights(
        tiny_pair, tmp_path, monkeypatch, at):
    dataset, features = tiny_pair
    options = dict(epochs=3, lr_schedule="cosine")
    straight = train(small_config(dataset, features, tmp_path / "straight", **options))
    config = small_config(dataset, features, tmp_path / "run", **options)
    monkeypatch.setattr(train_module, "train_step", interrupt(train_module.train_step, at))
    with pytest.raises(KeyboardInterrupt):
        train(config)
    monkeypatch.undo()
    train(config)
    assert same_weights(weights(straight), weights(config.out))


def test_cosine_with_cuda_graphs_is_refused_in_one_line(tiny_pair, tmp_path):
    dataset, features = tiny_pair
    config = small_config(dataset, features, tmp_path / "run", lr_schedule="cosine",
                          cuda_graphs=True)
    with pytest.raises(VpromError, match="drop --cuda-graphs or use a constant rate"):
        train(config)
    assert not (tmp_path / "run").exists()


def test_an_unknown_schedule_is_refused_naming_the_choices(tiny_pair, tmp_path):
    dataset, features = tiny_pair
    with pytest.raises(VpromError, match="use one of constant, cosine"):
        train(small_config(dataset, features, tmp_path / "run", lr_schedule="step"))


def test_a_run_recorded_before_the_schedule_setting_resumes(tiny_pair, tmp_path, capsys):
    """A run folder whose config.json and last.pt do not name a schedule trained at a
    constant rate: continuing it with the default is resuming, not a change of settings."""
    dataset, features = tiny_pair
    config = small_config(dataset, features, tmp_path / "run", epochs=1)
    train(config)
    manifest = json.loads((config.out / "config.json").read_text())
    del manifest["config"]["lr_schedule"]
    (config.out / "config.json").write_text(json.dumps(manifest))
    state = load_checkpoint(config.out / "last.pt")
    del state["config"]["lr_schedule"]
    torch.save(state, config.out / "last.pt")
    capsys.readouterr()
    train(small_config(dataset, features, config.out, epochs=2))
    assert "resuming after epoch 1" in capsys.readouterr().out
    assert len(history(config.out)) == 2
    with pytest.raises(VpromError, match="lr_schedule 'constant' vs 'cosine'"):
        train(small_config(dataset, features, config.out, epochs=3, lr_schedule="cosine"))
