"""`vprom human-score`: human accuracy and skips, with the breakdowns `vprom evaluate` gives.

Accuracy counts the problems answered (as the paper's 77.8% does), the skip rate all
responses, with 95% Wilson intervals, per relation, element type and participant.
STUDY/metrics.json has a run's schema (model "humans"), so `vprom report` lists people.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from vprom.app.human.study import load_key, read_responses
from vprom.baselines.metrics import breakdowns, score
from vprom.baselines.paper import HUMANS, HUMANS_SKIPPED
from vprom.errors import VpromError
from vprom.files import write_json
from vprom.domain import CHANCE

PAPER_HUMANS = {"accuracy": HUMANS / 100, "skipped": HUMANS_SKIPPED / 100}


def _rate(flags: np.ndarray) -> dict:
    s = score(flags)
    return {"n": s["n"], "skipped": s["correct"], "rate": s["accuracy"], "ci95": s["ci95"]}


def score_study(study: str | Path, responses) -> dict:
    """Score the study's responses; writes STUDY/metrics.json and returns the metrics."""
    study = Path(study)
    key = load_key(study)
    paths = [Path(f) for f in responses] or sorted((study / "responses").glob("*.jsonl"))
    if not paths:
        raise VpromError(f"{study / 'responses'}: no responses yet; serve the study with "
                         f"`vprom human-serve {study}` and collect some")
    rows = read_responses(study, key, paths)
    info = [key["problems"][r["problem"]] for r in rows]
    skipped = np.array([r["skipped"] for r in rows], dtype=bool)
    correct = np.array([not r["skipped"] and r["choice"] == k["dataset_answer"]
                        for r, k in zip(rows, info)], dtype=bool)
    relation = np.array([k["relation"] for k in info])
    element_type = np.array([k["element_type"] for k in info])
    answered = ~skipped
    if not answered.any():
        raise VpromError(f"{study}: every response is a skip; nothing to score")
    people = sorted({r["participant"] for r in rows})
    per_person = {}
    for who in people:
        mine = np.array([r["participant"] == who for r in rows])
        per_person[who] = {"responses": int(mine.sum()), "skipped": int((mine & skipped).sum()),
                           **score(correct[mine & answered])}
    accuracies = [p["accuracy"] for p in per_person.values() if p["accuracy"] is not None]
    config = key["manifest"]["config"]
    metrics = {
        "run": study.name, "model": "humans", "split": config["split"], "aux": False,
        "shuffle_context": False, "seed": config["seed"],
        "features": {"backbone": "human", "weights": None},
        "dataset": config["dataset"],
        "dataset_content_hash": next(iter(key["manifest"]["inputs"].values()), None),
        "config": config, "chance": CHANCE,
        **breakdowns(correct[answered], relation[answered], element_type[answered]),
        "skips": {"all": _rate(skipped),
                  "by_relation": {v: _rate(skipped[relation == v]) for v in
                                  dict.fromkeys(relation)},
                  "by_element_type": {v: _rate(skipped[element_type == v]) for v in
                                      dict.fromkeys(element_type)}},
        "participants": per_person,
        "spread": {"participants": len(people), "min": min(accuracies),
                   "median": float(np.median(accuracies)), "max": max(accuracies)},
        "paper": PAPER_HUMANS,
        "did_not_learn": [],
    }
    write_json(study / "metrics.json", metrics)
    return metrics


def _pct(s: dict, key: str = "accuracy") -> str:
    low, high = s["ci95"]
    return f"{100 * s[key]:5.1f}%  [{100 * low:5.1f}, {100 * high:5.1f}]"


def format_human_metrics(m: dict) -> str:
    """A terminal summary beside the paper's human figures."""
    skips = m["skips"]["all"]
    lines = [f"humans on {m['split']}: {m['spread']['participants']} participant(s), "
             f"{skips['n']} responses",
             f"accuracy {_pct(m['test'])} of {m['test']['n']} answered   (paper: "
             f"{100 * m['paper']['accuracy']:.1f}%)",
             f"skipped  {_pct(skips, 'rate')} of {skips['n']}   (paper: "
             f"{100 * m['paper']['skipped']:.1f}%)"]
    for title, key in (("relation", "by_relation"), ("element type", "by_element_type")):
        lines.append(f"by {title} (accuracy; skipped):")
        lines += [f"  {g:18s} {_pct(s)} ({s['correct']}/{s['n']});  "
                  f"{100 * m['skips'][key][g]['rate']:.1f}% skipped"
                  for g, s in m[key].items()]
    spread = m["spread"]
    lines.append(f"per participant: accuracy min {100 * spread['min']:.1f}%, median "
                 f"{100 * spread['median']:.1f}%, max {100 * spread['max']:.1f}%")
    return "\n".join(lines)
