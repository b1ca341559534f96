"""`vprom export --format original`, read the way the original release's clients read it.

The two public clients of the V-PROM release, re-stated in our own code (facts from their
sources, not their code):

- Slot-Abstractor, `v-prom/train_dinosaur_abstractor_vprom.py`, class `dataset`: run from
  the folder holding `V-PROM/`; `np.load(list)` (no allow_pickle) gives problem paths; panel
  k is `os.readlink("/".join(path.split("/")[-5:]) + f"/{k}.jpg")[15:]`, opened relative to
  that folder; the target is the first hit of `extract_labels`' lookups (obj and/or/union,
  attr and/or/union of 'obj', then of 'people', counting and/or/union/progression) with the
  problem folder's name as a string key, minus 9. A problem in no table leaves `label`
  unbound: the client crashes.
- SAViR-T, `VPROM_splits` (its `utils`): run from `V-PROM/`; the three label files loaded
  with `np.load(..., allow_pickle=True).tolist()`, walked two levels deep (obj, counting) or
  three (attr), each problem key parsed with `int`, collecting `im_path` and `label`.

Both are run over a real synthetic build (corpus -> mine -> generate) and every answer is
compared with DATASET.h5, for all seven splits' train, val and test lists.
"""

from __future__ import annotations

import dataclasses
import errno
import os
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from vprom.generation.export import export
from vprom.generation.export.release import LINK_PREFIX, problem_path
from tests.generation.synthetic_build import synthetic_build  # noqa: F401 (fixture)
from vprom.errors import VpromError
from vprom.images import ImageIndex, load_crop
from vprom.domain import SPLITS
from vprom.tables import SPLIT_PARTS, read_crop_table, read_matrix_table

LABELS = ("obj_gt_labels.npy", "attr_gt_labels.npy", "counting_gt_labels.npy")


@pytest.fixture(scope="module")
def release(synthetic_build, tmp_path_factory):
    dataset, vg = synthetic_build
    root = tmp_path_factory.mktemp("release") / "export"
    summary = export(dataset, "original", root, vg_dir=vg)
    return root, dataset, vg, summary


# --- the clients, re-stated -------------------------------------------------------------
def slot_abstractor_labels():
    """The three dicts, as `dataset.__init__` loads them (relative to the working folder)."""
    return [np.load(f"V-PROM/datasets/{name}", allow_pickle=True).item() for name in LABELS]


def slot_abstractor_target(problem_number: str, obj, attr, counting) -> int:
    """`dataset.extract_labels`: the lookups in the client's order; the first hit wins."""
    tables = ([obj[r] for r in ("and", "or", "union")]
              + [attr[r][kind] for kind in ("obj", "people") for r in ("and", "or", "union")]
              + [counting[r] for r in ("and", "or", "union", "progression")])
    for table in tables:
        if problem_number in table.keys():
            return table[problem_number]["label"] - 9
    raise AssertionError(f"problem {problem_number}: in no label table; the client crashes")


def slot_abstractor_read(list_path: Path) -> list[tuple[str, list[str], int]]:
    """(problem path, the 16 panel files, target) for every problem of a list."""
    obj, attr, counting = slot_abstractor_labels()
    out = []
    for data_path in np.load(list_path):
        folder = "/".join(data_path.split("/")[-5:])
        panels = [os.readlink(folder + f"/{i}.jpg")[15:] for i in range(1, 17)]
        out.append((data_path, panels,
                    slot_abstractor_target(data_path.split("/")[-1], obj, attr, counting)))
    return out


def savir_t_read() -> list[tuple[int, str, int]]:
    """`VPROM_splits` (run from V-PROM/): (problem number, im_path, label) of every entry."""
    counting, obj, attr = (np.load(f"datasets/{name}", allow_pickle=True).tolist()
                           for name in ("counting_gt_labels.npy", "obj_gt_labels.npy",
                                        "attr_gt_labels.npy"))
    out = []
    for table in (counting, obj):
        for label in table:
            lbls = table[label]
            for sub in lbls:
                out.append((int(sub), lbls[sub]["im_path"], lbls[sub]["label"]))
    for label in attr:
        rule = attr[label]
        for sub in rule:
            lbls = rule[sub]
            for subsub in lbls:
                out.append((int(subsub), lbls[subsub]["im_path"], lbls[subsub]["label"]))
    return out


