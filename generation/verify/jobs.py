"""`vprom verify --workers N`: the checks as independent jobs, run by N processes.

The parent reads DATASET.h5 into memory (`loaded.load`, which closes the file) and
lists the jobs; `vprom.processes.ordered_map` forks the workers, which share the loaded data
copy-on-write, and hands them the jobs. A job is a pure function of the data and of its own
arguments — a range of matrices for the solver, one group of the label probe, one element
type of the set probe, each of the other checks whole (the split rules on every matrix at
once, `rules.assign_all`) — and returns plain results, which come back in job order;
the parent builds the checks from them in the report's fixed order. So the report is the
same, byte for byte, whatever N is, and one worker runs the very same jobs one after the
other in this process.

What several jobs need beyond the data — the solver's tables, the stored split parts, the
crops' concepts, the probes' sample and candidate view — each process computes once, when
one of its jobs first needs it (`_shared`); jobs are handed out by what they need
(`needs`), so while there is other work one worker computes each. Only the two the parent
needs as well, the probes' sample (to plan the jobs) and the solver's tables (for the
solver's summary), are made in the parent before the fork, and so once for all.

Heavy jobs come first, so no worker is left with a long one at the end; the solver's
matrices are cut into `CHUNK`-matrix ranges, enough of them to keep every worker of a large
machine busy, and come last.
"""

from __future__ import annotations

import gc
import multiprocessing
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm import tqdm

import vprom.generation.verify.audit as audit
import vprom.generation.verify.bias as bias
import vprom.generation.verify.checks as checks
import vprom.generation.verify.set_probes as set_probes
import vprom.generation.verify.split_checks as split_checks
from vprom.errors import VpromError
from vprom.generation.verify.loaded import Data
from vprom.generation.verify.audit import Check
from vprom.generation.verify.ceiling import check_ceiling
from vprom.processes import collector_paused, ordered_map
from vprom.splits.rules import SplitRules, TrainBan

#: matrices per solver job
CHUNK = 10_000


@dataclass
class Inputs:
    """What every job reads: the loaded data set and the check's settings."""

    data: Data
    structure: list[str]
    rules: SplitRules
    features: Path | None
    check_matrix: Callable | None
    assigner: Callable | None
    train_bans: dict[str, TrainBan]


_INPUTS: list[Inputs] = []  # the parent's, set before the workers fork
_SHARED: dict[str, object] = {}  # per process: what `_shared` computed


def _shared(name: str):
    """What several jobs need, computed once per process."""
    if name not in _SHARED:
        _SHARED[name] = _MAKERS[name](_INPUTS[0])
    return _SHARED[name]


def _probes(inputs: Inputs):
    """The label probe's candidate view and groups."""
    train, test, _ = _shared("sample")
    view = bias.candidate_view(inputs.data, np.concatenate([train, test]))
    m = inputs.data.matrices
    groups = audit.probe_groups(m.element_type.astype(str), m.relation.astype(str), train, test)
    return view, groups


_MAKERS = {
    "tables": lambda inputs: checks.SolverTables(inputs.data),
    "columns": lambda inputs: inputs.data.matrices.part_columns(),
    "sample": lambda inputs: bias.probe_plan(inputs.data)[:3],  # train, test, note
    "probes": _probes,
    "sets": lambda inputs: set_probes.SetInputs(inputs.data, *_shared("sample")[:2]),
    "concepts": lambda inputs: split_checks.concept_table(inputs.data),
}


# ---------------------------------------------------------------- the jobs
def _matrices(start: int, stop: int):
    """The solver on matrices start..stop-1 (`checks.solve`'s results): `checks.solve_range`,
    or a caller's `check_matrix` on every record, splits included."""
    inputs, m = _INPUTS[0], _INPUTS[0].data.matrices
    if inputs.check_matrix is None:
        return checks.solve_range(_shared("tables"), inputs.data, start, stop)
    records = checks.matrix_records(m, _shared("columns"), start, stop)
    return checks.solve(_shared("tables"), records, inputs.data.rows, inputs.check_matrix)


def _split_rules():
    """`split_checks.off_rule` on every matrix, or the VpromError that stops the rules from
    being re-run (the splits check reports it)."""
    inputs, m = _INPUTS[0], _INPUTS[0].data.matrices
    columns = _shared("columns")
    try:
        expected = split_checks.assigned_parts(
            checks.matrix_records(m, columns, 0, len(m)), inputs.assigner) \
            if inputs.assigner else split_checks.expected_parts(inputs.data, inputs.rules,
                                                                _shared("concepts"))
    except VpromError as e:
        return e
    return split_checks.off_rule(m, expected, columns)


def _label_group(k: int) -> np.ndarray:
    view, groups = _shared("probes")
    _, train, test = groups[k]
    return audit.label_group_hits(view, _INPUTS[0].data.matrices.answer.astype(np.int64),
                                  train, test)


def _absent_values() -> Check:
    return _shared("sets").absent(_shared("sample")[2])


def _blocks() -> Check:
    return _shared("sets").blocks(_shared("sample")[2])


def _set_type(k: int) -> list:
    return _shared("sets").one_type(k)


def _features() -> Check:
    data = _INPUTS[0].data
    _, _, _, rng = bias.probe_plan(data)
    return bias.feature_check(data, _INPUTS[0].features, data.matrices.answer.astype(np.int64),
                              rng)


