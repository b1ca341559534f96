"""`vprom human-study`: a stratified, seeded sample of V-PROM problems as a study folder.

The sample is even across relations, as the paper's study was, then element types (a short
cell's shortfall goes to its relation's other cells, then to any); one training problem is
the worked example. STUDY/public/ holds what a browser reads (page, problems.json,
example.json, images/<token>.jpg), STUDY/study.json the key (manifest; per problem its
matrix, answer, candidate order), STUDY/responses/ a JSON-lines file per participant.
Nothing under public/ tells the answer: names are random tokens, orders shuffled.
`vprom human-score` counts accuracy over the problems answered (as the paper's 77.8% does),
the skip rate over all responses, with 95% Wilson intervals, per relation, element type and
participant; STUDY/metrics.json has a run's schema (model "humans"), so `vprom report` lists
people.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter, namedtuple
from importlib import resources
from pathlib import Path
from typing import NamedTuple

import numpy as np

from vprom.baselines.metrics import breakdowns, score
from vprom.baselines.paper import HUMANS, HUMANS_SKIPPED
from vprom.claim import writes
from vprom.domain import (
    CHANCE,
    N_CANDIDATES,
    N_CONTEXT,
    RELATIONS_OF,
    ElementType,
    Relation,
)
from vprom.errors import VpromError
from vprom.files import atomic_dir, write_json
from vprom.generation.export.crops import cut_crops
from vprom.images import letterbox
from vprom.manifest import input_hashes, make_manifest
from vprom.tables import crop_rows, read_crop_table, read_matrix_table

KEY_FILE = "study.json"


Cell = namedtuple("Cell", "relation element_type")  # a stratum of the sample


def allocate(n: int, available: dict[Cell, int], rng: np.random.Generator) -> dict[Cell, int]:
    """How many problems each cell gets: even over relations, then over element types."""
    total = sum(available.values())
    if n > total:
        raise VpromError(f"the split part holds {total} problems; ask for at most that many "
                         f"(--n {n})")
    relations = sorted({c.relation for c in available if available[c]},
                       key=[r.value for r in Relation].index)
    quota = {c: 0 for c in available}
    for relation, share in zip(relations, _shares(n, len(relations), rng)):
        cells = [c for c in available if c.relation == relation and available[c]]
        for cell, k in zip(cells, _shares(share, len(cells), rng)):
            quota[cell] = k
    for scope in ("relation", "any"):  # hand shortfalls to cells that have problems to spare
        for cell in list(quota):
            while quota[cell] > available[cell]:
                spare = [c for c in quota if quota[c] < available[c] and
                         (scope == "any" or c.relation == cell.relation)]
                if not spare:
                    break
                quota[cell] -= 1
                quota[spare[int(rng.integers(len(spare)))]] += 1
    return quota


def _shares(n: int, k: int, rng: np.random.Generator) -> list[int]:
    """n split into k near-equal whole shares; the remainder goes to random members."""
    shares = [n // k] * k
    for i in rng.choice(k, size=n % k, replace=False):
        shares[int(i)] += 1
    return shares


def sample(table, split: str, part: str, n: int, rng: np.random.Generator) -> list[int]:
    """Row indices of the sampled problems (stratified as `allocate` says)."""
    if split not in table.splits:
        raise VpromError(f"no split {split!r}; the data set has {', '.join(sorted(table.splits))}")
    ids = table.splits[split].get(part, np.zeros(0, np.int64))
    rows = np.flatnonzero(np.isin(table.id, ids))
    cells = {Cell(r.value, t.value): rows[(table.relation[rows] == r.value) &
                                          (table.element_type[rows] == t.value)]
             for t in ElementType for r in RELATIONS_OF[t]}
    quota = allocate(n, {c: len(v) for c, v in cells.items()}, rng)
    chosen = [rng.choice(cells[c], size=quota[c], replace=False) for c in cells if quota[c]]
    return [int(i) for i in np.concatenate(chosen)] if chosen else []


def _tokens(k: int, rng: np.random.Generator) -> list[str]:
    """k distinct random 16-hex-digit names."""
    out: set[str] = set()
    while len(out) < k:
        out.add(f"{int(rng.integers(1 << 62)):016x}")
    return [str(name) for name in rng.permutation(sorted(out))]


def _shown(table, row: int, order: np.ndarray, names: dict[int, str]) -> tuple[dict, dict]:
    """A problem as the page shows it (panels by token, candidates in `order`), and its truth."""
    panels = table.panels[row]
    page = {"context": [names[int(p)] for p in panels[:N_CONTEXT]],
            "candidates": [names[int(panels[N_CONTEXT + k])] for k in order]}
    return page, {"relation": str(table.relation[row]),
                  "element_type": str(table.element_type[row]),
                  "answer": int(np.argmax(order == table.answer[row]))}


@writes("out", (), inputs=lambda a: (a["dataset"], a["vg_dir"]))  # a new or empty folder
def make_study(dataset: str | Path, vg_dir: str | Path, out: str | Path, split: str, n: int,
               part: str, seed: int, size: int) -> StudySummary:
    """`vprom.app.api.human_study`, which holds the defaults."""
    dataset, vg_dir, out = Path(dataset), Path(vg_dir), Path(out)
    if n < 1:
        raise VpromError(f"--n must be at least 1, got {n}")
    table, crops = read_matrix_table(dataset), read_crop_table(dataset)
    rng = np.random.default_rng([seed, 25])
    rows = sample(table, split, part, n, rng)
    example_pool = np.flatnonzero(np.isin(table.id, table.splits[split].get("train", [])))
    if len(example_pool) == 0:
        raise VpromError(f"{dataset}: split {split!r} has no training problem for the worked "
                         "example")
    example = int(rng.choice(example_pool))
    rows_shown = rows + [example]
    crop_ids = sorted({int(p) for r in rows_shown for p in table.panels[r]})
    names = dict(zip(crop_ids, _tokens(len(crop_ids), rng)))
    keys = _tokens(len(rows), rng)
    orders = [rng.permutation(N_CANDIDATES) for _ in rows_shown]
    shown = crop_rows(crops.crop_id, np.array(crop_ids, dtype=np.int64))
    if (shown < 0).any():
        raise VpromError(f"{dataset}: panels name crop {crop_ids[np.argmax(shown < 0)]}, which is "
                         "not in crops; run `vprom verify` and regenerate the data set")
    problems, key = {}, {}
    for k, row, order in zip(keys, rows, orders):
        problems[k], truth = _shown(table, row, order, names)
        key[k] = {**truth, "matrix_id": int(table.id[row]),
                  "super_attribute": str(table.super_attribute[row]),
                  "dataset_answer": int(table.answer[row]),
                  "candidate_order": [int(v) for v in order]}
    listed = [keys[i] for i in rng.permutation(len(keys))]
    page, truth = _shown(table, example, orders[-1], names)
    elements = table.elements[example]
    example_json = {**page, **truth, "elements": [str(e) for e in elements[:N_CONTEXT]],
                    "answer_element": str(elements[N_CONTEXT + int(table.answer[example])])}
    config = {"dataset": dataset.name, "split": split, "part": part, "n": len(rows),
              "size": size, "seed": seed}
    manifest = make_manifest("human-study", config, seed,
                             inputs=input_hashes([dataset]),
                             counts={"problems": len(rows), "images": len(crop_ids)})
    with atomic_dir(out) as tmp:
        public = tmp / "public"
        images = public / "images"
        images.mkdir(parents=True)

        def save(row: int, crop) -> None:
            name = names[int(crops.crop_id[row])]
            letterbox(crop, side=size).save(images / f"{name}.jpg", quality=90)

        cut_crops(crops, shown, vg_dir, save, desc="study images")
        page = resources.files("vprom.app.human") / "page"
        for name in ("index.html", "study.js", "study.css"):
            shutil.copyfile(page / name, public / name)
        write_json(public / "problems.json", {"problems": [{"key": k, **problems[k]}
                                                           for k in listed], "size": size})
        write_json(public / "example.json", example_json)
        write_json(tmp / KEY_FILE, {"manifest": manifest, "problems": key,
                                    "example_matrix_id": int(table.id[example])})
        (tmp / "responses").mkdir()
    return StudySummary(out, len(crop_ids), key)


class StudySummary(NamedTuple):
    """What `human-study` wrote: the folder, the number of images, the answer key."""

    out: Path
    images: int
    key: dict

    def __str__(self) -> str:
        cells = Counter(f"{p['relation']} / {p['element_type']}" for p in self.key.values())
        listed = ", ".join(f"{k} {v}" for k, v in sorted(cells.items()))
        return (f"wrote {self.out}: {len(self.key)} problems ({listed}), {self.images} images\n"
                f"serve it with: vprom human-serve {self.out}   (then open the address it "
                "prints, adding ?participant=<id>)")


def load_key(study: str | Path) -> dict:
    """The study's key (`study.json`), or a VpromError saying what the folder lacks."""
    path = Path(study) / KEY_FILE
    if not Path(study).is_dir():
        raise VpromError(f"{study}: no such folder; pass a folder written by `vprom human-study`")
    try:
        key = json.loads(path.read_text())
        key["problems"], key["manifest"]["config"]
    except FileNotFoundError:
        raise VpromError(f"{study}: no {KEY_FILE}; pass a folder written by "
                         "`vprom human-study`") from None
    except (json.JSONDecodeError, KeyError, TypeError):
        raise VpromError(f"{path}: not a study key of `vprom human-study`; write the study "
                         "again") from None
    return key