# --- the tests ------------------------------------------------------------------------------
def test_slot_abstractor_reads_every_split_list(release, monkeypatch):
    """All 7 splits × train/val/test: every link followed, every label resolved, every
    problem compared with DATASET.h5 (panels, answer, membership of the part)."""
    root, dataset, _, _ = release
    m = read_matrix_table(dataset)
    assert np.array_equal(np.sort(m.id), np.arange(len(m)))  # so pid == matrix id
    row_of = {int(mid): i for i, mid in enumerate(m.id)}
    monkeypatch.chdir(root)  # the folder holding V-PROM/
    lists = sorted(p.name for p in Path("V-PROM/datasets").glob("*_problems.npy"))
    assert lists == sorted(f"{s}_{p}_problems.npy" for s in SPLITS for p in SPLIT_PARTS)
    for split in SPLITS:
        for part in SPLIT_PARTS:
            read = slot_abstractor_read(Path(f"V-PROM/datasets/{split}_{part}_problems.npy"))
            expected = sorted(int(i) for i in m.splits[split][part])
            assert [int(path.split("/")[-1]) for path, _, _ in read] == expected, (split, part)
            assert len(read) > 0, (split, part)  # the build fills every part
            for path, panels, target in read:
                i = row_of[int(path.split("/")[-1])]
                assert target == int(m.answer[i])
                assert panels == [f"V-PROM/crops/{int(c)}.jpg" for c in m.panels[i]]
                assert all(Path(p).is_file() for p in panels)


def test_panel_files_show_the_crops(release, monkeypatch):
    """Each crop file is its VG crop (JPEG q95) and each link resolves, from its own
    folder too, to the file the client opens."""
    root, dataset, vg, _ = release
    crops, m = read_crop_table(dataset), read_matrix_table(dataset)
    index = ImageIndex(vg)
    files = sorted((root / "V-PROM/crops").iterdir())
    assert len(files) == len(np.unique(m.panels))  # each crop written once
    for r in np.flatnonzero(np.isin(crops.crop_id, m.panels))[::7]:
        box = (crops.x[r], crops.y[r], crops.w[r], crops.h[r])
        want = np.asarray(load_crop(index.path(crops.image_id[r]), box), dtype=np.int16)
        with Image.open(root / f"V-PROM/crops/{int(crops.crop_id[r])}.jpg") as im:
            got = np.asarray(im.convert("RGB"), dtype=np.int16)
        assert got.shape == want.shape and np.abs(got - want).mean() < 4
    monkeypatch.chdir(root)
    for i in range(0, len(m), 50):
        folder = Path(problem_path(int(m.id[i])))
        for k in range(16):
            link = folder / f"{k + 1}.jpg"
            target = os.readlink(link)
            assert target.startswith(LINK_PREFIX) and target[:15] == "../" * 5
            assert link.resolve() == Path(target[15:]).resolve()


def test_savir_t_reads_every_problem_once(release, monkeypatch):
    root, dataset, _, _ = release
    m = read_matrix_table(dataset)
    monkeypatch.chdir(root / "V-PROM")
    read = savir_t_read()
    assert sorted(pid for pid, _, _ in read) == list(range(len(m)))  # 0..N-1, each once
    row_of = {int(mid): i for i, mid in enumerate(m.id)}
    for pid, im_path, label in read:
        i = row_of[pid]
        assert label == int(m.answer[i]) + 9
        assert (root / im_path).is_dir() and im_path == problem_path(pid)


def test_label_entries_carry_the_matrix(release, monkeypatch):
    root, dataset, _, _ = release
    m = read_matrix_table(dataset)
    monkeypatch.chdir(root)
    obj, attr, counting = slot_abstractor_labels()
    assert set(obj) == {"and", "or", "union"} and set(attr) == {"and", "or", "union"}
    assert set(counting) == {"and", "or", "union", "progression"}
    assert all(set(attr[r]) == {"obj", "people"} for r in attr)
    where = {"object": lambda r: obj[r], "count": lambda r: counting[r],
             "object_attribute": lambda r: attr[r]["obj"],
             "human_attribute": lambda r: attr[r]["people"]}
    for i in range(len(m)):
        entry = where[m.element_type[i]](m.relation[i])[str(int(m.id[i]))]
        assert entry == {"label": int(m.answer[i]) + 9, "im_path": problem_path(int(m.id[i])),
                         "relation": m.relation[i], "element_type": m.element_type[i],
                         "super_attribute": m.super_attribute[i],
                         "answer": int(m.answer[i]), "matrix_id": int(m.id[i])}
    sizes = sum(len(t) for t in obj.values()) + sum(len(t) for t in counting.values()) + sum(
        len(t) for r in attr.values() for t in r.values())
    assert sizes == len(m)


