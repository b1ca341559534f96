"""The relation rules and the solver: definitions, adversarial matrices, a brute-force oracle."""

from __future__ import annotations

import itertools
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vprom.domain import RELATIONS_OF, ElementType, Matrix, Relation
from vprom.generation.relations import RULES
from vprom.generation.draws import Draws
from vprom.generation.solver import Universe, check_matrix, completion_mask
from tests.generation.direct import valid_candidates

OA = ElementType.OBJECT_ATTRIBUTE


def sets(*panels: str) -> list[frozenset[str]]:
    """'red' -> {red}; 'red+wooden' -> {red, wooden} (several labels on one source)."""
    return [frozenset(p.split("+")) for p in panels]


# ---------------------------------------------------------------- definitions

@pytest.mark.parametrize("relation, rows, ok", [
    ("and", [(1, 1, 1), (2, 2, 2), (3, 3, 3)], True),
    ("and", [(1, 1, 1), (2, 2, 2), (3, 3, 4)], False),
    ("or", [(1, 2, 1), (3, 4, 4), (5, 6, 5)], True),
    ("or", [(1, 2, 1), (3, 4, 4), (5, 6, 7)], False),
    ("or", [(1, 1, 1), (3, 4, 4), (5, 6, 5)], False),  # Or needs two different elements
    ("union", [(1, 2, 3), (2, 3, 1), (3, 1, 2)], True),
    ("union", [(1, 2, 3), (2, 3, 1), (3, 1, 1)], False),
    ("union", [(1, 2, 3), (2, 3, 4), (3, 1, 2)], False),
    ("progression", [(1, 2, 3), (4, 5, 6), (2, 3, 4)], True),
    ("progression", [(9, 7, 5), (6, 4, 2), (10, 8, 6)], True),
    ("progression", [(1, 2, 3), (2, 4, 6), (1, 2, 3)], False),  # steps differ
    ("progression", [(3, 3, 3), (3, 3, 3), (3, 3, 3)], False),  # step 0 is no progression
])
def test_rule_definitions(relation, rows, ok):
    assert holds(relation, rows) is ok


def holds(relation, rows) -> bool:
    """`Rule.holds` of one matrix given as three rows."""
    return bool(RULES[Relation(relation)].holds(np.array([rows]))[0])


@pytest.mark.parametrize("relation", list(Relation))
def test_holds_judges_many_matrices_as_the_definitions_do(relation):
    """`Rule.holds` on many matrices at once agrees with the definitions written out, on
    random rows over 4 ids (many hold by chance), the sampler's own rows, and each with one
    panel changed."""
    rule, rng = RULES[relation], np.random.default_rng(3)
    sampled = np.array([rule.sample(Draws(9, i), list(range(1, 8))) for i in range(300)])
    changed = sampled.copy()
    changed[np.arange(300), rng.integers(0, 9, 300)] = rng.integers(1, 8, 300)
    e = np.concatenate([rng.integers(0, 4, (3000, 9)), sampled, changed]).reshape(-1, 3, 3)
    expected = [DEFINITIONS[relation](m.tolist()) for m in e]
    assert rule.holds(e).tolist() == expected
    assert 300 <= sum(expected) < len(e)


DEFINITIONS = {
    Relation.AND: lambda rows: all(r[0] == r[1] == r[2] for r in rows),
    Relation.OR: lambda rows: all(r[0] != r[1] and r[2] in (r[0], r[1]) for r in rows),
    Relation.UNION: lambda rows: all(len(set(r)) == 3 for r in rows)
    and set(rows[0]) == set(rows[1]) == set(rows[2]),
    Relation.PROGRESSION: lambda rows: len({r[1] - r[0] for r in rows}) == 1
    and rows[0][1] != rows[0][0] and all(r[2] - r[1] == r[1] - r[0] for r in rows),
}


@pytest.mark.parametrize("relation", list(Relation))
def test_sampled_rows_obey_their_rule(relation):
    rule = RULES[relation]
    for i in range(200):
        ids = rule.sample(Draws(5, i), list(range(1, 11)))
        rows = [ids[0:3], ids[3:6], ids[6:9]]
        assert holds(relation, rows), rows


@pytest.mark.parametrize("relation", list(Relation))
def test_a_context_drawn_for_an_answer_obeys_its_rule_with_that_answer(relation):
    rule, elements = RULES[relation], list(range(1, 11))
    for i in range(200):
        draws = Draws(7, i)
        answer = draws.pick([3, 4, 5, 6, 7, 8] if relation is Relation.PROGRESSION else elements)
        others = [e for e in draws.shuffled(elements) if e != answer]
        partner = others[0]
        ids = rule.context(draws, answer, elements, iter(others[1:]), partner=partner)
        rows = [ids[0:3], ids[3:6], ids[6:8] + [answer]]
        assert holds(relation, rows), (relation, answer, rows)
        if relation is Relation.OR:
            assert set(rows[2][:2]) == {answer, partner}


