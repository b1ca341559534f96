"""`vprom verify`'s set-level probes (`generation.verify.set_probes`) on planted data: a candidate set
that gives the answer away is caught, one that does not passes."""

from __future__ import annotations

import numpy as np

from vprom.generation.verify import audit, set_probes

N = 3000


def _count_sets(rng, planted: bool):
    """N count matrices: 8 of the 10 counts in random order; the answer random, or (planted)
    the smallest candidate above the smallest count left out (a pure set-level tell)."""
    elements, answers = [], []
    for _ in range(N):
        values = rng.permutation(np.arange(1, 11))[:8]
        missing = sorted(set(range(1, 11)) - set(values.tolist()))
        above = [v for v in sorted(values.tolist()) if v > missing[0]]
        pick = above[0] if planted and above else int(rng.choice(values))
        elements.append([str(v) for v in values])
        answers.append(int(np.flatnonzero(values == pick)[0]))
    return np.array(elements), np.array(answers, dtype=np.int64)


def _run(planted: bool):
    rng = np.random.default_rng(1)
    elements, answers = _count_sets(rng, planted)
    train, test = np.arange(0, 2000), np.arange(2000, N)
    etype, relation = np.full(N, "count"), np.full(N, "progression")
    table = set_probes.absent_value_probe(elements, answers, train, test, etype, relation)
    mlp = audit.judge_groups("bias:probe-sets", "the set MLP", set_probes.set_probe_type(
        "count", elements, np.full(elements.shape, ""), answers, train, test, etype,
        relation, np.random.default_rng(0)))
    return table, mlp


def test_a_set_level_tell_is_caught_by_both_probes():
    table, mlp = _run(planted=True)
    assert table.status == "fail" and table.figures["count x progression"]["accuracy"] > 0.9
    assert mlp.status == "fail", mlp.summary
    assert mlp.figures["count"]["ci95"][0] > 0.145


def test_an_uninformative_set_passes_both_probes():
    table, mlp = _run(planted=False)
    assert table.status == "pass", table.summary
    assert mlp.status == "pass", mlp.summary
    assert mlp.figures["count"]["judged"]


def _blocks(planted: bool):
    """N attribute matrices in 4 + 4 blocks of two of five super-attributes; the answer's
    block is the alphabetically first of the pair (planted) or either at random."""
    rng = np.random.default_rng(4)
    names = np.array(["age", "color", "material", "shape", "texture"])
    sas, answers = [], []
    for _ in range(N):
        pair = np.sort(rng.choice(names, 2, replace=False))
        row = rng.permutation(np.repeat(pair, 4))
        mine = pair[0] if planted else pair[rng.integers(2)]
        answers.append(int(rng.choice(np.flatnonzero(row == mine))))
        sas.append(row)
    return np.array(sas), np.array(answers, dtype=np.int64)


def test_the_blocks_table_tells_the_answers_block_when_the_set_does():
    train, test = np.arange(0, 2000), np.arange(2000, N)
    etype, relation = np.full(N, "object_attribute"), np.full(N, "or")
    planted = set_probes.block_probe(*_blocks(True), train, test, etype, relation)
    assert planted.status == "fail"
    assert abs(planted.figures["object_attribute x or"]["accuracy"] - 0.25) < 1e-9
    fair = set_probes.block_probe(*_blocks(False), train, test, etype, relation)
    assert fair.status == "pass" and fair.figures["object_attribute"]["judged"]
    single = np.full((N, 8), "color")
    assert set_probes.block_probe(single, np.zeros(N, dtype=np.int64), train, test, etype,
                                  relation).status == "skip"


def test_set_tokens_describe_coverage_and_missing_values():
    elements = np.array([["a1", "a2", "a3", "b1", "b2", "c1", "c1", "c2"]])
    sas = np.array([["a", "a", "a", "b", "b", "c", "c", "c"]])
    set_tok, own_tok, vocab = set_probes.set_tokens(elements, sas, np.array(["and"]))
    assert set_tok.shape[0] == 1 and own_tok.shape[:2] == (1, 8)
    assert vocab > int(max(set_tok.max(), own_tok.max()))
    # own tokens: element first, then super-attribute, position, ...
    assert own_tok[0, 5, 0] == own_tok[0, 6, 0] and own_tok[0, 0, 0] != own_tok[0, 3, 0]
    assert own_tok[0, 0, 1] == own_tok[0, 2, 1] != own_tok[0, 3, 1]
    assert len(set(own_tok[0, :, 2].tolist())) == 8  # positions


def test_the_absent_values_table_by_hand():
    """On train, the answer's count given the candidates' counts; on test, the share of the
    candidates whose count was that answer most often which is the answer."""
    counts = np.array([1, 2, 3, 4, 5, 6, 7, 8])
    values = np.array([counts, counts, counts, counts[::-1], counts, counts,
                       counts + 2, counts + 2, counts + 2])
    answers = np.array([2, 2, 4, 5, 2, 4, 0, 1, 0])  # train: counts 3, 3, 5, then 3 again
    train, test = np.arange(4), np.arange(4, 9)
    # matrix 4: its answer, count 3, was the answer 3 times of 4: a hit; matrix 5: count 5,
    # once, no hit; matrices 6-8 show counts 3..10, a set never seen: every candidate ties
    hits = set_probes.absent_hits(values, answers, train, test)
    assert hits.tolist() == [1.0, 0.0, 1 / 8, 1 / 8, 1 / 8]
    # ties split the hit: counts 3 and 5 each the answer once
    assert set_probes.absent_hits(values, answers, np.array([0, 2]), np.array([4, 5])).tolist() \
        == [0.5, 0.5]
