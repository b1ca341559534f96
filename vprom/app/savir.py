"""`vprom export --format savir-t`: SAViR-T's training data, one `.pt` pair per problem.

Why here, on the top floor: the files are `torch.save` tensors, and the index scheme comes
from the original release's label dicts (`vprom.generation`); generation may not import
torch or features, and baselines may not import generation. The top floor may import both;
the index scheme itself stays in `generation.export.savir` (plain Python, tested there).

    OUT/train/<index>_feature_Ours.pt    float32 (16, 1, 2048, 7, 7): the resnet101 maps of
                                          the 16 panels (8 context row-major, 8 candidates)
    OUT/train/<index>_target_Ours.pt     int64 (): the answer, 0..7
    OUT/test/…                            the same for SAViR-T's test list
    OUT/README.txt, OUT/manifest.json

The layout is what SAViR-T's model takes: `forward` permutes a batch (B, 16, 1, 2048, 7, 7)
to channels-last, applies `Linear(2048, 512)` (float32 weights: the maps are stored float32)
and reshapes to (B, 16, 1, 7, 7, 512); the loader slices `RPM[:8, :, :, :, :]` and
`RPM[8:, …]`. The maps come from `vprom extract --pool none --backbone resnet101` at input
224 (`open_maps`; float16 maps are widened). Each problem gathers its 16 crops' maps (crops
repeat across problems: the maps file stores each once), so the export needs the maps
file, not the images. 16 × 2048 × 49 × 4 bytes = 6.4 MB a problem (torch's zip adds ~1 KB):
~1.5 TB for the 235,000 problems of a full build, as SAViR-T's own extraction makes.

Indices: `generation.export.savir` (SAViR-T's own 2:1 draw with seed 1 over the label
files' walk). The folder fills as `OUT.partial/` and is renamed when complete; an
interrupted export resumes where it stopped (`generation.export.resumable`).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from vprom.errors import VpromError
from vprom.features.reader import open_maps
from vprom.generation.export.savir import MAP_SHAPE, PARTS, SAVIR_SEED, savir_lists
from vprom.generation.export.resumable import resumable_dir, write_once
from vprom.io import make_manifest, sha256_file
from vprom.tables import read_matrix_table

BACKBONE = "resnet101"


def feature_name(index: int) -> str:
    return f"{index}_feature_Ours.pt"


def target_name(index: int) -> str:
    return f"{index}_target_Ours.pt"


def check_maps(maps, path: Path, crop_ids: np.ndarray) -> None:
    """The maps must be resnet101's 2048x7x7, and hold every panel's crop."""
    backbone = maps.attrs.get("backbone")
    if backbone != BACKBONE or tuple(maps.shape[1:]) != MAP_SHAPE:
        raise VpromError(f"{path}: maps of {backbone} shaped {'x'.join(map(str, maps.shape[1:]))}"
                         f"; SAViR-T reads resnet101's 2048x7x7: extract with --backbone "
                         "resnet101 --pool none at the default --input-size 224")
    missing = np.intersect1d(crop_ids, maps.missing_crop_id)
    if len(missing):
        raise VpromError(f"{path}: crop {int(missing[0])} has no maps (its image was missing "
                         "at extraction); re-extract with the complete images")
    maps.index_of(crop_ids)  # a VpromError naming the first crop the file lacks


def export_savir(dataset: str | Path, features: str | Path, out: str | Path,
                 seed: int = SAVIR_SEED) -> dict:
    """Write SAViR-T's feature and target files for DATASET.h5 to folder `out`."""
    dataset, features, out = Path(dataset), Path(features), Path(out)
    m = read_matrix_table(dataset)
    lists = savir_lists(m, seed)
    with open_maps(features) as maps:
        check_maps(maps, features, np.unique(m.panels))
        settings = {"format": "savir-t", "seed": seed, "dataset": sha256_file(dataset),
                    "features": maps.attrs.get("config_hash", ""), "crops": len(maps)}
        with resumable_dir(out, settings) as tmp:
            written = sum(_write_part(tmp / part, lists[part], m, maps) for part in PARTS)
            counts = {"train": len(lists["train"]), "test": len(lists["test"]),
                      "written": written, "seed": seed}
            manifest = make_manifest("export-savir-t", settings,
                                     inputs={dataset.name: settings["dataset"]}, counts=counts)
            (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True)
                                               + "\n")
            (tmp / "README.txt").write_text(README.format(**counts), encoding="utf-8")
    return counts


def _write_part(folder: Path, entries, m, maps) -> int:
    """The files of one list; returns how many problems were written (not resumed)."""
    folder.mkdir(exist_ok=True)
    written = 0
    for index, entry in enumerate(tqdm(entries, desc=f"savir-t {folder.name}",
                                       unit="problem", disable=None)):
        target = torch.tensor(entry.target, dtype=torch.int64)
        write_once(folder / target_name(index), lambda p: torch.save(target, p))
        if (folder / feature_name(index)).exists():
            continue
        rpm = torch.from_numpy(np.ascontiguousarray(
            maps.gather(m.panels[entry.row], dtype=np.float32)[:, None]))
        written += write_once(folder / feature_name(index), lambda p: torch.save(rpm, p))
    return written


def summary(out: Path, counts: dict) -> str:
    return (f"wrote {out}: SAViR-T feature files for {counts['train']:,} train and "
            f"{counts['test']:,} test problems ({counts['written']:,} written now)")


README = """SAViR-T's training data, exported by `vprom export --format savir-t`.

train/<index>_feature_Ours.pt  float32 (16, 1, 2048, 7, 7): resnet101 maps of the 16 panels
train/<index>_target_Ours.pt   int64 (): the answer, 0..7
test/...                       the same for the test list
{train:,} train and {test:,} test problems. <index> is the position in the lists SAViR-T's
VPROM_splits() builds (random.seed({seed}), N = 235000) from the label files of
`vprom export --format original` of the same DATASET.h5: run SAViR-T from that export's
V-PROM/ folder with --train_data <this folder>/train/ --test_data <this folder>/test/
(with the trailing slashes: it concatenates).
"""
