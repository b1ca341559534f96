"""The per-model defaults: a valid data file, what `train` resolves from it, and (slow) that
every paper model learns the learnable task at its defaults."""

from __future__ import annotations

import json

import pytest

from vprom.baselines.config import (
    HYPER,
    TrainConfig,
    load_defaults,
    parse_defaults,
)
from vprom.errors import VpromError

PAPER_MODELS = ("mlp-sum-6", "gru-shared", "vqa", "rn")


def config(**options) -> TrainConfig:
    return TrainConfig(dataset="d.h5", features="f.h5", split="neutral", out="run",
                       **{"model": "rn", **options})


def test_the_shipped_file_is_valid_and_names_every_paper_model():
    data = load_defaults()
    assert set(PAPER_MODELS) <= set(data["models"])
    for model in PAPER_MODELS:
        assert config(model=model).resolved().optimizer == "adadelta"  # the paper's optimiser, kept


def test_unset_settings_come_from_the_model_and_given_ones_are_kept():
    resolved = config(model="mlp-sum-6", lr=0.5).resolved()
    defaults = load_defaults()["models"]["mlp-sum-6"]
    assert resolved.lr == 0.5
    for key in ("optimizer", "rho", "eps", "hidden", "batch_size", "score_init"):
        assert getattr(resolved, key) == defaults[key]
    assert config(model="mlp-sum-6", lr=0.5).defaulted() == [k for k in HYPER if k != "lr"]
    assert resolved.resolved() == resolved  # idempotent
    # a model the file does not list takes '*'
    assert config(model="mlp-cat-4").resolved().hidden == load_defaults()["models"]["*"]["hidden"]


def test_another_optimizer_takes_its_own_settings_not_the_models():
    adam = config(model="rn", optimizer="adam").resolved()
    own = load_defaults()["optimizers"]["adam"]
    assert (adam.lr, adam.eps, adam.rho) == (own["lr"], own["eps"], None)
    assert adam.hidden == load_defaults()["models"]["rn"]["hidden"]  # not an optimizer setting: the model's
    with pytest.raises(VpromError, match="--rho is AdaDelta's"):
        config(optimizer="adam", rho=0.9).resolved()


@pytest.mark.parametrize("change, message", [
    (lambda d: d["models"].pop("*"), "no '\\*' entry"),
    (lambda d: d["models"]["rn"].pop("eps"), "models.rn must give exactly"),
    (lambda d: d["models"]["rn"].update(lr=-1), "models.rn: lr must be a positive number"),
    (lambda d: d["models"]["rn"].update(optimizer="sgd"), "models.rn needs an optimizer"),
    (lambda d: d["models"]["rn"].update(batch_size=6.5), "batch_size must be a whole number"),
    (lambda d: d["optimizers"]["adam"].update(rho=0.9), "optimizers.adam must give exactly"),
])
def test_a_broken_defaults_file_is_refused_naming_the_entry(change, message):
    data = json.loads(json.dumps(load_defaults()))
    change(data)
    with pytest.raises(VpromError, match=message):
        parse_defaults(json.dumps(data), "defaults.json")


@pytest.mark.slow
@pytest.mark.parametrize("model", PAPER_MODELS)
def test_every_paper_model_learns_the_learnable_task_at_its_defaults(model, tmp_path_factory):
    """Issue 9: >= 60% validation accuracy within 10 epochs (2,400 matrices, 256-d, chance
    12.5%), nothing passed but the model; the run stops at the first epoch that reaches it."""
    from vprom.baselines.train import train
    from tests.baselines.conftest import write_pair

    folder = tmp_path_factory.getbasetemp() / "learnable-2400"
    if not (folder / "feats.h5").is_file():
        write_pair(folder, n=2400, dim=256, seed=0)
    run = tmp_path_factory.mktemp(model)
    best = 0.0
    for epochs in range(1, 11):  # each call resumes the run for one more epoch
        train(TrainConfig(dataset=folder / "dataset.h5", features=folder / "feats.h5",
                          model=model, split="neutral", out=run, epochs=epochs, patience=10,
                          device="cpu"))
        best = max(h["val_acc"] for h in json.loads((run / "history.json").read_text()))
        if best >= 0.6:
            break
    assert best >= 0.6, f"{model}: best validation accuracy {best:.1%} in 10 epochs"


@pytest.mark.parametrize("model", ["context-blind", "mlp-sum-2"])
def test_shallow_models_and_the_control_learn_at_the_default_entry(model, tmp_path):
    """The '*' entry: a control that cannot learn would hide a bias. The candidates alone give
    the answer away here (its crops carry a marker), and the model must find it."""
    import h5py
    import numpy as np

    from vprom.baselines.train import train
    from tests.baselines.conftest import write_pair

    assert model not in load_defaults()["models"]  # it does take '*'
    dataset, features = write_pair(tmp_path / "pair", n=400)
    with h5py.File(dataset) as h5:
        panels, answer = h5["matrices/panels"][()], h5["matrices/answer"][()]
    with h5py.File(features, "r+") as h5:
        x = h5["features"][()].astype(np.float32)
        x[np.searchsorted(h5["crop_id"][()], panels[np.arange(len(answer)), 8 + answer]), 0] += 1
        h5["features"][...] = (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float16)
    run = train(TrainConfig(dataset=dataset, features=features, model=model, split="neutral",
                            out=tmp_path / "run", epochs=3, device="cpu"))
    assert max(h["val_acc"] for h in json.loads((run / "history.json").read_text())) >= 0.9