def read_responses(study: Path, key: dict, paths: list[Path]) -> list[dict]:
    """Every response in `paths`, checked against the study's key."""
    seen: dict[tuple[str, str], str] = {}
    out = []
    for path in paths:
        try:
            lines = path.read_text().splitlines()
        except OSError as e:
            raise VpromError(f"{path}: cannot read ({e.strerror})") from None
        for number, line in enumerate(lines, 1):
            where = f"{path} line {number}"
            try:
                r = json.loads(line)
                who, problem, skipped, choice = (r["participant"], r["problem"], r["skipped"],
                                                 r["choice"])
            except (ValueError, RecursionError, KeyError, TypeError):  # also deep nesting
                raise VpromError(f"{where}: not a response of `vprom human-serve`; fix or "
                                 "remove the line") from None
            if problem not in key["problems"]:
                raise VpromError(f"{where}: problem {problem!r} is not in {study}; these "
                                 "responses belong to another study")
            if skipped != (choice is None):
                raise VpromError(f"{where}: a response must have a choice or be skipped")
            if (who, problem) in seen:
                raise VpromError(f"{where}: participant {who} answered problem {problem} "
                                 f"already ({seen[who, problem]}); remove one of the two")
            seen[who, problem] = where
            out.append(r)
    return out


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
        "paper": {"accuracy": HUMANS / 100, "skipped": HUMANS_SKIPPED / 100},
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
    lines = [(f"humans on {m['split']}: {m['spread']['participants']} participant(s), "
              f"{skips['n']} responses"),
             (f"accuracy {_pct(m['test'])} of {m['test']['n']} answered   (paper: "
              f"{100 * m['paper']['accuracy']:.1f}%)"),
             (f"skipped  {_pct(skips, 'rate')} of {skips['n']}   (paper: "
              f"{100 * m['paper']['skipped']:.1f}%)")]
    for title, key in (("relation", "by_relation"), ("element type", "by_element_type")):
        lines.append(f"by {title} (accuracy; skipped):")
        lines += [f"  {g:18s} {_pct(s)} ({s['correct']}/{s['n']});  "
                  f"{100 * m['skips'][key][g]['rate']:.1f}% skipped"
                  for g, s in m[key].items()]
    spread = m["spread"]
    lines.append(f"per participant: accuracy min {100 * spread['min']:.1f}%, median "
                 f"{100 * spread['median']:.1f}%, max {100 * spread['max']:.1f}%")
    return "\n".join(lines)
