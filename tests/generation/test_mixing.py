"""`generation.candidate_blocks`: mixed candidate profiles whose super-attributes do not say which block
is the answer's. The plans' expected flows are balanced: in every set of super-attributes
shown, each member is the answer's block as often as the others."""

from __future__ import annotations

import numpy as np

from tests.generation.conftest import SMALL_SCALE, tiny_crops
from vprom.generation.candidate_blocks import TOLERANCE, _Row, _world, balance
from vprom.generation.plan import make_plan
from vprom.generation.pool_index import PoolIndex
from vprom.generation.sampler import PlanSampler
from vprom.domain import ElementType
from vprom.splits import load_rules


def _flows(part, sets, mass):
    """Σ over rows of A's matrices per shown set: {frozenset: {A: matrices}}."""
    out: dict = {}
    for r, row_sets, w in zip(part, sets, mass):
        for s, q in row_sets:
            by = out.setdefault(frozenset(s + (r.sa,)), {})
            by[r.sa] = by.get(r.sa, 0.0) + w * q
    return out


def _assert_balanced(part, sets, mass, placed):
    flows = _flows(part, sets, mass)
    total = sum(sum(by.values()) for by in flows.values())
    for t, by in flows.items():
        values = [by.get(a, 0.0) for a in t]
        assert max(values) - min(values) <= 2 * TOLERANCE * total, (t, by)
    for r, row_sets, w in zip(part, sets, mass):
        if r.sa in placed:
            assert abs(sum(q for _, q in row_sets) - 1.0) < 1e-9 and w > 0, r


def test_pairs_balance_across_samplers_that_differ_in_who_is_a_matrix():
    """A held-out pair's test side is all one super-attribute: B's matrices are only in
    sampler 2, and A and C, sampler 1's matrices, take fillers there; C could fill all 8, so
    some of its matrices step down to host A, which outnumbers B."""
    part = [_Row((1, 0), "A", 100.0, 4, {4: ["B", "C"]}),
            _Row((2, 0), "B", 30.0, 4, {4: ["A", "C"]}),
            _Row((1, 0), "C", 400.0, 8, {4: ["A", "B"]})]
    down, sets = _world(part, 4, [0.0, 0.0, 0.0])
    assert down[0] == down[1] == 0.0 and 0.0 < down[2] < 1.0
    mass = np.array([100.0, 30.0, 400.0 * down[2]])
    _assert_balanced(part, sets, mass, {"A", "B", "C"})


def test_a_super_attribute_with_blocks_of_two_is_hosted_by_others_stepping_down():
    part = [_Row((1, 0), "D", 10.0, 2, {2: ["A", "B", "C"]}),
            _Row((1, 0), "A", 60.0, 4, {2: ["B", "C", "D"], 4: ["B", "C"]}),
            _Row((2, 0), "B", 40.0, 4, {2: ["A", "C", "D"], 4: ["A", "C"]}),
            _Row((2, 0), "C", 50.0, 4, {2: ["A", "B", "D"], 4: ["A", "B"]})]
    down, sets = _world(part, 2, [0.0] * 4)
    # one set of four shown: each member the answer's block 10 times
    assert sets[0] == [(("A", "B", "C"), 1.0)]
    assert np.allclose([60 * down[1], 40 * down[2], 50 * down[3]], 10.0, rtol=0.02)
    _assert_balanced(part, sets, np.array([10.0, 60 * down[1], 40 * down[2], 50 * down[3]]),
                     {"D", "A", "B", "C"})


def test_without_a_partner_a_row_is_left_unbalanced_and_said_so():
    part = [_Row((1, 0), "A", 10.0, 4, {4: ["B"]})]  # B has no 4 + 4 matrices to host A
    sets, left, _ = balance(part, np.array([10.0]), 4)
    assert sets == [[]] and left > 0.4


def test_the_plan_sampler_gives_every_attribute_sampler_its_plans():
    rules = load_rules()
    plan = make_plan(SMALL_SCALE, 3, rules.design)
    sampler = PlanSampler(PoolIndex(tiny_crops(), 3, rules.design, source="pools"), plan, {})
    planned = [s for s in sampler.samplers.values()
               if s is not None and s.group.element_type is ElementType.OBJECT_ATTRIBUTE]
    assert planned and all(s.mixing for s in planned)
    for s in planned:
        for option in s.options:
            assert option.super_attribute in s.mixing
