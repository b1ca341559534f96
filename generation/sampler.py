"""One matrix at a time. Human-attribute matrices are drawn candidates first
(`human_candidates`); counts draw their answer and candidate set from a table
(`count_candidates`), then a context for that answer; the others answer first: the rule samples
the 9 elements. A crop is drawn per panel in the cell (no region twice), the solver turns the
context's label masks into the mask Z of every element completing row 3, and the 7
distractors are drawn outside Z. A failed attempt is redrawn up to `MAX_TRIES` times, all from
the matrix's own `Draws(seed, index)`.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from vprom.generation.candidates import (
    Option,
    distractors,
    fill_weights,
    static_block,
)
from vprom.generation.human_candidates import HumanSampler, make_human_sampler, shortfall
from vprom.generation.count_candidates import count_context, count_distractors, count_tables
from vprom.generation.candidate_blocks import mixing_plans
from vprom.generation.plan import Group, MatrixPlan
from vprom.generation.pool_index import CELL_NAMES, RELATION_BIT, PoolIndex, draw_crops
from vprom.errors import VpromError
from vprom.domain import COUNTS, N_CANDIDATES, N_CONTEXT, ElementType, Relation
from vprom.generation.relations import RULES, Progression, mask_of
from vprom.generation.draws import Draws
from vprom.generation.solver import completion_mask
from vprom.splits.rules import HeldOutDesign, object_third

#: An element may appear in a matrix's context only with this many crops in the cell.
MIN_CONTEXT_CROPS = 3
#: Resampling attempts per matrix before generation gives up with a VpromError.
MAX_TRIES = 40
#: Attempts of a count matrix sharing one (answer, candidate set) draw of its table: redrawn
#: at each failure, answers whose matrices fail more would come out too rarely. A count
#: sampler has twice the tries, redrawing at every attempt after MAX_TRIES, lest a thin pool
#: fail to build. No matrix of the demo's pool gets that far; where many do (a few crops of
#: a count in a cell), `vprom verify` finds the imbalance.
COUNT_KEEP = 20
#: Attempts keeping every candidate's element off the others (`_Taker`); later ones keep only
#: the completions off (a super-attribute every crop carries has no exclusive labels).
STRICT_TRIES = 12
#: a smaller --scale does not help: what one matrix needs does not depend on how many are drawn
THIN_POOL_ADVICE = "mine more images (the synthetic corpus: a larger --images)"


@dataclass
class Sampler:
    """One (group, cell) of answer-first matrices (`make_sampler`)."""

    group: Group
    cell: int
    options: list[Option]
    cumulative: list[float]
    crops_of: dict[int, list[int]]
    masks: list[int]  # crop row -> its label mask
    region: list[int]  # crop row -> its region (no region twice in a matrix)
    label: str = ""
    skipped: list[str] = field(default_factory=list)  # super-attributes too small for it
    solver_groups: list[int] = field(default_factory=list)
    fill_weight: dict[str, float] = field(default_factory=dict)  # `fill_weights`
    mixing: dict = field(default_factory=dict)  # super-attribute -> `candidate_blocks.Plan`
    counts: tuple | None = None  # counts: `count_candidates.count_tables`' table
    tries = MAX_TRIES

    def sample(self, draws: Draws, answer_pos: int, why: Counter
               ) -> tuple[str, list[int]] | None:
        """(super-attribute, 16 crop rows, the answer at `answer_pos`) or None; `why`: failures."""
        etype, rule, crops_of = self.group.element_type, RULES[self.group.relation], self.crops_of
        masks, region, groups = self.masks, self.region, self.solver_groups
        for attempt in range(self.tries):
            option = self.options[draws.by_cumulative(self.cumulative)]
            if self.counts is None:
                ids = rule.sample(draws, option.context)
            else:
                if attempt % COUNT_KEEP == 0 or attempt >= MAX_TRIES:  # see COUNT_KEEP
                    entries, cumulative = self.counts
                    answer, forced, chosen = entries[draws.by_cumulative(cumulative)]
                ids = count_context(draws, rule, answer, forced, option.context)
            rows = draw_crops(draws, ids, crops_of, region)
            if rows is None:
                why["no 9 context crops on distinct regions"] += 1
                continue
            z = completion_mask(etype, [masks[r] for r in rows[:N_CONTEXT]], groups=groups)
            if not masks[rows[N_CONTEXT]] & z:
                why["the context's labels admit no reading the answer completes"] += 1
                continue
            used = {region[r] for r in rows}
            context_ids = list(dict.fromkeys(ids[:N_CONTEXT]))
            if self.counts is None:
                wrong = distractors(draws, option, context_ids, z, used, crops_of, masks,
                                    region, self.fill_weight, rows[N_CONTEXT],
                                    attempt < STRICT_TRIES, self.mixing)
            elif (z | masks[rows[N_CONTEXT]]) & chosen != 1 << answer:
                why["the context admits a completion in the candidate set"] += 1
                continue
            else:
                wrong = count_distractors(draws, answer, chosen, z, used, crops_of, masks,
                                          region)
            if wrong is None:
                why["too few distractors outside the completions"] += 1
                continue
            draws.shuffle(wrong)
            candidates = wrong[:answer_pos] + [rows[N_CONTEXT]] + wrong[answer_pos:]
            # the solver check: exactly the answer completes the matrix
            if [k for k in range(N_CANDIDATES) if masks[candidates[k]] & z] != [answer_pos]:
                why["a second candidate completes"] += 1
                continue
            return option.super_attribute, rows[:N_CONTEXT] + candidates
        return None


def make_sampler(pool: PoolIndex, design: HeldOutDesign, group: Group,
                 cell: int, bans: bool = True) -> Sampler | HumanSampler:
    """The sampler of one (group, cell); `bans` False: the loosened one (`PlanSampler`)."""
    etype = group.element_type
    where = f"{etype.value} pool of {pool.source}, {CELL_NAMES[cell]} images"
    label = f"{etype.value} {group.relation.value} matrices of group '{group.name}'"
    if etype not in pool.cells:
        raise VpromError(f"{pool.source}: no {etype.value} crops; {label} need them — mine "
                         "more images or check the pool file")
    crops_of = pool.cells[etype][cell]
    banned_note = ""
    banned = ban_mask(pool, group) if bans else None
    if banned is not None:
        bit = RELATION_BIT[group.relation]
        before = sum(len(rows) for rows in crops_of.values())
        crops_of = {i: kept for i, rows in crops_of.items()
                    if (kept := [r for r in rows if not banned[r] & bit])}
        after = sum(len(rows) for rows in crops_of.values())
        if after < before:
            banned_note = (f" ({before - after:,} of its {before:,} crops left out: they show "
                           "a label a held-out split keeps out of training)")
    if etype is ElementType.HUMAN_ATTRIBUTE:
        human = make_human_sampler(pool, design, group, cell, crops_of,
                                   f"{label} on {where}", MIN_CONTEXT_CROPS)
        reason = shortfall(human)
        if reason is not None:
            raise VpromError(f"{where}{banned_note}: no sound {label} can be drawn — {reason}"
                             f" — {THIN_POOL_ADVICE}")
        return human
    enough = {i for i, rows in crops_of.items() if len(rows) >= MIN_CONTEXT_CROPS}
    usable = set(crops_of)
    if etype is ElementType.COUNT:
        allowed = set(group.counts or COUNTS)
        options = [Option("", sorted(allowed & enough), sorted(usable), [])]
    elif etype is ElementType.OBJECT:
        names = pool.universe[etype].names
        mine = {i for i in names if object_third(names[i]) == group.third}
        options = [Option("", sorted(mine & enough), sorted(mine & usable), [])]
    else:
        options = _attribute_options(group, design, pool.super_attribute[etype], enough, usable)
    reasons = [_shortfall(o, group.relation) for o in options]
    good = [o for o, reason in zip(options, reasons) if reason is None]
    if not good:
        short = "; ".join(f"{o.super_attribute or etype.value}: {reason}"
                          for o, reason in zip(options, reasons))
        raise VpromError(f"{where}{banned_note}: no sound {label} can be drawn — {short} — "
                         f"{THIN_POOL_ADVICE}")
    # one that cannot form a symmetric profile is left out, unless no other can
    symmetric = [o for o in good
                 if not o.super_attribute or static_block(o, group.relation) is not None]
    good = symmetric or good
    cumulative = np.cumsum([len(o.context) for o in good]).tolist()
    skipped = sorted(o.super_attribute for o in options if o not in good)
    return Sampler(group, cell, good, cumulative, crops_of, pool.masks, pool.region,
                   f"{label} on {where}", skipped, pool.solver_groups.get(etype, []))


def _shortfall(o: Option, relation: Relation) -> str | None:
    rule = RULES[relation]
    need = rule.min_elements
    if len(o.context) < need:
        return (f"{need} elements with >= {MIN_CONTEXT_CROPS} crops each needed, "
                f"{len(o.context)} available (short by {need - len(o.context)})")
    if relation is Relation.PROGRESSION and not Progression.ends(o.context):
        return f"no progression fits the counts {sorted(o.context)}"
    need = N_CANDIDATES - 1 + rule.completing_elements
    have = len(set(o.same) | set(o.fill))
    if have < need:
        return (f"{need} distinct elements with crops needed for the candidates, {have}"
                f" available (short by {need - have})")
    return None


def _attribute_options(group: Group, design: HeldOutDesign, sa_of: dict[int, str],
                       enough: set[int], usable: set[int]) -> list[Option]:
    # a train-side group shows no held-out super-attribute, not even as a distractor
    chosen, shown = group.super_attributes(design, sorted(set(sa_of.values())))
    fill_sas = set(shown)
    options = []
    for sa in chosen:
        members = {i for i, s in sa_of.items() if s == sa}
        fill = {i for i in usable if sa_of.get(i) in fill_sas and sa_of[i] != sa}
        by_sa: dict[str, list[int]] = {}
        for i in sorted(fill):
            by_sa.setdefault(sa_of[i], []).append(i)
        options.append(Option(sa, sorted(members & enough), sorted(members & usable),
                              sorted(fill), [(t, ids, mask_of(ids))
                                             for t, ids in sorted(by_sa.items())]))
    return options


def ban_mask(pool: PoolIndex, group: Group) -> list[int] | None:
    """Per crop, the relations (`RELATION_BIT`) for which the group may not draw it (None:
    any). Train-side groups avoid every ban, to train in every split; so do counts, lest a
    label only test-side counts show tell the answer's range; test-side attribute groups
    avoid the banned categories."""
    if group.held_side == 0 or group.element_type is ElementType.COUNT:
        banned = pool.banned
    elif group.element_type in (ElementType.OBJECT_ATTRIBUTE, ElementType.HUMAN_ATTRIBUTE):
        banned = pool.banned_categories
    else:
        return None
    return banned if any(banned) else None


class PlanSampler:
    """Every (group, cell) sampler of a plan, made once; `draw(i)` gives matrix i from
    `Draws(seed, i)` alone, *loosened* (from all the cell's crops) where its ban leaves too few."""

    def __init__(self, pool: PoolIndex, plan: MatrixPlan,
                 skipped: dict[str, list[str]] | None = None,
                 legacy_counts: bool = False) -> None:
        self.pool, self.plan, self.legacy_counts = pool, plan, legacy_counts
        # the whole plan's (group, cell)s, not a shard's: the weights must match the single run
        self.cells = cells = plan.cells()
        keys, n = np.unique(np.stack([plan.group_of.astype(np.int64), cells], axis=1),
                            axis=0, return_counts=True)
        matrices_of = {(g, c): k for (g, c), k in zip(keys.tolist(), n.tolist())}
        samplers: dict = {}
        self.loose: dict = {}  # (group, cell) -> the sampler over all the cell's crops
        self.reasons: dict = {}  # (group, cell) -> why the banned-free one could not be made
        for key in sorted(matrices_of):
            group = plan.groups[key[0]]
            try:
                samplers[key] = make_sampler(pool, plan.design, group, key[1])
            except VpromError as e:
                if ban_mask(pool, group) is None:
                    raise
                # the manifest records why; it names the pool file, never its private folder
                self.reasons[key] = str(e).replace(pool.source, os.path.basename(pool.source))
                samplers[key] = None
                self.loose[key] = make_sampler(pool, plan.design, group, key[1], bans=False)
        made = {k: v for k, v in {**samplers, **self.loose}.items() if isinstance(v, Sampler)}
        self.weights = fill_weights(made, matrices_of)
        self.mixing = mixing_plans(made, matrices_of)
        self.tables = {} if legacy_counts else count_tables(made, matrices_of)
        for sampler in [*samplers.values(), *self.loose.values()]:
            self._weighted(sampler)
        for s in samplers.values():
            if s is not None and s.skipped and skipped is not None:
                key = f"{s.group.element_type.value} {s.group.relation.value} {s.group.name}"
                skipped[key] = sorted(set(skipped.get(key, [])) | set(s.skipped))
        self.samplers = samplers

    def _weighted(self, sampler):
        if not isinstance(sampler, Sampler):
            return sampler
        key = (self.plan.groups.index(sampler.group), sampler.cell)
        sampler.fill_weight = self.weights.get(sampler.group.element_type, {})
        sampler.mixing = self.mixing.get(key, {})
        if sampler.group.element_type is ElementType.COUNT and not self.legacy_counts:
            sampler.counts, sampler.tries = self.tables.get(key), 2 * MAX_TRIES
            if sampler.counts is None:
                raise VpromError(f"{sampler.label}: fewer than 8 counts have crops, so no "
                                 "candidate set can be drawn — mine more images")
        return sampler

    def draw(self, i: int) -> tuple[str, list[int], tuple[str, str, str] | None]:
        """(super-attribute, 16 crop rows, None or a loosened draw's (group, cell, why))."""
        pool, plan = self.pool, self.plan
        g, cell = int(plan.group_of[i]), int(self.cells[i])
        group = plan.groups[g]
        key = (g, cell)
        sampler = self.samplers[key]
        answer = int(plan.answer[i])
        why: Counter = Counter()
        draws = Draws(plan.seed, i)
        got = None if sampler is None else sampler.sample(draws, answer, why)
        note = None
        if got is None and ban_mask(pool, group) is not None:
            if key not in self.loose:
                self.loose[key] = self._weighted(make_sampler(pool, plan.design, group, cell,
                                                              bans=False))
                self.reasons.setdefault(key, "a matrix found no sound candidates among them "
                                             f"in {MAX_TRIES} tries")
            sampler = self.loose[key]
            got = sampler.sample(draws, answer, why)
            if got is not None:
                note = (f"{group.element_type.value} {group.relation.value} {group.name}",
                        CELL_NAMES[cell], self.reasons[key])
        if got is None:
            steps = "; ".join(f"{reason}: {n}" for reason, n in why.most_common())
            raise VpromError(f"matrix {i}: no sound {sampler.label} after {sampler.tries} tries "
                             f"({steps}); the pool is too thin there — {THIN_POOL_ADVICE}")
        return got[0], got[1], note
