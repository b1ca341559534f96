"""`vprom verify`: prove a built DATASET.h5 sound before anyone trains on it.

The checks, each a named result with its figures (see the README's verify section for thresholds):

1. integrity — the file's structure (groups, equal column lengths, N×16 panels and
   elements), the manifest (present, its `counts` and `outputs.content_hash` agree with the
   file, and the sidecar `X.h5.manifest.json`'s sha256 of the file if it records one),
   unique matrix and crop ids, every panel's crop present with the element and element
   type the matrix says, answers in 0..7, relations valid for the element type, no crop
   twice within a matrix, attribute matrices' context and answer of their super-attribute.
2. solver — `vprom.solver.check_matrix` on every matrix with all its panels' labels:
   exactly one candidate completes it.
3. splits — all 7 splits present, their ids known, train/val/test disjoint, the stored
   parts equal `splits.assign` re-run on every matrix (val is drawn from the train side),
   and the paper's rules that need no spec (held-out attributes, interpolation,
   extrapolation) hold for the answers.
4. leakage — no image region (same image and box, or same VG source id) on both the
   train(+val) and the test side of any split.
5. bias — `vprom.audit`: answer positions, frequency heuristics, context-blind probes.

`content_hash` fingerprints the data itself — the crops, matrices, splits and vocab groups
as typed arrays in sorted order — so it does not depend on HDF5's byte layout, chunking or
compression; the generator stores it as `manifest["outputs"]["content_hash"]`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import h5py
import numpy as np
from tqdm import tqdm

from vprom import audit
from vprom.audit import Check
from vprom.errors import VpromError
from vprom.io import manifest_path, sha256_file
from vprom.records import (COUNTS, N_CANDIDATES, N_CONTEXT, N_PANELS, RELATIONS_OF, SPLITS,
                           ElementType)
from vprom.tables import CropTable, MatrixTable, open_h5

MAX_EXAMPLES = 5
CONTENT_GROUPS = ("crops", "matrices", "splits", "vocab")
MATRIX_COLUMNS = ("id", "relation", "element_type", "super_attribute", "answer", "panels",
                  "elements")
CROP_COLUMNS = ("crop_id", "image_id", "x", "y", "w", "h", "element_type", "element",
                "super_attribute", "source_id", "phrase", "labels")
COUNT_UNIVERSE = frozenset(str(n) for n in COUNTS)
#: Paper rules that hold whatever the split spec files say (answer elements / super-attributes).
HELD_OUT_SUPER_ATTRIBUTES = frozenset({"shape", "texture", "action"})
#: matrices the probes sample (train, test): a few parameters need little training data,
#: and 50,000 test matrices put the 95% interval within ±0.3 points
PROBE_MAX = (20_000, 50_000)
#: the feature probe holds the candidates' features in memory (≤ 160,000 crops × D, stored dtype)
FEATURE_PROBE_MAX = (10_000, 10_000)


# ---------------------------------------------------------------- content hash
def content_hash(path: str | Path) -> str:
    """sha256 over the data of a DATASET.h5, independent of HDF5 byte layout.

    Datasets under CONTENT_GROUPS are visited in sorted path order; each contributes its
    path, kind, shape and values: integers as little-endian int64, floats as float64,
    strings as the UTF-8 of their JSON list. Attributes (the manifest) are not included.
    """
    h = hashlib.sha256()
    with open_h5(path) as f:
        items: list[tuple[str, h5py.Dataset]] = []
        for group in CONTENT_GROUPS:
            if group in f:
                f[group].visititems(lambda name, obj, g=group: items.append(
                    (f"{g}/{name}", obj)) if isinstance(obj, h5py.Dataset) else None)
        for name, ds in sorted(items, key=lambda t: t[0]):
            h.update(_dataset_bytes(name, ds))
    return "sha256:" + h.hexdigest()


def _dataset_bytes(name: str, ds: h5py.Dataset) -> bytes:
    kind = ds.dtype.kind
    if kind in "OSU":
        values = ds.asstr()[()] if kind != "U" else ds[()]
        body = json.dumps(np.asarray(values, dtype=object).ravel().tolist(),
                          ensure_ascii=False).encode()
        kind = "str"
    elif kind == "f":
        body = np.ascontiguousarray(ds[()], dtype="<f8").tobytes()
        kind = "float"
    else:
        body = np.ascontiguousarray(ds[()], dtype="<i8").tobytes()
        kind = "int"
    head = json.dumps([name, kind, list(ds.shape), len(body)]).encode()
    return head + b"\n" + body


# ---------------------------------------------------------------- loading
@dataclass
class Data:
    """A DATASET.h5 in memory, with each panel's row in the crops table."""

    path: Path
    crops: CropTable
    matrices: MatrixTable
    rows: np.ndarray  # N×16 crop rows, -1 where a crop id is unknown
    manifest: dict | None
    vocab: dict[str, frozenset[str]] = field(default_factory=dict)


