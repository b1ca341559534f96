"""Soundness v2: implied labels, the known-value rule, exchangeable human candidates, strict
held-out splits, the per-type balance, and the perception-only ceiling."""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from vprom.generation.verify.ceiling import perception_ceiling, perception_hits
from vprom.generation.generate import generate_dataset
from vprom.generation.verify.loaded import Data
from vprom.generation.labels import LabelVocabulary
from vprom.generation.plan import make_plan
from vprom.generation.pool_index import PoolIndex
from vprom.generation.verify.split_checks import check_held_out
from vprom.tables import crop_rows
from vprom.splits import load_rules
from tests.generation.conftest import HUMAN_ATTRIBUTES, VOCABULARY, tiny_crops
from vprom.errors import VpromError
from vprom.domain import Matrix, Relation
from vprom.generation.solver import check_matrix
from tests.generation.direct import valid_candidates

RULES = load_rules()


def in_memory(dataset) -> Data:
    """`generate_dataset`'s result as `vprom verify` reads the file written from it."""
    m = dataset.matrices
    return Data(Path("<memory>"), dataset.crops, m, crop_rows(dataset.crops.crop_id, m.panels),
                {"seed": (dataset.counts or {}).get("seed")}, dataset.universes,
                dataset.super_attributes, dataset.vocabulary)


@pytest.fixture(scope="module")
def larger(crops):
    """~2,350 matrices of the tiny pools: enough for the balance figures."""
    return generate_dataset(crops, RULES, scale=0.01, seed=5, vocabulary=VOCABULARY)


def _matrices(data, etype):
    parts = data.matrices.parts_of()
    return [data.matrices.row(i, parts) for i in range(len(data.matrices))
            if data.matrices.element_type[i] == etype]


# ---------------------------------------------------------------- implied labels
def test_names_imply_labels_and_only_for_people():
    vocab = LabelVocabulary(frozenset(), {"object_attribute": {"red": "color"},
                                          "human_attribute": {"male": "gender", "adult": "age"}},
                            {"man": ("male", "adult")})
    assert vocab.implied_of("human_attribute", {"man", "curly"}) == {"male", "adult"}
    assert vocab.implied_of("human_attribute", {"man", "male"}) == {"adult"}  # not twice
    assert vocab.implied_of("object_attribute", {"man", "red"}) == frozenset()


def test_an_unlabelled_man_completes_a_male_matrix():
    # And over gender: rows of males, females, then two males; a distractor named "man"
    # carries no "male" label, but the name implies it: it is a second answer
    male, female = frozenset({"male", "man"}), frozenset({"female", "woman"})
    groups = {"gender": {"male", "female"}, "hair style": {"curly", "bald"}}
    context = [male] * 3 + [female] * 3 + [male] * 2
    candidates = [male] + [frozenset({"curly", "woman"})] * 6 + [frozenset({"bald", "man"})]
    vocab = LabelVocabulary(frozenset(), {"human_attribute": {
        "male": "gender", "female": "gender", "curly": "hair style", "bald": "hair style"}},
        {"man": ("male",), "woman": ("female",)})
    labels = context + candidates
    universe = frozenset({"male", "female", "curly", "bald"})
    assert valid_candidates(Relation.AND, "human_attribute", labels, universe, groups) == [0]
    implied = [s | vocab.implied_of("human_attribute", s) for s in labels]
    assert valid_candidates(Relation.AND, "human_attribute", implied, universe, groups) == [0, 7]


def test_the_solver_reads_a_matrix_in_one_super_attribute():
    # row 1 shares a colour, row 2 a gender, row 3 a hair style: no V-PROM reading, so the
    # curly distractor completes nothing (v1 read each row in its own super-attribute)
    red, male, curly = frozenset({"red"}), frozenset({"male"}), frozenset({"curly"})
    a = frozenset({"blue", "curly"})
    context = [red | {"x1"}, red | {"x2"}, red | {"x3"}, male | {"y1"}, male | {"y2"},
               male | {"y3"}, a, a | {"z"}]
    labels = [s | {"blue"} if k < 0 else s for k, s in enumerate(context)]
    candidates = [frozenset({"blue"})] + [frozenset({f"o{k}"}) for k in range(6)] + [curly]
    groups = {"color": {"red", "blue"}, "gender": {"male"}, "hair style": {"curly"},
              "other": {f"{c}{k}" for c in "xyoz" for k in range(1, 7)} | {"z"}}
    universe = frozenset().union(*labels, *candidates)
    assert valid_candidates(Relation.AND, "human_attribute", labels + candidates,
                            universe) == [0, 7]  # mixed reading: both
    assert valid_candidates(Relation.AND, "human_attribute", labels + candidates, universe,
                            groups) == []  # no single super-attribute reads rows 1-3


