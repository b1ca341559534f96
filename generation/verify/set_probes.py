"""`vprom verify`'s set-level probes: does the candidate SET, seen whole, give the answer away?

A set can leak what no single candidate shows (RAVEN's answer-set flaw). Per element type and
relation x element type: `bias:absent-values` (counts: the candidate most often the answer on
train given the counts shown), `bias:blocks` (the same for the answer's super-attribute) and
`bias:probe-sets`, an MLP scoring j as v · relu(Σ E[set tokens] + Σ E[own tokens of j] + b),
fitted by L-BFGS-B for `ITERATIONS` (stopping early keeps it general), each type on its own stream.
"""

from __future__ import annotations

import math

import numpy as np

import vprom.generation.verify.audit as audit
from vprom.domain import N_CANDIDATES, N_CONTEXT
from vprom.generation.verify.audit import MIN_PROBE_TEST, Check
from vprom.tables import string_codes

#: element types with at most this many elements also get the exact element set as a token
SET_ID_MAX = 12
#: hidden units, L-BFGS-B iterations (a 10% count tell: 22% after 10, 20% after 40), L2
HIDDEN, ITERATIONS, L2 = 48, 10, 1e-4


def _table_top(shown: np.ndarray, keys: np.ndarray, answers: np.ndarray, train: np.ndarray,
               test: np.ndarray) -> np.ndarray:
    """len(test)×8: the candidates whose key was most often the answer's on train, per `shown`."""
    base = int(keys.max(initial=0)) + 1
    seen, times = np.unique(shown[train] * base + keys[train, answers[train]],
                            return_counts=True)
    pairs = shown[test, None] * base + keys[test]  # each candidate's (set, key) pair
    score = np.zeros(pairs.shape, dtype=np.int64)
    if len(seen):
        at = np.minimum(np.searchsorted(seen, pairs), len(seen) - 1)
        score = np.where(seen[at] == pairs, times[at], 0)
    return score == score.max(axis=1, keepdims=True)


def absent_hits(values: np.ndarray, answers: np.ndarray, train: np.ndarray,
                test: np.ndarray) -> np.ndarray:
    """Per test matrix, the share of the absent-values table's picks that is the answer."""
    sets = (np.int64(1) << values).sum(axis=1)  # the candidates' counts as a bit mask
    top = _table_top(sets, values, answers, train, test)
    return top[np.arange(len(test)), answers[test]] / top.sum(axis=1)


def absent_value_probe(elements: np.ndarray, answers: np.ndarray, train: np.ndarray,
                       test: np.ndarray, element_type: np.ndarray, relation: np.ndarray,
                       note: str = "") -> Check:
    """The table probe on count matrices, per relation and over all count matrices."""
    counts = np.flatnonzero(element_type == "count")
    tr, te = np.intersect1d(train, counts), np.intersect1d(test, counts)
    if len(te) == 0:
        return Check("bias:absent-values", "skip", "no count matrices to probe")
    names, codes = string_codes(elements[counts])
    values = np.zeros((len(elements), N_CANDIDATES), dtype=np.int64)
    values[counts] = np.array([int(e) if e.isdigit() else 0 for e in names])[codes]
    results = audit.group_hits(element_type, relation, tr, te,
                               lambda g_tr, g_te: absent_hits(values, answers, g_tr, g_te))
    return audit.judge_groups("bias:absent-values", "the answer's rate given the counts the "
                              "candidates leave out", results, note)


def block_hits(codes: np.ndarray, answers: np.ndarray, train: np.ndarray,
               test: np.ndarray) -> np.ndarray:
    """Per test matrix, the expected hit of the blocks table on `codes` (N×8)."""
    base = int(codes.max(initial=0)) + 1
    shown = np.zeros(len(codes), dtype=np.int64)  # the multiset shown, as one int
    for column in np.sort(codes, axis=1).T:
        shown = shown * base + column
    top = _table_top(shown, codes, answers, train, test)
    row = codes[test]
    first = np.ones(row.shape, dtype=bool)  # each super-attribute's first candidate
    for j in range(1, row.shape[1]):
        first[:, j] = (row[:, :j] != row[:, j:j + 1]).all(axis=1)
    size = (row == row[np.arange(len(test)), answers[test], None]).sum(axis=1)  # its block
    return top[np.arange(len(test)), answers[test]] / (top & first).sum(axis=1) / size


def block_probe(super_attributes: np.ndarray, answers: np.ndarray, train: np.ndarray,
                test: np.ndarray, element_type: np.ndarray, relation: np.ndarray,
                note: str = "") -> Check:
    """The blocks table on the matrices whose candidates show two or more super-attributes."""
    used = np.union1d(train, test)
    codes = np.zeros(super_attributes.shape, dtype=np.int64)
    codes[used] = string_codes(super_attributes[used])[1]
    mixed = (codes != codes[:, :1]).any(axis=1)
    tr, te = train[mixed[train]], test[mixed[test]]
    if len(te) == 0:
        return Check("bias:blocks", "skip", "no matrix shows candidates of two or more "
                     "super-attributes")
    results = audit.group_hits(element_type, relation, tr, te,
                               lambda g_tr, g_te: block_hits(codes, answers, g_tr, g_te))
    return audit.judge_groups("bias:blocks", "picking the answer's block by the "
                              "super-attributes shown (mixed blocks only)", results, note)


