"""SAViR-T's file indices (`generation.export.savir`) against its `VPROM_splits`, re-stated
(see tests/app/test_export_savir.py for its facts) over the label files of a real original
export: the i-th entry of each list is our i-th problem, with the same target."""

from __future__ import annotations

import random

import numpy as np

from tests.generation.test_export_savir_files import vprom_splits
from tests.dataset_fixture import build_records, write_dataset, write_images
from vprom.generation.export import export
from vprom.generation.export.crops import release_ids
from vprom.generation.export.release import problem_path
from vprom.generation.export.savir import savir_lists, savir_test_pids
from vprom.tables import read_matrix_table


def test_indices_follow_vprom_splits(tmp_path):
    crops, matrices = build_records(2, seed=5)
    dataset = write_dataset(tmp_path / "d.h5", crops, matrices)
    export(dataset, "original", tmp_path / "r", vg_dir=write_images(tmp_path / "vg", crops))
    m = read_matrix_table(dataset)
    pids = release_ids(m.id)
    ours = savir_lists(m)
    theirs = vprom_splits(tmp_path / "r" / "V-PROM")
    for part, (imgs, labels) in theirs.items():
        assert [problem_path(int(pids[e.row])) for e in ours[part]] == imgs
        assert [e.target + 9 for e in ours[part]] == labels
        assert [e.target for e in ours[part]] == [int(m.answer[e.row]) for e in ours[part]]
    assert ours["train"] and ours["test"]  # both lists met
    assert len(ours["train"]) + len(ours["test"]) == len(m)


def test_the_draw_is_python_random_seed_1():
    random.seed(1)
    expected = random.sample(range(235000), int(np.floor(235000 / 3)))
    assert savir_test_pids() == set(expected) and len(expected) == 78333