def test_generated_matrices_are_sound_under_implied_labels(small_dataset):
    data = small_dataset
    index = {int(c): i for i, c in enumerate(data.crops.crop_id)}
    full = data.vocabulary.label_sets(data.crops)
    implied_panels = 0
    for m in _matrices(data, "human_attribute"):
        rows = [index[p] for p in m.panels]
        implied_panels += sum(len(full[r]) > len(data.crops.label_sets()[r]) for r in rows)
        assert check_matrix(m, [full[r] for r in rows],
                            frozenset(data.universes[m.element_type.value]),
                            data.super_attributes[m.element_type.value]) is None, m.id
    assert implied_panels > 100


# ---------------------------------------------------------------- the known-value rule
def test_every_human_distractor_carries_a_known_different_value(larger):
    data = larger
    index = {int(c): i for i, c in enumerate(data.crops.crop_id)}
    full = data.vocabulary.label_sets(data.crops)
    for m in _matrices(data, "human_attribute"):
        values = set(HUMAN_ATTRIBUTES[m.super_attribute])
        answer = m.elements[8 + m.answer]
        for k, p in enumerate(m.candidates):
            labels = full[index[p]]
            assert labels & values, (m.id, k, labels)  # a known value of the matrix's s
            if k != m.answer:
                assert answer not in labels, (m.id, k)  # and not the answer's


def test_human_candidates_are_exchangeable(larger):
    # the answer is a uniform choice among candidates drawn before it: every element is
    # right about once in 8 of its candidacies, and carries no more labels as the answer
    data = larger
    index = {int(c): i for i, c in enumerate(data.crops.crop_id)}
    explicit = data.crops.label_sets()
    shown, right = Counter(), Counter()
    n_labels = defaultdict(list)
    matrices = _matrices(data, "human_attribute")
    for m in matrices:
        for k, (e, p) in enumerate(zip(m.elements[8:], m.candidates)):
            shown[e] += 1
            right[e] += k == m.answer
            n_labels[k == m.answer].append(len(explicit[index[p]]))
    assert len(matrices) > 400
    for e, n in shown.items():
        if n >= 200:  # 4 standard deviations of a binomial(n, 1/8)
            assert abs(right[e] / n - 1 / 8) < 4 * (7 / 64 / n) ** 0.5, (e, right[e], n)
    assert abs(np.mean(n_labels[True]) - np.mean(n_labels[False])) < 0.12


def test_a_held_out_super_attribute_too_thin_for_its_cell_is_listed(tmp_path):
    # with one action left, no candidate set can put an action answer beside 7 others (they
    # need an action of their own outside it): the held-out groups draw other human
    # matrices on their test-side images, and the manifest lists action as too small
    thin = tiny_crops(drop=("jumping", "skiing", "surfing", "skateboarding", "crouching",
                            "running", "walking", "sitting"))
    data = generate_dataset(thin, RULES, scale=0.0015, seed=0, vocabulary=VOCABULARY)
    too_small = data.counts["super_attributes_too_small"]
    assert too_small["human_attribute or held_sa"] == ["action"]
    human = data.matrices.element_type == "human_attribute"
    assert human.sum() == round(45_000 * 0.0015)
    assert "action" not in set(data.matrices.super_attribute[human].tolist())


def test_a_human_group_that_cannot_fill_8_candidates_is_named():
    from vprom.generation.sampler import make_sampler

    gone = [a for sa in ("hair style", "clothing style", "action", "age")
            for a in HUMAN_ATTRIBUTES[sa]] + ["pink", "purple", "orange", "gray", "black"]
    pool = PoolIndex(tiny_crops(drop=tuple(gone)), 0, RULES.design, vocabulary=VOCABULARY)
    plan = make_plan(0.0015, 0, RULES.design)
    group = next(g for g in plan.groups if g.element_type.value == "human_attribute"
                 and g.relation is Relation.AND and g.name == "train")
    with pytest.raises(VpromError, match=r"human_attribute pool.*neutral-train/held-out-train"
                                         r".*and matrices of group 'train'.*clothing color: "
                                         r"5 elements with enough crops, \d+ values, room for "
                                         r"\d candidates;.*gender: .*room for 1 candidates "
                                         r"\(8 candidates needed\)"):
        make_sampler(pool, RULES.design, group, 0)


