"""`vprom verify`'s checks 3-5.

3. splits: all 7 present, ids known, parts disjoint, equal to the split rules re-run on every
   matrix (val stands for train), and the paper's spec-free rules hold.
4. leakage: no image region (image and box, or VG source) on both sides of a split.
5. held-out labels: no train/val matrix of a held-out split shows a label it holds out.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from vprom.generation.verify.audit import Check
from vprom.generation.verify.loaded import Data, examples
from vprom.errors import VpromError
from vprom.domain import N_CONTEXT, SPLITS, ElementType, Relation
from vprom.splits.rules import (ConceptTable, SplitRules, TrainBan, assign, image_sides,
                                object_third)
from vprom.tables import CropTable, MatrixTable, present_rows, row_codes

#: Paper rules that hold whatever the split spec files say (answer elements / super-attributes).
HELD_OUT_SUPER_ATTRIBUTES = frozenset({"shape", "texture", "action"})


def concept_table(data: Data) -> ConceptTable:
    """Every crop's concepts among all its labels, explicit and implied (`ConceptTable`)."""
    return data.vocabulary.concept_table(data.crops.element_type.tolist(), data.labels)


def expected_parts(data: Data, rules: SplitRules) -> dict[str, np.ndarray]:
    """split -> the part the split rules give every matrix, with the manifest's seed."""
    seed = (data.manifest or {}).get("seed")
    if not isinstance(seed, int):
        raise VpromError(f"{data.path}: the manifest records no seed, so the split rules "
                         "cannot be re-run; regenerate the file with `vprom generate`")
    rows = np.where(data.rows < 0, 0, data.rows)
    bits = concept_table(data).bits(rules.design.train_bans)
    return assign(rules, data.matrices, image_sides(rules, seed, data.crops.image_id[rows]),
                  np.bitwise_or.reduce(bits[rows], axis=1))


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


def off_rule(m: MatrixTable, expected: Mapping[str, np.ndarray],
             stored: Mapping[str, np.ndarray]) -> tuple[list[int], list[str]]:
    """(ids of the matrices whose stored part in some split differs from the rule's, the first
    difference of each); split -> part column: `expected` from `assign`, `stored` the file's."""
    first = np.full(len(m), None, dtype=object)
    found = np.zeros(len(m), dtype=bool)
    excluded = np.full(len(m), "excluded", dtype=object)
    for split in sorted(stored):
        want, got = expected.get(split, excluded), stored[split]
        # val is drawn from the train side, so it stands for train here
        differs = ~found & (want != np.where(got == "val", "train", got))
        first[differs] = [f"{split}: stored {g}, the rule says {w}"
                          for g, w in zip(got[differs].tolist(), want[differs].tolist())]
        found |= differs
    wrong = np.flatnonzero(found)
    return m.id[wrong].tolist(), first[wrong].tolist()


def check_splits(data: Data, rules: SplitRules) -> Check:
    """Stored parts are well formed and equal the split rules re-run on every matrix."""
    m = data.matrices
    problems = split_structure_problems(m) + paper_rule_problems(data)
    try:
        expected = expected_parts(data, rules)
    except VpromError as e:
        return Check("splits", "fail", f"cannot re-run the split rules: {e}", {},
                     problems + [str(e)])
    wrong, reasons = off_rule(m, expected, m.part_columns())
    problems += examples("part differs from the split rule", wrong, reasons)
    sizes = {s: {p: len(ids) for p, ids in parts.items()} for s, parts in m.splits.items()}
    summary = (f"{len(m.splits)} splits; parts disjoint and equal to the rules" if not problems
               else f"{len(problems)} problem(s); {len(wrong):,} matrices off their rule")
    return Check("splits", "fail" if problems else "pass", summary,
                 {"sizes": sizes, "off_rule": len(wrong)}, problems)


def region_codes(c: CropTable) -> tuple[np.ndarray, np.ndarray]:
    """Per crop: a code for its region (image + box) and for its VG source (-1: unknown)."""
    region = row_codes(c.image_id, c.x, c.y, c.w, c.h)
    is_count = c.element_type == ElementType.COUNT.value
    # VG object ids and region ids are separate id spaces: counts come from regions
    source = row_codes(is_count, c.source_id)
    return region, np.where(c.source_id > 0, source, -1)


def on_both(a: np.ndarray, b: np.ndarray, n: int) -> np.ndarray:
    """The codes (0..n-1; -1, unknown, is skipped) in both a and b, sorted: two rows of n
    marks, where intersecting the two would sort millions of codes."""
    seen = np.zeros((2, n + 1), dtype=bool)  # -1 marks column n, which is left out
    seen[0, a] = True
    seen[1, b] = True
    return np.flatnonzero(seen[0, :n] & seen[1, :n])


def check_leakage(data: Data) -> Check:
    """No image region or VG source on both the train(+val) and test side of a split."""
    m = data.matrices
    region, source = region_codes(data.crops)
    figures, problems = {}, []
    for split in m.ordered_splits():
        parts = m.splits[split]

        def rows_of(names, parts=parts):
            ids = np.concatenate([parts.get(p, np.zeros(0, np.int64)) for p in names])
            r = data.rows[present_rows(m.id, ids)].ravel()
            return r[r >= 0]

        train, test = rows_of(("train", "val")), rows_of(("test",))
        shared_regions = on_both(region[train], region[test], len(data.crops))
        shared_sources = on_both(source[train], source[test], len(data.crops))
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


def held_out_labels(data: Data, ban: TrainBan) -> int:
    """How many distinct labels of the data set's vocabulary `ban` holds out (any relation)."""
    vocab = data.vocabulary
    labels = {label for table, sas in ban.super_attributes.items()
              for label, sa in vocab.tables.get(table, {}).items() if sa in sas}
    thirds = {t for ts in ban.object_thirds.values() for t in ts}
    if thirds:
        labels |= {c for c in vocab.categories if object_third(c) in thirds}
    return len(labels)


def check_held_out(data: Data, bans: Mapping[str, TrainBan]) -> Check:
    """No training or validation matrix of a held-out split shows a held-out label (`bans`:
    split -> what it holds out, `rules.design.train_bans`)."""
    m = data.matrices
    if not bans:
        return Check("held-out labels", "skip", "the split rules hold out no labels")
    table = concept_table(data)
    rows = np.where(data.rows < 0, 0, data.rows)
    columns = m.part_columns()
    figures, problems = {}, []
    for split in [s for s in SPLITS if s in bans] + sorted(set(bans) - set(SPLITS)):
        ban = bans[split]
        training = np.isin(columns.get(split, np.full(len(m), "excluded")), ["train", "val"])
        bad = np.zeros(len(m), dtype=bool)
        panels = 0
        for relation in Relation:
            mine = training & (m.relation == relation.value)
            if not mine.any():
                continue
            shows = table.banned(ban, relation.value)[rows[mine]]
            bad[np.flatnonzero(mine)[shows.any(axis=1)]] = True
            panels += int(shows.sum())
        figures[split] = {"train_val_matrices": int(training.sum()),
                          "violating_matrices": int(bad.sum()), "violating_panels": panels,
                          "held_out_labels": held_out_labels(data, ban)}
        if bad.any():
            problems += examples(f"{split}: a training or validation matrix shows a "
                                 "held-out label", m.id[bad])
    counts = ", ".join(f"{s} {f['violating_matrices']:,}/{f['train_val_matrices']:,}"
                       for s, f in figures.items())
    summary = (f"training and validation matrices showing a held-out label (any label, any "
               f"panel): {counts}")
    return Check("held-out labels", "fail" if problems else "pass", summary, figures, problems)
