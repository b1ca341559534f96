"""Training: learning, the auxiliary loss, checkpoints, resume, DDP, early stopping, refusals."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import vprom.baselines.train as train_module
from vprom.baselines.data import derangement, load_split
from vprom.baselines.registry import input_kind, list_models
from vprom.baselines.run_folder import load_checkpoint
from vprom.baselines.train import CudaGraphStep, build_model, epoch_batches, train
from vprom.runtime import World
from tests.baselines.conftest import small_config, write_pair
from vprom.errors import VpromError

ROOT = Path(__file__).resolve().parents[2]


def history(run: Path) -> list[dict]:
    return json.loads((run / "history.json").read_text())


def assert_same_state(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key


# ---------------------------------------------------------------- data
def test_rows_gather_the_features_of_each_panels_crop(tiny_pair):
    from vprom.feature_files import load_features
    from vprom.tables import read_matrix_table

    dataset, features = tiny_pair
    data = load_split(dataset, features, "neutral")
    table, feats = read_matrix_table(dataset), load_features(features)
    test = data.parts["test"]
    index = torch.arange(len(test))
    position = {int(m): i for i, m in enumerate(table.id)}
    crop_ids = table.panels[[position[int(m)] for m in test.ids]]
    expected = feats.features[np.searchsorted(feats.crop_id, crop_ids)]
    assert torch.equal(data.panels(test, index), torch.from_numpy(expected))
    assert test.answer.tolist() == [int(table.answer[position[int(m)]]) for m in test.ids]
    assert sorted(test.ids.tolist()) == sorted(table.splits["neutral"]["test"].tolist())


def test_centred_features_remove_the_training_mean_and_stay_unit_length(tiny_pair, tmp_path):
    dataset, features = tiny_pair
    plain = load_split(dataset, features, "neutral")
    centred = load_split(dataset, features, "neutral", center=True)
    train_rows = np.unique(centred.parts["train"].rows.numpy())
    x = centred.features.numpy()
    assert np.allclose(np.linalg.norm(x, axis=1), 1.0, atol=1e-5)
    # after removing the mean, the training crops' mean direction is (near) zero
    mean = plain.features.numpy()[train_rows].mean(axis=0)
    assert abs(float(x[train_rows].mean(axis=0) @ mean)) < 0.1 * float(mean @ mean)
    # the rows (which crop each panel shows) do not change, only the vectors
    assert torch.equal(centred.parts["test"].rows, plain.parts["test"].rows)
    # a run records the choice and evaluation applies the same transform
    run = train(small_config(dataset, features, tmp_path / "run", center_features=True))
    assert json.loads((run / "config.json").read_text())["config"]["center_features"] is True


def test_shuffled_context_keeps_candidates_and_takes_another_matrix_context(tiny_pair):
    dataset, features = tiny_pair
    plain = load_split(dataset, features, "neutral").parts["train"]
    shuffled = load_split(dataset, features, "neutral", shuffle_context=True).parts["train"]
    again = load_split(dataset, features, "neutral", shuffle_context=True).parts["train"]
    assert torch.equal(shuffled.rows, again.rows)  # a fixed, seeded derangement
    assert torch.equal(shuffled.rows[:, 8:], plain.rows[:, 8:])
    assert torch.equal(shuffled.answer, plain.answer)
    assert not (shuffled.rows[:, :8] == plain.rows[:, :8]).all(1).any()
    # every context is used exactly once
    assert sorted(map(tuple, shuffled.rows[:, :8].tolist())) == sorted(
        map(tuple, plain.rows[:, :8].tolist()))


@pytest.mark.parametrize("n", [2, 3, 10, 101])
def test_derangement_has_no_fixed_points(n):
    p = derangement(n, np.random.default_rng(n))
    assert sorted(p.tolist()) == list(range(n))
    assert not np.any(p == np.arange(n))


# ---------------------------------------------------------------- batches
@pytest.mark.parametrize("n, batch_size, size", [(120, 16, 1), (101, 16, 2), (50, 7, 3)])
def test_the_processes_share_every_batch_and_see_each_matrix_once(n, batch_size, size):
    shares = [epoch_batches(n, batch_size, 4, 2, World(r, size, r, torch.device("cpu"), False))
              for r in range(size)]
    batches = [torch.cat([share[step][0] for share in shares]) for step in range(len(shares[0]))]
    assert len(batches) == -(-n // batch_size)
    assert max(map(len, batches)) - min(map(len, batches)) <= 1  # no tiny last batch
    assert sorted(torch.cat(batches).tolist()) == list(range(n))
    for share in shares:  # each process's loss scale: world size / the whole batch's size
        assert [scale for _, scale in share] == [size / len(b) for b in batches]
    again = epoch_batches(n, batch_size, 4, 2, World(0, 1, 0, torch.device("cpu"), False))
    assert torch.equal(torch.cat([b for b, _ in again]), torch.cat(batches))  # (seed, epoch)
    other = epoch_batches(n, batch_size, 4, 3, World(0, 1, 0, torch.device("cpu"), False))
    assert not torch.equal(torch.cat([b for b, _ in other]), torch.cat(batches))


def test_cuda_graphs_are_refused_where_they_cannot_run(tiny_pair):
    dataset, features = tiny_pair
    with pytest.raises(VpromError, match="--cuda-graphs needs a CUDA device"):
        train(small_config(dataset, features, dataset.parent / "never", cuda_graphs=True))
    assert not (dataset.parent / "never").exists()
    with pytest.raises(VpromError, match="one process; drop it under torchrun"):
        CudaGraphStep(World(0, 2, 0, torch.device("cuda", 0), owns_group=True))


# ---------------------------------------------------------------- learning
def test_a_tiny_dataset_is_learned(tiny_pair, tmp_path):
    dataset, features = tiny_pair
    run = train(small_config(dataset, features, tmp_path / "run", model="rn", epochs=20,
                             optimizer="adam", lr=3e-3, patience=20))
    h = history(run)
    assert len(h) == 20
    assert h[-1]["train_loss"] < 0.5 * h[0]["train_loss"]
    assert max(e["val_acc"] for e in h) >= 0.5  # chance is 0.125
    best = load_checkpoint(run / "best.pt")
    assert best["best"]["val_acc"] == max(e["val_acc"] for e in h)


def test_aux_is_off_by_default_and_trains_both_heads_when_on(tiny_pair, tmp_path, capsys):
    dataset, features = tiny_pair
    plain = train(small_config(dataset, features, tmp_path / "plain", epochs=1))
    assert "train_aux_loss" not in history(plain)[0]
    assert not any("aux" in k for k in load_checkpoint(plain / "last.pt")["model"])

    config = small_config(dataset, features, tmp_path / "aux", epochs=2, aux=True)
    capsys.readouterr()
    run = train(config)
    h = history(run)
    printed = capsys.readouterr().out
    for epoch in h:
        # the console shows the answer loss "did not learn" judges, the aux loss apart
        assert (f"epoch {epoch['epoch']}/2: answer loss {epoch['train_answer_loss']:.4f} "
                f"(+ aux loss {epoch['train_aux_loss']:.4f}), train") in printed
        assert epoch["train_aux_loss"] > 0
        assert epoch["train_loss"] == pytest.approx(epoch["train_answer_loss"]
                                                    + epoch["train_aux_loss"])
    init, _ = build_model(config, 16)
    trained = load_checkpoint(run / "last.pt")["model"]
    heads = [k for k in trained if "aux" in k]
    assert {k.split(".")[-2] for k in heads} == {"relation", "element_type"}
    for key in heads:
        assert not torch.equal(trained[key], init.state_dict()[key]), key


@pytest.mark.parametrize("model", list_models())
def test_every_model_trains_with_aux_and_uses_every_parameter(tiny_sources, tmp_path, model):
    # DDP runs without find_unused_parameters, so every parameter must receive a gradient
    kind = input_kind(model)
    dataset, panels = tiny_sources(kind)
    config = small_config(dataset, panels if kind == "vectors" else None, tmp_path / "run",
                          model=model, epochs=1, batch_size=40, aux=True,
                          **{"maps": panels} if kind == "maps" else {},
                          **{"crops": panels} if kind == "pixels" else {})
    run = train(config)
    assert history(run)[0]["train_aux_loss"] > 0
    init, _ = build_model(config, *{"vectors": (16,), "maps": (16, 2), "pixels": (3, 16)}[kind])
    trained = load_checkpoint(run / "last.pt")["model"]
    for name, tensor in init.named_parameters():
        assert not torch.equal(tensor, trained[name]), f"{model}: {name} was not trained"


# ---------------------------------------------------------------- checkpoints and resume
def test_checkpoint_loads_with_weights_only(tiny_pair, tmp_path):
    dataset, features = tiny_pair
    config = small_config(dataset, features, tmp_path / "run", epochs=1)
    run = train(config)
    state = torch.load(run / "last.pt", weights_only=True)
    # stored with paths relative to the run folder; load_checkpoint anchors them again
    from vprom.baselines.run_folder import portable
    assert state["config"] == portable(config.resolved().to_dict(), run)
    assert load_checkpoint(run / "last.pt")["config"] == config.resolved().to_dict()
    assert state["epoch"] == 0 and len(state["history"]) == 1
    assert set(state) >= {"model", "optimizer", "model_config", "features_attrs"}
    assert state["features_attrs"]["backbone"] == "resnet18"
    model, _ = build_model(config, 16)
    model.load_state_dict(torch.load(run / "best.pt", weights_only=True)["model"])
    stored = json.loads((run / "config.json").read_text())
    # published with paths relative to the run folder (no home or install path)

    assert stored["config"] == portable(config.resolved().to_dict(), config.out)
    assert stored["config"]["out"] == "." and not os.path.isabs(stored["config"]["dataset"])
    assert stored["counts"] == {"train": 120, "val": 40, "test": 40}


def test_resume_after_a_kill_reaches_the_same_weights(tiny_pair, tmp_path, monkeypatch):
    dataset, features = tiny_pair
    straight = train(small_config(dataset, features, tmp_path / "straight", epochs=3,
                                  aux=True))

    original = train_module.save_epoch

    def killed_after_first_epoch(*args, **kwargs):
        original(*args, **kwargs)
        raise KeyboardInterrupt  # the process dies right after epoch 1's checkpoint

    monkeypatch.setattr(train_module, "save_epoch", killed_after_first_epoch)
    config = small_config(dataset, features, tmp_path / "killed", epochs=3, aux=True)
    with pytest.raises(KeyboardInterrupt):
        train(config)
    monkeypatch.undo()
    assert len(history(config.out)) == 1
    resumed = train(small_config(dataset, features, config.out, epochs=3, aux=True))

    a, b = load_checkpoint(straight / "last.pt"), load_checkpoint(resumed / "last.pt")
    assert_same_state(a["model"], b["model"])
    assert_same_state(load_checkpoint(straight / "best.pt")["model"],
                      load_checkpoint(resumed / "best.pt")["model"])
    assert a["optimizer"]["state"].keys() == b["optimizer"]["state"].keys()
    for key, value in a["optimizer"]["state"].items():
        other = b["optimizer"]["state"][key]
        for name, tensor in value.items():
            assert torch.equal(torch.as_tensor(tensor), torch.as_tensor(other[name]))
    drop = lambda h: [{k: v for k, v in e.items() if k != "seconds"} for e in h]  # noqa: E731
    assert drop(history(straight)) == drop(history(resumed))


def test_resume_can_extend_a_finished_run(tiny_pair, tmp_path):
    dataset, features = tiny_pair
    run = train(small_config(dataset, features, tmp_path / "run", epochs=1))
    train(small_config(dataset, features, run, epochs=2))
    assert [e["epoch"] for e in history(run)] == [1, 2]
    straight = train(small_config(dataset, features, tmp_path / "straight", epochs=2))
    assert_same_state(load_checkpoint(run / "last.pt")["model"],
                      load_checkpoint(straight / "last.pt")["model"])


def test_early_stopping_after_patience_epochs_without_gain(tiny_pair, tmp_path):
    dataset, features = tiny_pair
    # a learning rate this small leaves validation accuracy where it starts
    run = train(small_config(dataset, features, tmp_path / "run", epochs=10, patience=2,
                             optimizer="adam", lr=1e-12))
    h = history(run)
    assert len(h) == 3
    assert load_checkpoint(run / "best.pt")["epoch"] == 0


# ---------------------------------------------------------------- refusals
def test_bad_inputs_are_refused_with_a_clear_error(tiny_pair, tmp_path):
    dataset, features = tiny_pair
    cases = [
        (dict(split="nope"), "unknown split 'nope'"),
        (dict(model="nope"), "unknown model 'nope'"),
        (dict(optimizer="sgd"), "unknown optimizer"),
        (dict(epochs=0), "--epochs must be at least 1"),
        (dict(device="gpu7"), "--device gpu7: not a torch device"),
        (dict(features=tmp_path / "absent.h5"), "absent.h5: no such file"),
    ]
    for overrides, message in cases:
        options = {"dataset": dataset, "features": features, **overrides}
        with pytest.raises(VpromError, match=message):
            train(small_config(out=tmp_path / "bad", **options))
    assert not (tmp_path / "bad").exists()


def test_panels_of_the_wrong_kind_for_the_model_are_refused_in_one_line(tiny_sources,
                                                                        tmp_path):
    cases = [  # (model, the option given the file, the kind of file, what is said)
        ("panel-transformer", "features", "vectors",
         "--model panel-transformer reads maps, not the vectors of --features: pass its "
         "panels with --maps"),
        ("predrnet", "maps", "maps", "reads pixels, not the maps of --maps: pass its panels "
                                     "with --crops"),
        ("rn", "crops", "pixels", "--model rn reads vectors, not the pixels of --crops: pass "
                                  "its panels with --features"),
        ("rn", "features", "maps", r"maps.h5: this is a MAPS.h5 \(spatial maps of `vprom "
                                   r"extract --pool none`\); --features takes a FEATS.h5"),
        ("predrnet-maps", "maps", "vectors", "feats.h5: this is a FEATS.h5 .*--maps takes a "
                                             "MAPS.h5"),
        ("predrnet", "crops", "maps", "maps.h5: this is a MAPS.h5 .*--crops takes a CROPS.h5"),
    ]
    for model, option, kind, message in cases:
        dataset, path = tiny_sources(kind)
        given = {"features": None, option: path}
        config = small_config(dataset, given.pop("features"), tmp_path / "bad", model=model,
                              **given)
        with pytest.raises(VpromError, match=message):
            train(config)
    dataset, maps = tiny_sources("maps")
    with pytest.raises(VpromError, match="exactly one of --features FEATS.h5, --maps MAPS.h5 "
                                         "and --crops CROPS.h5; got --features and --maps"):
        train(small_config(dataset, maps, tmp_path / "bad", maps=maps))
    with pytest.raises(VpromError, match="--center-features centres pooled vectors; drop it"):
        train(small_config(dataset, None, tmp_path / "bad", model="predrnet-maps", maps=maps,
                           center_features=True))
    assert not (tmp_path / "bad").exists()


def test_features_missing_a_crop_name_it(tmp_path):
    dataset, features = write_pair(tmp_path / "pair", n=20, drop_crops=3)
    with pytest.raises(VpromError, match=r"no features for crop id 131[0-9] "):
        train(small_config(dataset, features, tmp_path / "run"))


def test_a_split_without_training_matrices_is_refused(tmp_path):
    dataset, features = write_pair(tmp_path / "pair", n=20, empty_train=("extrapolation",))
    with pytest.raises(VpromError, match="'extrapolation' has no training matrices"):
        train(small_config(dataset, features, tmp_path / "run", split="extrapolation"))


def test_a_run_folder_with_another_config_is_refused(tiny_pair, tmp_path):
    dataset, features = tiny_pair
    train(small_config(dataset, features, tmp_path / "run", epochs=1))
    with pytest.raises(VpromError, match="settings changed: .*model 'mlp-sum-2' vs 'rn'"):
        train(small_config(dataset, features, tmp_path / "run", epochs=1, model="rn"))
    with pytest.raises(VpromError, match=r"settings changed: hidden 16 vs 8, lr 1.0 vs 0.5\)"):
        train(small_config(dataset, features, tmp_path / "run", epochs=3, hidden=8, lr=0.5))


# ---------------------------------------------------------------- data parallel
@pytest.mark.slow
def test_two_gloo_processes_match_one(tiny_pair, tmp_path):
    dataset, features = tiny_pair
    args = ["train", str(dataset), "--features", str(features), "--model", "rn", "--split",
            "neutral", "--epochs", "2", "--batch-size", "16", "--hidden", "16", "--device",
            "cpu", "--aux"]
    single = train(small_config(dataset, features, tmp_path / "one", model="rn", epochs=2,
                                aux=True))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               "--nproc_per_node", "2", "-m", "vprom", *args, "--out", str(tmp_path / "two")]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    one, two = history(single), history(tmp_path / "two")
    assert [e["train_acc"] for e in one] == [e["train_acc"] for e in two]
    assert [e["val_acc"] for e in one] == [e["val_acc"] for e in two]
    for a, b in zip(one, two):
        assert a["train_loss"] == pytest.approx(b["train_loss"], rel=1e-5)
    a = load_checkpoint(single / "last.pt")
    b = load_checkpoint(tmp_path / "two" / "last.pt")
    assert b["world_size"] == 2
    for key in a["model"]:
        torch.testing.assert_close(a["model"][key], b["model"][key], rtol=1e-4, atol=1e-5)


def test_features_of_another_data_set_are_refused(tmp_path):
    dataset, _ = write_pair(tmp_path / "mine", n=20)
    _, foreign = write_pair(tmp_path / "other", n=20, seed=1, side=150)  # same crop ids
    with pytest.raises(VpromError, match="feats.h5 was made from another data set"):
        train(small_config(dataset, foreign, tmp_path / "run"))
    assert not (tmp_path / "run").exists()


def test_a_run_records_its_resolved_settings_and_their_source(tiny_pair, tmp_path):
    dataset, features = tiny_pair
    config = small_config(dataset, features, tmp_path / "run", epochs=1, model="rn")
    stored = json.loads((train(config) / "config.json").read_text())
    defaults = config.resolved()
    # small_config passes hidden and batch size; the rest are the model's defaults
    assert stored["config"]["hidden"] == 16 and stored["config"]["batch_size"] == 16
    for key in ("optimizer", "lr", "eps", "score_init"):
        assert stored["config"][key] == getattr(defaults, key)
        assert stored["defaulted"][key] == getattr(defaults, key)
    assert "hidden" not in stored["defaulted"]
    assert stored["defaults_file"].endswith("baselines/defaults.json")
    assert stored["inputs"]["dataset"].startswith("sha256:")  # the data set's content hash


def test_a_run_is_continued_only_on_the_data_it_was_made_from(tmp_path):
    """The same paths holding another data set and its features: the run is not resumed on
    them (its manifest is no longer current), whatever its settings."""
    dataset, features = write_pair(tmp_path / "pair", n=40)
    run = train(small_config(dataset, features, tmp_path / "run", epochs=1))
    write_pair(tmp_path / "pair", n=40, seed=5)
    with pytest.raises(VpromError, match="cannot continue \\(its inputs changed: "
                                         "dataset.h5, feats.h5\\)"):
        train(small_config(dataset, features, run, epochs=2))