def test_a_context_needs_the_other_elements_its_rows_show():
    draws = Draws(0, 0)
    assert RULES[Relation.AND].context(draws, 1, [1], iter(())) is None
    assert RULES[Relation.AND].context(draws, 1, [1, 2], iter([2])) == [2] * 6 + [1, 1]
    assert RULES[Relation.UNION].context(draws, 1, [1, 2], iter([2])) is None
    # within 1..3 a progression (1, 2, 3 or 3, 2, 1) ends on 1 or 3, never on 2
    assert RULES[Relation.PROGRESSION].context(draws, 2, [1, 2, 3], ()) is None


def test_or_balances_the_repeated_column():
    picks = [RULES[Relation.OR].sample(Draws(1, i), list(range(6))) for i in range(2000)]
    first = sum(p[8] == p[6] for p in picks) / len(picks)
    assert 0.45 < first < 0.55


def test_progression_uses_both_signs_and_several_steps():
    steps = {ids[1] - ids[0] for ids in (RULES[Relation.PROGRESSION].sample(
        Draws(2, i), list(range(1, 11))) for i in range(500))}
    assert {-4, -3, -2, -1, 1, 2, 3, 4} <= steps


@pytest.mark.parametrize("allowed", [list(range(1, 11)), [1, 3, 5, 7, 9], [6, 7, 8, 9, 10]])
def test_progression_answers_are_uniform_over_the_allowed_counts(allowed):
    # drawing the step first made 1 and 10 the answer ~3x as often as 5 and 6, so a
    # candidate's answer rate gave it away
    n = 4000
    answers = Counter(RULES[Relation.PROGRESSION].sample(Draws(5, i), allowed)[8]
                      for i in range(n))
    assert set(answers) == set(allowed)
    expected = n / len(allowed)
    assert all(abs(c - expected) < 5 * expected ** 0.5 for c in answers.values()), answers


# ---------------------------------------------------------------- the solver on strings

def test_each_relation_has_one_answer_with_single_labels():
    cases = {
        Relation.AND: ("a a a b b b c c", "c", ["d", "e", "f", "g", "h", "i", "a"]),
        Relation.OR: ("a b a c d d e f", "e", ["a", "b", "c", "d", "g", "h", "i"]),
        Relation.UNION: ("a b c b c a c a", "b", ["c", "a", "d", "e", "f", "g", "h"]),
    }
    for relation, (context, answer, wrong) in cases.items():
        candidates = wrong[:3] + [answer] + wrong[3:]
        labels = sets(*context.split(), *candidates)
        assert valid_candidates(relation, OA, labels) == [3], relation


def test_progression_on_counts_ignores_nouns():
    labels = sets("1+cows", "2+cows", "3+cows", "4+cups", "5+cups", "6+cups", "7+dogs",
                  "8+dogs", "9+dogs", "10", "2", "3", "4", "5", "6", "1+dogs")
    assert valid_candidates(Relation.PROGRESSION, ElementType.COUNT, labels) == [0]


def test_a_distractor_carrying_the_answer_label_is_found():
    labels = sets("a", "a", "a", "b", "b", "b", "c", "c",
                  "c", "d", "e+c", "f", "g", "h", "i", "j")
    assert valid_candidates(Relation.AND, OA, labels) == [0, 2]


def test_an_and_matrix_readable_as_or_admits_the_or_completion():
    # rows 1 and 2 also read as Or rows (x a a), (y b b); row 3's first panel is also 'w':
    # read as Or, (w c ?) completes with 'w', so a 'w' distractor is a second answer
    labels = sets("a+x", "a", "a", "b+y", "b", "b", "c+w", "c",
                  "c", "g", "w", "h", "i", "j", "k", "l")
    assert valid_candidates(Relation.AND, OA, labels) == [0, 2]
    plain = sets("a", "a", "a", "b", "b", "b", "c+w", "c",
                 "c", "g", "w", "h", "i", "j", "k", "l")
    assert valid_candidates(Relation.AND, OA, plain) == [0]  # rows 1, 2 admit no Or reading


def test_an_or_matrix_whose_rows_also_read_as_and():
    # rows 1 and 2 read as And ('x', 'y'); row 3's panels share 'w': under And, 'w' completes
    labels = sets("a+x", "b+x", "a+x", "c+y", "d+y", "d+y", "e+w", "f+w",
                  "e", "g", "w", "h", "i", "j", "k", "l")
    assert valid_candidates(Relation.OR, OA, labels) == [0, 2]
    clean = sets("a+x", "b+x", "a+x", "c+y", "d+y", "d+y", "e", "f",
                 "e", "g", "h", "i", "j", "k", "l", "m")
    assert valid_candidates(Relation.OR, OA, clean) == [0]


