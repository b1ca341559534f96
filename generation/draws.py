"""The random stream of one generated matrix: uniforms from `default_rng([seed, index])`, read
in batches. Every matrix owns its stream, so a shard reproduces the single run's rows exactly.
"""

from __future__ import annotations

import bisect
import itertools
from typing import Iterator, Sequence

import numpy as np

_BUFFER = 64


class Draws:
    """`uniform()` is the next float in [0, 1)."""

    __slots__ = ("uniform",)

    def __init__(self, seed: int, index: int) -> None:
        rng = np.random.default_rng([seed, index])
        batches = iter(lambda: rng.random(_BUFFER).tolist(), None)
        self.uniform = itertools.chain.from_iterable(batches).__next__

    def pick(self, seq: Sequence):
        return seq[int(self.uniform() * len(seq))]

    def coin(self) -> bool:
        return self.uniform() < 0.5

    def weighted(self, weights: Sequence[float]) -> int:
        """An index drawn in proportion to `weights` (the last where rounding leaves none)."""
        u = self.uniform() * sum(weights)
        for k, w in enumerate(weights):
            if u < w:
                return k
            u -= w
        return len(weights) - 1

    def by_cumulative(self, cumulative: Sequence[float]) -> int:
        """An index drawn in proportion to the weights whose running sums are `cumulative`."""
        u = self.uniform() * cumulative[-1]
        return min(bisect.bisect_right(cumulative, u), len(cumulative) - 1)

    def shuffled(self, seq: Sequence) -> Iterator:
        """The items of `seq` in random order, lazily (a partial Fisher-Yates on a copy)."""
        items = list(seq)
        u = self.uniform
        n = len(items)
        for i in range(n):
            j = i + int(u() * (n - i))
            items[i], items[j] = items[j], items[i]
            yield items[i]

    def distinct(self, seq: Sequence, k: int) -> list:
        return list(itertools.islice(self.shuffled(seq), k))

    def shuffle(self, items: list) -> None:
        u = self.uniform
        for i in range(len(items) - 1, 0, -1):
            j = int(u() * (i + 1))
            items[i], items[j] = items[j], items[i]
