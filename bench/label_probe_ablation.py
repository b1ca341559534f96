"""Diagnostic: which part of verify's label probe finds a group's shortcut.

For one probe group (e.g. "object_attribute x or") of each DATASET.h5 given, fits the label
probe as `vprom verify` does (`audit.label_group_hits`, the same sample, train and test),
then again without its set part, then without each dense feature column in turn, and prints
each configuration's test accuracy averaged over the data sets. A part whose removal brings
the accuracy back to chance (12.5%) carries the shortcut.

    .venv/bin/python bench/label_probe_ablation.py "object_attribute x or" /tmp/demo*/dataset.h5
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

#: the dense columns of `audit.label_features`, in order
COLUMNS = ("element count", "element unique", "element most frequent", "super-attribute count",
           "answer rate", "log times seen", "labels", "implied labels", "label overlap",
           "log area", "log aspect")


def main() -> None:
    from vprom.generation.verify.loaded import load
    from vprom.generation.verify import audit, jobs
    from vprom.splits import load_rules

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("group", help='a probe group as verify names it, e.g. "object x or"')
    p.add_argument("datasets", nargs="+", type=Path)
    args = p.parse_args()

    features, entries = audit.label_features, audit.set_entries
    drop: list = [None, True]  # the dense column zeroed (None: none); whether the set part is on

    def ablated_features(*a):
        x = features(*a)
        if drop[0] is not None:
            x = x.copy()
            x[:, :, drop[0]] = 0
        return x

    def ablated_entries(view, rows):
        r, c = entries(view, rows)
        return (r, c) if drop[1] else (r[:0], c[:0])

    audit.label_features, audit.set_entries = ablated_features, ablated_entries
    configs = [("full probe", None, True), ("without the set part", None, False)]
    configs += [(f"without '{name}'", k, True) for k, name in enumerate(COLUMNS)]
    hits: dict[str, list[float]] = {label: [] for label, *_ in configs}
    rules = load_rules()
    for path in args.datasets:
        data, structure = load(path)
        if data is None:
            sys.exit(f"{path}: not a readable DATASET.h5 ({'; '.join(structure)})")
        inputs = jobs.prepare(data, structure, rules, None)
        view, groups = inputs.view, inputs.groups
        answers = data.matrices.answer.astype(np.int64)
        found = [(tr, te) for name, tr, te in groups if name == args.group]
        if not found:
            print(f"{path}: no group {args.group!r}")
            continue
        for label, column, with_set in configs:
            drop[:] = [column, with_set]
            h = audit.label_group_hits(view, answers, *found[0])
            if len(h):
                hits[label].append(float(h.mean()))
    for label, values in hits.items():
        if values:
            print(f"{label:40s} {100 * np.mean(values):6.2f}%  ({len(values)} data sets)")


if __name__ == "__main__":
    main()
