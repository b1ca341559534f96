"""`vprom export --format savir-t`, read the way SAViR-T (kalbasioti/visual-reasoning) reads
it. Facts from its sources, re-stated in our own code:

- `main.py`: `random.seed(args.seed)` (default 1), then `VPROM_splits()`; the train and test
  `VPROM_dataset_utility` get `train_folder=args.train_data`, `test_folder=args.test_data`.
- `utils.VPROM_splits` (run from inside `V-PROM/`): `N = 235000`, `ind_test =
  random.sample(range(N), int(np.floor(N / 3)))`; the label files loaded with
  `np.load(..., allow_pickle=True).tolist()` and walked counting, obj (two levels), attr
  (three levels); `int(key) in ind_test` picks the list; each list keeps `im_path` and
  `label`.
- `VPROM_dataset_utility.__getitem__(index)`: `torch.load(folder + str(index) +
  '_target_Ours.pt', weights_only=True)` and the same for `'_feature_Ours.pt'`; with
  `shuffle`, `RPM[:8, :, :, :, :]`, `RPM[8:, :, :, :, :]`, `np.where(indices ==
  target.numpy())[0][0]`, `np.concatenate((context, new_choices))`.
- `savirt.SAViRT.forward(x)`: `x.permute(0, 1, 2, 4, 5, 3).reshape(-1, 2048)` into
  `Linear(2048, 512)`, then `reshape(B, 16, 1, 7, 7, 512)`.

The maps are real `vprom extract --pool none` output of resnet101 (random weights) at input
224, over a small data set; the answers are compared with DATASET.h5.
"""

from __future__ import annotations

import os
import random

import numpy as np
import pytest
import torch

from tests.dataset_fixture import build_records, write_dataset, write_images
from tests.features.test_extract import config
from vprom.app import cli
from vprom.errors import VpromError
from vprom.features.extract import extract
from vprom.feature_files import open_maps
from vprom.generation.export import export
from vprom.generation.export.crops import release_ids
from vprom.domain import ElementType
from vprom.tables import read_matrix_table

pytestmark = pytest.mark.slow  # resnet101 at 224 px on the CPU: tens of seconds


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    root = tmp_path_factory.mktemp("savir")
    crops, matrices = build_records(1, seed=3, element_types=(ElementType.OBJECT_ATTRIBUTE,
                                                              ElementType.COUNT))
    dataset = write_dataset(root / "d.h5", crops, matrices)
    vg = write_images(root / "vg", crops)
    maps = root / "maps.h5"
    extract(config(dataset, vg, maps, backbone="resnet101", input_size=None, pool="none",
                   batch_size=16))
    export(dataset, "original", root / "release", vg_dir=vg)
    return root, dataset, maps


def vprom_splits(v_prom: os.PathLike):
    """utils.VPROM_splits after main.py's random.seed(1), run from V-PROM/."""
    random.seed(1)
    n = 235000
    ind_test = random.sample(range(n), int(np.floor(n / 3)))
    here = os.getcwd()
    os.chdir(v_prom)
    try:
        counting, obj, attr = (np.load(f"datasets/{k}_gt_labels.npy", allow_pickle=True).tolist()
                               for k in ("counting", "obj", "attr"))
    finally:
        os.chdir(here)
    ind_test = set(ind_test)  # membership as the client's list test, faster
    lists = {"train": ([], []), "test": ([], [])}
    leaves = ([lbls for lbls in counting.values()] + [lbls for lbls in obj.values()]
              + [lbls for rule in attr.values() for lbls in rule.values()])
    for lbls in leaves:
        for key in lbls:
            imgs, targets = lists["test" if int(key) in ind_test else "train"]
            imgs.append(lbls[key]["im_path"])
            targets.append(lbls[key]["label"])
    return lists


