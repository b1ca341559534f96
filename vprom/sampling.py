"""Randomness and hashing shared by matrix generation and split assignment.

* `Draws` is the random stream of ONE matrix: a `numpy.random.Generator` seeded with
  `[seed, matrix index]`, read through a buffer of uniforms so a matrix costs one generator
  call instead of dozens. Because every matrix owns its stream, a shard `K/N` reproduces
  exactly the rows of the single run, and reordering code in one matrix never shifts another.
* `image_test_side` deals Visual Genome images to the train or test side of a partition by a
  64-bit hash of (seed, partition name, image id): the same image always lands on the same
  side, whatever pool or matrix uses it, which is what keeps every region of a split's test
  set out of its training set.
* `object_third` puts each object category in one of three fixed thirds by a hash of its name
  alone (independent of the seed and of the vocabulary), for the held-out-object splits.
* `val_ids` picks a split's validation matrices from its training ids by a hash of
  (seed, split, matrix id): the choice depends only on the set of training ids, so merging
  shards reproduces the single run's choice.
"""

from __future__ import annotations

import hashlib
import itertools
from functools import lru_cache
from typing import Iterator, Sequence

import numpy as np

_MASK64 = (1 << 64) - 1
_BUFFER = 64


class Draws:
    """The random stream of one matrix: uniforms in [0, 1) from `default_rng([seed, index])`.

    `uniform` is the C-level `__next__` of an endless chain of 64-float batches, so the hot
    path pays a Python call into numpy once per 64 draws, not once per draw.
    """

    __slots__ = ("uniform",)

    def __init__(self, seed: int, index: int) -> None:
        rng = np.random.default_rng([seed, index])
        batches = iter(lambda: rng.random(_BUFFER).tolist(), None)
        self.uniform = itertools.chain.from_iterable(batches).__next__

    def pick(self, seq: Sequence):
        return seq[int(self.uniform() * len(seq))]

    def coin(self) -> bool:
        return self.uniform() < 0.5

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
        """k distinct items of `seq` (k <= len(seq)), in random order: the first k of
        `shuffled`, so both draw the same stream."""
        return list(itertools.islice(self.shuffled(seq), k))

    def shuffle(self, items: list) -> None:
        u = self.uniform
        for i in range(len(items) - 1, 0, -1):
            j = int(u() * (i + 1))
            items[i], items[j] = items[j], items[i]


def _mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser on uint64 arrays (wrapping arithmetic is intended)."""
    x = x.astype(np.uint64, copy=True)
    with np.errstate(over="ignore"):
        x ^= x >> np.uint64(30)
        x *= np.uint64(0xBF58476D1CE4E5B9)
        x ^= x >> np.uint64(27)
        x *= np.uint64(0x94D049BB133111EB)
        x ^= x >> np.uint64(31)
    return x


@lru_cache(maxsize=None)
def _salt(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "little")


def hash_unit(seed: int, name: str, keys) -> np.ndarray:
    """A uniform-looking float in [0, 1) per key, fixed by (seed, name, key)."""
    keys = np.asarray(keys, dtype=np.int64).astype(np.uint64)
    base = _mix64(np.array([(_salt(name) ^ (int(seed) & _MASK64))], dtype=np.uint64))
    h = _mix64(keys ^ base[0])
    return (h >> np.uint64(11)).astype(np.float64) / float(1 << 53)


def image_test_side(seed: int, partition: str, image_ids, test_fraction: float) -> np.ndarray:
    """1 where an image lies on the test side of `partition`, else 0 (int8 array)."""
    return (hash_unit(seed, "partition:" + partition, image_ids) < test_fraction).astype(np.int8)


@lru_cache(maxsize=None)
def object_third(category: str) -> int:
    """The fixed third (0, 1 or 2) of an object category: sha256 of its name, mod 3."""
    return _salt("vprom-object-third:" + category) % 3


def val_ids(train_ids, seed: int, split: str, size: int) -> np.ndarray:
    """The `size` training ids with the smallest hash of (seed, split, id), sorted."""
    train_ids = np.asarray(train_ids, dtype=np.int64)
    if size <= 0 or len(train_ids) == 0:
        return np.zeros(0, dtype=np.int64)
    keys = hash_unit(seed, "val:" + split, train_ids)
    order = np.lexsort((train_ids, keys))  # ties broken by id, so the choice is total
    return np.sort(train_ids[order[:size]])
