"""Human-attribute matrices drawn candidates first: every person shows a gender, an age..., so
a distractor must carry a KNOWN value of super-attribute s that does not complete the matrix,
and drawn answer first the answer's value would be the odd one out. The 8 candidates come in
*blocks* (the *profile*) of distinct elements, each carrying no element of another block and
a known value of every other block's super-attribute (Or: each block keeps a value no
candidate carries). The answer is the planned slot's candidate; the context comes last.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from functools import reduce
from operator import or_

from vprom.generation.plan import Group
from vprom.generation.pool_index import draw_crops
from vprom.domain import N_CANDIDATES, Relation
from vprom.generation.relations import RULES, mask_of
from vprom.generation.draws import Draws
from vprom.generation.solver import completion_mask

#: generous: answers whose contexts are hard to draw would otherwise be rarer than 1 in 8
CONTEXT_TRIES = 40
#: elements a super-attribute needs for a context whatever its answer
CONTEXT_ELEMENTS = {Relation.AND: 2, Relation.OR: 2, Relation.UNION: 3}
#: crops of one element tried before a candidate set is given up
CROP_TRIES = 12


@dataclass
class HumanSampler:
    group: Group
    cell: int
    crops_of: dict[int, list[int]]  # element id -> crop rows (train side: unbanned only)
    masks: list[int]
    region: list[int]
    solver_groups: list[int]  # super-attribute masks: the solver reads panels in one of them
    names: list[str]  # super-attributes, by index
    values: list[int]  # per super-attribute: mask of its values (implied-only ones too)
    eligible: list[list[int]]  # per super-attribute: elements with enough crops for a context
    focus: list[int]  # super-attributes the focus block may be of
    blocks: list[int]  # super-attributes any block may be of
    knows: dict[int, dict[int, list[int]]]  # element -> {super-attributes known: its crops}
    element_id: list[int]  # crop row -> its element id
    label: str = ""
    skipped: list[str] = field(default_factory=list)
    focus_ok: bool = True  # some profile has a focus of `focus` (`shortfall`)
    _max: dict = field(default_factory=dict)
    _knowing: dict = field(default_factory=dict)
    tries = 160  # cheap attempts (a candidate set that does not fit is given up at once)

    def knowing(self, e: int, need: int) -> list[int]:
        """The crops of e that know a value of every super-attribute in `need` (bits)."""
        if (e, need) not in self._knowing:
            self._knowing[e, need] = [r for k, rows in self.knows.get(e, {}).items()
                                      if k & need == need for r in rows]
        return self._knowing[e, need]

    def fit(self, sa: int, blocks: tuple[int, ...]) -> list[int]:
        """`sa`'s elements with a context's crops and one knowing every other block's value."""
        need = mask_of(b for b in blocks if b != sa)
        return [e for e in self.eligible[sa] if self.knowing(e, need)]

    def hosts(self, sa: int) -> bool:
        return len(self.eligible[sa]) >= CONTEXT_ELEMENTS[self.group.relation]

    def alone(self, sa: int) -> bool:
        """Whether `sa` alone can hold all 8 candidates (their values then all differ)."""
        extra = 1 if self.group.relation is Relation.OR else 0
        room = min(len(self.eligible[sa]), self.values[sa].bit_count()) - extra
        return self.hosts(sa) and room >= N_CANDIDATES

    def block_max(self, sa: int, blocks: tuple[int, ...]) -> int:
        """The most candidates `sa` can hold beside the other `blocks`: k - 1 of its k values
        (Or: k - 2), as the others need a value of `sa` outside its block."""
        if (sa, blocks) not in self._max:
            extra = 1 if self.group.relation is Relation.OR else 0
            most = min(len(self.fit(sa, blocks)), self.values[sa].bit_count() - extra - 1,
                       len(self.eligible[sa]) - extra)
            self._max[sa, blocks] = max(most, 0) if self.hosts(sa) else 0
        return self._max[sa, blocks]

    def profile(self, draws: Draws, any_focus: bool = False
                ) -> list[tuple[int, int, int]] | None:
        """[(super-attribute, block size, its maximum)] summing to 8, the focus last, or None."""
        pool = [s for s in (self.blocks if any_focus else self.focus)
                if self.alone(s) or self.block_max(s, (s,)) > 0]
        if not pool:
            return None
        focus = pool[draws.weighted([len(self.eligible[s]) for s in pool])]
        if self.alone(focus):
            return [(focus, N_CANDIDATES, N_CANDIDATES)]
        chosen = [focus]
        maxes = [self.block_max(focus, (focus,))]
        others = [s for s in draws.shuffled(self.blocks) if s != focus]
        others.sort(key=lambda s: -self.block_max(s, tuple(sorted((focus, s)))))
        for s in others:
            if sum(maxes) >= N_CANDIDATES:
                break
            blocks = tuple(sorted(chosen + [s]))
            trial = [self.block_max(b, blocks) for b in chosen + [s]]
            if min(trial) > 0:
                chosen, maxes = chosen + [s], trial
        if sum(maxes) < N_CANDIDATES:
            return None
        return _allocate(draws, list(zip(chosen, maxes)))

    def candidates(self, draws: Draws, profile: list[tuple[int, int, int]]
                   ) -> tuple[list[tuple[int, int]], list, list] | None:
        """[(crop row, block)], each block's elements and reserved Or value, or None."""
        every = mask_of(s for s, _, _ in profile)
        orr = 1 if self.group.relation is Relation.OR else 0
        masks, region, u = self.masks, self.region, draws.uniform
        values = [self.values[s] for s, _, _ in profile]
        # most values of a later block the crops before it may carry
        budget = [v.bit_count() - m - orr for v, (_, m, _) in zip(values, profile)]
        chosen: list = []
        forbidden, carried = 0, 0  # elements taken so far / labels of the crops so far
        required: list[int] = []  # per fixed block: its values outside its elements
        out, used = [], set()
        for b, (s, m, _) in enumerate(profile):
            need = every & ~(1 << s)
            later = list(range(b + 1, len(profile)))
            elements: list[int] = []
            for e in draws.shuffled(self.eligible[s]):
                if len(elements) == m:
                    break
                crops = self.knowing(e, need)
                if (carried >> e) & 1 or not crops:
                    continue
                best, fewest = -1, N_CANDIDATES * 8
                for _ in range(CROP_TRIES):
                    row = crops[int(u() * len(crops))]
                    mask = masks[row]
                    if (mask & forbidden or region[row] in used
                            or not all(mask & r for r in required)):
                        continue
                    both = carried | mask
                    if any((both & values[t]).bit_count() > budget[t] for t in later):
                        continue
                    new = sum(((mask & ~carried) & values[t]).bit_count() for t in later)
                    if new < fewest:
                        best, fewest = row, new
                    if not new:
                        break
                if best < 0:
                    continue
                elements.append(e)
                forbidden |= 1 << e
                used.add(region[best])
                carried |= masks[best]
                out.append((best, b))
            if len(elements) < m:
                return None
            chosen.append(elements)
            required.append(values[b] & ~mask_of(elements))
        reserved = [-1] * len(profile)
        if orr:
            # the row's other element: a value of the block no candidate carries
            for b, (s, _, _) in enumerate(profile):
                free = [e for e in self.eligible[s] if not (carried >> e) & 1]
                if not free:
                    return None
                reserved[b] = draws.pick(free)
        return out, chosen, reserved

    def sample(self, draws: Draws, answer_pos: int, why: Counter
               ) -> tuple[str, list[int]] | None:
        """(super-attribute, 8 context + 8 candidate crop rows), or None after `tries`."""
        masks, region, tries = self.masks, self.region, self.tries
        for attempt in range(tries):
            # after half its tries a group may draw a matrix of another super-attribute: sound
            # and balanced, just not held out (a thin cell)
            any_focus = not self.focus_ok or attempt >= tries // 2
            profile = self.profile(draws, any_focus)
            if profile is None:
                why["no profile of super-attributes fills 8 candidates"] += 1
                continue
            got = self.candidates(draws, profile)
            while got is None and (profile := _shrink(profile)) is not None:
                got = self.candidates(draws, profile)
            if got is None:
                why["too few crops with known values of the other blocks"] += 1
                continue
            cands, chosen, reserved = got
            pick = int(draws.uniform() * N_CANDIDATES)
            rest = [c for k, c in enumerate(cands) if k != pick]
            draws.shuffle(rest)
            slots = rest[:answer_pos] + [cands[pick]] + rest[answer_pos:]
            answer_row, block = cands[pick]
            sa = profile[block][0]
            a = self.element_id[answer_row]
            mates = [e for e in chosen[block] if e != a]
            used = {region[r] for r, _ in cands}
            others = [r for r, _ in slots if r != answer_row]
            for _ in range(CONTEXT_TRIES):
                rows = self._context(draws, sa, a, reserved[block], mates, used)
                if rows is None:
                    continue
                z = completion_mask(self.group.element_type, [masks[r] for r in rows],
                                    groups=self.solver_groups)
                if masks[answer_row] & z and not any(masks[r] & z for r in others):
                    return self.names[sa], rows + [r for r, _ in slots]
            why["no context leaves exactly the answer completing"] += 1
        return None

    def _context(self, draws: Draws, sa: int, a: int, v: int, mates: list[int],
                 used: set[int]) -> list[int] | None:
        """8 context crops of `sa` for the answer `a` (Or: row 3 shows a and v), mates first."""
        pool = self.eligible[sa]

        def others():  # drawn only when the rule reads them (Or does not)
            first = list(draws.shuffled(mates))
            yield from first + [e for e in draws.shuffled(pool) if e != a and e not in mates]

        ids = RULES[self.group.relation].context(draws, a, pool, others(), partner=v)
        return None if ids is None else draw_crops(draws, ids, self.crops_of, self.region, used)


