"""Matrices drawn in chunks, by worker processes that share the parent's pool index.

`generate_dataset` builds everything a matrix needs once, in the parent: the pool index
(label masks, regions, cells, the held-out bans of every crop), the plan and every (group,
cell) sampler (`sampler.PlanSampler`). It then forks `workers` processes
(`vprom.processes.ordered_map(method="fork")`), which inherit all of it copy-on-write, and
hands them chunks of matrix indices; each returns its chunk as a few arrays (`Chunk`), and
the parent takes them back in index order. Every matrix draws from its own `Draws(seed,
index)`, so which process draws it changes nothing: the data set is the one-process run's,
byte for byte, whatever the number of workers (and `--workers 1` draws here, in-process).

Forking is safe here because the parent holds no HDF5 file open (`generate` reads the pools
into memory and closes the file first) and the workers take no lock that a thread of the
parent (a progress bar's monitor) could hold at the fork: they draw, assign and send.
`gc.freeze()` before the fork keeps the garbage collector from writing to every inherited
object, so the workers share its pages rather than copying them; with one worker it keeps
the collector's full passes from walking the millions of objects of the pool index and the
samplers again and again (6-8% of one worker's time, bench/RESULTS.md).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import partial, reduce
from operator import itemgetter, or_

import numpy as np

from vprom.generation.sampler import PlanSampler
from vprom.processes import ordered_map
from vprom.domain import N_PANELS, SPLITS
from vprom.splits.rules import PanelInfo, SplitRules

#: Matrices per job sent to a worker: large enough that the pipe traffic is a small part
#: of the work, small enough that the workers finish together.
CHUNK = 200
#: How `Chunk.parts` codes a matrix's part in a split.
PARTS = ("train", "test", "excluded")


@dataclass
class Chunk:
    """Consecutive matrices of one job: what the parent needs of each, as arrays."""

    ids: np.ndarray  # int64 matrix ids
    rows: np.ndarray  # ids x 16 crop rows of the pool
    super_attribute: list[str]
    parts: np.ndarray  # ids x len(SPLITS) int8 indices of `PARTS`
    loosened: list[tuple[str, str, str]]  # `PlanSampler.draw`'s notes, in id order


@dataclass
class Job:
    """What every worker shares (inherited at the fork): the samplers, the split rules and,
    per crop row, the sides of its image and its split bans."""

    sampler: PlanSampler
    rules: SplitRules
    partitions: tuple[str, str]  # (neutral, held-out)
    sides: tuple[list[int], list[int]]
    super_attribute: list[str]
    split_bans: list[int]


def make_job(sampler: PlanSampler, rules: SplitRules) -> Job:
    pool, design = sampler.pool, rules.design
    return Job(sampler, rules, (design.neutral_partition, design.held_partition),
               (pool.neutral_side, pool.held_side), pool.crops.super_attribute.tolist(),
               pool.split_bans)


def draw_chunk(job: Job, indices: Sequence[int]) -> Chunk:
    """Draw, prove and assign the matrices `indices` (what one worker does per job)."""
    rows_of, sas, parts, loosened = [], [], [], []
    code = {p: k for k, p in enumerate(PARTS)}
    neutral, held = job.partitions
    for i in indices:
        matrix, rows, note = job.sampler.draw(i)
        get = itemgetter(*rows)
        info = PanelInfo(sides={neutral: get(job.sides[0]), held: get(job.sides[1])},
                         super_attributes=get(job.super_attribute),
                         banned=reduce(or_, get(job.split_bans)))
        assigned = job.rules.assign(matrix, info)
        parts.append([code[assigned[s]] for s in SPLITS])
        rows_of.append(rows)
        sas.append(matrix.super_attribute)
        if note is not None:
            loosened.append(note)
    return Chunk(np.asarray(indices, dtype=np.int64),
                 np.asarray(rows_of, dtype=np.int64).reshape(-1, N_PANELS), sas,
                 np.asarray(parts, dtype=np.int8).reshape(-1, len(SPLITS)), loosened)


def draw_chunks(sampler: PlanSampler, rules: SplitRules, indices: Sequence[int],
                workers: int) -> Iterator[Chunk]:
    """Every chunk of `indices`, in order, drawn by `workers` forked processes (here when
    fewer than 2)."""
    chunks = [indices[k:k + CHUNK] for k in range(0, len(indices), CHUNK)]
    workers = min(workers, len(chunks))
    work = partial(draw_chunk, make_job(sampler, rules))
    gc.freeze()  # the collector leaves the pool index and samplers alone (see the module doc)
    try:
        with ordered_map(work, chunks, workers, "generate", method="fork") as results:
            yield from results
    finally:
        gc.unfreeze()