def set_tokens(elements: np.ndarray, super_attributes: np.ndarray,
               relation: np.ndarray, key=None) -> tuple[np.ndarray, np.ndarray, int]:
    """(N×S set tokens, N×8×O own tokens, vocabulary size), element codes in `key`'s order. Set:
    relation, elements, super-attributes, distinct counts, the exact set (small types). Own:
    element, super-attribute, position, sharing counts, missing elements, count rank/offsets."""
    (el_names, el), (sa_names, sa), (rel_names, rel) = (
        string_codes(elements, key), string_codes(super_attributes), string_codes(relation))
    n_el, n_sa = len(el_names), len(sa_names)
    same_el = el[:, :, None] == el[:, None, :]
    same_sa = sa[:, :, None] == sa[:, None, :]
    c_el, c_sa = same_el.sum(axis=2), same_sa.sum(axis=2)  # 1..8
    distinct_el = (1.0 / c_el).sum(axis=1, keepdims=True).round().astype(np.int64)
    distinct_sa = (1.0 / c_sa).sum(axis=1, keepdims=True).round().astype(np.int64)
    # elements of each super-attribute the data set shows; those of j's missing from the set
    size = np.array([len(np.unique(el[sa == s_code])) for s_code in range(n_sa)])
    present = (same_sa / c_el[:, None, :]).sum(axis=2).round().astype(np.int64)
    missing = np.clip(size[sa] - present, 0, 31)
    position = np.broadcast_to(np.arange(N_CANDIDATES), el.shape)
    # (how many codes, N×k codes) per family of set tokens, then of own tokens
    set_families = [(len(rel_names), rel[:, None]), (n_el, el), (n_sa, sa), (9, distinct_el),
                    (9, distinct_sa)]
    own_families = [(n_el, el), (n_sa, sa), (N_CANDIDATES, position), (9, c_el), (9, c_sa),
                    (32, missing)]
    if n_el <= SET_ID_MAX:  # the exact set (repeats only add bits), ranks and offsets
        sets, set_id = np.unique((np.int64(1) << el).sum(axis=1), return_inverse=True)
        set_families.append((len(sets), set_id.reshape(-1, 1)))
        own_families += _count_tokens(el, n_el)
    # each family takes the next rows of the one embedding table
    families = set_families + own_families
    bases = np.cumsum([0] + [n for n, _ in families])
    tokens = [codes + base for (_, codes), base in zip(families, bases)]
    return (np.concatenate(tokens[:len(set_families)], axis=1),
            np.stack(tokens[len(set_families):], axis=2), int(bases[-1]))


def _count_tokens(el: np.ndarray, n_el: int) -> list[tuple[int, np.ndarray]]:
    """Rank among the 8 and offsets to the two lowest missing codes, as token families."""
    rank = (el[:, None, :] < el[:, :, None]).sum(axis=2)
    held = np.zeros((len(el), n_el), dtype=bool)
    np.put_along_axis(held, el, True, axis=1)
    out = [(N_CANDIDATES, rank)]
    for k in range(2):
        m = np.argsort(held, axis=1, kind="stable")[:, k]
        none = held[np.arange(len(el)), m]  # fewer than k+1 missing codes
        out.append((2 * n_el + 1, np.where(none[:, None], 2 * n_el, el - m[:, None] + n_el)))
    return out


