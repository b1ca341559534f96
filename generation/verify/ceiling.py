"""The perception-only ceiling: what perfect recognition scores without finding the relation.

Pick (1) the single candidate whose element row 3 shows, else (2) the single candidate the
context shows exactly twice, else (3) the one it shows least often (ties split). Inherent to
the relations, so `vprom verify` and `vprom stats` report it as a figure, never a failure.
"""

from __future__ import annotations

import numpy as np

from vprom.generation.verify.audit import Check
from vprom.domain import N_CANDIDATES, N_CONTEXT
from vprom.tables import MatrixTable, string_codes


def perception_hits(elements: np.ndarray, answers: np.ndarray) -> np.ndarray:
    """Per matrix, the probability that the rule above picks the answer (0..1); an answer
    outside 0..7 is never picked."""
    codes = string_codes(elements)[1].reshape(len(answers), N_CONTEXT + N_CANDIDATES)
    context, candidates = codes[:, :N_CONTEXT, None], codes[:, None, N_CONTEXT:]
    in_row3 = (candidates == context[:, 6:8]).any(axis=1)  # N×8
    shown = (candidates == context).sum(axis=1)  # how often the context shows each candidate
    twice = shown == 2
    least = shown == shown.min(axis=1, keepdims=True)
    picked = np.where((in_row3.sum(axis=1) == 1)[:, None], in_row3,
                      np.where((twice.sum(axis=1) == 1)[:, None], twice, least))
    answers = np.asarray(answers, dtype=np.int64)
    valid = (answers >= 0) & (answers < N_CANDIDATES)
    hit = picked[np.arange(len(answers)), answers.clip(0, N_CANDIDATES - 1)] & valid
    return hit / picked.sum(axis=1) if len(answers) else np.zeros(0)


def perception_ceiling(m: MatrixTable) -> dict:
    """{"all": accuracy, "by_element_type": {type: {"all": acc, relation: acc}}, "n": N}."""
    hits = perception_hits(m.elements, m.answer.astype(np.int64))
    out: dict = {"all": float(hits.mean()) if len(hits) else 0.0, "n": int(len(hits)),
                 "by_element_type": {}}
    for etype in sorted(set(m.element_type.tolist())):
        mine = m.element_type == etype
        row = {"all": float(hits[mine].mean())}
        for relation in sorted(set(m.relation[mine].tolist())):
            row[relation] = float(hits[mine & (m.relation == relation)].mean())
        out["by_element_type"][etype] = row
    return out


def format_ceiling(figures: dict) -> str:
    """One line: overall, then per element type (its relations in brackets)."""
    parts = []
    for etype, row in figures["by_element_type"].items():
        rel = ", ".join(f"{r} {100 * a:.1f}" for r, a in row.items() if r != "all")
        parts.append(f"{etype} {100 * row['all']:.1f}% ({rel})")
    return (f"perfect recognition without the relation scores {100 * figures['all']:.1f}% "
            f"[" + "; ".join(parts) + "]")


def check_ceiling(m: MatrixTable) -> Check:
    """The ceiling as an information line of `vprom verify` (status 'info', never a failure)."""
    figures = perception_ceiling(m)
    return Check("perception ceiling", "info", format_ceiling(figures) + " (inherent to "
                 "V-PROM's relations; not a failure)", figures)
