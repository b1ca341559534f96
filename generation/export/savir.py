"""`vprom export --format savir-t`: a `.pt` pair per problem at the index SAViR-T
(kalbasioti/visual-reasoning) reads. Its `utils.VPROM_splits` draws test problem numbers with
`random.sample(range(235000), 235000 // 3)` under `random.seed(1)`, then walks the release's
label files appending each problem to the test or train list; this module repeats both, the
draw with `random.Random(seed)` (vprom's one use of `random`: SAViR-T's split is defined by it).
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import NamedTuple

import numpy as np
from tqdm import tqdm

from vprom.errors import VpromError
from vprom.feature_files import open_maps
from vprom.files import write_json
from vprom.generation.export.crops import release_ids, resumable_dir, template_text, write_once
from vprom.generation.export.release import FIRST_CANDIDATE_LABEL, LABEL_FILES, label_dicts
from vprom.manifest import input_hash, make_manifest
from vprom.tables import MatrixTable, read_matrix_table

SAVIR_N = 235000  # utils.VPROM_splits: "available RPMs"
SAVIR_SEED = 1  # main.py's --seed default
PARTS = ("train", "test")
BACKBONE = "resnet101"
MAP_SHAPE = (2048, 7, 7)  # SAViR-T: Linear(2048, 512), 49 = 7 x 7 cells
BYTES_PER_PROBLEM = 16 * 2048 * 7 * 7 * 4  # float32 (16, 1, 2048, 7, 7)
HELP = (f"SAViR-T's training data: train/ and test/ <index>_feature_Ours.pt (float32 "
        f"16x1x2048x7x7) and <index>_target_Ours.pt, indexed as its VPROM_splits lists "
        f"(--features: resnet101 maps from `vprom extract --pool none`; --out: a folder; "
        f"{BYTES_PER_PROBLEM / 1e6:.1f} MB a problem, "
        f"~{BYTES_PER_PROBLEM * SAVIR_N / 1e12:.1f} TB at full scale)")
#: The walk's order: VPROM_splits reads counting, then obj, then attr.
WALK = ("counting_gt_labels.npy", "obj_gt_labels.npy", "attr_gt_labels.npy")


class Entry(NamedTuple):
    row: int
    target: int


def savir_test_pids(seed: int = SAVIR_SEED, n: int = SAVIR_N) -> set[int]:
    return set(random.Random(seed).sample(range(n), int(np.floor(n / 3))))


def savir_lists(m: MatrixTable, seed: int = SAVIR_SEED) -> dict[str, list[Entry]]:
    """'train' and 'test' -> the entries in SAViR-T's index order (VPROM_splits' walk)."""
    pids = release_ids(m.id)
    row_of = {int(p): r for r, p in enumerate(pids.tolist())}
    test = savir_test_pids(seed)
    labels = label_dicts(m, pids)
    nested_files = {name for name, sub in LABEL_FILES.values() if sub is not None}
    entries = (item for name in WALK for relation in labels[name].values()
               for table in (relation.values() if name in nested_files else [relation])
               for item in table.items())
    out: dict[str, list[Entry]] = {p: [] for p in PARTS}
    for key, entry in entries:
        pid = int(key)
        out["test" if pid in test else "train"].append(
            Entry(row_of[pid], entry["label"] - FIRST_CANDIDATE_LABEL))
    return out


def export_savir(dataset: str | Path, features: str | Path, out: str | Path,
                 seed: int = SAVIR_SEED) -> dict:
    dataset, features, out = Path(dataset), Path(features), Path(out)
    m = read_matrix_table(dataset)
    lists = savir_lists(m, seed)
    with open_maps(features) as maps:
        maps.check_finite()  # before any file: a run never stops halfway on a bad map
        backbone, crop_ids = maps.attrs.get("backbone"), np.unique(m.panels)
        if backbone != BACKBONE or tuple(maps.shape[1:]) != MAP_SHAPE:
            raise VpromError(f"{features}: maps of {backbone} shaped "
                             f"{'x'.join(map(str, maps.shape[1:]))}; SAViR-T reads resnet101's "
                             "2048x7x7: extract with --backbone resnet101 --pool none at the "
                             "default --input-size 224")
        missing = np.intersect1d(crop_ids, maps.missing_crop_id)
        if len(missing):
            raise VpromError(f"{features}: crop {int(missing[0])} has no maps (its image was "
                             "missing at extraction); re-extract with the complete images")
        maps.index_of(crop_ids)  # a VpromError naming the first crop the file lacks
        settings = {"format": "savir-t", "seed": seed, "dataset": input_hash(dataset),
                    "features": input_hash(features), "crops": len(maps)}
        with resumable_dir(out, settings) as tmp:
            written = sum(_write_part(tmp / part, lists[part], m, maps) for part in PARTS)
            counts = {"train": len(lists["train"]), "test": len(lists["test"]),
                      "written": written, "seed": seed}
            manifest = make_manifest("export-savir-t", settings,
                                     inputs={dataset.name: settings["dataset"]}, counts=counts)
            write_json(tmp / "manifest.json", manifest)
            readme = template_text("savir.txt").format(**counts)
            (tmp / "README.txt").write_text(readme, encoding="utf-8")
    return counts


def _write_part(folder: Path, entries, m, maps) -> int:
    """The files of one list; how many problems were written now (not resumed)."""
    import torch  # here, not at the top: the command line imports this module for its help

    folder.mkdir(exist_ok=True)
    written = 0
    for index, entry in enumerate(tqdm(entries, desc=f"savir-t {folder.name}",
                                       unit="problem", disable=None)):
        target = torch.tensor(entry.target, dtype=torch.int64)
        write_once(folder / f"{index}_target_Ours.pt", lambda p: torch.save(target, p))
        feature = folder / f"{index}_feature_Ours.pt"
        if feature.exists():
            continue
        rpm = torch.from_numpy(np.ascontiguousarray(
            maps.gather(m.panels[entry.row], dtype=np.float32)[:, None]))
        written += write_once(feature, lambda p: torch.save(rpm, p))
    return written


def summary(out: Path, counts: dict) -> str:
    return (f"wrote {out}: SAViR-T feature files for {counts['train']:,} train and "
            f"{counts['test']:,} test problems ({counts['written']:,} written now)")

