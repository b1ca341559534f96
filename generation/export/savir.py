"""Which problem SAViR-T's training reads under which file index (`vprom export --format
savir-t`; the tensors themselves are written by `vprom.app.savir`, which may import torch).

SAViR-T (kalbasioti/visual-reasoning) trains from per-problem feature files. Its facts, read
from `utils.py` (`VPROM_splits`), `main.py` and `utility/VPROM_dataset_utility.py`:

- `main.py` seeds Python's `random` with `--seed` (default 1) and calls `VPROM_splits()`,
  which draws `ind_test = random.sample(range(N), floor(N / 3))` with `N = 235000` written
  in the code: a 2:1 train/test split of problem numbers, no validation part.
- `VPROM_splits` walks the three label files of the original release (from inside
  `V-PROM/`): counting[relation][pid], then obj[relation][pid], then
  attr[relation][kind][pid], each in the pickled dicts' order; a problem whose `int(pid)`
  is in `ind_test` goes to the test list, else to the train list, each list keeping
  (`im_path`, `label`).
- `VPROM_dataset_utility.__getitem__(index)` loads `<folder><index>_feature_Ours.pt` and
  `<folder><index>_target_Ours.pt` with `torch.load(..., weights_only=True)`, `<folder>`
  being `--train_data` or `--test_data` (a string prefix: it needs its trailing `/`), and
  `index` the position in that list. A missing file makes it retry another index forever.

So file `i` of `train/` is the i-th train entry of that walk. This module reproduces the
walk over the label dicts `export_release.label_dicts` builds (the ones `--format original`
pickles, in the same order) and the draw, with `random.Random(seed)`: the one place vprom
uses Python's `random`, because SAViR-T's split is defined by it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np

from vprom.generation.export.crops import release_ids
from vprom.generation.export.release import (
    FIRST_CANDIDATE_LABEL,
    LABEL_FILES,
    label_dicts,
)
from vprom.tables import MatrixTable

SAVIR_N = 235000  # utils.VPROM_splits: "available RPMs"
SAVIR_SEED = 1  # main.py's --seed default
PARTS = ("train", "test")
MAP_SHAPE = (2048, 7, 7)  # SAViR-T: Linear(2048, 512), 49 = 7 x 7 cells
BYTES_PER_PROBLEM = 16 * 2048 * 7 * 7 * 4  # float32 (16, 1, 2048, 7, 7)
FULL_SCALE = 235_000
HELP = (f"SAViR-T's training data: train/ and test/ <index>_feature_Ours.pt (float32 "
        f"16x1x2048x7x7) and <index>_target_Ours.pt, indexed as its VPROM_splits lists "
        f"(--features: resnet101 maps from `vprom extract --pool none`; --out: a folder; "
        f"{BYTES_PER_PROBLEM / 1e6:.1f} MB a problem, "
        f"~{BYTES_PER_PROBLEM * FULL_SCALE / 1e12:.1f} TB at full scale)")
#: The walk's order: VPROM_splits reads counting, then obj, then attr.
WALK = ("counting_gt_labels.npy", "obj_gt_labels.npy", "attr_gt_labels.npy")


@dataclass(frozen=True)
class Entry:
    """One problem of a SAViR-T list: its matrix row, release pid and target (0..7)."""

    row: int
    pid: int
    target: int


def savir_test_pids(seed: int = SAVIR_SEED, n: int = SAVIR_N) -> set[int]:
    """The problem numbers SAViR-T puts in its test list."""
    return set(random.Random(seed).sample(range(n), int(np.floor(n / 3))))


LABEL_FILES_NESTED = {name: sub is not None for name, sub in LABEL_FILES.values()}


def walk(labels: dict[str, dict]):
    """Yield (pid string, entry dict) in VPROM_splits' order."""
    for name in WALK:
        nested = LABEL_FILES_NESTED[name]
        for relation in labels[name].values():
            tables = relation.values() if nested else [relation]
            for table in tables:
                yield from table.items()


def savir_lists(m: MatrixTable, seed: int = SAVIR_SEED) -> dict[str, list[Entry]]:
    """'train' and 'test' -> the entries in SAViR-T's file-index order."""
    pids = release_ids(m.id)
    row_of = {int(p): r for r, p in enumerate(pids.tolist())}
    test = savir_test_pids(seed)
    out: dict[str, list[Entry]] = {p: [] for p in PARTS}
    for key, entry in walk(label_dicts(m, pids)):
        pid = int(key)
        out["test" if pid in test else "train"].append(
            Entry(row_of[pid], pid, entry["label"] - FIRST_CANDIDATE_LABEL))
    return out
