"""`vprom verify`'s checks 1-4: integrity, solver, splits and leakage.

1. integrity — the file's structure (groups, equal column lengths, N×16 panels and
   elements), the manifest (present, its `counts` and `outputs.content_hash` agree with the
   file, and the sidecar `X.h5.manifest.json`'s sha256 of the file if it records one),
   unique matrix and crop ids, every panel's crop present with the element and element
   type the matrix says, answers in 0..7, relations valid for the element type, no crop
   twice within a matrix, attribute matrices' context and answer of their super-attribute.
2. solver — `vprom.solver.check_matrix` on every matrix with all its panels' labels:
   exactly one candidate completes it.
3. splits — all 7 splits present, their ids known, train/val/test disjoint, the stored
   parts equal the split rules re-run on every matrix (val is drawn from the train side),
   and the paper's rules that need no spec (held-out attributes, interpolation,
   extrapolation) hold for the answers.
4. leakage — no image region (same image and box, or same VG source id) on both the
   train(+val) and the test side of any split.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import numpy as np
from tqdm import tqdm

from generation.audit import Check
from generation.dataset_view import MAX_EXAMPLES, Data, bad, examples
from vprom.errors import VpromError
from vprom.io import manifest_path, sha256_file
from vprom.records import (
    COUNTS,
    N_CANDIDATES,
    N_CONTEXT,
    RELATIONS_OF,
    SPLITS,
    ElementType,
)
from vprom.solver import check_matrix as solver_check
from vprom.splitting import PanelInfo, SplitRules, image_sides
from vprom.tables import CropTable, MatrixTable, content_hash

COUNT_UNIVERSE = frozenset(str(n) for n in COUNTS)
#: Paper rules that hold whatever the split spec files say (answer elements / super-attributes).
HELD_OUT_SUPER_ATTRIBUTES = frozenset({"shape", "texture", "action"})


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


def fatal_problems(data: Data) -> list[str]:
    """Damage that keeps matrices from being read as records (later checks cannot run)."""
    m = data.matrices
    if len(m) == 0:
        return ["the data set holds no matrices; regenerate it with a larger --scale"]
    ids, counts = np.unique(m.id, return_counts=True)
    problems = [f"matrix id {int(i)} appears {int(k)} times" for i, k in
                zip(ids[counts > 1][:MAX_EXAMPLES], counts[counts > 1][:MAX_EXAMPLES])]
    problems += bad((data.rows < 0).any(axis=1), m.id, "a panel's crop id is not in crops")
    problems += bad((m.answer < 0) | (m.answer >= N_CANDIDATES), m.id, "answer not in 0..7")
    problems += bad(~_relation_valid(m), m.id,
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
        problems += bad(~missing & (c.element[safe] != m.elements).any(axis=1), m.id,
                         "a panel's element differs from its crop's element")
        problems += bad(~missing & (c.element_type[safe] != m.element_type[:, None]).any(axis=1),
                         m.id, "a panel's crop is of another element type")
    ordered = np.sort(m.panels, axis=1)
    problems += bad((ordered[:, 1:] == ordered[:, :-1]).any(axis=1), m.id,
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
    problems = bad(attribute & (m.super_attribute == ""), m.id,
                    "an attribute matrix without a super-attribute")
    problems += bad(~attribute & (m.super_attribute != ""), m.id,
                     "an object/count matrix with a super-attribute")
    if not len(c):
        return problems
    shown = np.concatenate([rows[:, :N_CONTEXT],
                            rows[np.arange(len(m)), N_CONTEXT + m.answer.astype(np.int64)
                                 .clip(0, N_CANDIDATES - 1)][:, None]], axis=1)
    wrong = attribute & ~missing & (c.super_attribute[shown] != m.super_attribute[:, None]).any(
        axis=1)
    return problems + bad(wrong, m.id, "a context or answer crop of another super-attribute")


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
    check_matrix = check_matrix or solver_check
    label_sets = data.crops.label_sets()
    universe = universes(data)
    parts = data.matrices.parts_of()
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
                 examples("not exactly one answer", failed, reasons))


# ---------------------------------------------------------------- 3. splits
def default_assigner(data: Data, rules: SplitRules) -> Callable:
    """matrix -> {split: part} by the split rules with the seed the manifest records (sides
    of every panel's image computed for all matrices at once)."""
    seed = (data.manifest or {}).get("seed")
    if not isinstance(seed, int):
        raise VpromError(f"{data.path}: the manifest records no seed, so the split rules "
                         "cannot be re-run; regenerate the file with `vprom generate`")
    rows = np.where(data.rows < 0, 0, data.rows)
    sides = image_sides(rules, seed, data.crops.image_id[rows])
    super_attributes = data.crops.super_attribute[rows]
    row_of = {int(mid): i for i, mid in enumerate(data.matrices.id)}

    def assigner(matrix):
        i = row_of[matrix.id]
        info = PanelInfo(sides={p: tuple(int(v) for v in s[i]) for p, s in sides.items()},
                         super_attributes=tuple(super_attributes[i]))
        return rules.assign(matrix, info)

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
    columns = m.part_columns()
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


def check_splits(data: Data, rules: SplitRules, assigner: Callable | None = None) -> Check:
    """Stored parts are well formed and equal the split rules re-run on every matrix."""
    m = data.matrices
    problems = split_structure_problems(m) + paper_rule_problems(data)
    try:
        assigner = assigner or default_assigner(data, rules)
    except VpromError as e:
        return Check("splits", "fail", f"cannot re-run the split rules: {e}", {},
                     problems + [str(e)])
    parts = m.parts_of()
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
    problems += examples("part differs from the split rule", wrong, reasons)
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
    for split in m.ordered_splits():
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


