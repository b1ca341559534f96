"""`vprom verify`'s checks 1-2: integrity and solver (3-5, splits, leakage and held-out
labels, are `generation.verify.split_checks`).

1. integrity — the file's structure (groups, equal column lengths, N×16 panels and
   elements), the manifest (present, its `counts` and `outputs.content_hash` agree with the
   file), unique matrix and crop ids, every panel's crop present with the element and element
   type the matrix says, answers in 0..7, relations valid for the element type, no crop
   twice within a matrix, attribute matrices' context and answer of their super-attribute.
2. solver — `vprom.generation.solver.check_matrix` on every matrix with all its panels' labels,
   explicit and implied (the label vocabulary the file records: a "man" is male and adult),
   each matrix read in one super-attribute at a time: exactly one candidate completes it.
   A failure that only the implied labels cause is counted apart.
"""

from __future__ import annotations

from collections.abc import Callable
from operator import itemgetter

import numpy as np

from vprom.generation.verify.audit import Check
from vprom.generation.verify.loaded import MAX_EXAMPLES, Data, bad, examples
from vprom.domain import (
    COUNTS,
    N_CANDIDATES,
    N_CONTEXT,
    RELATIONS_OF,
    ElementType,
    Matrix,
    Relation,
)
from vprom.generation.relations import RULES
from vprom.generation.solver import Universe, check_masks, completion_mask, group_masks
from vprom.generation.solver import check_matrix as solver_check
from vprom.tables import MatrixTable, content_hash, table_columns

COUNT_UNIVERSE = frozenset(str(n) for n in COUNTS)


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
    # the columns loaded a moment ago are the file's values: only the rest is read again
    if recorded and recorded != content_hash(data.path, table_columns(data.crops,
                                                                     data.matrices)):
        problems.append("content_hash differs from the manifest's: the data was changed "
                        "after generation; regenerate it")
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


def reading_groups(data: Data) -> dict[str, dict[str, frozenset[str]]]:
    """Per attribute type, its super-attributes' labels: the solver reads a matrix in one."""
    if data.super_attributes:
        return data.super_attributes
    c, out = data.crops, {}
    for etype in (ElementType.OBJECT_ATTRIBUTE.value, ElementType.HUMAN_ATTRIBUTE.value):
        rows = c.element_type == etype
        by_sa: dict[str, set[str]] = {}
        for e, sa in zip(c.element[rows].tolist(), c.super_attribute[rows].tolist()):
            by_sa.setdefault(sa, set()).add(e)
        out[etype] = {sa: frozenset(v) for sa, v in by_sa.items()}
    return out


class SolverTables:
    """What the solver check reads for every matrix, computed once: each crop's labels
    (explicit and implied, and explicit only), each element type's universe and reading
    groups, and, for `vprom.generation.solver`, each crop's label mask per element type."""

    def __init__(self, data: Data) -> None:
        self.labels, self.explicit = data.label_sets(), data.explicit_label_sets()
        self.rows = data.label_rows()
        self.universe, self.groups = universes(data), reading_groups(data)
        self._masks: dict[str, tuple] = {}
        self._ids: dict[str, np.ndarray] = {}

    def masks(self, etype: str) -> tuple[Universe, list[int], list[int]]:
        """(universe, group masks, per crop row its labels' mask) of one element type."""
        if etype not in self._masks:
            u = Universe(etype, self.universe[etype])
            self._masks[etype] = (u, group_masks(u, self.groups.get(etype)),  # once a row:
                                  self.rows.per_crop(list(map(u.mask, self.rows.both))))
        return self._masks[etype]

    def claimed_ids(self, crops, etype: str) -> np.ndarray:
        """Per crop row, the id in `etype`'s universe of the crop's element, when the crop is
        of that type and its element is one of its labels and of the universe; else -1."""
        if etype not in self._ids:
            ids = self.masks(etype)[0].ids
            out = np.full(len(crops), -1, dtype=np.int64)
            for r in np.flatnonzero(crops.element_type == etype).tolist():
                element = crops.element[r]
                if element in self.labels[r] and element in ids:
                    out[r] = ids[element]
            self._ids[etype] = out
        return self._ids[etype]


def quick_passes(tables: SolverTables, data: Data, start: int, stop: int) -> np.ndarray:
    """Which of matrices start..stop-1 pass `check_masks`, shown the cheap way, a relation
    and element type at a time: every panel's element is its crop's (`claimed_ids`), the 9
    claimed elements obey the relation (`Rule.holds_many`), and the solver's completion mask
    admits the answer alone. False means only "not shown here": `solve` then runs
    `check_masks` on the matrix, whose verdict and reason count."""
    m, cut = data.matrices, slice(start, stop)
    rows, answer = data.rows[cut], m.answer[cut].astype(np.int64)
    etypes, relations, elements = m.element_type[cut], m.relation[cut], m.elements[cut]
    out = np.zeros(stop - start, dtype=bool)
    for etype in sorted(set(etypes.tolist())):
        u, groups, masks = tables.masks(etype)
        ids = tables.claimed_ids(data.crops, etype)
        for relation in sorted(set(relations[etypes == etype].tolist())):
            sel = np.flatnonzero((etypes == etype) & (relations == relation))
            panel = ids[rows[sel]]
            ok = (elements[sel] == data.crops.element[rows[sel]]).all(axis=1) & \
                (panel >= 0).all(axis=1)
            nine = np.concatenate([panel[:, :N_CONTEXT],
                                   panel[np.arange(len(sel)), N_CONTEXT + answer[sel], None]],
                                  axis=1)
            ok &= RULES[Relation(relation)].holds_many(nine.reshape(-1, 3, 3))
            for k, crop_rows, a in zip(sel[ok].tolist(), rows[sel[ok]].tolist(),
                                       answer[sel[ok]].tolist()):
                mask = itemgetter(*crop_rows)(masks)
                z = completion_mask(u.element_type, mask[:N_CONTEXT], groups=groups)
                out[k] = [j for j in range(N_CANDIDATES) if mask[N_CONTEXT + j] & z] == [a]
    return out