def get_item(folder: str, index: int):
    """VPROM_dataset_utility.__getitem__'s loads (no shuffle), and its shuffle branch."""
    target = torch.load(folder + str(index) + "_target_Ours.pt", weights_only=True)
    rpm = torch.load(folder + str(index) + "_feature_Ours.pt", weights_only=True)
    context, choices = rpm[:8, :, :, :, :], rpm[8:, :, :, :, :]
    indices = np.arange(8)
    np.random.default_rng(index).shuffle(indices)
    new_target = np.where(indices == target.numpy())[0][0]
    shuffled = np.concatenate((context, choices[indices, :, :, :, :]))
    assert np.array_equal(shuffled[8 + new_target], rpm[8 + int(target)])
    return rpm, target


def test_savir_t_reads_every_problem(build, capsys):
    root, dataset, maps_path = build
    out = root / "savir"
    assert cli.main(["export", str(dataset), "--format", "savir-t", "--features",
                     str(maps_path), "--out", str(out)]) == 0
    assert "SAViR-T feature files" in capsys.readouterr().out
    m = read_matrix_table(dataset)
    pid_row = {int(p): r for r, p in enumerate(release_ids(m.id))}
    lists = vprom_splits(root / "release" / "V-PROM")
    assert sum(len(v[0]) for v in lists.values()) == len(m)
    with open_maps(maps_path) as maps:
        for part, (imgs, targets) in lists.items():
            folder = str(out / part) + "/"
            assert len(os.listdir(folder)) == 2 * len(imgs)
            for index, (im_path, label) in enumerate(zip(imgs, targets)):
                rpm, target = get_item(folder, index)
                row = pid_row[int(im_path.split("/")[-1])]
                assert rpm.dtype == torch.float32 and rpm.shape == (16, 1, 2048, 7, 7)
                assert target.dtype == torch.int64 and target.shape == ()
                assert int(target) == label - 9 == int(m.answer[row])
                assert np.array_equal(rpm[:, 0].numpy(), maps.gather(m.panels[row]))
    batch = torch.stack([get_item(str(out / "train") + "/", 0)[0]] * 2)  # the model's view
    x = batch.permute(0, 1, 2, 4, 5, 3).reshape(-1, 2048)
    assert torch.nn.Linear(2048, 512)(x).reshape(2, 16, 1, 7, 7, 512).shape[-1] == 512


def test_interrupted_export_resumes_and_refuses_other_settings(build, monkeypatch):
    from vprom.generation.export import savir

    root, dataset, maps_path = build
    out = root / "resumed"
    calls = []
    real = savir.write_once

    def dies_on_third(path, write):
        if path.name.endswith("_feature_Ours.pt"):
            calls.append(path.name)
            if len(calls) == 3:
                raise KeyboardInterrupt
        return real(path, write)

    monkeypatch.setattr(savir, "write_once", dies_on_third)
    with pytest.raises(KeyboardInterrupt):
        savir.export_savir(dataset, maps_path, out)
    assert not out.exists() and (root / "resumed.partial").is_dir()
    monkeypatch.setattr(savir, "write_once", real)
    with pytest.raises(VpromError, match="other settings"):
        savir.export_savir(dataset, maps_path, out, seed=2)
    counts = savir.export_savir(dataset, maps_path, out)
    assert counts["written"] == counts["train"] + counts["test"] - 2
    assert out.is_dir() and not (root / "resumed.partial").exists()
    with pytest.raises(VpromError, match="already exists"):
        savir.export_savir(dataset, maps_path, out)


def test_refuses_maps_savir_t_cannot_read(build, tmp_path):
    from vprom.generation.export.savir import export_savir

    root, dataset, _ = build
    vg = root / "vg"
    small = tmp_path / "r18.h5"
    extract(config(dataset, vg, small, pool="none"))  # resnet18 at 64 px: 512x2x2
    with pytest.raises(VpromError, match="maps of resnet18 shaped 512x2x2; SAViR-T reads "
                                         "resnet101's 2048x7x7"):
        export_savir(dataset, small, tmp_path / "o")
    assert not (tmp_path / "o").exists() and not (tmp_path / "o.partial").exists()
