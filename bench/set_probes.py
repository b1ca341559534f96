"""Run `vprom verify`'s set-level probes alone on a DATASET.h5 and time them.

`vprom verify` runs them among its other checks; this script runs only them, so a data set
built by another vprom version (or `vprom generate --legacy-count-candidates`) can be
measured with these probes:

    .venv/bin/python bench/set_probes.py DATASET.h5

It prints each check's verdict and summary, and the seconds it took.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np


from vprom.generation.verify import audit, set_probes
from vprom.generation.verify.bias import PROBE_MAX, probe_sides
from vprom.generation.verify.loaded import load


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dataset", type=Path)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    data, _ = load(args.dataset)
    # the same sample `vprom verify` draws (`bias.probe_plan` seeds its generator with 0)
    train, test, note = probe_sides(data, np.random.default_rng(args.seed), PROBE_MAX)
    start = time.perf_counter()
    inputs = set_probes.SetInputs(data, train, test, args.seed)
    mlp = [r for k in range(len(inputs.types())) for r in inputs.one_type(k)]
    absent = set_probes.absent_value_probe(inputs.elements, *inputs.sides(), note)
    blocks = set_probes.block_probe(inputs.super_attributes, *inputs.sides(), note)
    for check in (absent, blocks, audit.judge_groups(
            "bias:probe-sets", "context-blind MLP on the candidate set", mlp, note)):
        print(f"{check.status.upper():4s} {check.name}: {check.summary}")
        for problem in check.problems:
            print(f"     - {problem}")
    print(f"set probes: {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
