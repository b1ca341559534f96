"""`vprom verify`'s set-level probes: does the candidate SET, seen whole, give the answer away?

The label and feature probes (`generation.verify.audit`) score each candidate from its own
description. A set can also leak through which values it leaves out (RAVEN's answer-set
flaw), which super-attributes it covers and how often, or a candidate's rank and its offsets
to the missing values. Three context-blind probes look at that, per element type and per
relation x element type, fitted on the neutral split's train part (the MLP's epoch chosen on
its val part) and scored on its test part:

1. `bias:absent-values` (counts): a table of how often each count was the answer on train,
   given the set of counts the candidates show (equivalently, the counts they leave out); on
   test, pick the candidate whose count was that answer most often (ties split; an unseen
   set scores 1/8).
2. `bias:blocks` (candidates of two or more super-attributes): the same table for the
   super-attribute of the answer given the multiset of super-attributes shown; pick that
   block, then one of its candidates at random.
3. `bias:probe-sets` (every element type): a small MLP (torch), one per element type,
   scoring candidate j as s_j = v · relu(Σ E[set tokens] + Σ E[own tokens of j] + b), softmax
   over the 8. Set tokens, the same for all 8: the relation; every candidate's element and
   super-attribute (which the set covers, how often); how many distinct of each; for types
   of at most `SET_ID_MAX` elements (counts) the exact set. Own tokens of j: its element,
   super-attribute and position; how many candidates share its element and its
   super-attribute; how many elements of its super-attribute (as the data set shows them)
   the set lacks; for counts its rank among the 8 and its offsets to the two lowest missing
   values. The relu mixes own and set tokens, so "the value whose neighbours are missing" is
   within reach. The loss is not convex: Adam on minibatches, keeping the epoch with the
   best val accuracy. Each element type's model draws its initial weights and minibatches
   from its own stream (spawned from one seed), so the types can be fitted in any order and
   in any process (`vprom verify --workers`).

All are judged like the other probes (`audit.judge_groups`): a group fails when the lower
end of its 95% Wilson interval exceeds 12.5% + 2 points.
"""

from __future__ import annotations

import numpy as np

import vprom.generation.verify.audit as audit
from vprom.domain import N_CANDIDATES, N_CONTEXT
from vprom.generation.verify.audit import MIN_PROBE_TEST, Check
from vprom.tables import present_rows, string_codes

#: element types with at most this many elements also get the exact element set as a token
SET_ID_MAX = 12
#: the MLP's hidden units, epochs, minibatch, step size and L2 penalty on its embeddings
HIDDEN, EPOCHS, BATCH, LR, L2 = 48, 6, 256, 0.01, 1e-5
#: val matrices per element type used to choose the epoch
VAL_MAX = 5_000


