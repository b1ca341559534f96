"""verify's bias verdict (`generation.verify.audit`): exact p-values, Holm's step-down over
the family, and the decision on probe inputs with and without a planted tell."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.stats
from vprom.generation.verify import audit

#: the test matrices of a full-scale relation x element-type cell (and fewer train)
TRAIN, TEST = 4_000, 5_000


def test_holm_matches_a_hand_computed_example():
    # sorted: 0.005·4 = 0.02, 0.01·3 = 0.03, 0.03·2 = 0.06, 0.04·1 = 0.04 -> raised to 0.06
    adjusted = audit.holm([0.01, 0.04, 0.03, 0.005])
    assert adjusted == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert audit.holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])  # capped at 1


def test_the_p_value_bounds_the_exact_binomial_tail_within_a_factor_e():
    # untied hits are Binomial(n, 1/8) under the null: the bound is valid and near its tail
    for hits, n in ((1, 10), (78, 416), (700, 5000), (3400, 25_000)):
        exact = scipy.stats.binomtest(hits, n, 1 / 8, alternative="greater").pvalue
        assert exact <= audit.tail_p(hits, n) <= np.e * exact
    assert audit.tail_p(0, 10) == audit.tail_p(50, 400) == 1.0  # at or below chance


def _null_hits(rng, n):
    """Hits of a pick among k tied candidates (k = 1..8), the answer drawn without them."""
    k = rng.integers(1, 9, n)
    return (rng.random(n) < k / 8) / k


def test_tied_picks_give_one_p_value_whatever_their_order():
    rng = np.random.default_rng(2)
    hits = np.where(rng.random(2000) < 0.05, 1.0, _null_hits(rng, 2000))  # 4.4 points
    p = audit.group_test(hits)["p"]
    assert p == audit.group_test(rng.permutation(hits))["p"] == audit.group_test(
        hits.copy())["p"]
    assert p < 1e-4  # the excess is found


def test_unbiased_tied_sets_pass_at_every_level():
    # under the null the share of p-values under alpha is at most alpha (the test is valid)
    rng = np.random.default_rng(3)
    p = np.array([audit.group_test(_null_hits(rng, 400))["p"] for _ in range(4000)])
    for alpha in (0.01, 0.05, 0.1):
        assert (p < alpha).mean() <= alpha


def test_ties_count_their_share_and_an_8_way_tie_is_no_evidence():
    # every matrix a 4-way tie holding the answer: 25%, far above 1/8
    f = audit.group_test(np.full(4000, 0.25))
    assert f["accuracy"] == 0.25 and f["judged"] and f["p"] < 1e-10
    # a heuristic that ties all 8 every time scores 1/8 whatever the answers: p = 1
    assert audit.group_test(np.full(4000, 1 / 8))["p"] == 1.0


def test_a_group_fails_only_when_significant_and_above_the_tolerance():
    rng = np.random.default_rng(0)
    small_excess = (rng.random(200_000) < 0.135).astype(float)  # 1 point: significant
    big_small_group = np.r_[np.ones(12), np.zeros(48)]  # 20%: p = 0.05
    check = audit.judge_groups("bias:x", "x", [("big", small_excess, 10**5),
                                                ("small", big_small_group, 100)])
    big = check.figures["big"]
    small = check.figures["small"]
    assert big["p_adjusted"] < audit.FAMILY_ALPHA and not big["failed"]
    assert small["accuracy"] >= audit.LIMIT and not small["failed"]
    assert check.status == "pass"


def _label_view(rng, n, planted_q=0.0, answers=None):
    """A candidate view whose labels are drawn without the answer; with `planted_q`, the
    answer carries with that probability a label no other candidate has."""
    element = rng.integers(0, 40, (n, 8))
    row_labels = [(e, 40 + e % 7) for e in range(40)] + [(e, 40 + e % 7, 99) for e in range(40)]
    label_row = element.copy()
    planted = np.flatnonzero(rng.random(n) < planted_q)
    label_row[planted, answers[planted]] += 40
    return audit.CandidateView(
        element=element, super_attribute=np.zeros((n, 8), int), n_labels=np.full((n, 8), 2.0),
        overlap=np.zeros((n, 8)), area=rng.uniform(1e4, 1e5, (n, 8)),
        aspect=rng.uniform(0.5, 2, (n, 8)), n_implied=np.zeros((n, 8)), label_row=label_row,
        row_labels=row_labels)


@pytest.mark.parametrize("excess", [0.0, 0.05])
def test_a_planted_5_point_tell_fails_and_an_unbiased_set_passes(excess):
    """At a full-scale cell's size, where the power table finds a 3-point label tell in every
    replicate, a 5-point one fails among a family of 60 groups; without it, all pass."""
    rng = np.random.default_rng(1)
    n = TRAIN + TEST
    answers = rng.integers(0, 8, n)
    view = _label_view(rng, n, excess * 8 / 7, answers)
    train, test = np.arange(TRAIN), np.arange(TRAIN, n)
    hits = audit.label_group_hits(view, answers, train, test)
    others = [(f"null {k}", (rng.random(TEST) < 1 / 8).astype(float), TRAIN) for k in range(59)]
    check = audit.judge_groups("bias:probe-labels", "probe", [("cell", hits, TRAIN)] + others)
    assert check.figures["cell"]["failed"] == (excess > 0), check.figures["cell"]
    assert [g for g, f in check.figures.items() if f["failed"]] == (["cell"] if excess else [])
