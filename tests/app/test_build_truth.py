"""A build folder tells the truth (issue 20, rows 10 and 14): a stage whose input changed
removes what was made from the old input before it runs, a failed rebuild leaves no stale
output, `verify` checks the recorded inputs, and nothing published names an absolute path."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.dataset_fixture import write_pools
from vprom.app import build as build_module
from vprom.app.api import build
from vprom.app.cli import main
from vprom.errors import VpromError

REPO = Path(__file__).resolve().parents[2]
OPTIONS = dict(synthetic=True, images=1000, scale=0.003, seed=0)


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("truth") / "build"
    build(out, **OPTIONS)
    return out


@pytest.fixture
def copy(built, tmp_path) -> Path:
    target = tmp_path / "build"
    shutil.copytree(built, target, symlinks=True, copy_function=shutil.copy2)
    return target


def test_a_failed_rebuild_leaves_no_output_made_from_the_old_inputs(copy, monkeypatch,
                                                                     capsys):
    """Row 10: a rebuild that failed at generate left the old dataset.h5 and manifest.json,
    and `verify` still said PASS."""
    objects = copy / "vg" / "objects.json"  # the corpus changed: new bytes, the same data
    objects.write_bytes(objects.read_bytes() + b" ")

    def fails(*args, **kwargs):
        raise VpromError("the pools are too thin")

    monkeypatch.setattr(build_module, "generate", fails)
    with pytest.raises(VpromError, match="too thin"):
        build(copy, **OPTIONS)
    log = capsys.readouterr().out
    assert "[2/5] pools: its inputs changed: objects.json; removed" in log, log
    names = sorted(p.name for p in copy.iterdir())
    assert "pools.h5" in names
    for stale in ("dataset.h5", "verify.txt", "stats.json"):
        assert stale not in names
    assert json.loads((copy / "manifest.json").read_text())["outputs"] == {}  # vouches for none


def test_verify_fails_when_the_pools_no_longer_match(copy, tmp_path, capsys):
    assert main(["verify", str(copy / "dataset.h5")]) == 0
    assert main(["verify", str(copy / "dataset.h5"), "--pools", str(copy / "pools.h5")]) == 0
    other = write_pools(tmp_path / "other.h5", images=20)
    capsys.readouterr()
    assert main(["verify", str(copy / "dataset.h5"), "--pools", str(other)]) == 1
    assert "was not generated from" in capsys.readouterr().err
    shutil.copy(other, copy / "pools.h5")  # the folder's pools replaced behind its back
    assert main(["verify", str(copy / "dataset.h5")]) == 1
    assert ("dataset.h5 no longer matches what it was made from (its inputs changed: "
            "pools.h5)") in capsys.readouterr().err


def test_verify_fails_when_the_corpus_no_longer_matches(copy, capsys):
    annotation = sorted((copy / "vg").glob("*.json"))[0]
    annotation.write_bytes(annotation.read_bytes() + b" ")
    assert main(["verify", str(copy / "dataset.h5")]) == 1
    assert ("pools.h5 no longer matches what it was made from (its inputs changed: "
            f"{annotation.name})") in capsys.readouterr().err


def test_a_data_set_of_other_settings_is_not_vouched_for_but_made_again(copy, capsys):
    """A data set generated into the folder with another seed: `verify` says the folder no
    longer describes it, and `build` makes it again instead of keeping it."""
    from vprom.generation.generate import generate
    from vprom.splits import load_rules
    from vprom.tables import read_manifest

    generate(copy / "pools.h5", copy / "dataset.h5", load_rules(), scale=OPTIONS["scale"],
             seed=9)
    capsys.readouterr()
    assert main(["verify", str(copy / "dataset.h5")]) == 1
    assert "its settings changed: seed" in capsys.readouterr().err
    build(copy, **OPTIONS)
    assert "[3/5] dataset: its settings changed: seed" in capsys.readouterr().out
    assert read_manifest(copy / "dataset.h5")["seed"] == OPTIONS["seed"]


def private_paths(out: Path) -> list[str]:
    home = str(Path.home())
    return [p for p in {str(out.resolve()), str(out.resolve().parent), str(REPO),
                        home if home not in ("/", "") else None} if p]


def test_no_published_file_names_an_absolute_path(built):
    """Row 14: build configs, verify.txt and stats.json held the absolute --out and --vg."""
    found = []
    for path in sorted(built.rglob("*")):
        if path.is_file() and path.suffix != ".jpg":
            data = path.read_bytes()
            found += [f"{path.name}: {s}" for s in private_paths(built) if s.encode() in data]
    assert found == []


def test_no_published_file_of_a_run_names_an_absolute_path(tmp_path):
    """Row 14: a run's config.json held the install path of defaults.json and absolute
    --dataset/--features/--out paths; its checkpoints held them too. The paths are relative
    to the run folder, so a run moved together with its data still evaluates."""
    from tests.baselines.conftest import small_config, write_pair
    from vprom.baselines.evaluate import evaluate
    from vprom.baselines.train import train

    dataset, features = write_pair(tmp_path / "work" / "pair")
    run = train(small_config(dataset, features, (tmp_path / "work" / "run").resolve(),
                             epochs=1))
    first = evaluate(run, device="cpu")
    found = []
    for path in sorted(run.rglob("*")):
        if path.is_file():
            data = path.read_bytes()
            found += [f"{path.name}: {s}" for s in private_paths(run) if s.encode() in data]
    assert found == []
    (tmp_path / "work").rename(tmp_path / "moved")
    again = evaluate(tmp_path / "moved" / "run", device="cpu")
    assert again["test"] == first["test"]
