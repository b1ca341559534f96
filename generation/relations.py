"""The four V-PROM relations as a rule table: one class per relation (after RAVEN's Rule.py).

  And          φ(I_i1) = φ(I_i2) = φ(I_i3) (each row may show a different element)
  Or           φ(I_i3) = φ(I_i1) or φ(I_i2), with φ(I_i1) ≠ φ(I_i2)
  Union        every row holds the same set of three distinct elements, in any order
  Progression  φ(I_i2) − φ(I_i1) = φ(I_i3) − φ(I_i2) = d for one step d ≠ 0 shared by all rows

Element ids are bit positions (a count's id is the count). A rule's `sample` gives 9 elements
(the answer near uniform), `context` the 8 for a given answer, `holds` whether each N×3×3 id
matrix obeys, `completions` (from the context's masks of ALL elements each panel carries) the
mask of every element completing the matrix.
"""

from __future__ import annotations

from functools import lru_cache, reduce
from operator import or_
from typing import Sequence

import numpy as np

from vprom.domain import Relation
from vprom.generation.draws import Draws


def bits(mask: int):
    """The single-bit masks set in `mask`, lowest first."""
    while mask:
        low = mask & -mask
        yield low
        mask ^= low


def positions(mask: int):
    """The bit positions set in `mask`, lowest first."""
    return (low.bit_length() - 1 for low in bits(mask))


def mask_of(ids) -> int:
    """The mask with the bit positions `ids` set."""
    return reduce(or_, (1 << i for i in ids), 0)


class Rule:
    relation: Relation
    #: fewest distinct elements `sample` needs among the allowed ones
    min_elements: int = 1
    #: how many elements a completion can be (Or admits either of two): distractors avoid them
    completing_elements: int = 1


class And(Rule):
    relation = Relation.AND

    @staticmethod
    def layout(a: int, b: int, c: int) -> list[int]:
        return [a, a, a, b, b, b, c, c, c]

    def sample(self, draws, elements):
        # three different rows when the element set allows, so no row repeats another
        if len(elements) >= 3:
            a, b, c = draws.distinct(elements, 3)
        else:
            a, b, c = (draws.pick(elements) for _ in range(3))
        return self.layout(a, b, c)

    def context(self, draws, answer, elements, others=(), partner=-1):
        others = list(others)
        if not others:
            return None
        if len(others) < 2:
            others = others * 2  # a 2-value super-attribute: rows 1 and 2 repeat
        return self.layout(others[0], others[1], answer)[:8]

    def holds(self, e):
        return ((e[..., 0] == e[..., 1]) & (e[..., 1] == e[..., 2])).all(axis=1)

    def completions(self, m):
        if m[0] & m[1] & m[2] and m[3] & m[4] & m[5]:
            return m[6] & m[7]
        return 0


def _or_completing(a: int, b: int) -> int:
    """Elements x completing an Or row (A, B, x): x ∈ A or B, paired with a different one."""
    if not a or not b:
        return 0
    from_a = a if b.bit_count() >= 2 else a & ~b
    from_b = b if a.bit_count() >= 2 else b & ~a
    return from_a | from_b


def _or_row(draws: Draws, elements: Sequence[int]) -> list[int]:
    x, y = draws.distinct(elements, 2)
    # which column the third panel repeats is a fair coin, so neither is a tell
    return [x, y, x if draws.coin() else y]


class Or(Rule):
    relation = Relation.OR
    min_elements = 2
    completing_elements = 2

    def sample(self, draws, elements):
        return _or_row(draws, elements) + _or_row(draws, elements) + _or_row(draws, elements)

    def context(self, draws, answer, elements, others=(), partner=-1):
        rows = _or_row(draws, elements) + _or_row(draws, elements)
        return rows + ([answer, partner] if draws.coin() else [partner, answer])

    def holds(self, e):
        a, b, c = e[..., 0], e[..., 1], e[..., 2]
        return ((a != b) & ((c == a) | (c == b))).all(axis=1)

    def completions(self, m):
        if _or_completing(m[0], m[1]) & m[2] and _or_completing(m[3], m[4]) & m[5]:
            return _or_completing(m[6], m[7])
        return 0


