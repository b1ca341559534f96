"""Test-set scores with 95% Wilson intervals, overall and by relation and element type,
shared by `vprom evaluate` and `vprom score`.
"""

from __future__ import annotations

import numpy as np

from vprom.domain import ElementType, Relation
from vprom.statistics import wilson_interval


def score(correct: np.ndarray) -> dict:
    """n, correct, accuracy and its 95% interval for a boolean array of outcomes."""
    n, k = int(len(correct)), int(np.sum(correct))
    low, high = wilson_interval(k, n)
    return {"n": n, "correct": k, "accuracy": k / n if n else None, "ci95": [low, high]}


def breakdowns(correct: np.ndarray, relation: np.ndarray, element_type: np.ndarray) -> dict:
    """Scores overall, by relation, by element type and by both, in the enums' order."""
    relations = [r.value for r in Relation if np.any(relation == r.value)]
    types = [t.value for t in ElementType if np.any(element_type == t.value)]
    pairs: dict = {}
    for r in relations:
        for t in types:
            mask = (relation == r) & (element_type == t)
            if mask.any():
                pairs.setdefault(r, {})[t] = score(correct[mask])
    return {
        "test": score(correct),
        "by_relation": {r: score(correct[relation == r]) for r in relations},
        "by_element_type": {t: score(correct[element_type == t]) for t in types},
        "by_relation_element_type": pairs,
    }


def format_score(s: dict) -> str:
    if s["accuracy"] is None:
        return "n/a"
    low, high = s["ci95"]
    return (f"{100 * s['accuracy']:5.1f}%  [{100 * low:5.1f}, {100 * high:5.1f}]  "
            f"({s['correct']}/{s['n']})")


def format_breakdowns(metrics: dict, beside=None) -> list[str]:
    """The breakdowns of `metrics`, one group a line, each followed by `beside(key, name)`."""
    def more(key, name):
        text = beside(key, name) if beside else ""
        return f"   {text}" if text else ""

    lines = []
    for title, key in (("relation", "by_relation"), ("element type", "by_element_type")):
        lines.append(f"by {title}:")
        lines += [f"  {name:18s} {format_score(s)}{more(key, name)}"
                  for name, s in metrics[key].items()]
    lines.append("by relation x element type:")
    for r, per_type in metrics["by_relation_element_type"].items():
        lines += [f"  {r + ' / ' + t:30s} {format_score(s)}"
                  f"{more('by_relation_element_type', (r, t))}" for t, s in per_type.items()]
    return lines
