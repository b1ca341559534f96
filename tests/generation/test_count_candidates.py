"""Count candidates that say nothing about the answer through the values they leave out
(issue 27): the construction's tables, its rule laws, and the absent-value probe on real
generated count matrices, scored as `vprom verify` scores it."""

from __future__ import annotations

from collections import Counter

import h5py
import numpy as np
import pytest
from scipy.stats import chi2

from tests.generation.direct import generate_matrices
from vprom.generation import sampler as sampler_mod
from vprom.generation.count_candidates import answer_law, count_tables
from vprom.generation.plan import MatrixPlan, make_plan
from vprom.generation.labels import LabelVocabulary
from vprom.generation.pool_index import PoolIndex
from vprom.generation.verify.set_probes import absent_value_probe
from vprom.domain import COUNTS, N_CANDIDATES, N_CONTEXT, Relation
from vprom.generation.relations import RULES
from vprom.generation.draws import Draws
from vprom.splits import load_rules

ODD, LOW = (1, 3, 5, 7, 9), (1, 2, 3, 4, 5)


def balance(tables: dict, samplers: dict, matrices_of: dict) -> dict:
    """(relation, neutral side) -> {candidate set: the matrices answering each count} under
    the tables."""
    mixes: dict = {}
    for key, (entries, cumulative) in tables.items():
        mix = mixes.setdefault((samplers[key].group.relation, key[1] // 2), {})
        for (a, _, st), p in zip(entries, np.diff([0.0, *cumulative])):
            mix.setdefault(st, np.zeros(max(COUNTS) + 1))[a] += matrices_of[key] * p
    return mixes


def residual(mixes: dict) -> float:
    """The worst miss: max over (relation, neutral side, S, a in S) of |P(a | S) - 1/8|."""
    worst = 0.0
    for mix in mixes.values():
        for st, m in mix.items():
            share = m[[v for v in COUNTS if (st >> v) & 1]] / m.sum()
            worst = max(worst, float(np.abs(share - 1 / N_CANDIDATES).max()))
    return worst


@pytest.mark.parametrize("relation", list(Relation))
@pytest.mark.parametrize("allowed", [COUNTS, ODD, LOW])
def test_answer_law_is_the_rules_own(relation, allowed):
    """The tables are solved for the laws `answer_law` states: they must be the rules'."""
    law = answer_law(relation, allowed)
    n = 8_000
    seen = Counter()
    for i in range(n):
        ids = RULES[relation].sample(Draws(5, i), list(allowed))
        forced = 1 << ids[N_CONTEXT - 1] if relation is Relation.OR else 0
        if relation is Relation.OR and ids[N_CONTEXT - 1] == ids[N_CONTEXT]:
            forced = 1 << ids[N_CONTEXT - 2]  # the row's other element is the partner
        seen[(ids[N_CONTEXT], forced)] += 1
    assert set(seen) == set(law)
    for key, p in law.items():  # 4 standard errors: a wrong law is off by far more
        assert abs(seen[key] / n - p) < 4 * (p * (1 - p) / n) ** 0.5 + 1e-3, key


@pytest.fixture(scope="module")
def count_setup(crops):
    design = load_rules().design
    plan = make_plan(0.12, 0, design)
    pool = PoolIndex(crops, 0, design)
    return plan, pool


def count_keys(plan) -> dict:
    """(group, cell) -> matrices, for the plan's count groups."""
    held = np.array([g.held_side for g in plan.groups])
    cell = plan.neutral_side.astype(int) * 2 + held[plan.group_of.astype(int)]
    keys, n = np.unique(np.stack([plan.group_of.astype(int), cell]), axis=1, return_counts=True)
    return {(int(g), int(c)): int(k) for (g, c), k in zip(keys.T.tolist(), n.tolist())
            if plan.groups[g].element_type.value == "count"}


def test_tables_make_every_candidate_the_answer_one_time_in_eight(count_setup):
    plan, pool = count_setup
    matrices_of = count_keys(plan)
    samplers = {k: sampler_mod.make_sampler(pool, plan.design, plan.groups[k[0]], k[1])
                for k in matrices_of}
    tables = count_tables(samplers, matrices_of)
    assert set(tables) == set(matrices_of)
    assert residual(balance(tables, samplers, matrices_of)) < 1e-4
    for key, (entries, _) in tables.items():  # each set holds its answer, avoids the forced
        allowed = samplers[key].options[0].context
        assert all(a in allowed and (s >> a) & 1 and not s & forced
                   and s.bit_count() == N_CANDIDATES for a, forced, s in entries)


def test_a_side_whose_samplers_miss_a_count_is_balanced_by_the_others(count_setup):
    """Where most matrices of a side come from samplers that never answer 8 but the sets must
    show it, moving the full-range sampler's answer law balances the side."""
    plan, pool = count_setup
    matrices_of = count_keys(plan)
    samplers = {k: sampler_mod.make_sampler(pool, plan.design, plan.groups[k[0]], k[1])
                for k in matrices_of}
    full = {k: s for k, s in samplers.items() if len(s.options[0].context) == len(COUNTS)}
    narrow = {k: s for k, s in samplers.items() if 8 not in s.options[0].context}
    assert full and len(narrow) >= 2
    key = next(iter(full))
    side = [key] + [k for k in narrow if k[1] // 2 == key[1] // 2
                    and samplers[k].group.relation is samplers[key].group.relation]
    mix = {k: samplers[k] for k in side}
    weights = {k: matrices_of[k] * (1 if k == key else 6) for k in side}
    assert len(side) >= 3
    tables = count_tables(mix, weights)
    assert residual(balance(tables, mix, weights)) < 1e-4
    law = answer_law(samplers[key].group.relation, COUNTS)
    drawn = np.zeros(max(COUNTS) + 1)
    entries, cumulative = tables[key]
    for (a, _, _), p in zip(entries, np.diff([0.0, *cumulative])):
        drawn[a] += p
    rule = np.zeros(max(COUNTS) + 1)
    for (a, _), p in law.items():
        rule[a] += p
    assert drawn[8] > 1.5 * rule[8]


@pytest.fixture(scope="module")
def demo_pool(tmp_path_factory):
    """The pools of the demo's synthetic corpus (2,000 images): some of its cells hold only a
    few crops of a count, so that matrices there often fail and retry."""
    from vprom.generation.generate import POOLS, read_crop_table
    from vprom.mining.pools import mine
    from vprom.mining.synth import write_corpus

    root = tmp_path_factory.mktemp("demo_pool")
    write_corpus(root / "vg", images=2000, seed=0)
    mine(root / "vg", root / "pools.h5", workers=1)
    with h5py.File(root / "pools.h5") as h5:
        vocabulary = LabelVocabulary.read(h5.get("vocabulary"), "pools.h5")
    return read_crop_table(root / "pools.h5", POOLS), vocabulary


def test_generated_count_matrices_answer_each_candidate_one_time_in_eight(demo_pool):
    """The matrices drawn, not only the tables: retries must not thin any answer. Per
    (relation, neutral side) of the demo's 40,000 count matrices, each count is the answer
    in 1/8 of the matrices showing it (chi-square over the counts: redrawing the answer at
    every failure gives p < 1e-5 on And and Or of the test side)."""
    crops, vocabulary = demo_pool
    design = load_rules().design
    plan = make_plan(0.4, 0, design)
    pool = PoolIndex(crops, 0, design, vocabulary=vocabulary)
    idx = [i for i in range(len(plan))
           if plan.groups[plan.group_of[i]].element_type.value == "count"]
    answered, shown = Counter(), Counter()
    for m in generate_matrices(pool, plan, idx):
        where = (m.relation, int(plan.neutral_side[m.id]))
        values = [int(e) for e in m.elements[N_CONTEXT:]]
        answered[where + (values[m.answer],)] += 1
        for v in values:
            shown[where + (v,)] += 1
    assert len({k[:2] for k in shown}) == 8
    for where in {k[:2] for k in shown}:
        obs = np.array([answered[where + (v,)] for v in COUNTS if shown[where + (v,)]])
        exp = np.array([shown[where + (v,)] / N_CANDIDATES for v in COUNTS
                        if shown[where + (v,)]])
        assert chi2.sf(((obs - exp) ** 2 / exp).sum(), len(obs) - 1) > 1e-4, (where, obs, exp)


def _progressions(plan, pool, legacy: bool):
    """Every count x progression matrix of the plan: (elements, answers, neutral side)."""
    idx = [i for i in range(len(plan))
           if plan.groups[plan.group_of[i]].element_type.value == "count"
           and plan.groups[plan.group_of[i]].relation is Relation.PROGRESSION]
    out = generate_matrices(pool, plan, idx, legacy_counts=legacy)
    elements = np.array([m.elements[N_CONTEXT:] for m in out])
    answers = np.array([m.answer for m in out], dtype=np.int64)
    side = plan.neutral_side[[m.id for m in out]]
    return elements, answers, side


@pytest.mark.slow
def test_absent_value_probe_was_above_chance_and_is_at_chance_now(count_setup):
    plan, pool = count_setup
    verdicts = {}
    for legacy in (True, False):
        elements, answers, side = _progressions(plan, pool, legacy)
        n = len(answers)
        check = absent_value_probe(elements, answers, np.flatnonzero(side == 0),
                                   np.flatnonzero(side == 1), np.full(n, "count"),
                                   np.full(n, "progression"))
        verdicts[legacy] = check
        # the construction never leaves the answer out, and shows 8 distinct counts
        assert all(len(set(row)) == N_CANDIDATES for row in elements.tolist())
    old, new = verdicts[True], verdicts[False]
    assert old.status == "fail", old.summary
    assert old.figures["count x progression"]["ci95"][0] > 0.145
    assert new.status == "pass", new.summary
    assert new.figures["count x progression"]["ci95"][0] <= 0.145


def _count_progressions_only(scale: float):
    """The plan of `scale` cut down to its count x progression matrices (a small fixture:
    a data set of thousands of the matrices that leaked, without the rest of Table 1)."""
    def plan(_, seed, design):
        full = make_plan(scale, seed, design)
        keep = np.array([k for k, g in enumerate(full.group_of.tolist())
                         if full.groups[g].element_type.value == "count"
                         and full.groups[g].relation is Relation.PROGRESSION])
        group_of = full.group_of[keep]
        return MatrixPlan(full.scale, seed, design, full.groups, group_of,
                          full.neutral_side[keep], full.answer[keep])
    return plan


def legacy_and_current_reports(pools_file, tmp_path, monkeypatch, scale: float,
                               **options) -> dict:
    """{legacy: `verify(**options)`'s report} on the count x progression matrices of `scale`,
    generated with and without the legacy count candidates."""
    from vprom.generation import generate as dataset_mod
    from vprom.generation.verify import verify

    monkeypatch.setattr(dataset_mod, "make_plan", _count_progressions_only(scale))
    rules = load_rules()
    reports = {}
    for legacy in (True, False):
        out = tmp_path / f"legacy{int(legacy)}.h5"
        dataset_mod.generate(pools_file, out, rules, scale=0.05, seed=0, legacy_counts=legacy)
        reports[legacy] = verify(out, rules, **options)
    return reports


@pytest.mark.slow
def test_verify_fails_on_legacy_count_candidates_and_passes_on_new(pools_file, tmp_path,
                                                                    monkeypatch):
    """End to end: `generate` (legacy or not) then `verify`, on 6,250 count x progression
    matrices."""
    reports = legacy_and_current_reports(pools_file, tmp_path, monkeypatch, 0.25)
    old = {c.name: c for c in reports[True].checks}
    new = {c.name: c for c in reports[False].checks}
    assert not reports[True].ok
    assert old["bias:absent-values"].status == "fail", old["bias:absent-values"].summary
    assert old["bias:absent-values"].figures["count x progression"]["failed"]
    assert reports[False].ok, reports[False].failures()
    for name in ("bias:absent-values", "bias:probe-sets"):
        assert new[name].status == "pass", new[name].summary


def test_count_matrices_show_no_held_out_category_on_either_side():
    """Count crops name objects ("five dogs"). Only the test side of the count splits answers
    even or 6-10 counts, so a held-out category shown there alone would tell the answer's
    range: no count matrix, on either side, shows a category banned for its relation."""
    from vprom.generation.generate import generate_dataset
    from vprom.splits.rules import object_third

    from tests.generation.conftest import OBJECTS, VOCABULARY, tiny_crops

    crops = tiny_crops()
    rng = np.random.default_rng(0)
    for k in np.flatnonzero(crops.element_type == "count"):
        if rng.random() < 0.5:
            crops.labels[k] += "|" + OBJECTS[int(rng.integers(len(OBJECTS)))]
    rules = load_rules()
    data = generate_dataset(crops, rules, scale=0.004, seed=1, vocabulary=VOCABULARY)
    m = data.matrices
    row_of = {c: r for r, c in enumerate(data.crops.crop_id.tolist())}
    by_side = Counter()
    test = set(m.splits["interpolation"]["test"].tolist()) | set(
        m.splits["extrapolation"]["test"].tolist())
    for i in np.flatnonzero(m.element_type == "count"):
        relation = str(m.relation[i])
        thirds = set(rules.design.train_side_ban(relation).object_thirds.get(relation, ()))
        shown = {c for p in m.panels[i] for c in data.crops.labels[row_of[int(p)]].split("|")
                 if c in OBJECTS}
        assert not {object_third(c) for c in shown} & thirds, (i, relation, shown)
        by_side[int(m.id[i]) in test] += len(shown)
    assert by_side[True] > 100 and by_side[False] > 100  # categories shown on both sides
    assert not [g for g in data.counts["held_out_bans_loosened"] if g.startswith("count ")]
