"""Runs are never destroyed: re-runs, interruptions at several moments, --restart, refusals."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import torch

import vprom.baselines.run_folder as run_folder
import vprom.baselines.train as train_module
from vprom.baselines.evaluate import evaluate
from vprom.baselines.run_folder import load_checkpoint
from vprom.baselines.train import train
from tests.baselines.conftest import small_config
from vprom.errors import VpromError


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` (hidden ones too), by relative path, with its bytes."""
    return {str(p.relative_to(folder)): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def weights(run: Path, name: str = "last.pt") -> dict:
    return load_checkpoint(run / name)["model"]


def same_weights(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.fixture
def finished(tiny_pair, tmp_path):
    """A finished, evaluated 2-epoch run with a file of the user's beside it."""
    dataset, features = tiny_pair
    config = small_config(dataset, features, tmp_path / "run", epochs=2)
    train(config)
    evaluate(config.out, device="cpu")
    (config.out / "notes.txt").write_text("my notes")
    return config


def interrupt(original, at: int):
    """`original`, raising KeyboardInterrupt at its `at`-th call (counting from 1); a plain
    function, so that it binds as a method where it replaces one."""
    calls = []

    def wrapped(*args, **kwargs):
        calls.append(1)
        if len(calls) == at:
            raise KeyboardInterrupt
        return original(*args, **kwargs)

    return wrapped


def test_rerunning_a_finished_run_does_nothing_and_says_so(finished, capsys):
    before = snapshot(finished.out)
    capsys.readouterr()
    assert train(finished) == finished.out
    assert "this run is finished (2 epochs" in capsys.readouterr().out
    assert snapshot(finished.out) == before


def test_other_settings_are_refused_naming_them_and_nothing_changes(finished):
    before = snapshot(finished.out)
    # mlp-sum-4 takes the same defaults entry ('*') as mlp-sum-2: only what is passed differs
    other = small_config(finished.dataset, finished.features, finished.out, epochs=2,
                         model="mlp-sum-4", lr=0.5)
    with pytest.raises(VpromError, match=r"its settings changed: lr 1.0 vs 0.5, model "
                                         r"'mlp-sum-2' vs 'mlp-sum-4'\).*--restart"):
        train(other)
    assert snapshot(finished.out) == before


@pytest.mark.parametrize("at", [1, 5, 9])  # steps of the 8-step epochs: 1st, 2nd, 2nd epoch
def test_ctrl_c_mid_epoch_keeps_finished_epochs_and_resumes_by_default(tiny_pair, tmp_path,
                                                                       monkeypatch, capsys, at):
    dataset, features = tiny_pair
    straight = train(small_config(dataset, features, tmp_path / "straight", epochs=3))
    config = small_config(dataset, features, tmp_path / "run", epochs=3)
    monkeypatch.setattr(train_module, "train_step", interrupt(train_module.train_step, at))
    with pytest.raises(KeyboardInterrupt):
        train(config)
    assert "run the same command again to resume" in capsys.readouterr().out
    done = (at - 1) // 8  # epochs of 8 steps (120 matrices, batches of 16) before the cut
    if done:
        assert len(json.loads((config.out / "history.json").read_text())) == done
    monkeypatch.undo()
    train(config)  # the same command, no flag
    assert "resuming after epoch" in capsys.readouterr().out or not done
    assert same_weights(weights(straight), weights(config.out))


def test_a_kill_between_two_checkpoint_files_loses_nothing(tiny_pair, tmp_path, monkeypatch):
    dataset, features = tiny_pair
    # with no validation figure every epoch is the best: each writes best.pt, then last.pt
    monkeypatch.setattr(train_module, "evaluate", lambda *args: None)
    straight = train(small_config(dataset, features, tmp_path / "straight", epochs=2))
    config = small_config(dataset, features, tmp_path / "run", epochs=2)
    # epoch 1: last.pt (call 1), best.pt (2); epoch 2: last.pt (3), then dies in best.pt
    monkeypatch.setattr(train_module, "save_checkpoint",
                        interrupt(train_module.save_checkpoint, 4))
    with pytest.raises(KeyboardInterrupt):
        train(config)
    assert load_checkpoint(config.out / "last.pt")["epoch"] == 0  # epoch 1 intact
    assert load_checkpoint(config.out / "best.pt")["epoch"] == 0  # the pair of one epoch
    monkeypatch.undo()
    monkeypatch.setattr(train_module, "evaluate", lambda *args: None)
    train(config)
    assert same_weights(weights(straight), weights(config.out))
    assert same_weights(weights(straight, "best.pt"), weights(config.out, "best.pt"))


def test_restart_keeps_the_old_run_until_the_new_one_finished_an_epoch(finished, monkeypatch):
    before = snapshot(finished.out)
    restart = small_config(finished.dataset, finished.features, finished.out, epochs=2,
                           seed=7, restart=True)
    # killed in the first epoch of the new run, then after its first step's checkpoint files
    for name, at in (("train_step", 3), ("save_checkpoint", 2)):
        monkeypatch.setattr(train_module, name, interrupt(getattr(train_module, name), at))
        with pytest.raises(KeyboardInterrupt):
            train(restart)
        monkeypatch.undo()
        assert snapshot(finished.out) == before  # the old run, byte for byte
    train(restart)
    new = finished.out
    assert load_checkpoint(new / "last.pt")["config"]["seed"] == 7
    assert (new / "notes.txt").read_text() == "my notes"  # the user's file came along
    old_metrics = before["metrics.json"]
    assert (new / "metrics.before-restart.json").read_bytes() == old_metrics
    assert not (new / "metrics.json").exists()  # it scored the old weights
    assert not run_folder.staging_folder(new).exists()
    assert not list(new.parent.glob(".run.replaced-*"))


def test_continuing_an_evaluated_run_keeps_its_old_metrics(finished, monkeypatch):
    old = (finished.out / "metrics.json").read_bytes()
    scored = json.loads(old)["checkpoint"]["epoch"]
    # with no validation figure every epoch counts as the best, so epoch 3 replaces best.pt
    monkeypatch.setattr(train_module, "evaluate", lambda *args: None)
    train(small_config(finished.dataset, finished.features, finished.out, epochs=3))
    assert load_checkpoint(finished.out / "best.pt")["epoch"] + 1 == 3
    assert (finished.out / f"metrics.best-epoch-{scored}.json").read_bytes() == old
    assert not (finished.out / "metrics.json").exists()


def test_a_best_checkpoint_without_last_is_not_overwritten(finished):
    (finished.out / "last.pt").unlink()
    before = snapshot(finished.out)
    with pytest.raises(VpromError, match="best.pt but no last.pt.*--restart"):
        train(finished)
    assert snapshot(finished.out) == before


def test_the_command_line_resumes_by_default(finished, capsys):
    from vprom.app import cli

    argv = ["train", str(finished.dataset), "--features", str(finished.features), "--model",
            "mlp-sum-2", "--split", "neutral", "--out", str(finished.out), "--epochs", "2",
            "--batch-size", "16", "--hidden", "16", "--device", "cpu"]
    before = snapshot(finished.out)
    assert cli.main(argv) == 0 and cli.main(argv) == 0
    assert capsys.readouterr().out.count("this run is finished") == 2
    assert snapshot(finished.out) == before
    assert cli.main([*argv[:-8], "--epochs", "3", *argv[-6:]]) == 0
    assert "resuming after epoch 2" in capsys.readouterr().out
    assert len(json.loads((finished.out / "history.json").read_text())) == 3


def test_train_on_a_full_disk_is_one_line_and_the_rerun_resumes(tiny_pair, tmp_path):
    """A real 8 MB tmpfs, filled but for room for config.json: the checkpoints do not fit."""
    import shutil

    from tests.mining.hostile import tmpfs
    from vprom.errors import VpromError

    dataset, features = tiny_pair
    with tmpfs(tmp_path / "disk", "8m") as disk:
        config = small_config(dataset, features, disk / "run", epochs=1, hidden=256)
        (disk / "ballast").write_bytes(b"\0" * (shutil.disk_usage(disk).free - 64 * 1024))
        with pytest.raises(VpromError, match="no space left on the device"):
            train(config)  # was torch's RuntimeError, a 40-line traceback on the command line
        names = {p.name for p in config.out.iterdir()}
        assert "best.pt" not in names or "last.pt" in names
        assert not [n for n in names if n.endswith(".part")]
        (disk / "ballast").unlink()
        train(config)  # not refused ("pass --restart")
        assert load_checkpoint(config.out / "last.pt")["epoch"] == 0


def test_resuming_refuses_a_last_checkpoint_of_another_run_or_shape(tiny_pair, tmp_path):
    """A last.pt copied from another model's run, or whose weights do not fit the model, is
    refused in one line naming the file, what differs and what to do; nothing changes."""
    dataset, features = tiny_pair
    config = small_config(dataset, features, tmp_path / "run", epochs=1)
    run = train(config)
    other = train(small_config(dataset, features, tmp_path / "other", model="rn", epochs=1))
    last, longer = run / "last.pt", small_config(dataset, features, run, epochs=2)
    own = last.read_bytes()
    last.write_bytes((other / "last.pt").read_bytes())
    before = snapshot(run)
    with pytest.raises(VpromError, match=f"^{last}: not this run's checkpoint \\(model, .*"
                                         "differ from .*config.json\\); restore .*--restart"):
        train(longer)
    assert snapshot(run) == before
    state = torch.load(io.BytesIO(own), weights_only=True)
    key = next(iter(state["model"]))
    state["model"][key] = torch.zeros(3, 5)
    torch.save(state, last)
    before = snapshot(run)
    with pytest.raises(VpromError, match=f"^{last}: its weights do not fit .*{key}.*--restart"):
        train(longer)
    assert snapshot(run) == before
