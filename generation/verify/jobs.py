"""`vprom verify --workers N`: the checks as independent jobs, run by N forked processes.

The parent loads DATASET.h5 and computes what several jobs read (`prepare`); the workers
inherit it copy-on-write. A job is a pure function of those inputs; results come back in job
order, heavy jobs first, so the report is the same for any N.
"""

from __future__ import annotations

import gc
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np
from tqdm import tqdm

import vprom.generation.verify.audit as audit
import vprom.generation.verify.bias as bias
import vprom.generation.verify.checks as checks
import vprom.generation.verify.learned as learned
import vprom.generation.verify.set_probes as set_probes
import vprom.generation.verify.split_checks as split_checks
from vprom.generation.verify.audit import Check
from vprom.generation.verify.ceiling import check_ceiling
from vprom.generation.verify.loaded import Data
from vprom.processes import collector_paused, ordered_map
from vprom.splits.rules import SplitRules

CHUNK = 2_000  # matrices per solver job: small, so all workers end together


@dataclass
class Inputs:
    """What the jobs read, computed once in the parent."""

    data: Data
    structure: list[str]
    rules: SplitRules
    features: Path | None
    tables: checks.SolverTables
    train: np.ndarray  # the probes' sample (`bias.probe_plan`)
    test: np.ndarray
    note: str
    view: audit.CandidateView  # the label probe's
    groups: list  # the label probe's groups: (name, train rows, test rows)
    sets: set_probes.SetInputs
    learned: bool = False  # also the learned probe (`learned`), on the label probe's groups


def prepare(data: Data, structure: list[str], rules: SplitRules, features: Path | None,
            learned: bool = False) -> Inputs:
    train, test, note, _ = bias.probe_plan(data)
    m = data.matrices
    groups = audit.probe_groups(m.element_type.astype(str), m.relation.astype(str), train, test)
    return Inputs(data, structure, rules, features, checks.SolverTables(data), train, test, note,
                  bias.candidate_view(data, np.concatenate([train, test])), groups,
                  set_probes.SetInputs(data, train, test), learned)


JOBS = {
    "matrices": lambda i, start, stop: checks.solve(i.tables, i.data, start, stop),
    "splits": lambda i: split_checks.check_splits(i.data, i.rules),
    "label group": lambda i, k: audit.label_group_hits(
        i.view, i.data.matrices.answer.astype(np.int64), *i.groups[k][1:]),
    "learned group": lambda i, k: learned.learned_hits(
        i.view, i.data.matrices.answer.astype(np.int64), *i.groups[k][1:],
        learned.group_stream(k, len(i.groups))),
    "set type": lambda i, k: i.sets.one_type(k),
    "absent values": lambda i: set_probes.absent_value_probe(i.sets.elements, *i.sets.sides(),
                                                              i.note),
    "blocks": lambda i: set_probes.block_probe(i.sets.super_attributes, *i.sets.sides(), i.note),
    "features": lambda i: bias.feature_check(i.data, i.features,
                                             i.data.matrices.answer.astype(np.int64),
                                             bias.probe_plan(i.data)[3]),
    "integrity": lambda i: checks.check_integrity(i.data, i.structure),
    "leakage": lambda i: split_checks.check_leakage(i.data),
    "held-out": lambda i: split_checks.check_held_out(i.data, i.rules.design.train_bans),
    "frequencies": lambda i: bias.frequency_checks(i.data),
    "ceiling": lambda i: check_ceiling(i.data.matrices),
}


def run_job(inputs: Inputs, job: tuple):
    """Worker side: one job, by name and arguments."""
    name, *args = job
    with collector_paused():  # a job's tables are long-lived objects and no cycles
        return JOBS[name](inputs, *args)


def job_list(inputs: Inputs) -> list[tuple]:
    """Every job of a readable data set, heavy ones first."""
    n = len(inputs.data.matrices)
    jobs = [("features",)] if inputs.features else []
    jobs += [("learned group", k) for k in range(len(inputs.groups)) if inputs.learned]
    jobs += [("set type", k) for k in range(len(inputs.sets.types()))]
    jobs += [("label group", k) for k in range(len(inputs.groups))]
    jobs += [(name,) for name in ("absent values", "blocks", "frequencies", "splits",
                                  "integrity", "leakage", "held-out", "ceiling")]
    return jobs + [("matrices", s, min(n, s + CHUNK)) for s in range(0, n, CHUNK)]


def load_optimiser() -> None:
    """Import the probes' optimiser before `threadpool_limits`, so that its BLAS keeps to one
    thread in the forked workers too."""
    import scipy.optimize  # noqa: F401


def run_checks(inputs: Inputs, workers: int) -> list[Check]:
    """Every check, in report order."""
    jobs = job_list(inputs)
    load_optimiser()
    from threadpoolctl import threadpool_limits

    gc.freeze()  # the collector leaves the loaded data alone, here and in the workers
    # BLAS on one thread, here and in the forked workers: sums that do not depend on the core
    # count, and workers that do not crowd each other's cores
    try:
        with threadpool_limits(1, user_api="blas"), ordered_map(
                partial(run_job, inputs), jobs, workers, "verify", method="fork") as results:
            done = dict(zip(jobs, tqdm(results, total=len(jobs), desc="verify", unit="job",
                                       disable=None)))
    finally:
        gc.unfreeze()
    return assemble(inputs, jobs, done)


def assemble(inputs: Inputs, jobs: list[tuple], done: dict) -> list[Check]:
    """The checks in report order from the jobs' results."""
    solved = [done[job] for job in jobs if job[0] == "matrices"]
    out = [done[("integrity",)],
           checks.solver_result(inputs.data,
                                [i for failed, _, _ in solved for i in failed],
                                [r for _, reasons, _ in solved for r in reasons],
                                sum(implied for _, _, implied in solved)),
           done[("splits",)], done[("leakage",)], done[("held-out",)]]
    out += bias_checks(inputs, jobs, done)
    out.append(done[("ceiling",)])
    return out


def bias_checks(inputs: Inputs, jobs: list[tuple], done: dict) -> list[Check]:
    """The bias checks in report order, their groups judged as one family (`audit.decide`)."""
    out = list(done[("frequencies",)])
    out.append(audit.judge_groups("bias:probe-labels", "context-blind probe on candidate labels",
                                  group_results(inputs, done, "label group"), inputs.note))
    out += [done[("absent values",)], done[("blocks",)]]
    sets = [r for job in jobs if job[0] == "set type" for r in done[job]]
    out.append(audit.judge_groups("bias:probe-sets", "context-blind MLP on the candidate set",
                                  sets, inputs.note))
    if inputs.learned:
        out.append(audit.judge_groups(
            "bias:probe-learned", "context-blind model trained on candidate labels",
            group_results(inputs, done, "learned group"), inputs.note))
    if inputs.features:
        out.append(done[("features",)])
    audit.decide(out)
    return out


def group_results(inputs: Inputs, done: dict, job: str) -> list[tuple[str, np.ndarray, int]]:
    """(group, test hits, train size) of the probe groups' jobs named `job`."""
    return [(name, done[(job, k)], len(train)) for k, (name, train, _) in enumerate(inputs.groups)]
