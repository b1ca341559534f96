"""Time `vprom verify` (each check), `vprom stats` and `vprom export --format jsonl` on a
synthetic DATASET.h5 of the paper's size (235,000 matrices), built here with numpy.

The matrices are And matrices over Table 1's vocabulary sizes (84 / 38 / 346 / 10 elements,
45k / 45k / 45k / 100k matrices) whose panels draw from 200 crops per element, so crops are
shared between matrices as in a real build. Splits: the neutral split is a seeded 2:1 draw
(other splits empty); the figures measure cost, not verdicts.

    .venv/bin/python bench/verify_full_scale.py [--matrices 235000] [--out /tmp/vbench]
"""

from __future__ import annotations

import argparse
import shutil
import time
from pathlib import Path

import h5py
import numpy as np

from vprom.manifest import make_manifest
from vprom.domain import SPLITS
from vprom.tables import CropTable, MatrixTable, set_manifest

TYPES = {"object_attribute": (84, 45_000), "human_attribute": (38, 45_000),
         "object": (346, 45_000), "count": (10, 100_000)}
CROPS_PER_ELEMENT = 200


def build(path: Path, n_total: int, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    scale = n_total / sum(n for _, n in TYPES.values())
    crop_cols = {k: [] for k in ("crop_id", "image_id", "element_type", "element",
                                 "super_attribute")}
    panels, elements, etypes, answers = [], [], [], []
    next_id = 0
    for etype, (n_elements, n_matrices) in TYPES.items():
        names = ([str(k) for k in range(1, 11)] if etype == "count"
                 else [f"{etype[:3]}{k}" for k in range(n_elements)])
        base = next_id
        for e in names:
            crop_cols["crop_id"] += range(next_id, next_id + CROPS_PER_ELEMENT)
            crop_cols["element"] += [e] * CROPS_PER_ELEMENT
            next_id += CROPS_PER_ELEMENT
        n = int(round(n_matrices * scale))
        for _ in range(n):
            pick = rng.choice(len(names), 10, replace=False)  # a, b, c + 7 distractors
            answer = int(rng.integers(8))
            distractors = list(pick[3:])
            cand = distractors[:answer] + [pick[2]] + distractors[answer:]
            els = [pick[0]] * 3 + [pick[1]] * 3 + [pick[2]] * 2 + cand
            offsets = rng.choice(CROPS_PER_ELEMENT, 3, replace=False)
            use = {}
            ids = []
            for e in els:  # repeated elements take different crops of that element
                k = use.get(e, 0)
                use[e] = k + 1
                ids.append(base + e * CROPS_PER_ELEMENT + int(offsets[k]))
            panels.append(ids)
            elements.append([names[e] for e in els])
            etypes.append(etype)
            answers.append(answer)
        crop_cols["element_type"] += [etype] * (len(names) * CROPS_PER_ELEMENT)
        crop_cols["super_attribute"] += ([names[0][:3] + "sa"] if "attribute" in etype else
                                         [""]) * (len(names) * CROPS_PER_ELEMENT)
    n_crops = len(crop_cols["crop_id"])
    crops = CropTable(
        crop_id=crop_cols["crop_id"], image_id=np.arange(n_crops) // 3 + 1,
        x=np.zeros(n_crops), y=np.zeros(n_crops), w=np.full(n_crops, 120),
        h=np.full(n_crops, 120), element_type=crop_cols["element_type"],
        element=crop_cols["element"], super_attribute=crop_cols["super_attribute"],
        source_id=np.arange(n_crops) + 1, phrase=[""] * n_crops, labels=crop_cols["element"])
    n = len(panels)
    ids = np.arange(n)
    test = rng.random(n) < 1 / 3
    splits = {s: {p: np.zeros(0, np.int64) for p in ("train", "val", "test")} for s in SPLITS}
    splits["neutral"] = {"train": ids[~test][8000:], "val": ids[~test][:8000], "test": ids[test]}
    table = MatrixTable(id=ids, relation=["and"] * n, element_type=etypes,
                        super_attribute=[crops.super_attribute[p[0]] for p in panels],
                        answer=answers, panels=np.array(panels), elements=np.array(elements,
                                                                                   dtype=object),
                        splits=splits)
    with h5py.File(path, "w") as h5:
        crops.write(h5.create_group("crops"))
        table.write(h5.create_group("matrices"), h5.create_group("splits"))
        set_manifest(h5, make_manifest("dataset", {"bench": True}, seed, counts={"matrices": n}))


def timed(label: str, fn):
    start = time.perf_counter()
    result = fn()
    print(f"{label:34s} {time.perf_counter() - start:8.1f} s", flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--matrices", type=int, default=235_000)
    parser.add_argument("--out", type=Path, default=Path("/tmp/vbench"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "dataset.h5"
    timed(f"build {args.matrices:,} matrices", lambda: build(path, args.matrices))
    print(f"DATASET.h5: {path.stat().st_size / 1e6:.0f} MB")

    from vprom.generation.verify import bias
    from vprom.generation.verify import checks
    from vprom.generation.verify import split_checks
    from vprom.generation.verify.ceiling import check_ceiling
    from vprom.generation.verify.loaded import load
    from vprom.generation.export import export
    from vprom.generation.verify.stats import stats
    from vprom.generation.verify import verify
    from vprom.splits import load_rules
    from vprom.tables import content_hash

    rules = load_rules()
    data, _ = timed("load", lambda: load(path))
    timed("content_hash", lambda: content_hash(path))
    timed("check integrity", lambda: checks.check_integrity(data, []))
    timed("check solver (vprom.generation.solver)", lambda: checks.solver_result(
        data, *checks.solve(checks.SolverTables(data), data, 0, len(data.matrices))))
    timed("check splits (vprom.splits.rules)", lambda: split_checks.check_splits(data, rules))
    timed("check leakage", lambda: split_checks.check_leakage(data))
    timed("check held-out labels", lambda: split_checks.check_held_out(
        data, rules.design.train_bans))
    timed("check bias: answer position and frequencies", lambda: bias.frequency_checks(data))
    timed("perception ceiling", lambda: check_ceiling(data.matrices))
    timed("verify (everything)", lambda: verify(path, rules))
    timed("stats", lambda: stats(path))
    timed("export jsonl", lambda: export(path, "jsonl", args.out / "dataset.jsonl"))
    print(f"dataset.jsonl: {(args.out / 'dataset.jsonl').stat().st_size / 1e6:.0f} MB")
    shutil.rmtree(args.out)


if __name__ == "__main__":
    main()