def solve_range(tables: SolverTables, data: Data, start: int,
                stop: int) -> tuple[list[int], list[str], int]:
    """`solve` on matrices start..stop-1 with `vprom.generation.solver`: `quick_passes` first, records and
    `check_masks` only for the rest."""
    m = data.matrices
    rest = (start + np.flatnonzero(~quick_passes(tables, data, start, stop))).tolist()
    return solve(tables, [r for i in rest for r in matrix_records(m, {}, i, i + 1)], data.rows)


def solve(tables: SolverTables, records: list[tuple[int, Matrix]], crop_rows: np.ndarray,
          check_matrix: Callable | None = None) -> tuple[list[int], list[str], int]:
    """(ids of the matrices without exactly one valid candidate, each one's reason, how many
    of them pass with explicit labels alone) among `records` ((row, matrix) pairs; row
    indexes `crop_rows`, the N×16 crop rows). `check_matrix(matrix, labels, universe,
    groups)` defaults to `vprom.generation.solver`, run on masks computed once per crop."""
    failed, reasons, implied_only = [], [], 0
    for i, matrix in records:
        etype = matrix.element_type.value
        rows = itemgetter(*crop_rows[i].tolist())  # the 16 panels' entries of a per-crop list
        labels = rows(tables.labels)
        if check_matrix is None:
            u, groups, masks = tables.masks(etype)
            reason = check_masks(matrix, u, rows(masks), groups, labels)
        else:
            reason = check_matrix(matrix, labels, tables.universe[etype],
                                  tables.groups.get(etype))
        if reason is None:
            continue
        failed.append(matrix.id)
        reasons.append(reason)
        if (check_matrix or solver_check)(matrix, rows(tables.explicit),
                                          tables.universe[etype],
                                          tables.groups.get(etype)) is None:
            implied_only += 1
    return failed, reasons, implied_only


def solver_result(data: Data, tables: SolverTables, failed: list[int], reasons: list[str],
                  implied_only: int) -> Check:
    """The solver check from `solve`'s results over every matrix."""
    implied_rows = np.array([len(a) > len(b) for a, b in zip(tables.labels, tables.explicit)],
                            bool)
    n = len(data.matrices)
    safe = np.where(data.rows < 0, 0, data.rows)
    panels = int(implied_rows[safe].sum()) if len(implied_rows) else 0
    summary = (f"{n - len(failed):,}/{n:,} matrices have exactly one valid candidate under "
               f"their explicit and implied labels ({panels:,} panels carry implied labels"
               + (f"; {implied_only:,} failures come from implied labels alone" if implied_only
                  else "") + ")")
    return Check("solver", "fail" if failed else "pass", summary,
                 {"matrices": n, "failed": len(failed), "failed_only_with_implied": implied_only,
                  "panels_with_implied_labels": panels,
                  "implied_labels_recorded": data.vocabulary.recorded},
                 examples("not exactly one answer", failed, reasons))


def matrix_records(m: MatrixTable, columns: dict[str, np.ndarray], start: int,
                   stop: int) -> list[tuple[int, Matrix]]:
    """(row, record) of matrices start..stop-1, as `m.row` makes them (`columns` from
    `part_columns`, computed once), from plain Python values taken a range at a time. The
    integrity check has found the table sound (`fatal_problems`), so `Matrix.checked` skips
    the record's own checks."""
    cut = slice(start, stop)
    parts = [(s, c[cut].tolist()) for s, c in sorted(columns.items())]
    rows = zip(m.id[cut].tolist(), m.relation[cut].tolist(), m.element_type[cut].tolist(),
               m.super_attribute[cut].tolist(), m.panels[cut].tolist(),
               m.elements[cut].tolist(), m.answer[cut].tolist())
    relation, element_type = _members(Relation), _members(ElementType)
    return [(start + k, Matrix.checked(i, relation[r], element_type[t], sa, tuple(p), tuple(e),
                                       a, tuple((s, c[k]) for s, c in parts)))
            for k, (i, r, t, sa, p, e, a) in enumerate(rows)]


def _members(enum) -> dict:
    return {member.value: member for member in enum}


def check_solver(data: Data, check_matrix: Callable | None = None) -> Check:
    """Every matrix, with all its panels' labels (explicit and implied), has exactly one
    valid candidate. `check_matrix(matrix, labels, universe, groups)` defaults to the solver."""
    tables = SolverTables(data)
    if check_matrix is None:
        return solver_result(data, tables, *solve_range(tables, data, 0, len(data.matrices)))
    records = matrix_records(data.matrices, data.matrices.part_columns(), 0, len(data.matrices))
    return solver_result(data, tables, *solve(tables, records, data.rows, check_matrix))
