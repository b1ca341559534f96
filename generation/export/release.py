"""`vprom export --format original`: the original release's layout, as Slot-Abstractor's loader
and SAViR-T's `VPROM_splits` read it. Crops are stored once in `V-PROM/crops/`; problem `pid`
(its rank in id order) is `V-PROM/datasets/Raven_release/<pid // 5000>/<pid>/1..16.jpg`,
relative links clients open as `os.readlink(link)[15:]` (or copies). The label files are
pickled dicts keyed by `str(pid)`, `label` the answer's panel (9..16).
"""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

import numpy as np
from tqdm import tqdm

from vprom.generation.export.crops import cut_crops, npy_bytes, release_ids, template_text
from vprom.errors import VpromError
from vprom.files import atomic_dir, free_space_for, write_json
from vprom.domain import N_CONTEXT, N_PANELS, RELATIONS_OF, ElementType
from vprom.tables import SPLIT_PARTS, CropTable, MatrixTable

ROOT_NAME = "V-PROM"
DATASETS = f"{ROOT_NAME}/datasets"
PROBLEMS = f"{DATASETS}/Raven_release"
CROPS = f"{ROOT_NAME}/crops"
BUCKET = 5000  # problems per bucket folder
#: A panel's link climbs from <pid>/ past <bucket>/, Raven_release/, datasets/ and V-PROM/
#: to ROOT: the 15 characters clients cut off with `[15:]`.
LINK_PREFIX = "../" * 5
JPEG_QUALITY = 95
FIRST_CANDIDATE_LABEL = N_CONTEXT + 1  # candidates are panels 9..16
#: element type -> (label file, the key under the relation; None: entries sit under it)
LABEL_FILES = {
    ElementType.OBJECT.value: ("obj_gt_labels.npy", None),
    ElementType.OBJECT_ATTRIBUTE.value: ("attr_gt_labels.npy", "obj"),
    ElementType.HUMAN_ATTRIBUTE.value: ("attr_gt_labels.npy", "people"),
    ElementType.COUNT.value: ("counting_gt_labels.npy", None),
}


def problem_path(pid: int) -> str:
    return f"{PROBLEMS}/{pid // BUCKET}/{pid}"


def label_dicts(m: MatrixTable, pids: np.ndarray) -> dict[str, dict]:
    out: dict[str, dict] = {}  # every key a client looks up, even without entries
    for element_type, (name, sub) in LABEL_FILES.items():
        table = out.setdefault(name, {})
        for relation in RELATIONS_OF[ElementType(element_type)]:
            slot = table.setdefault(relation.value, {})
            if sub is not None:
                slot.setdefault(sub, {})
    for i in range(len(m)):
        element_type, relation = m.element_type[i], m.relation[i]
        if element_type not in LABEL_FILES:
            raise VpromError(f"matrix {int(m.id[i])}: element type {element_type!r} has no "
                             "place in the original release's label files")
        name, sub = LABEL_FILES[element_type]
        slot = out[name].get(relation)
        if slot is None:
            raise VpromError(f"matrix {int(m.id[i])}: relation {relation!r} does not take "
                             f"{element_type} elements; run `vprom verify` on the data set")
        pid = int(pids[i])
        answer = int(m.answer[i])
        (slot if sub is None else slot[sub])[str(pid)] = {
            "label": FIRST_CANDIDATE_LABEL + answer, "im_path": problem_path(pid),
            "relation": str(relation), "element_type": str(element_type),
            "super_attribute": str(m.super_attribute[i]), "answer": answer,
            "matrix_id": int(m.id[i])}
    return out


def split_lists(m: MatrixTable, pids: np.ndarray) -> dict[str, np.ndarray]:
    """`<split>_<part>_problems.npy` name -> unicode array of problem paths, in pid order."""
    pid_of = dict(zip(m.id.tolist(), pids.tolist()))
    out = {}
    for split in m.ordered_splits():
        for part in SPLIT_PARTS:
            ids = m.splits[split].get(part, np.zeros(0, np.int64)).tolist()
            chosen = sorted(pid_of[i] for i in ids if i in pid_of)
            out[f"{split}_{part}_problems.npy"] = np.array([problem_path(p) for p in chosen],
                                                           dtype=str)
    return out


def write_release(crops: CropTable, m: MatrixTable, rows: np.ndarray, out: Path, vg_dir: Path,
                  copy: bool, manifest: dict) -> dict:
    pids = release_ids(m.id)
    labels, lists = label_dicts(m, pids), split_lists(m, pids)  # refuse bad data before work
    with atomic_dir(out) as tmp:
        crop_dir = tmp / (CROPS if not copy else ".crops")
        crop_dir.mkdir(parents=True)
        n_crops = cut_crops(crops, rows, vg_dir, lambda r, im: im.save(
            crop_dir / f"{int(crops.crop_id[r])}.jpg", quality=JPEG_QUALITY))
        if copy:  # 16 copies per problem: check the disk holds them before making them
            sizes = {int(c): (crop_dir / f"{int(c)}.jpg").stat().st_size
                     for c in np.unique(m.panels)}
            free_space_for(out, sum(sizes[int(c)] for c in m.panels.ravel()),
                           " for the panel copies (--copy)")
        _write_problems(tmp, m, pids, crop_dir, copy)
        if copy:
            shutil.rmtree(crop_dir)
        datasets = tmp / DATASETS
        datasets.mkdir(parents=True, exist_ok=True)
        for name, table in labels.items():  # numpy 1.x loads them too (`npy_bytes`)
            (datasets / name).write_bytes(npy_bytes(table))
        for name, paths in lists.items():
            np.save(datasets / name, paths, allow_pickle=False)
        counts = {"problems": len(m), "buckets": len({int(p) // BUCKET for p in pids}),
                  "crops": n_crops, "panels": "copies" if copy else "symlinks",
                  "label_files": len(labels), "split_lists": len(lists)}
        manifest = {**manifest, "counts": {**manifest["counts"], **counts}}
        write_json(tmp / "manifest.json", manifest)
        note = template_text("release_copies.txt" if copy else "release_links.txt")
        readme = template_text("release.txt").format(n=len(m), mode=note)
        (tmp / "README.txt").write_text(readme, encoding="utf-8")
    return counts


def _write_problems(tmp: Path, m: MatrixTable, pids: np.ndarray, crop_dir: Path,
                    copy: bool) -> None:
    names = [f"{k + 1}.jpg" for k in range(N_PANELS)]
    for i in tqdm(range(len(m)), desc="problems", unit="problem", disable=None):
        folder = tmp / problem_path(int(pids[i]))
        folder.mkdir(parents=True)
        for k in range(N_PANELS):
            crop = f"{int(m.panels[i, k])}.jpg"
            if copy:
                shutil.copyfile(crop_dir / crop, folder / names[k])
                continue
            try:
                os.symlink(f"{LINK_PREFIX}{CROPS}/{crop}", folder / names[k])
            except OSError as e:
                if e.errno in (errno.EPERM, errno.EOPNOTSUPP, errno.ENOSYS):
                    raise VpromError(f"{folder}: this file system cannot hold symbolic links "
                                     f"({e.strerror}); export with --copy (panels as plain "
                                     "files, which readlink-based clients cannot read) or "
                                     "choose a folder on another disk") from None
                raise