def test_layout_buckets_and_summary(release):
    root, dataset, _, summary = release
    m = read_matrix_table(dataset)
    buckets = sorted(p.name for p in (root / "V-PROM/datasets/Raven_release").iterdir())
    assert buckets == sorted({str(int(i) // 5000) for i in m.id})
    assert problem_path(234_999) == "V-PROM/datasets/Raven_release/46/234999"
    assert problem_path(5000) == "V-PROM/datasets/Raven_release/1/5000"
    for name in LABELS:
        assert np.load(root / "V-PROM/datasets" / name, allow_pickle=True).dtype == object
    assert np.load(root / "V-PROM/datasets/neutral_val_problems.npy").dtype.kind == "U"
    text = str(summary)
    assert text.startswith(f"wrote {root}/V-PROM: {len(m):,} problems") and "symlinks" in text
    assert (root / "README.txt").is_file() and (root / "manifest.json").is_file()


def test_ids_that_are_not_0_to_n_get_release_ids(tmp_path, monkeypatch):
    """A data set whose ids are not 0..N-1 (a subset, say) is numbered by id order; each
    entry keeps its matrix id."""
    from tests.dataset_fixture import build_records, write_dataset, write_images
    crops, matrices = build_records(1, seed=5)
    matrices = [dataclasses.replace(x, id=10 * x.id + 7) for x in matrices]
    dataset = write_dataset(tmp_path / "d.h5", crops, matrices)
    root = export(dataset, "original", tmp_path / "out", vg_dir=write_images(tmp_path / "vg",
                                                                               crops)).out
    monkeypatch.chdir(root / "V-PROM")
    read = sorted(savir_t_read())
    assert [pid for pid, _, _ in read] == list(range(len(matrices)))
    obj, attr, counting = (np.load(f"datasets/{n}", allow_pickle=True).item() for n in LABELS)
    ids = sorted(e["matrix_id"] for t in (obj, counting) for r in t.values() for e in r.values())
    ids += sorted(e["matrix_id"] for r in attr.values() for k in r.values() for e in k.values())
    assert sorted(ids) == sorted(x.id for x in matrices)


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    from tests.dataset_fixture import build_records, write_dataset, write_images

    root = tmp_path_factory.mktemp("small")
    crops, matrices = build_records(1, seed=4)
    return write_dataset(root / "d.h5", crops, matrices), write_images(root / "vg", crops)


def test_copy_mode_has_plain_panels_that_readlink_cannot_follow(small, tmp_path):
    dataset, vg = small
    linked = export(dataset, "original", tmp_path / "link", vg_dir=vg).out
    copied = export(dataset, "original", tmp_path / "copy", vg_dir=vg, copy=True).out
    assert not (copied / "V-PROM/crops").exists()
    panels = sorted((copied / "V-PROM/datasets/Raven_release").rglob("*.jpg"))
    assert len(panels) == 13 * 16 and not any(p.is_symlink() for p in panels)
    for p in panels:
        assert p.read_bytes() == (linked / p.relative_to(copied)).read_bytes()
    with pytest.raises(OSError) as e:  # the documented limit: readlink clients fail
        os.readlink(panels[0])
    assert e.value.errno == errno.EINVAL
    for name in (*LABELS, "neutral_test_problems.npy"):
        a, b = (np.load(r / "V-PROM/datasets" / name, allow_pickle=True)
                for r in (linked, copied))
        assert a.tolist() == b.tolist()


def test_same_data_set_same_export(small, tmp_path):
    dataset, vg = small

    def listing(root):
        return {str(p.relative_to(root)): (os.readlink(p) if p.is_symlink() else p.read_bytes())
                for p in sorted(root.rglob("*")) if p.is_file() or p.is_symlink()
                if p.name != "manifest.json"}

    a = export(dataset, "original", tmp_path / "a", vg_dir=vg).out
    b = export(dataset, "original", tmp_path / "b", vg_dir=vg).out
    assert listing(a) == listing(b)


def test_a_file_system_without_symlinks_is_named(small, tmp_path, monkeypatch):
    dataset, vg = small

    def refuse(*args, **kwargs):
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "symlink", refuse)
    with pytest.raises(VpromError, match="cannot hold symbolic links.*--copy"):
        export(dataset, "original", tmp_path / "out", vg_dir=vg)
    assert not any(tmp_path.iterdir())  # nothing half-written is left
