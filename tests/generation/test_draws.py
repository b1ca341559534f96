"""`vprom.generation.draws.Draws`: the stream of matrix i is `default_rng([seed, i])`'s, whatever the
size of seed and i (the fast path computes small ones' start states itself, a block at a
time, and shares one Generator between all streams)."""

from __future__ import annotations

import numpy as np
import pytest

from vprom.generation.draws import Draws, pcg64_states


@pytest.mark.parametrize("seed, index", [(0, 0), (0, 1), (0, 1023), (0, 1024), (7, 123_456), (2**32 - 1, 5),
                                         (3, 2**32 - 1), (2**32, 9), (5, 2**40)])
def test_a_matrix_stream_is_its_seed_sequence_stream(seed, index):
    draws = Draws(seed, index)
    expected = np.random.default_rng([seed, index]).random(150).tolist()
    assert [draws.uniform() for _ in range(150)] == expected  # across batch boundaries


def test_the_computed_start_states_are_numpys_own_seeding():
    rng = np.random.default_rng(1)
    for seed in (0, 1, 2**31, 2**32 - 1, *rng.integers(0, 2**32, 5).tolist()):
        indices = [0, 1, 2**32 - 1, *rng.integers(0, 2**32, 20).tolist()]
        expected = [np.random.PCG64(np.random.SeedSequence([seed, i])).state for i in indices]
        assert pcg64_states(seed, indices) == expected


def test_streams_read_in_turns_stay_apart():
    """The streams share one Generator: each batch sets its own state, so reading several
    matrices' streams interleaved gives each its own numbers."""
    streams = [Draws(3, i) for i in (10, 11, 5000)]
    got = [[] for _ in streams]
    for step in range(300):
        for k, draws in enumerate(streams):
            if step % (k + 1) == 0:  # unequal paces, across batch boundaries
                got[k].append(draws.uniform())
    for k, i in enumerate((10, 11, 5000)):
        assert got[k] == np.random.default_rng([3, i]).random(len(got[k])).tolist()