# ---------------------------------------------------------------- strict held-out splits
def test_no_training_matrix_shows_a_held_out_label_anywhere(larger):
    view = in_memory(larger)
    check = check_held_out(view, RULES.design.train_bans)
    assert check.status == "pass", check.problems
    assert set(check.figures) == {"held_out_attributes", "held_out_objects",
                                  "held_out_relation_object_pairs"}
    for figures in check.figures.values():
        assert figures["violating_matrices"] == 0 and figures["train_val_matrices"] > 1000
        assert figures["held_out_labels"] > 0


def test_the_pools_do_carry_held_out_labels_the_train_side_avoids(crops):
    design = RULES.design
    pool = PoolIndex(crops, 5, design, vocabulary=VOCABULARY)
    banned = np.array(pool.banned)
    # attribute crops name objects of every third, and people carry actions: many crops are
    # banned from some relation's training matrices, and none from all of them by accident
    assert (banned > 0).mean() > 0.3
    assert (banned == 0).mean() > 0.2


def test_no_attribute_matrix_shows_an_object_category_banned_for_its_relation(larger):
    # on either side of the held-out partition: a banned category in the test-side groups
    # only would tell a context-blind model the role of the block it comes with
    from vprom.splits.rules import object_third

    view = in_memory(larger)
    m = view.matrices
    labels = view.crops.labels.tolist()
    categories = view.vocabulary.categories
    sides, seen = Counter(), 0
    for i in np.flatnonzero(np.isin(m.element_type, ["object_attribute", "human_attribute"])):
        relation = str(m.relation[i])
        thirds = RULES.design.train_side_ban(relation).object_thirds.get(relation, ())
        assert thirds
        shown = {c for r in view.rows[i] for c in labels[r].split("|") if c in categories}
        seen += len(shown)
        assert not {object_third(c) for c in shown} & set(thirds), (i, relation, shown)
        sides[int(m.id[i]) in set(m.splits["held_out_attributes"]["test"].tolist())] += 1
    assert seen > 1000 and sides[True] > 50 and sides[False] > 50  # both sides looked at
    assert not larger.counts["held_out_bans_loosened"]


def test_the_object_splits_test_matrices_still_show_their_held_out_third(larger):
    from vprom.splits.rules import object_third

    view = in_memory(larger)
    m = view.matrices
    test = set(m.splits["held_out_objects"]["test"].tolist())
    shown = [object_third(str(view.crops.element[r])) for i in range(len(m))
             if int(m.id[i]) in test for r in view.rows[i]]
    assert shown and set(shown) == {0}


def test_a_violation_is_counted_per_split(larger):
    from vprom.splits.rules import object_third

    crops = larger.crops.take(np.arange(len(larger.crops)))  # a copy to damage
    m = larger.matrices
    train = set(m.splits["held_out_objects"]["train"].tolist())
    k = next(i for i, mid in enumerate(m.id) if int(mid) in train
             and m.element_type[i] == "object_attribute")
    crop = in_memory(larger).rows[k, 3]
    held = next(c for c in sorted(larger.vocabulary.categories) if object_third(c) == 0)
    crops.labels[crop] += "|" + held  # a held-out category now named by a panel
    check = check_held_out(in_memory(replace(larger, crops=crops)), RULES.design.train_bans)
    assert check.status == "fail"
    assert check.figures["held_out_objects"]["violating_matrices"] >= 1
    assert any(p.startswith(f"matrix {int(m.id[k])}: held_out_objects") for p in check.problems)


# ---------------------------------------------------------------- perception-only ceiling
def test_the_ceiling_rule_by_hand():
    # And: row 3 shows c twice; Or: the single candidate in row 3; neither: the least shown
    rows = [["a", "a", "a", "b", "b", "b", "c", "c", "x", "c", "a", "b", "y", "z", "w", "v"],
            ["a", "b", "a", "c", "d", "d", "e", "f", "x", "y", "e", "a", "b", "c", "d", "z"],
            ["1", "2", "3", "2", "3", "4", "3", "4", "6", "5", "4", "3", "7", "8", "9", "1"]]
    hits = perception_hits(np.array(rows, dtype=object), np.array([1, 2, 1]))
    # row 3 (progression 3 4 5): 4 is the single candidate in row 3, not the answer 5
    assert hits.tolist() == [1.0, 1.0, 0.0]


