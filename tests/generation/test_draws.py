"""`vprom.generation.draws.Draws`: the stream of matrix i is `default_rng([seed, i])`'s."""

from __future__ import annotations

import numpy as np
import pytest

from vprom.generation.draws import Draws


@pytest.mark.parametrize("seed, index", [(0, 0), (0, 1), (7, 123_456), (2**32, 9), (5, 2**40)])
def test_a_matrix_stream_is_its_seed_sequence_stream(seed, index):
    draws = Draws(seed, index)
    expected = np.random.default_rng([seed, index]).random(150).tolist()
    assert [draws.uniform() for _ in range(150)] == expected  # across batch boundaries


def test_a_distinct_draw_is_the_start_of_a_shuffle():
    items = list(range(20))
    assert Draws(3, 1).distinct(items, 5) == list(Draws(3, 1).shuffled(items))[:5]
    assert sorted(Draws(3, 1).shuffled(items)) == items


def test_weighted_draws_follow_their_weights():
    draws = Draws(4, 2)
    assert {draws.weighted([0.0, 2.5, 0.0]) for _ in range(50)} == {1}
    assert {draws.by_cumulative([0.0, 0.0, 3.0, 3.0]) for _ in range(50)} == {2}
    picks = [draws.weighted([1.0, 3.0]) for _ in range(4000)]
    assert 0.72 < sum(picks) / len(picks) < 0.78  # P(1) = 3/4