def fit_set_mlp(set_tok: np.ndarray, own_tok: np.ndarray, answers: np.ndarray,
                train: np.ndarray, rng: np.random.Generator):
    """The set MLP fitted on rows `train` from weights drawn by `rng`: rows -> N×8 scores.
    Sums run in float32; the weights are one array: `vocab` embedding rows, bias, output."""
    vocab = int(max(set_tok.max(), own_tok.max())) + 1

    def bags(rows: np.ndarray):
        # candidates' own tokens repeat across matrices (a few thousand distinct tuples in
        # 100,000s): each distinct tuple is embedded once and its sum copied to its candidates
        tokens = own_tok[rows].reshape(-1, own_tok.shape[-1])
        which, bound = np.zeros(len(tokens), dtype=np.int64), 1
        for column in tokens.T:  # one int per tuple (np.unique(axis=0) sorts slowly)
            if bound * vocab >= 1 << 62:
                which = np.unique(which, return_inverse=True)[1]
                bound = len(tokens)
            which, bound = which * vocab + column, bound * vocab
        first, which = np.unique(which, return_index=True, return_inverse=True)[1:]
        return (_incidence(set_tok[rows], vocab), _incidence(tokens[first], vocab),
                which.reshape(len(rows), N_CANDIDATES))

    def forward(params: np.ndarray, set_bag, own_bag, which):
        h = (own_bag @ params[:vocab])[which]
        h += (set_bag @ params[:vocab])[:, None, :] + params[vocab]
        return np.maximum(h, 0.0, out=h) @ params[vocab + 1], h

    fitted = bags(train)
    set_t, own_t = (bag.T.tocsr() for bag in fitted[:2])  # the gradient's sums onto tokens
    pool = _incidence(fitted[2].reshape(-1, 1), own_t.shape[1]).T.tocsr()  # onto tuples

    def loss_grad(params: np.ndarray) -> tuple[float, np.ndarray]:
        weights = params.astype(np.float32)
        scores, h = forward(weights, *fitted)
        loss, p = audit.softmax_residual(scores, answers[train])
        p /= len(train)
        g_pre = (p[:, :, None] * weights[vocab + 1]) * (h > 0)
        g_set = g_pre.sum(axis=1)
        g_emb = own_t @ (pool @ g_pre.reshape(-1, HIDDEN)) + set_t @ g_set
        return (loss / len(train) + 0.5 * L2 * float(np.square(params[:vocab]).sum()),
                np.vstack([g_emb + L2 * params[:vocab], g_set.sum(axis=0),
                           np.einsum("bj,bjh->h", p, h)]))

    start = np.vstack([rng.normal(0, 0.1, (vocab, HIDDEN)), np.zeros(HIDDEN),
                       rng.normal(0, 0.1, HIDDEN)])
    params = audit.lbfgs(loss_grad, start, maxiter=ITERATIONS).astype(np.float32)
    return lambda rows: forward(params, *bags(rows))[0]


def _incidence(tokens: np.ndarray, vocab: int):
    """Rows × vocab, a 1 for each of a row's tokens (the last axis)."""
    import scipy.sparse

    rows, slots = math.prod(tokens.shape[:-1]), tokens.shape[-1]
    return scipy.sparse.csr_matrix((np.ones(rows * slots, np.float32), tokens.reshape(-1),
                                    np.arange(rows + 1) * slots), shape=(rows, vocab))


def set_probe_type(etype: str, elements: np.ndarray, super_attributes: np.ndarray,
                   answers: np.ndarray, train: np.ndarray, test: np.ndarray,
                   element_type: np.ndarray, relation: np.ndarray,
                   rng: np.random.Generator) -> list[tuple[str, np.ndarray, int]]:
    """The set MLP of one element type: (group, test hits, train size) per type and relation."""
    mine = np.flatnonzero(element_type == etype)
    tr, te = np.intersect1d(train, mine), np.intersect1d(test, mine)
    if len(tr) < MIN_PROBE_TEST or len(te) < MIN_PROBE_TEST:
        return [(etype, np.zeros(0), len(tr))]
    used = np.concatenate([tr, te])
    # counts get codes in count order ("01".."10"), so ranks and offsets are arithmetic
    key = (lambda e: e.zfill(2)) if etype == "count" else None
    set_tok, own_tok, _ = set_tokens(elements[used], super_attributes[used], relation[used],
                                     key)
    y, l_te = answers[used], np.arange(len(tr), len(used))
    scores = fit_set_mlp(set_tok, own_tok, y, np.arange(len(tr)), rng)
    hits = audit.chunked_hits(scores, l_te, y)
    rel_te, rel_tr = relation[te], relation[tr]
    return [(etype, hits, len(tr))] + [
        (f"{etype} x {rel}", hits[rel_te == rel], int((rel_tr == rel).sum()))
        for rel in sorted(set(rel_te.tolist()))]


class SetInputs:
    """What the set-level probes read of `data`; `[seed, 27]` spawns a stream per type."""

    def __init__(self, data, train: np.ndarray, test: np.ndarray, seed: int = 0) -> None:
        self.seed = seed
        m = data.matrices
        self.answers = m.answer.astype(np.int64)
        self.elements = m.elements[:, N_CONTEXT:]  # Python strings, coded where used
        rows = np.where(data.rows < 0, 0, data.rows)[:, N_CONTEXT:]
        self.super_attributes = data.crops.super_attribute[rows]
        self.etype, self.relation = m.element_type.astype(str), m.relation.astype(str)
        self.train, self.test = train, test

    def sides(self) -> tuple:
        """(answers, train, test, element types, relations): what every set probe reads."""
        return self.answers, self.train, self.test, self.etype, self.relation

    def types(self) -> list[str]:
        """The element types the set MLP probes, in the order their streams are spawned."""
        return sorted(set(self.etype[self.test].tolist()))

    def one_type(self, k: int) -> list[tuple[str, np.ndarray, int]]:
        """`set_probe_type` of the k-th of `types()`, on the k-th spawned stream."""
        stream = np.random.default_rng([self.seed, 27]).spawn(k + 1)[k]
        return set_probe_type(self.types()[k], self.elements, self.super_attributes,
                              *self.sides(), stream)
