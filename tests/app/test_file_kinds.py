"""Every command tells a wrong input file the same way: one line naming the file, what kind of
vprom file it is, and what the command takes there."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest

from vprom.app import api, cli
from vprom.file_kinds import CROPS, DATASET, FEATS, MAPS, POOLS, describe, kind_of


@pytest.fixture(scope="module")
def files(synthetic_build, tmp_path_factory) -> dict[str, Path]:
    """One file of each kind, as vprom writes it (the maps file by its documented layout:
    a real maps extraction needs a CNN)."""
    dataset, vg = synthetic_build
    root = tmp_path_factory.mktemp("kinds")
    api.extract(dataset, vg, backbone="labels", out=root / "feats.h5")
    api.crops(dataset, vg=vg, size=8, out=root / "crops.h5", workers=1)
    with h5py.File(root / "maps.h5", "w") as h5:
        h5["crop_id"] = np.arange(3, dtype=np.int64)
        h5["maps"] = np.zeros((3, 4, 2, 2), np.float32)
        h5.attrs["complete"] = True
    return {DATASET: dataset, POOLS: dataset.parent / "pools.h5",
            FEATS: root / "feats.h5", MAPS: root / "maps.h5", CROPS: root / "crops.h5"}


def test_each_kind_is_named(files):
    assert {kind: kind_of(path) for kind, path in files.items()} == {k: k for k in files}
    assert kind_of(files[DATASET].parent) is None
    assert describe(files[DATASET].parent / "vg") == "a folder"


def _refusal(capsys, argv: list[str]) -> str:
    """stderr's one line; nothing was started (stdout is empty)."""
    assert cli.main(argv) == 1
    out, err = capsys.readouterr()
    assert err.count("\n") == 1 and "Traceback" not in err and out == ""
    return err


@pytest.mark.parametrize("given", [POOLS, FEATS, MAPS, CROPS])
@pytest.mark.parametrize("command", ["verify", "stats", "train", "export", "extract", "show",
                                     "crops", "score"])
def test_a_command_taking_a_dataset_names_what_it_got(files, synthetic_build, capsys, tmp_path,
                                                      command, given):
    wrong, vg = str(files[given]), synthetic_build[1]
    argv = {"verify": [wrong], "stats": [wrong],
            "train": [wrong, "--features", str(files[FEATS]), "--model", "rn", "--split",
                      "neutral", "--out", str(tmp_path / "run")],
            "export": [wrong, "--format", "jsonl", "--out", str(tmp_path / "x.jsonl")],
            "extract": [wrong, "--backbone", "labels", "--out", str(tmp_path / "f.h5")],
            "show": [wrong, "--id", "0", "--vg", str(vg), "--out",
                     str(tmp_path / "m.png")],
            "crops": [wrong, "--vg", str(vg), "--size", "8", "--out",
                      str(tmp_path / "c.h5")],
            "score": [wrong, str(tmp_path / "predictions.csv")]}[command]
    err = _refusal(capsys, [command, *argv])
    assert f"{wrong}: this is a {given} " in err and "takes a DATASET.h5" in err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("option, wanted, model", [("--features", FEATS, "rn"),
                                                   ("--maps", MAPS, "panel-transformer"),
                                                   ("--crops", CROPS, "predrnet")])
@pytest.mark.parametrize("given", [DATASET, POOLS, FEATS, MAPS, CROPS])
def test_train_names_the_panels_file_it_got_before_starting_a_run(files, capsys, tmp_path,
                                                                  option, wanted, model, given):
    if given == wanted:
        return
    err = _refusal(capsys, ["train", str(files[DATASET]), option, str(files[given]), "--model",
                            model, "--split", "neutral", "--out", str(tmp_path / "run")])
    assert f"this is a {given} " in err and f"{option} takes a {wanted}" in err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("argv, says", [
    (["generate", "{DATASET}", "--out", "{tmp}/d.h5"], "this is a DATASET.h5 "),
    (["verify", "{DATASET}", "--pools", "{FEATS}"], "--pools takes a POOLS.h5"),
    (["verify", "{DATASET}", "--features", "{POOLS}"], "--features takes a FEATS.h5"),
    (["merge", "{DATASET}", "--out", "{tmp}/m.h5"], "a whole DATASET.h5, not one shard"),
    (["merge", "{FEATS}", "--out", "{tmp}/m.h5"], "this is a FEATS.h5 "),
    (["build", "--vg", "{DATASET}", "--out", "{tmp}/b"],
     ("this is a DATASET.h5 (a data set of `vprom generate` or `vprom build`); --vg takes the "
      "folder")),
    (["mine", "--vg", "{POOLS}", "--out", "{tmp}/p.h5"], "this is a POOLS.h5 "),
])
def test_other_inputs_are_named_the_same_way(files, capsys, tmp_path, argv, says):
    err = _refusal(capsys, [a.format(tmp=tmp_path, **{k[:-3]: v for k, v in files.items()})
                            for a in argv])
    assert says in err and "--out" not in err.split(says)[1]  # no `download --out D.h5`