def _allocate(draws: Draws, have: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Block sizes for [(super-attribute, maximum)], the focus first: the focus uniform up to
    its maximum, every block at least 1, the rest spread over the others; the focus last."""
    sizes = [1] * len(have)
    left = N_CANDIDATES - len(have)
    low = max(0, left - sum(m - 1 for _, m in have[1:]))
    high = min(have[0][1] - 1, left)
    first = low + int(draws.uniform() * (high - low + 1))
    sizes[0] += first
    left -= first
    for k in draws.shuffled(range(1, len(have))):
        add = min(have[k][1] - 1, left)
        sizes[k] += add
        left -= add
    blocks = [(s, n, m) for (s, m), n in zip(have, sizes)]
    return blocks[1:] + blocks[:1]


def _shrink(profile: list[tuple[int, int, int]]) -> list[tuple[int, int, int]] | None:
    """The profile with one candidate moved from the focus (last) to a block with room."""
    *others, (focus, size, cap) = profile
    if size <= 1:
        return None
    for k, (s, n, m) in enumerate(others):
        if n < m:
            others[k] = (s, n + 1, m)
            return others + [(focus, size - 1, cap)]
    return None


def make_human_sampler(pool, design, group: Group, cell: int, crops_of: dict[int, list[int]],
                       label: str, min_context_crops: int) -> HumanSampler:
    etype = group.element_type
    sa_of = pool.super_attribute[etype]
    names = sorted(set(sa_of.values()))
    # a value no crop carries is no value a distractor can be known to hold
    carried = reduce(or_, (pool.masks[r] for rows in crops_of.values() for r in rows), 0)
    values = [mask_of(i for i, s in sa_of.items() if s == n) & carried for n in names]
    eligible = [[e for e, rows in sorted(crops_of.items())
                 if sa_of.get(e) == n and len(rows) >= min_context_crops] for n in names]
    masks = pool.masks
    knows: dict[int, dict[int, list[int]]] = {e: {} for e in crops_of}  # by what they know
    for e, rows in crops_of.items():
        for r in rows:
            known = mask_of(k for k, v in enumerate(values) if masks[r] & v)
            knows[e].setdefault(known, []).append(r)
    asked, _ = group.super_attributes(design, names)
    focus = [names.index(s) for s in asked]
    # any candidate may be the answer: a train-side group's blocks are only what it asks
    blocks = list(range(len(names))) if group.held_side else focus
    sampler = HumanSampler(group, cell, crops_of, masks, pool.region,
                           pool.solver_groups.get(etype, []), names, values, eligible, focus,
                           blocks, knows, pool.element_id, label=label)
    sampler.skipped = sorted(names[s] for s in focus
                             if not sampler.alone(s) and sampler.block_max(s, (s,)) == 0)
    return sampler


def shortfall(s: HumanSampler) -> str | None:
    """Why no candidate set can be drawn (None: some can), naming each super-attribute."""
    draws = Draws(0, s.cell)
    if any(s.profile(draws) is not None for _ in range(32)):
        return None
    if set(s.blocks) != set(s.focus) and any(s.profile(draws, True) is not None
                                             for _ in range(32)):
        s.focus_ok = False
        s.skipped = sorted(set(s.skipped) | {s.names[k] for k in s.focus})
        return None
    others = [s.names[k] for k in s.blocks if k not in s.focus]
    return "; ".join(
        f"{s.names[k]}: {len(s.eligible[k])} elements with enough crops, "
        f"{s.values[k].bit_count()} values, room for "
        f"{N_CANDIDATES if s.alone(k) else s.block_max(k, (k,))} candidates"
        for k in s.focus) + " (8 candidates needed" + (
            f"; other super-attributes: {', '.join(others)})" if others else ")") \
        if s.focus else "no super-attribute may be asked here"
