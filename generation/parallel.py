"""Matrices drawn in chunks by forked workers that inherit the parent's samplers copy-on-write
(`gc.freeze()` keeps the collector off their pages). Every matrix draws from its own
`Draws(seed, index)`, so the data set is the same for any number of workers.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import partial

import numpy as np

from vprom.domain import N_PANELS
from vprom.generation.sampler import PlanSampler
from vprom.processes import ordered_map

#: Matrices per job: the pipe traffic stays a small part of the work, and workers end together.
CHUNK = 200


@dataclass
class Chunk:
    ids: np.ndarray  # int64 matrix ids
    rows: np.ndarray  # ids x 16 crop rows of the pool
    super_attribute: list[str]
    loosened: list[tuple[str, str, str]]  # `PlanSampler.draw`'s notes, in id order


def draw_chunk(sampler: PlanSampler, indices: Sequence[int]) -> Chunk:
    rows, super_attributes, loosened = [], [], []
    for i in indices:
        super_attribute, matrix_rows, note = sampler.draw(i)
        rows.append(matrix_rows)
        super_attributes.append(super_attribute)
        if note is not None:
            loosened.append(note)
    return Chunk(np.asarray(indices, dtype=np.int64),
                 np.asarray(rows, dtype=np.int64).reshape(-1, N_PANELS), super_attributes,
                 loosened)


def draw_chunks(sampler: PlanSampler, indices: Sequence[int], workers: int) -> Iterator[Chunk]:
    """Every chunk of `indices`, in order, from `workers` forked processes (none below 2)."""
    chunks = [indices[k:k + CHUNK] for k in range(0, len(indices), CHUNK)]
    gc.freeze()
    try:
        with ordered_map(partial(draw_chunk, sampler), chunks, min(workers, len(chunks)),
                         "generate", method="fork") as results:
            yield from results
    finally:
        gc.unfreeze()