def _split_problems() -> list[str]:
    data = _INPUTS[0].data
    return split_checks.split_structure_problems(data.matrices) + \
        split_checks.paper_rule_problems(data, _shared("columns"))


JOBS = {
    "matrices": _matrices,
    "split rules": _split_rules,
    "label group": _label_group,
    "set type": _set_type,
    "absent values": _absent_values,
    "blocks": _blocks,
    "features": _features,
    "split problems": _split_problems,
    "integrity": lambda: checks.check_integrity(_INPUTS[0].data, _INPUTS[0].structure),
    "leakage": lambda: split_checks.check_leakage(_INPUTS[0].data),
    "held-out": lambda: split_checks.check_held_out(_INPUTS[0].data, _INPUTS[0].train_bans,
                                                    _shared("columns"), _shared("concepts")),
    "frequencies": lambda: bias.frequency_checks(_INPUTS[0].data),
    "ceiling": lambda: check_ceiling(_INPUTS[0].data.matrices),
}


#: the shared inputs (`_shared`) each kind of job computes, as `ordered_map`'s affinity: jobs
#: that need the same ones go to one worker while others have other work
NEEDS = {"label group": "probes", "set type": "sets", "absent values": "sets", "blocks": "sets",
         "split rules": "columns", "split problems": "columns", "held-out": "columns"}


def needs(job: tuple) -> str | None:
    return NEEDS.get(job[0])


def run_job(job: tuple):
    """Worker side: one job, by name and arguments."""
    name, *args = job
    with collector_paused():  # a job's tables are long-lived objects and no cycles
        return JOBS[name](*args)


# ---------------------------------------------------------------- the parent
def job_list(inputs: Inputs, n_groups: int, n_types: int) -> list[tuple]:
    """Every job of a readable data set, heavy ones first."""
    n = len(inputs.data.matrices)
    jobs = [("features",)] if inputs.features else []
    jobs += [("set type", k) for k in range(n_types)]
    jobs += [("label group", k) for k in range(n_groups)]
    jobs += [(name,) for name in ("split rules", "integrity", "leakage", "held-out",
                                  "absent values", "blocks", "split problems", "ceiling",
                                  "frequencies")]
    # the solver's ranges last: small and many, they fill the workers' ends evenly
    return jobs + [("matrices", s, min(n, s + CHUNK)) for s in range(0, n, CHUNK)]


def plan(inputs: Inputs) -> tuple[list, list[tuple]]:
    """(the label probe's groups, every job): known before the workers start (cheap: the
    probes' sample, not their view)."""
    m = inputs.data.matrices
    train, test, _ = _shared("sample")
    etype = m.element_type.astype(str)
    groups = audit.probe_groups(etype, m.relation.astype(str), train, test)
    n_types = len(set_probes.probe_types(etype, test))
    return groups, job_list(inputs, len(groups), n_types)


def run_checks(inputs: Inputs, workers: int) -> list[Check]:
    """Every check but integrity's verdict on readability (the caller's), in report order."""
    if "fork" not in multiprocessing.get_all_start_methods():
        workers = 1  # the jobs read the parent's data: without fork, run them here
    _INPUTS[:] = [inputs]
    _SHARED.clear()
    try:
        groups, jobs = plan(inputs)
        _shared("tables")  # the parent's summary needs them too: made once, inherited
        if workers > 1:  # made here while the elements are still read beside (`verify`)
            _shared("columns")
        inputs.data.complete()
        gc.freeze()  # the collector leaves the loaded data alone, here and in the workers
        with ordered_map(run_job, jobs, workers, "verify", method="fork",
                         affinity=needs) as results:
            done = dict(zip(jobs, tqdm(results, total=len(jobs), desc="verify", unit="job",
                                       disable=None)))
        return assemble(inputs, jobs, done, groups)
    finally:
        gc.unfreeze()
        _INPUTS.clear()
        _SHARED.clear()


def assemble(inputs: Inputs, jobs: list[tuple], done: dict, groups: list) -> list[Check]:
    """The checks in report order from the jobs' results."""
    data = inputs.data
    failed, reasons, implied_only = [], [], 0
    for job in jobs:
        if job[0] == "matrices":
            failed += done[job][0]
            reasons += done[job][1]
            implied_only += done[job][2]
    out = [done[("integrity",)],
           checks.solver_result(data, _shared("tables"), failed, reasons, implied_only)]
    problems, off = done[("split problems",)], done[("split rules",)]
    if isinstance(off, VpromError):
        out.append(split_checks.unassignable(problems, off))
    else:
        out.append(split_checks.splits_check(data.matrices, problems, *off))
    out += [done[("leakage",)], done[("held-out",)]]
    out += done[("frequencies",)]
    note = _shared("sample")[2]
    out.append(audit.label_check([(name, done[("label group", k)], len(tr))
                                  for k, (name, tr, _) in enumerate(groups)], note))
    out.append(done[("absent values",)])
    out.append(done[("blocks",)])
    out.append(set_probes.set_check([r for job in jobs if job[0] == "set type"
                                     for r in done[job]], note))
    if inputs.features:
        out.append(done[("features",)])
    out.append(done[("ceiling",)])
    return out