def crop_rows(crop_ids: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """The row of each wanted crop id in `crop_ids` (same shape as `wanted`), -1 where absent."""
    wanted = np.asarray(wanted, dtype=np.int64)
    if len(crop_ids) == 0:
        return np.full(wanted.shape, -1, dtype=np.int64)
    order = np.argsort(crop_ids, kind="stable")
    ordered = crop_ids[order]
    pos = np.minimum(np.searchsorted(ordered, wanted), len(ordered) - 1)
    return np.where(ordered[pos] == wanted, order[pos], -1)


def parts_by_id(m: MatrixTable) -> dict[int, dict[str, str]]:
    """matrix id -> {split: part}, ignoring ids a split lists that are not matrices."""
    columns = part_columns(m)
    return {int(mid): {s: columns[s][i] for s in columns} for i, mid in enumerate(m.id)}


def ordered_splits(m: MatrixTable) -> list[str]:
    """The splits of the file in the paper's order, then any others by name."""
    return [s for s in SPLITS if s in m.splits] + sorted(set(m.splits) - set(SPLITS))


def part_columns(m: MatrixTable) -> dict[str, np.ndarray]:
    """split -> the part ('train', 'val', 'test', 'excluded') of every matrix row."""
    out = {}
    for split, parts in m.splits.items():
        column = np.full(len(m), "excluded", dtype=object)
        for part in ("train", "val", "test"):
            column[np.isin(m.id, parts.get(part, np.zeros(0, np.int64)))] = part
        out[split] = column
    return out


def structure_problems(h5: h5py.File) -> list[str]:
    """What makes the file unreadable as a DATASET.h5 (empty when the layout is right)."""
    problems = []
    for group in ("crops", "matrices", "splits"):
        if group not in h5:
            problems.append(f"no '{group}' group")
    if problems:
        return problems
    for group, columns in (("matrices", MATRIX_COLUMNS), ("crops", CROP_COLUMNS)):
        missing = [c for c in columns if c not in h5[group]]
        if missing:
            problems.append(f"{group} lacks column(s) {', '.join(missing)}")
            continue
        n = h5[group][columns[0]].shape[0] if h5[group][columns[0]].shape else 0
        for c in columns:
            shape = h5[group][c].shape
            want = (n, N_PANELS) if c in ("panels", "elements") else (n,)
            if shape != want:
                problems.append(f"{group}/{c} has shape {shape}, expected {want}")
    for split in h5["splits"]:
        for part in h5["splits"][split]:
            if len(h5["splits"][split][part].shape) != 1:
                problems.append(f"splits/{split}/{part} is not a 1-D list of matrix ids")
    return problems


def load(path: Path) -> tuple[Data | None, list[str]]:
    """The data set, or None with the structural problems that prevent reading it."""
    with open_h5(path) as h5:
        problems = structure_problems(h5)
        if problems:
            return None, problems
        crops = CropTable.read(h5["crops"])
        matrices = MatrixTable.read(h5["matrices"], h5["splits"])
        manifest = None
        if "manifest" in h5.attrs:
            try:
                manifest = json.loads(h5.attrs["manifest"])
            except (TypeError, ValueError):
                manifest = {"_unreadable": True}
        vocab = {}
        if "vocab" in h5:
            for name, ds in h5["vocab"].items():
                if isinstance(ds, h5py.Dataset) and ds.dtype.kind == "O":
                    vocab[name] = frozenset(ds.asstr()[()].ravel().tolist())
    return Data(path, crops, matrices, crop_rows(crops.crop_id, matrices.panels), manifest,
                vocab), []


def _examples(what: str, ids, reasons=None) -> list[str]:
    ids = list(ids)
    out = [f"matrix {int(i)}: {what}" + (f" ({reasons[k]})" if reasons else "")
           for k, i in enumerate(ids[:MAX_EXAMPLES])]
    if len(ids) > MAX_EXAMPLES:
        out.append(f"... {len(ids) - MAX_EXAMPLES:,} more: {what}")
    return out


# ---------------------------------------------------------------- 1. integrity
def manifest_problems(data: Data) -> list[str]:
    """The manifest is there and what it records agrees with the file."""
    m = data.manifest
    if m is None:
        return ["no 'manifest' attribute: the file was not written by `vprom generate`, "
                "or not to the end; regenerate it"]
    if m.get("_unreadable"):
        return ["the 'manifest' attribute is not valid JSON; regenerate the file"]
    problems = []
    counts = m.get("counts") or {}
    actual = {"matrices": len(data.matrices), "crops": len(data.crops)}
    for key, value in actual.items():
        if isinstance(counts.get(key), int) and counts[key] != value:
            problems.append(f"manifest counts {counts[key]:,} {key}, the file holds {value:,}")
    for split, parts in (counts.get("splits") or {}).items():
        stored = data.matrices.splits.get(split, {})
        for part, n in (parts or {}).items():
            if part in stored and isinstance(n, int) and n != len(stored[part]):
                problems.append(f"manifest counts {n:,} {split}/{part}, the file holds "
                                f"{len(stored[part]):,}")
    recorded = (m.get("outputs") or {}).get("content_hash")
    if recorded and recorded != content_hash(data.path):
        problems.append("content_hash differs from the manifest's: the data was changed "
                        "after generation; regenerate it")
    side = manifest_path(data.path)
    if side.is_file():
        try:
            outputs = json.loads(side.read_text(encoding="utf-8")).get("outputs") or {}
        except ValueError:
            return problems + [f"{side} is not valid JSON"]
        sha = outputs.get(data.path.name)
        if sha and sha.removeprefix("sha256:") != sha256_file(data.path):
            problems.append(f"sha256 differs from {side.name}'s: the file was changed or "
                            "truncated after it was written")
    return problems


def _bad(mask: np.ndarray, ids: np.ndarray, what: str) -> list[str]:
    return _examples(what, ids[np.flatnonzero(mask)]) if mask.any() else []


def fatal_problems(data: Data) -> list[str]:
    """Damage that keeps matrices from being read as records (later checks cannot run)."""
    m = data.matrices
    if len(m) == 0:
        return ["the data set holds no matrices; regenerate it with a larger --scale"]
    ids, counts = np.unique(m.id, return_counts=True)
    problems = [f"matrix id {int(i)} appears {int(k)} times" for i, k in
                zip(ids[counts > 1][:MAX_EXAMPLES], counts[counts > 1][:MAX_EXAMPLES])]
    problems += _bad((data.rows < 0).any(axis=1), m.id, "a panel's crop id is not in crops")
    problems += _bad((m.answer < 0) | (m.answer >= N_CANDIDATES), m.id, "answer not in 0..7")
    problems += _bad(~_relation_valid(m), m.id,
                     "unknown element type, or relation not valid for the element type")
    return problems


def record_problems(data: Data) -> list[str]:
    """Per-matrix integrity: crops, elements, element types, repeats, super-attributes."""
    m, c, rows = data.matrices, data.crops, data.rows
    problems = []
    cids, ccounts = np.unique(c.crop_id, return_counts=True)
    problems += [f"crop id {int(i)} appears {int(k)} times in crops" for i, k in
                 zip(cids[ccounts > 1][:MAX_EXAMPLES], ccounts[ccounts > 1][:MAX_EXAMPLES])]
    missing = (rows < 0).any(axis=1)
    safe = np.where(rows < 0, 0, rows)
    if len(c):
        problems += _bad(~missing & (c.element[safe] != m.elements).any(axis=1), m.id,
                         "a panel's element differs from its crop's element")
        problems += _bad(~missing & (c.element_type[safe] != m.element_type[:, None]).any(axis=1),
                         m.id, "a panel's crop is of another element type")
    ordered = np.sort(m.panels, axis=1)
    problems += _bad((ordered[:, 1:] == ordered[:, :-1]).any(axis=1), m.id,
                     "the same crop is shown twice")
    problems += super_attribute_problems(data, safe, missing)
    return problems


def _relation_valid(m: MatrixTable) -> np.ndarray:
    valid = {(t.value, r.value) for t, rels in RELATIONS_OF.items() for r in rels}
    return np.array([(t, r) in valid for t, r in zip(m.element_type, m.relation)], dtype=bool)


def super_attribute_problems(data: Data, rows: np.ndarray, missing: np.ndarray) -> list[str]:
    """Attribute matrices show their super-attribute in the context and the answer."""
    m, c = data.matrices, data.crops
    attribute = np.isin(m.element_type, [ElementType.OBJECT_ATTRIBUTE.value,
                                         ElementType.HUMAN_ATTRIBUTE.value])
    problems = _bad(attribute & (m.super_attribute == ""), m.id,
                    "an attribute matrix without a super-attribute")
    problems += _bad(~attribute & (m.super_attribute != ""), m.id,
                     "an object/count matrix with a super-attribute")
    if not len(c):
        return problems
    shown = np.concatenate([rows[:, :N_CONTEXT],
                            rows[np.arange(len(m)), N_CONTEXT + m.answer.astype(np.int64)
                                 .clip(0, N_CANDIDATES - 1)][:, None]], axis=1)
    wrong = attribute & ~missing & (c.super_attribute[shown] != m.super_attribute[:, None]).any(
        axis=1)
    return problems + _bad(wrong, m.id, "a context or answer crop of another super-attribute")


def check_integrity(data: Data | None, structure: list[str]) -> Check:
    """`figures["readable"]` says whether the records are sound enough for later checks."""
    if data is None:
        return Check("integrity", "fail", "the file's structure is broken: " + structure[0],
                     {"readable": False}, structure)
    fatal = fatal_problems(data)
    problems = manifest_problems(data) + fatal + record_problems(data)
    figures = {"matrices": len(data.matrices), "crops": len(data.crops),
               "manifest": data.manifest is not None, "readable": not fatal}
    summary = (f"{len(data.matrices):,} matrices, {len(data.crops):,} crops: "
               + (f"{len(problems)} problem(s)" if problems else
                  "manifest, ids, crops, elements, answers and relations agree"))
    return Check("integrity", "fail" if problems else "pass", summary, figures, problems)


# ---------------------------------------------------------------- 2. solver
def universes(data: Data) -> dict[str, frozenset[str]]:
    """The elements a panel of each element type could show (for the solver's 'any other')."""
    c = data.crops
    out = {t.value: frozenset(c.element[c.element_type == t.value].tolist())
           for t in ElementType}
    out[ElementType.COUNT.value] = COUNT_UNIVERSE
    out.update({t: v for t, v in data.vocab.items() if t in out})
    return out


def check_solver(data: Data, check_matrix: Callable | None = None) -> Check:
    """Every matrix, with all its panels' labels, has exactly one valid candidate."""
    if check_matrix is None:
        from vprom.solver import check_matrix
    label_sets = data.crops.label_sets()
    universe = universes(data)
    parts = parts_by_id(data.matrices)
    failed, reasons = [], []
    for i in tqdm(range(len(data.matrices)), desc="solver", unit="matrix", disable=None):
        matrix = data.matrices.row(i, parts)
        labels = [label_sets[r] for r in data.rows[i]]
        reason = check_matrix(matrix, labels, universe[matrix.element_type.value])
        if reason is not None:
            failed.append(matrix.id)
            reasons.append(reason)
    n = len(data.matrices)
    summary = (f"{n - len(failed):,}/{n:,} matrices have exactly one valid candidate")
    return Check("solver", "fail" if failed else "pass", summary,
                 {"matrices": n, "failed": len(failed)},
                 _examples("not exactly one answer", failed, reasons))


# ---------------------------------------------------------------- 3. splits
def default_assigner(data: Data) -> Callable:
    """matrix -> {split: part} by `splits.assign` with the split spec files and the seed the
    manifest records (sides of every panel's image computed for all matrices at once)."""
    from splits.assign import PanelInfo, assign, load_split_specs
    from vprom.sampling import image_test_side

    seed = (data.manifest or {}).get("seed")
    if not isinstance(seed, int):
        raise VpromError(f"{data.path}: the manifest records no seed, so the split rules "
                         "cannot be re-run; regenerate the file with `vprom generate`")
    specs = load_split_specs()
    rows = np.where(data.rows < 0, 0, data.rows)
    image_ids = data.crops.image_id[rows]
    sides = {}
    for spec in specs.values():
        if spec.partition not in sides:
            sides[spec.partition] = image_test_side(seed, spec.partition, image_ids.ravel(),
                                                    spec.test_fraction).reshape(rows.shape)
    super_attributes = data.crops.super_attribute[rows]
    row_of = {int(mid): i for i, mid in enumerate(data.matrices.id)}

    def assigner(matrix):
        i = row_of[matrix.id]
        info = PanelInfo(sides={p: tuple(int(v) for v in s[i]) for p, s in sides.items()},
                         super_attributes=tuple(super_attributes[i]))
        return assign(matrix, info, specs)

    return assigner


def split_structure_problems(m: MatrixTable) -> list[str]:
    """Every split present; its ids are matrices; train, val and test disjoint."""
    problems = [f"split '{s}' is missing" for s in SPLITS if s not in m.splits]
    known = set(m.id.tolist())
    for split, parts in sorted(m.splits.items()):
        seen: dict[int, str] = {}
        for part in ("train", "val", "test"):
            ids = parts.get(part, np.zeros(0, np.int64)).tolist()
            unknown = [i for i in ids if i not in known]
            if unknown:
                problems.append(f"{split}/{part} lists {len(unknown):,} unknown matrix id(s), "
                                f"e.g. {unknown[0]}")
            twice = [i for i in ids if i in seen]
            if twice:
                problems.append(f"{split}: matrix {twice[0]} is in {seen[twice[0]]} and {part} "
                                f"({len(twice):,} such)")
            seen.update({i: part for i in ids})
    return problems


def paper_rule_problems(data: Data) -> list[str]:
    """Rules from the paper that hold whatever the spec files say, checked on the answers."""
    m = data.matrices
    columns = part_columns(m)
    answer = m.elements[np.arange(len(m)), N_CONTEXT + m.answer.astype(np.int64).clip(0, 7)]
    count = m.element_type == ElementType.COUNT.value
    value = np.array([int(a) if c and a.isdigit() else 0 for a, c in zip(answer, count)])
    held = np.isin(m.super_attribute, sorted(HELD_OUT_SUPER_ATTRIBUTES))
    # split -> (what may not be on the train side, what may not be in test)
    rules = {
        "held_out_attributes": (held, np.zeros(len(m), bool)),
        "interpolation": (count & (value % 2 == 0), count & (value % 2 == 1)),
        "extrapolation": (count & (value > 5), count & (value <= 5)),
    }
    problems = []
    for split, (not_train, not_test) in rules.items():
        if split not in columns:
            continue
        side = columns[split]
        bad = (np.isin(side, ["train", "val"]) & not_train) | ((side == "test") & not_test)
        if bad.any():
            problems.append(f"{split}: {int(bad.sum()):,} matrices break the paper's rule "
                            f"(e.g. matrix {int(m.id[np.flatnonzero(bad)[0]])})")
    return problems


def check_splits(data: Data, assigner: Callable | None = None) -> Check:
    """Stored parts are well formed and equal the split rules re-run on every matrix."""
    m = data.matrices
    problems = split_structure_problems(m) + paper_rule_problems(data)
    try:
        assigner = assigner or default_assigner(data)
    except VpromError as e:
        return Check("splits", "fail", f"cannot re-run the split rules: {e}", {},
                     problems + [str(e)])
    parts = parts_by_id(m)
    side = {"train": "train", "val": "train", "test": "test", "excluded": "excluded"}
    wrong, reasons = [], []
    for i in tqdm(range(len(m)), desc="splits", unit="matrix", disable=None):
        matrix = m.row(i, parts)
        expected = assigner(matrix)
        for split in sorted(m.splits):
            want, got = expected.get(split, "excluded"), matrix.part(split)
            if side.get(want, want) != side.get(got, got):
                wrong.append(matrix.id)
                reasons.append(f"{split}: stored {got}, the rule says {want}")
                break
    problems += _examples("part differs from the split rule", wrong, reasons)
    sizes = {s: {p: len(ids) for p, ids in parts_.items()} for s, parts_ in m.splits.items()}
    summary = (f"{len(m.splits)} splits; parts disjoint and equal to the rules" if not problems
               else f"{len(problems)} problem(s); {len(wrong):,} matrices off their rule")
    return Check("splits", "fail" if problems else "pass", summary,
                 {"sizes": sizes, "off_rule": len(wrong)}, problems)


# ---------------------------------------------------------------- 4. leakage
def region_codes(c: CropTable) -> tuple[np.ndarray, np.ndarray]:
    """Per crop: a code for its region (image + box) and for its VG source (-1: unknown)."""
    boxes = np.stack([c.image_id, c.x, c.y, c.w, c.h], axis=1).astype(np.int64)
    _, region = np.unique(boxes, axis=0, return_inverse=True)
    is_count = (c.element_type == ElementType.COUNT.value).astype(np.int64)
    # VG object ids and region ids are separate id spaces: counts come from regions
    keyed = np.stack([is_count, c.source_id], axis=1)
    _, source = np.unique(keyed, axis=0, return_inverse=True)
    return region.ravel(), np.where(c.source_id > 0, source.ravel(), -1)


def check_leakage(data: Data) -> Check:
    """No image region or VG source on both the train(+val) and test side of a split."""
    m = data.matrices
    region, source = region_codes(data.crops)
    index = {int(i): k for k, i in enumerate(m.id)}
    figures, problems = {}, []
    for split in ordered_splits(m):
        parts = m.splits[split]

        def rows_of(names, parts=parts):
            ids = np.concatenate([parts.get(p, np.zeros(0, np.int64)) for p in names])
            idx = np.array([index[int(i)] for i in ids if int(i) in index], dtype=np.int64)
            r = data.rows[idx].ravel()
            return r[r >= 0]

        train, test = rows_of(("train", "val")), rows_of(("test",))
        shared_regions = np.intersect1d(region[train], region[test])
        shared_sources = np.intersect1d(source[train], source[test])
        shared_sources = shared_sources[shared_sources >= 0]
        figures[split] = {"regions": len(shared_regions), "sources": len(shared_sources)}
        if len(shared_regions) or len(shared_sources):
            example = data.crops.row(int(train[np.isin(region[train], shared_regions[:1])
                                               | np.isin(source[train], shared_sources[:1])][0]))
            problems.append(f"{split}: {len(shared_regions):,} image regions and "
                            f"{len(shared_sources):,} VG sources on both train/val and test "
                            f"(e.g. image {example.image_id} box {list(example.box)})")
    summary = ("no image region on both sides of any split" if not problems else
               f"{len(problems)} split(s) share image regions between train/val and test")
    return Check("leakage", "fail" if problems else "pass", summary, figures, problems)


# ---------------------------------------------------------------- 5. bias
def probe_sides(data: Data, rng: np.random.Generator,
                caps: tuple[int, int]) -> tuple[np.ndarray, np.ndarray, str]:
    """Row indices of the neutral train and test parts (a 2:1 draw if there is no neutral)."""
    m = data.matrices
    index = {int(i): k for k, i in enumerate(m.id)}
    neutral = m.splits.get("neutral", {})
    train = np.array([index[int(i)] for i in neutral.get("train", []) if int(i) in index],
                     dtype=np.int64)
    test = np.array([index[int(i)] for i in neutral.get("test", []) if int(i) in index],
                    dtype=np.int64)
    note = ""
    if len(train) == 0 or len(test) == 0:
        perm = rng.permutation(len(m))
        cut = (2 * len(m)) // 3
        train, test = np.sort(perm[:cut]), np.sort(perm[cut:])
        note = " [no neutral split: a seeded 2:1 draw of all matrices]"
    if len(train) > caps[0]:
        train = np.sort(rng.choice(train, caps[0], replace=False))
    if len(test) > caps[1]:
        test = np.sort(rng.choice(test, caps[1], replace=False))
    return train, test, note


def candidate_view(data: Data, used: np.ndarray) -> audit.CandidateView:
    """What the label probe sees of the candidates (label overlap only for rows `used`)."""
    c = data.crops
    rows = np.where(data.rows < 0, 0, data.rows)[:, N_CONTEXT:]
    label_sets = c.label_sets()
    n_labels = np.array([len(s) for s in label_sets], dtype=float)
    overlap = np.zeros(rows.shape)
    overlap[used] = audit.label_overlap(audit.label_masks(label_sets), rows[used])
    _, sa = np.unique(c.super_attribute.astype(str), return_inverse=True)
    _, el = np.unique(c.element.astype(str), return_inverse=True)
    # An element is identified with its type: "red" of objects and of humans are not alike
    el = el.ravel() * len(ElementType) + np.searchsorted(
        sorted(t.value for t in ElementType), c.element_type.astype(str))
    _, el = np.unique(el, return_inverse=True)
    return audit.CandidateView(
        element=el.ravel()[rows], super_attribute=sa.ravel()[rows], n_labels=n_labels[rows],
        overlap=overlap, area=(c.w.astype(float) * c.h)[rows],
        aspect=(c.w.astype(float) / np.maximum(c.h, 1))[rows])


def check_bias(data: Data, features: Path | None, seed: int = 0) -> list[Check]:
    """The audit of `vprom.audit`; `seed` fixes the probes' samples and minibatches."""
    m = data.matrices
    answers = m.answer.astype(np.int64)
    groups = {t: np.flatnonzero(m.element_type == t) for t in sorted(set(m.element_type))}
    checks = [audit.answer_position(answers, groups)]
    codes = audit.element_codes(m.elements[:, N_CONTEXT:])
    checks.append(audit.shortcut_check("bias:mode", "pick the most frequent candidate element",
                                       audit.heuristic_hits(codes, answers, "mode")))
    checks.append(audit.shortcut_check("bias:odd-one-out", "pick the odd one out",
                                       audit.heuristic_hits(codes, answers, "odd")))
    rng = np.random.default_rng(seed)
    train, test, note = probe_sides(data, rng, PROBE_MAX)
    view = candidate_view(data, np.concatenate([train, test]))
    checks.append(audit.label_probe(view, answers, train, test, note,
                                    groups=m.element_type.astype(str)[test]))
    if features is not None:
        checks.append(feature_check(data, features, answers, rng))
    return checks


def read_features(path: Path, crop_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(features of the wanted crops, row of each wanted crop id in that array)."""
    with open_h5(path) as h5:
        if "crop_id" not in h5 or "features" not in h5:
            raise VpromError(f"{path}: no 'crop_id'/'features' datasets; expected a FEATS.h5 "
                             "from `vprom extract`")
        ids = h5["crop_id"][()].astype(np.int64)
        wanted = np.unique(crop_ids)
        where = crop_rows(ids, wanted)
        if (where < 0).any():
            raise VpromError(f"{path}: {int((where < 0).sum()):,} crops of the data set have no "
                             f"features (e.g. crop {int(wanted[where < 0][0])}); run `vprom "
                             "extract` on this DATASET.h5")
        stored = h5["features"]
        if stored.ndim != 2 or stored.shape[0] != len(ids):
            raise VpromError(f"{path}: 'features' has shape {stored.shape}, expected "
                             f"({len(ids)}, D); re-run `vprom extract`")
        feats = np.empty((len(wanted), stored.shape[1]), dtype=stored.dtype)
        block = 16_384  # stream the file in row blocks: memory stays at what the probe keeps
        for start in range(0, len(ids), block):
            inside = np.flatnonzero((where >= start) & (where < start + block))
            if len(inside):
                feats[inside] = stored[start: start + block][where[inside] - start]
    return feats, crop_rows(wanted, crop_ids)


def feature_check(data: Data, features: Path, answers: np.ndarray,
                  rng: np.random.Generator) -> Check:
    train, test, note = probe_sides(data, rng, FEATURE_PROBE_MAX)
    used = np.concatenate([train, test])
    candidates = data.matrices.panels[:, N_CONTEXT:]
    feats, rows = read_features(features, candidates[used])
    full_rows = np.zeros(candidates.shape, dtype=np.int64)
    full_rows[used] = rows
    return audit.feature_probe(feats, full_rows, answers, train, test, rng, note,
                               groups=data.matrices.element_type.astype(str)[test])


# ---------------------------------------------------------------- the report
@dataclass
class VerifyReport:
    dataset: Path
    checks: list[Check]
    figures: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    def failures(self) -> str:
        """One line naming each failed check and its first problem."""
        return "; ".join(f"{c.name}: {c.problems[0] if c.problems else c.summary}"
                         for c in self.checks if not c.ok)

    def format(self) -> str:
        lines = [f"vprom verify {self.dataset}: {self.figures.get('matrices', 0):,} matrices, "
                 f"{self.figures.get('crops', 0):,} crops"]
        for c in self.checks:
            lines.append(f"  {c.status.upper():4s} {c.name:20s} {c.summary}")
            lines += [f"       - {p}" for p in c.problems]
        failed = [c.name for c in self.checks if not c.ok]
        lines.append("verdict: " + (f"FAIL ({', '.join(failed)})" if failed else "PASS"))
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return {"dataset": str(self.dataset), "ok": self.ok, "figures": self.figures,
                "checks": [c.__dict__ for c in self.checks]}


def verify(dataset: str | Path, features: str | Path | None = None, *,
           check_matrix: Callable | None = None, assigner: Callable | None = None) -> VerifyReport:
    """Run every check on DATASET.h5 (and the feature probe with a FEATS.h5).

    `check_matrix` and `assigner` default to `vprom.solver.check_matrix` and the split
    specification files; they are parameters so each check can be tested on its own.
    """
    dataset = Path(dataset)
    data, structure = load(dataset)
    checks = [check_integrity(data, structure)]
    if not checks[0].figures["readable"]:
        skipped = "not run: the matrices cannot be read as records (see integrity)"
        checks += [Check(n, "skip", skipped) for n in ("solver", "splits", "leakage", "bias")]
        figures = {} if data is None else {"matrices": len(data.matrices),
                                           "crops": len(data.crops)}
        return VerifyReport(dataset, checks, figures)
    checks.append(check_solver(data, check_matrix))
    checks.append(check_splits(data, assigner))
    checks.append(check_leakage(data))
    checks += check_bias(data, Path(features) if features else None)
    return VerifyReport(dataset, checks, {"matrices": len(data.matrices),
                                          "crops": len(data.crops)})
