"""`vprom.sampling.Draws`: the stream of matrix i is `default_rng([seed, i])`'s, whatever the
size of seed and i (the fast path hands small ones over as uint32 words)."""

from __future__ import annotations

import numpy as np
import pytest

from vprom.sampling import Draws


@pytest.mark.parametrize("seed, index", [(0, 0), (0, 1), (7, 123_456), (2**32 - 1, 5),
                                         (3, 2**32 - 1), (2**32, 9), (5, 2**40)])
def test_a_matrix_stream_is_its_seed_sequence_stream(seed, index):
    draws = Draws(seed, index)
    expected = np.random.default_rng([seed, index]).random(150).tolist()
    assert [draws.uniform() for _ in range(150)] == expected  # across batch boundaries
