"""`vprom verify`'s bias checks: can the answer be found without the context?

The statistics live in `generation.verify.audit` (and, for the candidate set seen whole,
`generation.verify.set_probes`); this module chooses what they see: the neutral
split's train and test parts (sampled to at most `PROBE_MAX` matrices per element type),
the candidates' labels (explicit and implied), and with a FEATS.h5 the candidates' image
features (streamed from the file), after `vprom.feature_files.check_features_source` has
refused features made from another data set. Crops a FEATS.h5 made with `--allow-missing`
has no features for (NaN rows) take their matrices out of the feature probes, and the
summary says how many.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

import vprom.generation.verify.audit as audit
import vprom.generation.verify.set_probes as set_probes
from vprom.generation.verify.audit import Check
from vprom.generation.verify.loaded import Data
from vprom.errors import VpromError
from vprom.feature_files import check_features_source
from vprom.domain import N_CONTEXT, ElementType
from vprom.tables import crop_rows, open_h5, present_rows, string_codes

#: matrices the probes sample per element type (train, test): 20,000 train a probe's
#: parameters, and 50,000 test matrices put the 95% interval within ±0.3 points
PROBE_MAX = (20_000, 50_000)
#: the feature probes hold the candidates' features in memory (≤ 4 element types × 10,000
#: matrices × 8 crops × D, stored dtype: 1.3 GB of float16 2048-d features at most)
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
    etype = m.element_type
    kept = []
    for rows, cap in ((train, caps[0]), (test, caps[1])):
        parts = []
        for t in sorted(set(etype[rows].tolist())):
            mine = rows[etype[rows] == t]
            parts.append(np.sort(rng.choice(mine, cap, replace=False)) if len(mine) > cap
                         else mine)
        kept.append(np.sort(np.concatenate(parts)) if parts else rows)
    return kept[0], kept[1], note


def candidate_view(data: Data, used: np.ndarray) -> audit.CandidateView:
    """What the label probe sees of the candidates (label overlap only for rows `used`):
    every label, explicit and implied; counts of explicit and of implied labels apart."""
    c = data.crops
    rows = np.where(data.rows < 0, 0, data.rows)[:, N_CONTEXT:]
    distinct = {s: k for k, s in enumerate(dict.fromkeys(data.labels))}  # a row per label set
    of_crop = np.array([distinct[s] for s in data.labels], dtype=np.int64)
    n_labels = np.array([len(s) for s in data.explicit_labels], dtype=float)
    n_implied = np.array([len(a) - len(b) for a, b in zip(data.labels, data.explicit_labels)],
                         dtype=float)
    ids: dict[str, int] = {}
    row_labels = [tuple(ids.setdefault(label, len(ids)) for label in sorted(s))
                  for s in distinct]
    label_row = of_crop[rows]
    overlap = np.zeros(rows.shape)
    overlap[used] = audit.label_overlap(audit.label_masks(row_labels), label_row[used])
    sa, el = string_codes(c.super_attribute)[1], string_codes(c.element)[1]
    # An element is identified with its type: "red" of objects and of humans are not alike
    el = el.ravel() * len(ElementType) + np.searchsorted(
        sorted(t.value for t in ElementType), c.element_type.astype(str))
    _, el = np.unique(el, return_inverse=True)
    return audit.CandidateView(
        element=el.ravel()[rows], super_attribute=sa.ravel()[rows], n_labels=n_labels[rows],
        overlap=overlap, area=(c.w.astype(float) * c.h)[rows],
        aspect=(c.w.astype(float) / np.maximum(c.h, 1))[rows], n_implied=n_implied[rows],
        label_row=label_row, row_labels=row_labels)


def frequency_checks(data: Data) -> list[Check]:
    """The answer-position test and the two element-frequency heuristics."""
    m = data.matrices
    answers = m.answer.astype(np.int64)
    groups = {t: np.flatnonzero(m.element_type == t) for t in sorted(set(m.element_type))}
    codes = string_codes(m.elements[:, N_CONTEXT:])[1]  # equal elements, equal codes
    return [audit.answer_position(answers, groups),
            audit.shortcut_check("bias:mode", "pick the most frequent candidate element",
                                 audit.heuristic_hits(codes, answers, "mode")),
            audit.shortcut_check("bias:odd-one-out", "pick the odd one out",
                                 audit.heuristic_hits(codes, answers, "odd"))]


def probe_plan(data: Data, seed: int = 0) -> tuple[np.ndarray, np.ndarray, str,
                                                    np.random.Generator]:
    """(train rows, test rows, note, the generator the feature probe goes on with): the
    probes' sample, the same in every process for the same `seed`."""
    rng = np.random.default_rng(seed)
    train, test, note = probe_sides(data, rng, PROBE_MAX)
    return train, test, note, rng


def check_bias(data: Data, features: Path | None, seed: int = 0) -> list[Check]:
    """The audit of `generation.verify.audit`; `seed` fixes the probes' samples and minibatches."""
    m = data.matrices
    answers = m.answer.astype(np.int64)
    checks = frequency_checks(data)
    train, test, note, rng = probe_plan(data, seed)
    view = candidate_view(data, np.concatenate([train, test]))
    checks.append(audit.label_probe(view, answers, train, test, m.element_type.astype(str),
                                    m.relation.astype(str), note))
    # the candidate set seen whole (absent values, coverage): `generation.verify.set_probes`
    checks += set_probes.check_sets(data, train, test, seed, note)
    if features is not None:
        checks.append(feature_check(data, features, answers, rng))
    return checks


def read_features(path: Path, crop_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(features of the wanted crops, row of each wanted crop id in that array)."""
    with open_h5(path) as h5:
        if "maps" in h5 and "features" not in h5:
            raise VpromError(f"{path}: holds spatial maps (`vprom extract --pool none`); the "
                             "feature probe reads pooled vectors: pass a FEATS.h5 extracted "
                             "without --pool none")
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
    check_features_source(data.path, features)  # features of another data set are refused
    train, test, note = probe_sides(data, rng, FEATURE_PROBE_MAX)
    used = np.concatenate([train, test])
    candidates = data.matrices.panels[:, N_CONTEXT:]
    feats, rows = read_features(features, candidates[used])
    full_rows = np.zeros(candidates.shape, dtype=np.int64)
    full_rows[used] = rows
    # a FEATS.h5 written with --allow-missing holds NaN rows for crops it could not read:
    # their matrices leave the probe (a NaN would poison the fit), and the summary says so
    finite = np.isfinite(feats).all(axis=1) if feats.size else np.ones(len(feats), bool)
    if not finite.all():
        ok = finite[full_rows].all(axis=1)
        dropped = int((~ok[train]).sum() + (~ok[test]).sum())
        train, test = train[ok[train]], test[ok[test]]
        note += (f" [{dropped:,} sampled matrices left out: {int((~finite).sum()):,} of their "
                 "crops have no features in the file (extracted with --allow-missing)]")
    m = data.matrices
    return audit.feature_probe(feats, full_rows, answers, train, test, rng,
                               m.element_type.astype(str), m.relation.astype(str), note)
