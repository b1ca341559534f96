"""Does the candidates' super-attribute mix say which block holds the answer? (a diagnostic)

Attribute matrices take their 8 candidates in blocks (`generation.candidates._profile`): m
from the matrix's super-attribute, the answer among them, and m from each of 8/m - 1 others.
Within one block the answer is hidden, but if the super-attributes SHOWN tell which of them
is the matrix's, a context-blind model picks the right block and then guesses within it:
1/m instead of 1/8. This script measures that on the neutral split's probe sample (the one
`vprom verify` draws):

- the table (`vprom verify`'s `bias:blocks`, `set_probes.block_hits`): on train, for each
  set of super-attributes the candidates show (two or more), how often each was the
  answer's; on test, pick the one most often the answer's for that set (ties split; an
  unseen set picks among all), then one of its candidates at random. Its expected accuracy
  is printed per element type and relation, on the matrices with two or more blocks, with a
  95% interval, beside chance (12.5%);
- per super-attribute, how often it is the answer's block and how often a filler block in
  those matrices: a super-attribute only ever seen as the answer's block (or only as a
  filler) gives its matrices away.

    PYTHONPATH=$PWD .venv/bin/python bench/sa_pairs.py DATASET.h5 [DATASET.h5 ...]
"""

from __future__ import annotations

import argparse
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np


from vprom.generation.verify.loaded import load
from vprom.generation.verify.bias import probe_plan
from vprom.generation.verify.set_probes import block_hits
from vprom.domain import N_CONTEXT
from vprom.statistics import wilson_interval


def report(path: Path) -> None:
    data, _ = load(path)
    m = data.matrices
    train, test, _ = probe_plan(data)[:3]
    rows = np.where(data.rows < 0, 0, data.rows)[:, N_CONTEXT:]
    sa = data.crops.super_attribute.astype(str)[rows]
    _, codes = np.unique(sa, return_inverse=True)
    codes = codes.reshape(sa.shape)
    answer = m.answer.astype(np.int64)
    etype, relation = m.element_type.astype(str), m.relation.astype(str)
    sas = [tuple(r) for r in sa.tolist()]
    answer_sa = sa[np.arange(len(m)), answer].tolist()
    print(f"{path}")
    for et in ("object_attribute", "human_attribute"):
        mixed = np.array([len(set(s)) > 1 for s in sas])
        tr = [int(i) for i in train if etype[i] == et and mixed[i]]
        n_test = int((etype[test] == et).sum())
        if not n_test:
            continue
        roles: dict[str, Counter] = defaultdict(Counter)
        for i in tr:
            for s in set(sas[i]):
                roles[s]["answer" if s == answer_sa[i] else "filler"] += 1
        for rel in [None] + sorted(set(relation[test][etype[test] == et].tolist())):
            te = [int(i) for i in test if etype[i] == et and mixed[i]
                  and (rel is None or relation[i] == rel)]
            trr = [i for i in tr if rel is None or relation[i] == rel]
            name = et if rel is None else f"{et} x {rel}"
            if not te:
                print(f"  {name:32s} no test matrix shows two or more super-attributes")
                continue
            hits = block_hits(codes, answer, np.array(trr, dtype=np.int64),
                              np.array(te, dtype=np.int64))
            lo, hi = wilson_interval(float(hits.sum()), len(hits))
            print(f"  {name:32s} {len(te):6,d} of its test matrices show 2+ super-attributes: "
                  f"the table scores {100 * hits.mean():5.1f}% (95% CI {100 * lo:.1f}-"
                  f"{100 * hi:.1f}%; chance 12.5%)")
        print("    answer / filler block, per super-attribute (train): " + ", ".join(
            f"{s} {c['answer']}/{c['filler']}" for s, c in sorted(roles.items())))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("datasets", type=Path, nargs="+")
    for path in ap.parse_args().datasets:
        report(path)


if __name__ == "__main__":
    main()
