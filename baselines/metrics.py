"""Test-set scores with 95% intervals, overall and by relation and element type, and whether a
run learned: it did not when its training answer loss never got `LOSS_TOLERANCE` below ln 8
(uniform scores), or its test accuracy lies in chance's 95% interval (flagged, never dropped).
The intervals are Wilson's, at the effective sample size of problems clustered by their answer
crop (`vprom.statistics.clustered_interval`): problems that share a crop are not independent.
A control (context-blind, shuffled context) passes while its interval's lower end is at most
chance + 2 points, `vprom verify`'s rule for bias probes."""

from __future__ import annotations

import itertools
import math

import numpy as np

from vprom.domain import CHANCE, N_CANDIDATES, SHORTCUT_MARGIN, ElementType, Relation
from vprom.statistics import clustered_interval, wilson_interval

#: how the printed intervals are made (module doc)
INTERVAL = "95% interval, problems clustered by answer crop"
#: ln 8, the answer loss of uniform scores
CHANCE_LOSS = math.log(N_CANDIDATES)
#: how far below ln 8 the loss must get once for the run to count as having left it
LOSS_TOLERANCE = 0.01
#: models that are controls whatever they are trained on: they cannot see the context
CONTROL_MODELS = ("context-blind", "context-blind-pixels")


def score(correct: np.ndarray, clusters: np.ndarray | None = None) -> dict:
    """n, correct, accuracy, its 95% interval and design effect for a boolean array of
    outcomes of problems whose answer crops are `clusters` (None: independent outcomes)."""
    n, k = int(len(correct)), int(np.sum(correct))
    if clusters is None:
        (low, high), deff = wilson_interval(k, n), 1.0
    else:
        low, high, deff = clustered_interval(correct, clusters)
    return {"n": n, "correct": k, "accuracy": k / n if n else None, "ci95": [low, high],
            "design_effect": deff}


def breakdowns(correct: np.ndarray, relation: np.ndarray, element_type: np.ndarray,
               answer_crop: np.ndarray | None = None) -> dict:
    """Scores overall, by relation, by element type and by both, in the enums' order; each
    interval clustered by `answer_crop` (the problems' answer crop ids) where given."""
    def part(mask):
        return score(correct[mask], None if answer_crop is None else answer_crop[mask])

    relations = [r.value for r in Relation if np.any(relation == r.value)]
    types = [t.value for t in ElementType if np.any(element_type == t.value)]
    pairs: dict = {}
    for r, t in itertools.product(relations, types):
        if (mask := (relation == r) & (element_type == t)).any():
            pairs.setdefault(r, {})[t] = part(mask)
    return {
        "test": part(np.ones(len(correct), dtype=bool)),
        "by_relation": {r: part(relation == r) for r in relations},
        "by_element_type": {t: part(element_type == t) for t in types},
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


def is_control(model: str, shuffle_context: bool) -> bool:
    return shuffle_context or model in CONTROL_MODELS


def control_result(metrics: dict) -> tuple[bool, str]:
    """(passed, why) for a control (see the module doc)."""
    low, high = metrics["test"]["ci95"]
    limit = CHANCE + SHORTCUT_MARGIN
    accuracy = 100 * metrics["test"]["accuracy"]
    interval = f"{accuracy:.1f}% (95% interval {100 * low:.1f}–{100 * high:.1f}%)"
    if low <= limit:
        return True, f"at chance as expected: {interval}, lower end ≤ {100 * limit:.1f}%"
    return False, (f"above chance: {interval}, lower end > {100 * limit:.1f}%; the answer can "
                   "be found without the context")


def did_not_learn(metrics: dict, history: list[dict]) -> list[str]:
    reasons = []
    losses = [h.get("train_answer_loss", h.get("train_loss")) for h in history]
    losses = [x for x in losses if isinstance(x, (int, float))]
    if losses and min(losses) > CHANCE_LOSS - LOSS_TOLERANCE:
        reasons.append(f"its training answer loss never left ln 8 = {CHANCE_LOSS:.4f} (lowest "
                       f"{min(losses):.4f} in {len(losses)} epochs)")
    test = metrics.get("test") or {}
    n, accuracy = test.get("n") or 0, test.get("accuracy")
    if n and accuracy is not None:
        n_effective = n / test.get("design_effect", 1.0)
        low, high = wilson_interval(CHANCE * n_effective, n_effective)
        if low <= accuracy <= high:
            reasons.append(f"its test accuracy {100 * accuracy:.1f}% is within the chance "
                           f"interval {100 * low:.1f}–{100 * high:.1f}% of {n:,} matrices")
    return reasons
