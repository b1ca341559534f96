"""The perception-only ceiling: what perfect recognition scores without finding the relation.

A model that recognises every panel's element perfectly can solve most V-PROM matrices
without ever identifying the relation, from how often each candidate's element appears in the
context:

1. the single candidate whose element row 3 shows (Or: the answer is one of row 3's two
   panels, and the other never is a candidate);
2. else the single candidate the context shows exactly twice (And: row 3 shows the answer
   twice, the other rows' elements three times; Union: the missing element appears in rows 1
   and 2 only);
3. else the candidate the context shows least often (ties split evenly).

This is inherent to V-PROM's relation definitions, not a flaw of one data set: the candidates
of a sound matrix include elements of the context, and the answer's count in the context
differs from theirs by construction. `vprom verify` and `vprom stats` report its accuracy as
the *perception-only ceiling*: what recognition alone is worth on this data set, per element
type and relation — a figure to read beside a model's accuracy, never a failure.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from vprom.generation.verify.audit import Check
from vprom.records import N_CANDIDATES, N_CONTEXT
from vprom.tables import MatrixTable


def perception_hits(elements: np.ndarray, answers: np.ndarray) -> np.ndarray:
    """Per matrix, the probability that the rule above picks the answer (0..1)."""
    out = np.zeros(len(answers))
    for i, (row, answer) in enumerate(zip(elements.tolist(), answers.tolist())):
        context, candidates = row[:N_CONTEXT], row[N_CONTEXT:]
        row3 = set(context[6:8])
        picked = [k for k in range(N_CANDIDATES) if candidates[k] in row3]
        if len(picked) != 1:
            shown = Counter(context)
            counts = [shown[c] for c in candidates]
            picked = [k for k, n in enumerate(counts) if n == 2]
            if len(picked) != 1:
                least = min(counts)
                picked = [k for k, n in enumerate(counts) if n == least]
        out[i] = (answer in picked) / len(picked)
    return out


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