def _union_sets(a: int, b: int, c: int) -> set[int]:
    """The 3-element sets (as masks) a row of panels (A, B, C) can show."""
    if a.bit_count() == b.bit_count() == c.bit_count() == 1:  # the common case
        s = a | b | c
        return {s} if s.bit_count() == 3 else set()
    out = set()
    for x in bits(a):
        for y in bits(b & ~x):
            for z in bits(c & ~x & ~y):
                out.add(x | y | z)
    return out


def _square(draws: Draws, a: int, b: int, c: int) -> list[list[int]]:
    """Three Union rows: the cyclic shifts of one order (a Latin square), reversed on a coin."""
    rows = [[a, b, c], [b, c, a], [c, a, b]]
    if draws.coin():
        rows = [r[::-1] for r in rows]
    return rows


class Union(Rule):
    relation = Relation.UNION
    min_elements = 3

    def sample(self, draws, elements):
        rows = _square(draws, *draws.distinct(elements, 3))
        draws.shuffle(rows)
        return rows[0] + rows[1] + rows[2]

    def context(self, draws, answer, elements, others=(), partner=-1):
        others = list(others)
        if len(others) < 2:
            return None
        rows = _square(draws, answer, others[0], others[1])
        last = next(r for r in rows if r[2] == answer)
        first = [r for r in rows if r is not last]
        draws.shuffle(first)
        return first[0] + first[1] + last[:2]

    def holds(self, e):
        s = np.sort(e, axis=2)
        distinct = ((s[..., 0] < s[..., 1]) & (s[..., 1] < s[..., 2])).all(axis=1)
        return distinct & (s[:, 0] == s[:, 1]).all(axis=1) & (s[:, 1] == s[:, 2]).all(axis=1)

    def completions(self, m):
        common = _union_sets(m[0], m[1], m[2])
        if common:
            common &= _union_sets(m[3], m[4], m[5])
        out = 0
        for s in common:
            for x in bits(m[6] & s):
                for y in bits(m[7] & s & ~x):
                    out |= s & ~x & ~y
        return out


def _steps(a: int, b: int, c: int) -> set[int]:
    """The nonzero steps d of the progressions a row of count panels (A, B, C) can show."""
    out = set()
    for x in positions(a):
        for y in positions(b):
            d = y - x
            if d and y + d > 0 and (c >> (y + d)) & 1:  # counts start at 1
                out.add(d)
    return out


@lru_cache(maxsize=None)
def _progressions(allowed: tuple[int, ...]) -> tuple[tuple[int, tuple[int, ...]], ...]:
    """(step, start values) of every nonzero step that fits inside `allowed`."""
    values = set(allowed)
    span = max(allowed) - min(allowed) if allowed else 0
    out = []
    for d in range(-span, span + 1):
        starts = tuple(s for s in allowed if d and s + d in values and s + 2 * d in values)
        if starts:
            out.append((d, starts))
    return tuple(out)


class Progression(Rule):
    relation = Relation.PROGRESSION
    min_elements = 3

    def sample(self, draws, elements):
        # the answer first, uniform over the values some progression ends on: drawing the
        # step first would make the extremes answer far more often than the middle
        answer = draws.pick(self.ends(elements))
        return self.context(draws, answer, elements) + [answer]

    def context(self, draws, answer, elements, others=(), partner=-1):
        options = _progressions(tuple(sorted(elements)))
        fits = [(d, st) for d, st in options if answer - 2 * d in st]
        if not fits:
            return None
        d, starts = draws.pick(fits)
        out = []
        for _ in range(2):
            s = draws.pick(starts)
            out += [s, s + d, s + 2 * d]
        return out + [answer - 2 * d, answer - d]

    def holds(self, e):
        step = e[..., 1] - e[..., 0]
        return ((step == step[:, :1]) & (step != 0)
                & (e[..., 2] - e[..., 1] == step)).all(axis=1)

    def completions(self, m):
        shared = _steps(m[0], m[1], m[2])
        if shared:
            shared &= _steps(m[3], m[4], m[5])
        out = 0
        for x in positions(m[6]):
            for y in positions(m[7]):
                d = y - x
                if d in shared and y + d > 0:  # no count is 0
                    out |= 1 << (y + d)
        return out

    @staticmethod
    def ends(elements: Sequence[int]) -> list[int]:
        """The values some progression of `elements` ends on (none: no progression fits)."""
        return sorted({s + 2 * d for d, starts in _progressions(tuple(sorted(elements)))
                       for s in starts})


RULES: dict[Relation, Rule] = {r.relation: r for r in (And(), Or(), Union(), Progression())}
