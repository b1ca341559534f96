"""`vprom verify`'s checks 1-2 (3-5 are `split_checks`).

1. integrity: structure, manifest counts and content hash, unique ids, every panel's crop
   present and of the matrix's element and type, answers in 0..7, valid relations, no crop
   twice, attribute matrices of one super-attribute.
2. solver: exactly one candidate completes every matrix under all its panels' labels
   (`generation.solver`); failures due to implied labels alone are counted apart.
"""

from __future__ import annotations

import numpy as np

from vprom.generation.verify.audit import Check
from vprom.generation.verify.loaded import MAX_EXAMPLES, Data, bad, examples
from vprom.domain import COUNTS, N_CANDIDATES, N_CONTEXT, RELATIONS_OF, ElementType
from vprom.generation.solver import Universe, check_matrices, group_masks

COUNT_UNIVERSE = frozenset(str(n) for n in COUNTS)


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
    if recorded and recorded != data.content_hash:
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
    valid = {(t.value, r.value) for t, rels in RELATIONS_OF.items() for r in rels}
    problems += bad(~np.array([(t, r) in valid for t, r in zip(m.element_type, m.relation)],
                              dtype=bool), m.id,
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


def universes(data: Data) -> dict[str, frozenset[str]]:
    """The elements a panel of each element type could show (for the solver's 'any other')."""
    c = data.crops
    out = {t.value: frozenset(c.element[c.element_type == t.value].tolist())
           for t in ElementType}
    out[ElementType.COUNT.value] = COUNT_UNIVERSE
    out.update({t: frozenset(v) for t, v in data.universes.items() if t in out})
    return out


def reading_groups(data: Data) -> dict[str, dict[str, frozenset[str]]]:
    """Per attribute type, its super-attributes' labels: the solver reads a matrix in one."""
    if data.super_attributes:
        return data.super_attributes
    c = data.crops
    return {etype: {sa: frozenset(c.element[(c.element_type == etype)
                                            & (c.super_attribute == sa)].tolist())
                    for sa in set(c.super_attribute[c.element_type == etype].tolist())}
            for etype in (ElementType.OBJECT_ATTRIBUTE.value, ElementType.HUMAN_ATTRIBUTE.value)}


class SolverTables:
    """Per element type its universe, reading groups and each crop's label mask in it."""

    def __init__(self, data: Data) -> None:
        universe, groups = universes(data), reading_groups(data)
        self.masks: dict[str, tuple[Universe, list[int], np.ndarray]] = {}
        for etype in sorted(set(data.matrices.element_type.tolist()) & set(universe)):
            u = Universe(etype, universe[etype])
            self.masks[etype] = (u, group_masks(u, groups.get(etype)),
                                 label_masks(u, data.key_labels, data.label_key))
        self.key_explicit, self.label_key = data.key_explicit, data.label_key

    def explicit_masks(self, etype: str) -> np.ndarray:
        """Each crop's mask of its explicit labels alone in `etype`'s universe."""
        return label_masks(self.masks[etype][0], self.key_explicit, self.label_key)


def label_masks(u: Universe, sets: list[frozenset[str]], key: np.ndarray) -> np.ndarray:
    """The mask in `u` of `sets[k]` for each k of `key`, as Python ints in an object array."""
    masks = np.empty(len(sets), dtype=object)
    masks[:] = [u.mask(s) for s in sets]
    return masks[key]


def solve(tables: SolverTables, data: Data, start: int,
          stop: int) -> tuple[list[int], list[str], int]:
    """(ids of the matrices start..stop-1 without exactly one valid candidate, their reasons,
    how many of them pass with explicit labels alone)."""
    m, found = data.matrices, []
    etypes = m.element_type[start:stop]
    for etype in sorted(set(etypes.tolist())):
        rows = start + np.flatnonzero(etypes == etype)
        u, groups, masks = tables.masks[etype]
        crops, elements = data.rows[rows], m.elements[rows]
        relations, answers = m.relation[rows], m.answer[rows].astype(np.int64)
        reasons = check_matrices(u, groups, relations, elements, crops, masks, answers)
        bad = [k for k, reason in enumerate(reasons) if reason is not None]
        if not bad:
            continue
        explicit = check_matrices(u, groups, relations[bad], elements[bad], crops[bad],
                                  tables.explicit_masks(etype), answers[bad])
        found += [(int(rows[k]), reasons[k], ok is None) for k, ok in zip(bad, explicit)]
    found.sort()
    return ([int(m.id[row]) for row, _, _ in found], [reason for _, reason, _ in found],
            sum(implied for _, _, implied in found))


def solver_result(data: Data, failed: list[int], reasons: list[str],
                  implied_only: int) -> Check:
    """The solver check from `solve`'s results over every matrix."""
    implied_rows = np.array([len(a) > len(b) for a, b in zip(data.key_labels,
                                                              data.key_explicit)], bool)[
        data.label_key]
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
