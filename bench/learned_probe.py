"""Run `vprom verify --learned`'s probe alone on a DATASET.h5 and time it.

It draws the sample `vprom verify` draws, fits the context-blind label model per group and
prints each group's figures and CPU seconds, the check's verdict and the time it took, in one
process:

    .venv/bin/python bench/learned_probe.py DATASET.h5

On the bench pool at full scale (`bench/generate.py --write-pools POOLS.h5`, then
`vprom generate POOLS.h5 --out DATASET.h5 --scale 1`, with and without
`--legacy-count-candidates`) it must pass the current generator and fail the legacy one.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

from vprom.generation.verify import audit, bias, learned
from vprom.generation.verify.loaded import load


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dataset", type=Path)
    args = ap.parse_args()
    start = time.perf_counter()
    data, problems = load(args.dataset)
    if data is None:
        raise SystemExit(f"{args.dataset}: {'; '.join(problems)}")
    train, test, note, _ = bias.probe_plan(data)
    m = data.matrices
    groups = audit.probe_groups(m.element_type.astype(str), m.relation.astype(str), train, test)
    view = bias.candidate_view(data, np.concatenate([train, test]))
    print(f"loaded {len(m):,} matrices: {time.perf_counter() - start:.1f} s", flush=True)
    start, cpu = time.perf_counter(), time.process_time()
    results = []
    with threadpool_limits(1, user_api="blas"):  # as `vprom verify` runs its probes
        for k, (name, tr, te) in enumerate(groups):
            t = time.process_time()
            hits = learned.learned_hits(view, m.answer.astype(np.int64), tr, te,
                                        learned.group_stream(k, len(groups)))
            results.append((name, hits, len(tr)))
            print(f"  {name:28s} train {len(tr):6,} test {len(te):6,} "
                  f"{100 * hits.mean() if len(hits) else float('nan'):5.1f}% "
                  f"({time.process_time() - t:.1f} s CPU)", flush=True)
    check = audit.judge_groups("bias:probe-learned", "context-blind model trained on "
                               "candidate labels", results, note)
    print(f"{check.status.upper():4s} {check.name}: {check.summary}")
    for problem in check.problems:
        print(f"     - {problem}")
    print(f"learned probe: {time.perf_counter() - start:.1f} s, "
          f"{time.process_time() - cpu:.1f} s CPU")


if __name__ == "__main__":
    main()