def _ceiling_by_hand(row, answer):
    """The ceiling's rule for one matrix, as the module docstring states it."""
    context, candidates = row[:8], row[8:]
    picked = [k for k in range(8) if candidates[k] in context[6:8]]
    if len(picked) != 1:
        counts = [context.count(c) for c in candidates]
        picked = [k for k, n in enumerate(counts) if n == 2]
        if len(picked) != 1:
            picked = [k for k, n in enumerate(counts) if n == min(counts)]
    return (answer in picked) / len(picked)


def test_the_ceiling_on_all_matrices_at_once_is_the_rule_matrix_by_matrix():
    rng = np.random.default_rng(0)
    elements = rng.choice(list("abcdef"), size=(400, 16)).astype(object)
    answers = rng.integers(-1, 9, size=400)  # out of 0..7: never picked
    want = [_ceiling_by_hand(r, a) for r, a in zip(elements.tolist(), answers.tolist())]
    assert perception_hits(elements, answers).tolist() == want
    assert perception_hits(elements[:0], answers[:0]).tolist() == []


def test_the_ceiling_is_reported_per_type_and_relation(small_dataset):
    figures = perception_ceiling(small_dataset.matrices)
    assert 0.5 < figures["all"] <= 1.0
    assert set(figures["by_element_type"]["count"]) == {"all", "and", "or", "union",
                                                         "progression"}


def test_dataset_records_the_label_vocabulary(tmp_path, pools_file):
    import h5py

    from vprom.generation.generate import generate

    generate(pools_file, tmp_path / "d.h5", RULES, scale=0.0015, seed=1)
    with h5py.File(tmp_path / "d.h5") as h5:
        back = LabelVocabulary.read(h5["vocab/labels"], "d.h5")
    assert back.implied == {k: tuple(v) for k, v in VOCABULARY.implied.items()}
    assert back.tables["human_attribute"]["curly"] == "hair style"


def test_a_plan_index_is_the_same_matrix_in_any_shard(crops):
    plan = make_plan(0.0015, 2, RULES.design)
    assert len(plan) > 0
    one = generate_dataset(crops, RULES, scale=0.0015, seed=2, vocabulary=VOCABULARY)
    odd = generate_dataset(crops, RULES, scale=0.0015, seed=2, shard=(1, 2),
                           vocabulary=VOCABULARY)
    human = one.matrices.element_type == "human_attribute"
    assert human.any()
    assert (odd.matrices.panels == one.matrices.panels[1::2]).all()


def test_matrix_records_of_human_type_have_their_answer_block_super_attribute(small_dataset):
    data = small_dataset
    sa_of = dict(zip(data.crops.crop_id.tolist(), data.crops.super_attribute.tolist()))
    for m in _matrices(data, "human_attribute"):
        assert isinstance(m, Matrix)
        assert sa_of[m.candidates[m.answer]] == m.super_attribute
        assert all(sa_of[p] == m.super_attribute for p in m.context)


def test_a_train_side_cell_too_thin_to_avoid_held_out_labels_is_loosened_and_said():
    # most count crops name "thing06" (an object of the held-out third 0): train-side count
    # matrices cannot avoid it, so they draw from all crops, say so, and the split rules
    # keep those matrices out of held_out_objects' training
    crops = tiny_crops()
    count = np.flatnonzero(crops.element_type == "count")
    for k in count[np.arange(len(count)) % 10 != 0]:
        crops.labels[k] += "|thing06"
    data = generate_dataset(crops, RULES, scale=0.0015, seed=0, vocabulary=VOCABULARY)
    loosened = data.counts["held_out_bans_loosened"]
    assert any(key.startswith("count ") for key in loosened)
    assert all(v["matrices"] > 0 and v["why"] for v in loosened.values())
    check = check_held_out(in_memory(data), RULES.design.train_bans)
    assert check.status == "pass"  # excluded, not leaked
    trained = set(data.matrices.splits["held_out_objects"]["train"].tolist())
    shown = {int(m) for m, t in zip(data.matrices.id, data.matrices.element_type)
             if t == "count"}
    assert shown - trained  # some count matrices left held_out_objects' training
