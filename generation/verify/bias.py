"""What `vprom verify`'s bias probes see: the neutral split's train and test parts (at most
`PROBE_MAX` matrices of each type), the candidates' labels and, with a FEATS.h5, features."""

from __future__ import annotations

from pathlib import Path

import numpy as np

import vprom.generation.verify.audit as audit
from vprom.generation.verify.audit import Check
from vprom.generation.verify.loaded import Data
from vprom.feature_files import check_features_source, load_features
from vprom.domain import N_CONTEXT
from vprom.tables import present_rows, row_codes, string_codes

#: matrices the probes sample per element type (train, test): 50,000 test matrices put the
#: 95% interval within ±0.3 points
PROBE_MAX = (20_000, 50_000)
#: matrices the feature probes sample per element type (train, test)
FEATURE_PROBE_MAX = (5_000, 5_000)


def probe_sides(data: Data, rng: np.random.Generator,
                caps: tuple[int, int]) -> tuple[np.ndarray, np.ndarray, str]:
    """Row indices of the neutral train and test parts (a 2:1 draw if there is no neutral),
    at most `caps` of each element type."""
    m = data.matrices
    neutral = m.splits.get("neutral", {})
    train = present_rows(m.id, neutral.get("train", []))
    test = present_rows(m.id, neutral.get("test", []))
    note = ""
    if len(train) == 0 or len(test) == 0:
        perm = rng.permutation(len(m))
        cut = (2 * len(m)) // 3
        train, test = np.sort(perm[:cut]), np.sort(perm[cut:])
        note = " [no neutral split: a seeded 2:1 draw of all matrices]"
    def capped(rows: np.ndarray, cap: int) -> np.ndarray:
        kept = [rows[:0]]
        for t in sorted(set(m.element_type[rows].tolist())):
            mine = rows[m.element_type[rows] == t]
            kept.append(np.sort(rng.choice(mine, cap, replace=False)) if len(mine) > cap
                        else mine)
        return np.sort(np.concatenate(kept))

    return capped(train, caps[0]), capped(test, caps[1]), note


def candidate_view(data: Data, used: np.ndarray) -> audit.CandidateView:
    """What the label probe sees of the candidates (label overlap only for rows `used`)."""
    c = data.crops
    rows = np.where(data.rows < 0, 0, data.rows)[:, N_CONTEXT:]
    full, explicit = data.key_labels, data.key_explicit
    distinct = {s: k for k, s in enumerate(dict.fromkeys(full))}  # a row per label set
    key = data.label_key[rows]
    n_labels = np.array([len(s) for s in explicit], dtype=float)[key]
    n_implied = np.array([len(a) - len(b) for a, b in zip(full, explicit)], dtype=float)[key]
    ids: dict[str, int] = {}
    row_labels = [tuple(ids.setdefault(label, len(ids)) for label in sorted(s))
                  for s in distinct]
    label_row = np.array([distinct[s] for s in full], dtype=np.int64)[key]
    overlap = np.zeros(rows.shape)
    overlap[used] = audit.label_overlap(row_labels, label_row[used])
    sa = string_codes(c.super_attribute)[1]
    # an element is identified with its type: "red" of objects and of humans are not alike
    el = row_codes(string_codes(c.element)[1], string_codes(c.element_type)[1])
    return audit.CandidateView(
        element=el[rows], super_attribute=sa[rows], n_labels=n_labels,
        overlap=overlap, area=(c.w.astype(float) * c.h)[rows],
        aspect=(c.w.astype(float) / np.maximum(c.h, 1))[rows], n_implied=n_implied,
        label_row=label_row, row_labels=row_labels)


def frequency_checks(data: Data) -> list[Check]:
    """The answer-position test and the two element-frequency heuristics."""
    m = data.matrices
    answers = m.answer.astype(np.int64)
    groups = {t: np.flatnonzero(m.element_type == t) for t in sorted(set(m.element_type))}
    codes = string_codes(m.elements[:, N_CONTEXT:])[1]  # equal elements, equal codes
    return [audit.answer_position(answers, groups),
            # a heuristic fits nothing: it is scored on every matrix, as one group
            audit.judge_groups("bias:mode", "pick the most frequent candidate element",
                               [("all", audit.heuristic_hits(codes, answers, "mode"), None)]),
            audit.judge_groups("bias:odd-one-out", "pick the odd one out",
                               [("all", audit.heuristic_hits(codes, answers, "odd"), None)])]


def probe_plan(data: Data, seed: int = 0) -> tuple[np.ndarray, np.ndarray, str,
                                                    np.random.Generator]:
    """(train rows, test rows, note, the generator the feature probe goes on with)."""
    rng = np.random.default_rng(seed)
    train, test, note = probe_sides(data, rng, PROBE_MAX)
    return train, test, note, rng


def feature_check(data: Data, features: Path, answers: np.ndarray,
                  rng: np.random.Generator) -> Check:
    """The feature probes on a sample of their own, drawn by `rng` after `probe_plan`'s."""
    check_features_source(data.path, features)  # features of another data set are refused
    stored = load_features(features)
    train, test, note = probe_sides(data, rng, FEATURE_PROBE_MAX)
    used = np.concatenate([train, test])
    candidates = data.matrices.panels[:, N_CONTEXT:]
    rows = np.zeros(candidates.shape, dtype=np.int64)
    rows[used] = stored.index_of(candidates[used])
    # crops --allow-missing could not read are NaN rows: their matrices leave the probe
    finite = np.isfinite(stored.features).all(axis=1)
    if not finite[rows[used]].all():
        ok = finite[rows].all(axis=1)
        dropped = int((~ok[train]).sum() + (~ok[test]).sum())
        train, test = train[ok[train]], test[ok[test]]
        note += (f" [{dropped:,} sampled matrices left out: {int((~finite).sum()):,} of their "
                 "crops have no features in the file (extracted with --allow-missing)]")
    m = data.matrices
    return audit.feature_probe(stored.features, rows, answers, train, test,
                               m.element_type.astype(str), m.relation.astype(str), note)