def test_a_union_context_admitting_a_second_completion():
    # panel 7 is both 'a' and 'b': the missing element of row 3 is then 'b' or 'a'
    labels = sets("a", "b", "c", "b", "c", "a", "c", "a+b",
                  "b", "a", "d", "e", "f", "g", "h", "i")
    assert valid_candidates(Relation.UNION, OA, labels) == [0, 1]


def test_a_progression_with_an_alternative_step():
    # rows read with step 1 or 2 (multi-count labels): row 3 completes with 5 or 7
    labels = sets("1", "2+3", "3+5", "2", "3+4", "4+6", "3", "4+5",
                  "5", "7", "1", "2", "9", "10", "8", "6")
    assert valid_candidates(Relation.PROGRESSION, ElementType.COUNT, labels) == [0, 1]


def test_labels_outside_the_universe_do_not_count():
    # objects that share a colour: the colour is no object category
    labels = sets("dog+red", "dog", "dog", "cat", "cat+red", "cat", "cup+red", "cup",
                  "cup", "car+red", "bus", "van", "pen", "hat", "box", "bag")
    objects = frozenset("dog cat cup car bus van pen hat box bag".split())
    assert valid_candidates(Relation.AND, ElementType.OBJECT, labels, objects) == [0]
    assert valid_candidates(Relation.AND, ElementType.OBJECT, labels) == [0, 1]  # no universe


def _matrix(relation, etype, elements, answer=0):
    return Matrix(id=1, relation=relation, element_type=etype, super_attribute="",
                  panels=tuple(range(16)), elements=tuple(elements), answer=answer)


def test_check_matrix_accepts_a_sound_matrix_and_names_each_flaw():
    elements = "a a a b b b c c c d e f g h i j".split()
    m = _matrix(Relation.AND, OA, elements)
    assert check_matrix(m, sets(*elements)) is None
    shared = sets(*elements[:10], "e+c", *elements[11:])
    assert "candidates [0, 2]" in check_matrix(m, shared)
    missing = sets(*elements[:9], "x", *elements[10:])
    assert "claims 'd'" in check_matrix(m, missing)
    wrong_rule = _matrix(Relation.UNION, OA, elements)
    assert "do not obey union" in check_matrix(wrong_rule, sets(*elements))
    with pytest.raises(ValueError, match="16 panels"):
        check_matrix(m, sets("a", "b"))


# ---------------------------------------------------------------- a brute-force oracle

def _oracle(element_type, masks):
    """Completing elements by enumerating every label choice of every panel (slow, obvious)."""
    def choices(mask):
        return [i for i in range(mask.bit_length()) if (mask >> i) & 1]

    out = set()
    for relation in RELATIONS_OF[element_type]:
        for pick in itertools.product(*(choices(m) for m in masks)):
            rows12 = [pick[0:3], pick[3:6]]
            for z in range(1, 12):
                if DEFINITIONS[relation](rows12 + [(pick[6], pick[7], z)]):
                    out.add(z)
    return sum(1 << z for z in out)


panel = st.integers(min_value=1, max_value=(1 << 6) - 1).filter(lambda m: m.bit_count() <= 2)


@settings(max_examples=150, deadline=None)
@given(st.lists(panel, min_size=8, max_size=8),
       st.sampled_from([ElementType.COUNT, ElementType.OBJECT]))
def test_completion_mask_matches_brute_force(context, element_type):
    # shift so bit 0 is unused: count ids are the counts themselves (1..)
    masks = [m << 1 for m in context]
    assert completion_mask(element_type, masks) == _oracle(element_type, masks)


def test_a_descending_progression_never_completes_with_zero():
    # rows 5, 4, 3 / 5, 4, 3 / 2, 1, ?: the step -1 would end row 3 on 0, which is no count
    # (found by the brute-force comparison below)
    masks = [1 << 5, 1 << 4, 1 << 3, 1 << 5, 1 << 4, 1 << 3, 1 << 2, 1 << 1]
    assert completion_mask(ElementType.COUNT, masks) == 0
    assert completion_mask(ElementType.COUNT, [1 << 3, 1 << 2, 1 << 1] * 2 + [1 << 3, 1 << 2]) \
        == 1 << 1


def test_universe_maps_counts_to_their_value():
    u = Universe(ElementType.COUNT, {"1", "10", "cows", "3"})
    assert u.ids == {"1": 1, "10": 10, "3": 3}
    assert u.mask(["3", "cows"]) == 1 << 3
