"""The random stream of one generated matrix.

* `Draws` is the random stream of ONE matrix: the stream of `default_rng([seed, matrix
  index])`, read through a buffer of uniforms so a matrix costs one generator call instead
  of dozens. Because every matrix owns its stream, a shard `K/N` reproduces exactly the rows
  of the single run, and reordering code in one matrix never shifts another.
* Seeding a Generator costs ~25 µs, more than most matrices spend drawing. For seeds and
  indices below 2**32, `pcg64_states` computes what `default_rng([seed, i])` would start
  from (numpy's SeedSequence hash and PCG64's seeding step) for a block of indices at once,
  and `Draws` sets one reused PCG64 to that state per batch (advancing it past the batches
  already read): the same numbers, ~8 µs a matrix instead of ~29. tests/generation/test_draws.py
  holds it to numpy's own seeding.

The hashes that deal images and object categories to the sides of a split are split
logic: `vprom.splits.rules`.
"""

from __future__ import annotations

import itertools
import threading
from functools import partial
from typing import Iterator, Sequence

import numpy as np

_BUFFER = 64
_WORD = 1 << 32
_BLOCK = 1024  # indices whose start states `pcg64_states` computes at once
_BLOCKS: dict[tuple[int, int], list[dict]] = {}  # (seed, block) -> states, a few kept
_LOCAL = threading.local()  # each thread's reused Generator

# numpy's SeedSequence (bit_generator.pyx) and PCG64 seeding (pcg64.h) constants
_INIT_A, _MULT_A, _INIT_B, _MULT_B = 0x43B0D7E5, 0x931E8875, 0x8B51F9DD, 0x58F38DED
_MIX_L, _MIX_R = 0xCA01F9DD, 0x4973F715
_PCG_MULT = (2549297995355413924 << 64) + 4865540595714422341
_MASK128 = (1 << 128) - 1


def _seed_words(seed: int, indices: np.ndarray) -> np.ndarray:
    """`SeedSequence([seed, i]).generate_state(4, np.uint64)` for every i, as N×4 uint64
    (seed and every i below 2**32: the entropy is those two uint32 words)."""
    u32 = np.uint32
    const = _INIT_A

    def hashmix(value: np.ndarray) -> np.ndarray:
        nonlocal const
        value = value ^ u32(const)
        const = (const * _MULT_A) & 0xFFFFFFFF
        value = value * u32(const)
        return value ^ (value >> u32(16))

    def mix(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        out = u32(_MIX_L) * x - u32(_MIX_R) * y
        return out ^ (out >> u32(16))

    n = len(indices)
    with np.errstate(over="ignore"):
        entropy = [np.full(n, seed, u32), indices.astype(u32), np.zeros(n, u32),
                   np.zeros(n, u32)]  # the pool is 4 words; the last two hash zeros
        pool = [hashmix(word) for word in entropy]
        for src in range(4):
            for dst in range(4):
                if src != dst:
                    pool[dst] = mix(pool[dst], hashmix(pool[src]))
        words, const = np.empty((n, 8), u32), _INIT_B
        for k in range(8):
            value = pool[k % 4] ^ u32(const)
            const = (const * _MULT_B) & 0xFFFFFFFF
            value = value * u32(const)
            words[:, k] = value ^ (value >> u32(16))
    return words.astype("<u4").view("<u8").astype(np.uint64)


def pcg64_states(seed: int, indices: Sequence[int]) -> list[dict]:
    """The `bit_generator.state` that `default_rng([seed, i])` starts in, for every i
    (0 <= seed, i < 2**32): PCG64's seeding from the SeedSequence's four words."""
    states = []
    for s_hi, s_lo, i_hi, i_lo in _seed_words(seed, np.asarray(indices)).tolist():
        inc = ((((i_hi << 64) | i_lo) << 1) | 1) & _MASK128
        state = (((inc + ((s_hi << 64) | s_lo)) & _MASK128) * _PCG_MULT + inc) & _MASK128
        states.append({"bit_generator": "PCG64", "state": {"state": state, "inc": inc},
                       "has_uint32": 0, "uinteger": 0})
    return states


def _start_state(seed: int, index: int) -> dict:
    key = (seed, index // _BLOCK)
    block = _BLOCKS.get(key)
    if block is None:
        if len(_BLOCKS) >= 8:
            _BLOCKS.clear()
        start = key[1] * _BLOCK
        block = _BLOCKS[key] = pcg64_states(seed, range(start, min(start + _BLOCK, _WORD)))
    return block[index % _BLOCK]


def _batch(state: dict, n: int) -> list[float]:
    """Uniforms n*64 .. n*64+63 of the stream that starts in `state`."""
    gen = getattr(_LOCAL, "gen", None)
    if gen is None:
        gen = _LOCAL.gen = np.random.Generator(np.random.PCG64(0))
    bits = gen.bit_generator
    bits.state = state
    if n:
        bits.advance(n * _BUFFER)  # one double is one 64-bit step
    return gen.random(_BUFFER).tolist()


class Draws:
    """The random stream of one matrix: uniforms in [0, 1) from `default_rng([seed, index])`.

    `uniform` is the C-level `__next__` of an endless chain of 64-float batches, so the hot
    path pays a Python call into numpy once per 64 draws, not once per draw.
    """

    __slots__ = ("uniform",)

    def __init__(self, seed: int, index: int) -> None:
        if 0 <= seed < _WORD and 0 <= index < _WORD:
            batches = map(partial(_batch, _start_state(seed, index)), itertools.count())
        else:
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