# ---------------------------------------------------------------- 1, 2. the tables
def _times_seen(seen_keys: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """How often each of `keys` occurs among `seen_keys` (0 for a key never seen)."""
    seen, times = np.unique(seen_keys, return_counts=True)
    if len(seen) == 0:
        return np.zeros(keys.shape, dtype=np.int64)
    at = np.minimum(np.searchsorted(seen, keys), len(seen) - 1)
    return np.where(seen[at] == keys, times[at], 0)


def count_values(elements: np.ndarray) -> np.ndarray:
    """N×8 count strings -> N×8 ints (0 where a candidate is no count)."""
    names, codes = string_codes(elements)
    return np.array([int(e) if e.isdigit() else 0 for e in names], dtype=np.int64)[codes]


def absent_hits(values: np.ndarray, answers: np.ndarray, train: np.ndarray,
                test: np.ndarray) -> np.ndarray:
    """Per test matrix, the share of the table's picks that is the answer (see 1.); a
    (candidates' counts, count) pair is one int key."""
    sets = (np.int64(1) << values).sum(axis=1)  # the candidates' counts as a bit mask
    base = int(values.max(initial=0)) + 1
    score = _times_seen(sets[train] * base + values[train, answers[train]],
                        sets[test, None] * base + values[test])
    top = score == score.max(axis=1, keepdims=True)
    return top[np.arange(len(test)), answers[test]] / top.sum(axis=1)


def absent_value_probe(elements: np.ndarray, answers: np.ndarray, train: np.ndarray,
                       test: np.ndarray, element_type: np.ndarray, relation: np.ndarray,
                       note: str = "") -> Check:
    """The table probe on count matrices, per relation and over all count matrices."""
    counts = np.flatnonzero(element_type == "count")
    tr, te = np.intersect1d(train, counts), np.intersect1d(test, counts)
    if len(te) == 0:
        return Check("bias:absent-values", "skip", "no count matrices to probe")
    values = np.zeros((len(elements), N_CANDIDATES), dtype=np.int64)
    values[counts] = count_values(elements[counts])
    results = audit.group_hits(element_type, relation, tr, te,
                               lambda g_tr, g_te: absent_hits(values, answers, g_tr, g_te))
    return audit.judge_groups("bias:absent-values", "the answer's rate given the counts the "
                              "candidates leave out", results, note)


def block_hits(codes: np.ndarray, answers: np.ndarray, train: np.ndarray,
               test: np.ndarray) -> np.ndarray:
    """Per test matrix, the expected hit of "the super-attribute most often the answer's for
    the blocks shown (on train), then one of its candidates at random" (ties split; a set
    unseen on train ties everywhere). `codes`: N×8 super-attribute codes (0 and up)."""
    base = int(codes.max(initial=0)) + 1
    shown = np.zeros(len(codes), dtype=np.int64)  # the multiset shown, as one int
    for column in np.sort(codes, axis=1).T:
        shown = shown * base + column
    mine = codes[np.arange(len(codes)), answers]
    score = _times_seen(shown[train] * base + mine[train], shown[test, None] * base + codes[test])
    top = score == score.max(axis=1, keepdims=True)
    row = codes[test]
    first = np.ones(row.shape, dtype=bool)  # each super-attribute's first candidate
    for j in range(1, row.shape[1]):
        first[:, j] = (row[:, :j] != row[:, j:j + 1]).all(axis=1)
    size = (row == mine[test, None]).sum(axis=1)  # the answer's block
    return top[np.arange(len(test)), answers[test]] / (top & first).sum(axis=1) / size


def block_probe(super_attributes: np.ndarray, answers: np.ndarray, train: np.ndarray,
                test: np.ndarray, element_type: np.ndarray, relation: np.ndarray,
                note: str = "") -> Check:
    """The blocks table (`block_hits`) on the matrices whose candidates show two or more
    super-attributes, per element type and per relation x element type."""
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


# ---------------------------------------------------------------- 3. the set MLP
def _codes(a: np.ndarray, key=None) -> tuple[np.ndarray, int]:
    names, codes = string_codes(a, key)
    return codes, max(len(names), 1)


def set_tokens(elements: np.ndarray, super_attributes: np.ndarray,
               relation: np.ndarray, key=None) -> tuple[np.ndarray, np.ndarray, int]:
    """(N×S set tokens, N×8×O own tokens, vocabulary size) of one element type's matrices
    (see 3.). Element codes follow the order of the elements' `key` (default: the elements
    themselves)."""
    n = len(elements)
    el, n_el = _codes(elements, key)
    sa, n_sa = _codes(super_attributes)
    rel, n_rel = _codes(relation)
    same_el = el[:, :, None] == el[:, None, :]
    same_sa = sa[:, :, None] == sa[:, None, :]
    c_el, c_sa = same_el.sum(axis=2), same_sa.sum(axis=2)  # 1..8
    distinct_el = (1.0 / c_el).sum(axis=1).round().astype(np.int64)
    distinct_sa = (1.0 / c_sa).sum(axis=1).round().astype(np.int64)
    # elements of each super-attribute the data set shows; those of j's missing from the set
    size = np.array([len(np.unique(el[sa == s_code])) for s_code in range(n_sa)])
    present = (same_sa / c_el[:, None, :]).sum(axis=2).round().astype(np.int64)
    missing = np.clip(size[sa] - present, 0, 31)
    vocab = _Vocab()
    set_cols = [vocab.add("rel", n_rel, rel)]
    set_cols += [vocab.add("el", n_el, el[:, k]) for k in range(N_CANDIDATES)]
    set_cols += [vocab.add("sa", n_sa, sa[:, k]) for k in range(N_CANDIDATES)]
    set_cols += [vocab.add("nel", 9, distinct_el), vocab.add("nsa", 9, distinct_sa)]
    if n_el <= SET_ID_MAX:
        mask = (np.int64(1) << el).sum(axis=1)  # distinct elements: repeats only add bits
        set_cols.append(vocab.add("set", 1 << n_el, mask))
    own = [vocab.add("oel", n_el, el), vocab.add("osa", n_sa, sa),
           vocab.add("pos", N_CANDIDATES, np.broadcast_to(np.arange(N_CANDIDATES), el.shape)),
           vocab.add("cel", 9, c_el), vocab.add("csa", 9, c_sa), vocab.add("miss", 32, missing)]
    if n_el <= SET_ID_MAX:
        own += _count_tokens(vocab, el, n_el)
    return (np.stack(set_cols, axis=1).reshape(n, -1), np.stack(own, axis=2),
            vocab.size)


def _count_tokens(vocab, el: np.ndarray, n_el: int) -> list[np.ndarray]:
    """Rank among the 8 and offsets to the two lowest missing codes. Codes follow the
    elements' sort order; `set_probe_type` zero-pads counts ("01".."10") so that order, and
    with it every rank and offset, is the counts' own."""
    rank = (el[:, None, :] < el[:, :, None]).sum(axis=2)
    held = np.zeros((len(el), n_el), dtype=bool)
    np.put_along_axis(held, el, True, axis=1)
    out = [vocab.add("rank", N_CANDIDATES, rank)]
    missing = [np.argsort(held, axis=1, kind="stable")[:, k] for k in range(2)]
    for k, m in enumerate(missing):
        none = held[np.arange(len(el)), m]  # fewer than k+1 missing codes
        offset = np.where(none[:, None], 2 * n_el, el - m[:, None] + n_el)
        out.append(vocab.add(f"off{k}", 2 * n_el + 1, offset))
    return out


class _Vocab:
    """Token families laid out one after another in one embedding table."""

    def __init__(self) -> None:
        self.size, self.base = 0, {}

    def add(self, name: str, n: int, codes: np.ndarray) -> np.ndarray:
        if name not in self.base:
            self.base[name] = self.size
            self.size += n
        return self.base[name] + np.asarray(codes, dtype=np.int64)


def fit_set_mlp(set_tok: np.ndarray, own_tok: np.ndarray, answers: np.ndarray,
                train: np.ndarray, val: np.ndarray, rng: np.random.Generator):
    """The set MLP (see 3.) fitted on rows `train` of the tokens (`set_tokens`): Adam for
    `EPOCHS` epochs of `BATCH`-matrix minibatches, the embeddings penalised by `L2`, keeping
    the epoch with the best accuracy on rows `val`. Returns its scores: a function of (set
    tokens, own tokens) of N matrices, giving an N×8 tensor."""
    import torch  # here, not on top: only the process that fits it pays for the import

    vocab = int(max(set_tok.max(), own_tok.max())) + 1
    table = torch.from_numpy(rng.normal(0, 0.1, (vocab, HIDDEN)).astype(np.float32))
    embed = torch.nn.EmbeddingBag.from_pretrained(table, freeze=False, mode="sum")
    bias = torch.zeros(HIDDEN, requires_grad=True)
    out = torch.from_numpy(rng.normal(0, 0.1, HIDDEN).astype(np.float32)).requires_grad_()
    params = [embed.weight, bias, out]

    def scores(set_rows: np.ndarray, own_rows: np.ndarray):
        n, k, o = own_rows.shape
        own = embed(torch.from_numpy(own_rows.reshape(n * k, o))).reshape(n, k, HIDDEN)
        return torch.relu(embed(torch.from_numpy(set_rows))[:, None] + own + bias) @ out

    adam = torch.optim.Adam([{"params": params[:1], "weight_decay": L2},
                             {"params": params[1:]}], lr=LR)
    best, kept = -1.0, params
    for _ in range(EPOCHS):
        order = train[rng.permutation(len(train))]
        for s in range(0, len(order), BATCH):
            idx = order[s:s + BATCH]
            loss = torch.nn.functional.cross_entropy(scores(set_tok[idx], own_tok[idx]),
                                                     torch.from_numpy(answers[idx]))
            adam.zero_grad()
            loss.backward()
            adam.step()
        score = float(set_hits(scores, set_tok[val], own_tok[val], answers[val]).mean()) \
            if len(val) else 0.0
        if score > best:
            best, kept = score, [p.detach().clone() for p in params]
    with torch.no_grad():
        for p, k in zip(params, kept):
            p.copy_(k)
    return scores


def set_hits(scores, set_tok: np.ndarray, own_tok: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Per matrix, the share of the top-scoring candidates under `scores` that is the answer;
    4,096 matrices at a time, so that each one's hidden layer stays small."""
    import torch

    if len(y) == 0:
        return np.zeros(0)
    with torch.no_grad():
        return np.concatenate([audit.hits_of(scores(set_tok[part], own_tok[part]).numpy(),
                                             y[part])
                               for part in np.array_split(np.arange(len(y)), -(-len(y) // 4096))])


def set_probe(elements: np.ndarray, super_attributes: np.ndarray, answers: np.ndarray,
              train: np.ndarray, val: np.ndarray, test: np.ndarray,
              element_type: np.ndarray, relation: np.ndarray, rng: np.random.Generator,
              note: str = "") -> Check:
    """The set MLP, one model per element type, scored per element type and per relation x
    element type. Arrays are over all matrices; only rows in train / val / test are read.
    Each element type's model draws from its own stream, spawned from `rng`."""
    types = probe_types(element_type, test)
    streams = rng.spawn(len(types))
    results = [r for etype, stream in zip(types, streams)
               for r in set_probe_type(etype, elements, super_attributes, answers, train, val,
                                       test, element_type, relation, stream)]
    return set_check(results, note)


def probe_types(element_type: np.ndarray, test: np.ndarray) -> list[str]:
    """The element types the set MLP probes, in the order their streams are spawned."""
    return sorted(set(element_type[test].tolist()))


def set_check(results: list[tuple[str, np.ndarray, int]], note: str = "") -> Check:
    """The set MLP's check from every group's (name, test hits, train size)."""
    return audit.judge_groups("bias:probe-sets", "context-blind MLP on the candidate set",
                              results, note)


def set_probe_type(etype: str, elements: np.ndarray, super_attributes: np.ndarray,
                   answers: np.ndarray, train: np.ndarray, val: np.ndarray, test: np.ndarray,
                   element_type: np.ndarray, relation: np.ndarray,
                   rng: np.random.Generator) -> list[tuple[str, np.ndarray, int]]:
    """One element type's model: (group, test hits, train size) for the type and for each
    of its relations."""
    mine = np.flatnonzero(element_type == etype)
    tr, va, te = (np.intersect1d(rows, mine) for rows in (train, val, test))
    if len(tr) < MIN_PROBE_TEST or len(te) < MIN_PROBE_TEST:
        return [(etype, np.zeros(0), len(tr))]
    used = np.concatenate([tr, va, te])
    # counts get codes in count order ("01".."10"), so ranks and offsets are arithmetic
    key = (lambda e: e.zfill(2)) if etype == "count" else None
    set_tok, own_tok, _ = set_tokens(elements[used], super_attributes[used], relation[used],
                                     key)
    local = np.arange(len(used))
    l_tr, l_va, l_te = local[:len(tr)], local[len(tr):len(tr) + len(va)], \
        local[len(tr) + len(va):]
    y = answers[used]
    with audit.one_torch_thread():
        scores = fit_set_mlp(set_tok, own_tok, y, l_tr, l_va, rng)
        hits = set_hits(scores, set_tok[l_te], own_tok[l_te], y[l_te])
    results = [(etype, hits, len(tr))]
    rel_te, rel_tr = relation[te], relation[tr]
    for rel in sorted(set(rel_te.tolist())):
        results.append((f"{etype} x {rel}", hits[rel_te == rel], int((rel_tr == rel).sum())))
    return results


def val_rows(data, train: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray,
                                                                        np.ndarray]:
    """(train, val) rows: the neutral split's val part (≤ VAL_MAX per element type), or,
    without one, a fifth of `train` set aside."""
    m = data.matrices
    val = np.setdiff1d(present_rows(m.id, m.splits.get("neutral", {}).get("val", [])), train)
    if len(val) == 0:
        perm = rng.permutation(train)
        cut = len(train) // 5
        return np.sort(perm[cut:]), np.sort(perm[:cut])
    etype = m.element_type
    parts = [rng.choice(val[etype[val] == t], min(VAL_MAX, int((etype[val] == t).sum())),
                        replace=False) for t in sorted(set(etype[val].tolist()))]
    return train, np.sort(np.concatenate(parts))


class SetInputs:
    """What both set-level probes read of `data` (a `loaded.Data`), neutral rows given.
    A generator of its own (`seed`, 27) draws the val rows, so the other probes' draws are
    unchanged; a fresh one spawns the set MLP's streams, one per element type."""

    def __init__(self, data, train: np.ndarray, test: np.ndarray, seed: int = 0) -> None:
        self.seed = seed
        m = data.matrices
        self.answers = m.answer.astype(np.int64)
        self.elements = m.elements[:, N_CONTEXT:]  # Python strings, coded where used
        rows = np.where(data.rows < 0, 0, data.rows)[:, N_CONTEXT:]
        self.super_attributes = data.crops.super_attribute[rows]
        self.etype, self.relation = m.element_type.astype(str), m.relation.astype(str)
        self.train, self.test = train, test
        self.fit, self.val = val_rows(data, train, np.random.default_rng([seed, 27]))

    def streams(self) -> np.random.Generator:
        """The generator whose spawned children are the set MLP's streams."""
        return np.random.default_rng([self.seed, 27])

    def absent(self, note: str = "") -> Check:
        return absent_value_probe(self.elements, self.answers, self.train, self.test,
                                  self.etype, self.relation, note)

    def blocks(self, note: str = "") -> Check:
        return block_probe(self.super_attributes, self.answers, self.train, self.test,
                           self.etype, self.relation, note)

    def types(self) -> list[str]:
        return probe_types(self.etype, self.test)

    def one_type(self, k: int) -> list[tuple[str, np.ndarray, int]]:
        """`set_probe_type` of the k-th of `types()`, on its own spawned stream."""
        return set_probe_type(self.types()[k], self.elements, self.super_attributes,
                              self.answers, self.fit, self.val, self.test, self.etype,
                              self.relation, self.streams().spawn(k + 1)[k])


def check_sets(data, train: np.ndarray, test: np.ndarray, seed: int = 0,
               note: str = "") -> list[Check]:
    """Both set-level probes on `data` (a `loaded.Data`), neutral rows given."""
    inputs = SetInputs(data, train, test, seed)
    return [inputs.absent(note), inputs.blocks(note),
            set_probe(inputs.elements, inputs.super_attributes, inputs.answers, inputs.fit,
                      inputs.val, test, inputs.etype, inputs.relation, inputs.streams(), note)]
