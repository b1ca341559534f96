"""Bias audit of a built data set: can the answer be found without looking at the context?

A sound V-PROM matrix can only be solved by reading its 8 context panels. This module
measures the shortcuts a model could take instead, using the candidates alone:

1. Answer position. The answer index (0..7) must be uniform: a χ² goodness-of-fit test
   against N/8 per position, with its p-value from the regularized upper incomplete gamma
   function Q(k/2, χ²/2) (series / continued fraction, stdlib `math` only).
2. Element-frequency heuristics. "Pick a candidate whose element is the most frequent
   among the candidates" and "pick the odd one out (an element unique among the
   candidates while others repeat)" are context-blind strategies; each picks uniformly
   among the candidates it singles out (all 8 when it singles out none). If the answer's
   position is independent of the candidates' elements, each scores exactly 1/8 in
   expectation, whatever the elements are.
3. Context-blind probes, one per element type and one per relation x element type (a
   shortcut confined to one relation of one type would hide in a pooled figure). A
   conditional-logit model (score s_j = w·x_j + Σ_l W[l, c_l] per candidate, softmax over
   the 8) is trained on the neutral split's train part and scored on its test part. x_j
   describes candidate j from its labels only: how often its element and super-attribute
   occur among the 8 candidates, its element's answer rate in train (for a training row,
   from the other folds of train, so the feature neither contains nor reveals the target),
   how many labels it carries (explicit and implied apart), its label overlap with the
   others, box size and shape, and its position. The set part W sees every label l the
   candidate carries (explicit or implied) together with c_l, how many of the other 7 carry
   it too: a learnt weight per (label, count) finds "the one male among seven women", "the
   only one labelled curly", "the one without the label all others share". With a FEATS.h5
   the same probes run on the candidates' image features, mean-centred over the 8
   candidates.

A strategy (2, 3) is flagged only when its accuracy is significantly above chance plus a
2-point margin: the lower end of its 95% Wilson interval exceeds 14.5%. Small data sets
are therefore never flagged by noise, and large ones are flagged for real shortcuts only;
a probe group with fewer than `MIN_PROBE_TEST` test matrices is reported but not judged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from itertools import chain
from typing import TYPE_CHECKING

import numpy as np
from tqdm import tqdm

from vprom.generation.verify.minimise import minimise
from vprom.domain import CHANCE, N_CANDIDATES, SHORTCUT_MARGIN
from vprom.statistics import chi2_sf, wilson_interval

if TYPE_CHECKING:
    import scipy.sparse

MARGIN = SHORTCUT_MARGIN  # a shortcut worth at most 2 accuracy points is tolerated
POSITION_ALPHA = 1e-3  # family-wise level of the answer-position tests
MIN_PROBE_TEST = 50  # fewer test matrices than this tell nothing; the probe is skipped
FOLDS = 5  # the label probe's answer rates for training rows come from the other folds
#: the label probe's per-slot features: candidate j's position, one-hot and standardised
#: (mean 1/8, standard deviation √7/8), the same for every matrix
SLOTS = (np.eye(N_CANDIDATES) - 1 / N_CANDIDATES) / (math.sqrt(N_CANDIDATES - 1) / N_CANDIDATES)


@dataclass
class Check:
    """One named verification result; `status` is 'pass', 'fail' or 'skip'."""

    name: str
    status: str
    summary: str
    figures: dict = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.status != "fail"


# ---------------------------------------------------------------- 1. answer position
def answer_position(answers: np.ndarray, groups: dict[str, np.ndarray]) -> Check:
    """χ² test of uniform answer positions, overall and per group (Bonferroni-corrected)."""
    tests = {"all": np.asarray(answers)}
    tests.update({g: np.asarray(answers)[idx] for g, idx in sorted(groups.items())})
    tests = {g: a for g, a in tests.items() if len(a) > 0}
    alpha = POSITION_ALPHA / max(1, len(tests))
    figures, problems = {}, []
    for group, a in tests.items():
        counts = np.bincount(a.astype(np.int64), minlength=N_CANDIDATES)[:N_CANDIDATES]
        expected = len(a) / N_CANDIDATES
        stat = float(((counts - expected) ** 2).sum() / expected)
        p = chi2_sf(stat, N_CANDIDATES - 1)
        figures[group] = {"counts": counts.tolist(), "chi2": round(stat, 3), "p": p}
        if p < alpha:
            problems.append(f"{group}: answer positions {counts.tolist()} are not uniform "
                            f"(chi2={stat:.1f}, p={p:.2g} < {alpha:.2g})")
    overall = figures["all"]
    summary = (f"answer positions {overall['counts']} (chi2={overall['chi2']:.1f}, "
               f"p={overall['p']:.3g}; fail below p={alpha:.2g} per test, "
               f"{len(tests)} tests)")
    return Check("bias:position", "fail" if problems else "pass", summary, figures, problems)


# ---------------------------------------------------------------- 2. frequency heuristics
def within_counts(codes: np.ndarray) -> np.ndarray:
    """N×8: how many of the 8 candidates share each candidate's code."""
    return (codes[:, :, None] == codes[:, None, :]).sum(axis=2)


def heuristic_hits(codes: np.ndarray, answers: np.ndarray, kind: str) -> np.ndarray:
    """Per matrix, the probability that the heuristic picks the answer (0..1)."""
    counts = within_counts(codes)
    if kind == "mode":
        chosen = counts == counts.max(axis=1, keepdims=True)
    elif kind == "odd":
        unique = counts == 1
        # "odd one out" needs others that repeat; otherwise the heuristic has no pick
        applies = unique.any(axis=1) & (counts > 1).any(axis=1)
        chosen = np.where(applies[:, None], unique, True)
    else:
        raise ValueError(f"unknown heuristic {kind!r}")
    picked = chosen[np.arange(len(answers)), answers]
    return picked / chosen.sum(axis=1)


def shortcut_check(name: str, what: str, hits: np.ndarray) -> Check:
    """Flag a strategy whose 95% lower bound exceeds chance + MARGIN."""
    n = len(hits)
    acc = float(hits.mean()) if n else CHANCE
    lo, hi = wilson_interval(float(hits.sum()), n)
    limit = CHANCE + MARGIN
    failed = n > 0 and lo > limit
    summary = (f"{what}: {100 * acc:.1f}% on {n:,} matrices (95% CI {100 * lo:.1f}–"
               f"{100 * hi:.1f}%; chance 12.5%, fail if the lower bound > {100 * limit:.1f}%)")
    problems = [f"{what} scores {100 * acc:.1f}% without the context"] if failed else []
    return Check(name, "fail" if failed else "pass", summary,
                 {"accuracy": acc, "ci95": [lo, hi], "n": n, "limit": limit}, problems)


# ---------------------------------------------------------------- 3. the context-blind probe
def label_masks(label_ids: list[tuple[int, ...]]) -> list[int]:
    """Each label set (its label ids) as a bit mask over all labels, one Python int each."""
    return [sum(1 << i for i in ids) for ids in label_ids]


def label_overlap(masks: list[int], candidate_rows: np.ndarray) -> np.ndarray:
    """M×8: per candidate, the fraction of the other 7 sharing at least one label with it.

    `candidate_rows` (M×8) index `masks` (from `label_masks`; crops share label sets, so
    one mask per distinct set), which become rows of 64-bit words here, so every pair of
    candidates is compared by numpy, a block of matrices at a time.
    """
    words = max(1, -(-max(masks, default=0).bit_length() // 64))
    bits = np.frombuffer(b"".join(m.to_bytes(8 * words, "little") for m in masks),
                         dtype="<u8").reshape(len(masks), words)
    out = np.zeros(candidate_rows.shape)
    block = max(1, (1 << 21) // (N_CANDIDATES * N_CANDIDATES * words))  # ~16 MB of pairs
    diagonal = np.arange(N_CANDIDATES)
    for s in range(0, len(candidate_rows), block):
        b = bits[candidate_rows[s:s + block]]  # m × 8 × words
        shares = (b[:, :, None, :] & b[:, None, :, :]).any(axis=3)  # m × 8 × 8
        out[s:s + block] = shares.sum(axis=2) - shares[:, diagonal, diagonal]
    return out / (N_CANDIDATES - 1)


@dataclass
class CandidateView:
    """What the probe may see of each matrix's 8 candidates (arrays are N×8)."""

    element: np.ndarray  # element codes
    super_attribute: np.ndarray  # super-attribute codes
    n_labels: np.ndarray
    overlap: np.ndarray  # label overlap with the other candidates
    area: np.ndarray
    aspect: np.ndarray
    n_implied: np.ndarray | None = None  # implied labels (n_labels counts explicit ones)
    label_row: np.ndarray | None = None  # N×8 rows of `row_labels`, for the set part
    row_labels: list[tuple[int, ...]] | None = None  # per row: one label set's label ids
    index: dict = field(default_factory=dict, repr=False)  # `_label_index`, made once


def label_features(view: CandidateView, answers: np.ndarray, train: np.ndarray,
                   rows: np.ndarray) -> np.ndarray:
    """N_rows×8 features of the candidates of matrices `rows` (their position is the
    probe's per-slot part, `SLOTS`).

    The element answer rate (and frequency) is learnt on `train` only. A training row takes
    it from the other `FOLDS - 1` folds of `train` (folds by position in sorted `train`), so
    its own answer never enters its features. A leave-one-out rate would not do: it dips for
    the answer's element alone, and a probe with one weight per element reads the dip (on
    the small demo it lifted count x union to 17.5%; bench/RESULTS.md, tenth stop).
    """
    n_codes = int(view.element.max()) + 1
    order = np.sort(train)
    fold = np.arange(len(order)) % FOLDS
    seen = np.zeros((FOLDS + 1, n_codes))  # per fold; the last row, zeros, for other rows
    answered = np.zeros((FOLDS + 1, n_codes))
    for f in range(FOLDS):
        mine = order[fold == f]
        seen[f] = np.bincount(view.element[mine].ravel(), minlength=n_codes)
        answered[f] = np.bincount(view.element[mine, answers[mine]], minlength=n_codes)
    el = view.element[rows]
    held = np.full(len(rows), FOLDS)
    at = np.searchsorted(order, rows).clip(max=max(len(order) - 1, 0))
    in_train = (order[at] == rows) if len(order) else np.zeros(len(rows), bool)
    held[in_train] = fold[at[in_train]]
    seen_el = seen.sum(axis=0)[el] - seen[held[:, None], el]
    answered_el = answered.sum(axis=0)[el] - answered[held[:, None], el]
    prior = 2.0  # Laplace-style smoothing towards chance
    rate = (answered_el + prior * CHANCE) / (seen_el + prior)
    counts = within_counts(el)
    columns = [
        counts / N_CANDIDATES,
        (counts == 1).astype(float),
        (counts == counts.max(axis=1, keepdims=True)).astype(float),
        within_counts(view.super_attribute[rows]) / N_CANDIDATES,
        rate * N_CANDIDATES,
        np.log1p(seen_el),
        view.n_labels[rows],
        view.n_implied[rows] if view.n_implied is not None else np.zeros(el.shape),
        view.overlap[rows],
        np.log(np.maximum(view.area[rows], 1.0)),
        np.log(np.maximum(view.aspect[rows], 1e-3)),
    ]
    return np.stack(columns, axis=2).astype(np.float32)


def fit_probe(batches, n_features: int, steps: int, lr: float = 0.05,
              l2: float = 1e-4) -> np.ndarray:
    """Adam on the conditional-logit loss; `batches()` yields (X[B,8,F], answers[B])."""
    w = np.zeros(n_features)
    m = np.zeros_like(w)
    v = np.zeros_like(w)
    for t in range(1, steps + 1):
        x, y = batches()
        scores = x @ w.astype(x.dtype)  # float32 products: the probe needs no more precision
        scores -= scores.max(axis=1, keepdims=True)
        p = np.exp(scores)
        p /= p.sum(axis=1, keepdims=True)
        p[np.arange(len(y)), y] -= 1.0
        grad = np.einsum("bj,bjf->f", p, x) / len(y) + l2 * w
        m = 0.9 * m + 0.1 * grad
        v = 0.999 * v + 0.001 * grad * grad
        w -= lr * (m / (1 - 0.9 ** t)) / (np.sqrt(v / (1 - 0.999 ** t)) + 1e-8)
    return w


def probe_hits(x: np.ndarray, y: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Per matrix, the share of the top-scoring candidates that is the answer (ties split)."""
    scores = (x @ w.astype(x.dtype)).astype(np.float64)
    top = np.isclose(scores, scores.max(axis=1, keepdims=True), rtol=0, atol=1e-9)
    return top[np.arange(len(y)), y] / top.sum(axis=1)


def _standardise(x_train: np.ndarray, *others: np.ndarray) -> list[np.ndarray]:
    flat = x_train.reshape(-1, x_train.shape[-1])
    mean, std = flat.mean(axis=0), flat.std(axis=0)
    std[std < 1e-8] = 1.0
    return [(a - mean) / std for a in (x_train,) + others]


def set_entries(view: CandidateView, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The set part's entries for matrices `rows`: (candidate index i*8+j, feature l*8+c)
    for every label l of candidate j, c = how many of the other 7 carry l; candidate by
    candidate, each one's labels in order."""
    flat, starts, sizes = _label_index(view)
    sets = view.label_row[rows].ravel()
    n = sizes[sets]
    cand = np.repeat(np.arange(len(sets), dtype=np.int64), n)
    within = np.arange(int(n.sum()), dtype=np.int64) - np.repeat(np.cumsum(n) - n, n)
    label = flat[np.repeat(starts[sets], n) + within]
    # how many of the matrix's 8 candidates carry each (matrix, label) pair
    _, pair, count = np.unique((cand // N_CANDIDATES) * (int(flat.max(initial=0)) + 1) + label,
                               return_inverse=True, return_counts=True)
    return cand, label * N_CANDIDATES + count[pair.ravel()] - 1


def _label_index(view: CandidateView) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`view.row_labels` flat: (every label id, where each row's start, how many)."""
    if "labels" not in view.index:
        sizes = np.array([len(ls) for ls in view.row_labels], dtype=np.int64)
        flat = np.fromiter(chain.from_iterable(view.row_labels), dtype=np.int64,
                           count=int(sizes.sum()))
        view.index["labels"] = (flat, np.cumsum(sizes) - sizes, sizes)
    return view.index["labels"]


def _slot_major(x: np.ndarray, entries, n_sparse: int) -> tuple[np.ndarray, SetPart]:
    """x (N×8×F) as F×8N, column j*N + i for candidate j of matrix i, and the set entries
    re-indexed alike: the probe's reductions over the 8 candidates then run over 8
    contiguous runs of N instead of N runs of 8, and its products over the features are
    `einsum`s over F contiguous rows (no BLAS: its threads would make the sums depend on the
    machine's core count, and crowd the other workers' cores)."""
    n = x.shape[0]
    cand, feat = entries
    columns = np.ascontiguousarray(x.transpose(2, 1, 0).reshape(x.shape[-1], -1),
                                   dtype=np.float64)
    return columns, SetPart((cand % N_CANDIDATES) * n + cand // N_CANDIDATES, feat,
                            columns.shape[1], n_sparse)


class SetPart:
    """The set part's entries (column `cand`, table entry `feat`) as two sparse 0/1 matrices
    made once: `scores(table)` sums each column's entries, `grad(p)` each table entry's
    columns, both in the entries' order (a stable sort per row), so the very sums of
    `np.bincount(cand, table[feat])` and `np.bincount(feat, p[cand])`, without their
    gathers."""

    def __init__(self, cand: np.ndarray, feat: np.ndarray, n_columns: int,
                 n_sparse: int) -> None:
        self.by_column = _rows_of(cand, feat, n_columns, n_sparse)
        self.by_entry = _rows_of(feat, cand, n_sparse, n_columns)
        self.n_sparse = n_sparse

    def scores(self, table: np.ndarray) -> np.ndarray:
        return self.by_column @ table

    def grad(self, p: np.ndarray) -> np.ndarray:
        return self.by_entry @ p


def _rows_of(rows: np.ndarray, cols: np.ndarray, n_rows: int,
             n_cols: int) -> scipy.sparse.csr_matrix:
    import scipy.sparse  # here: importing it takes 0.1 s of every `vprom` start

    # the stable sort of the narrowest type that holds the rows (radix sort up to 16 bits)
    order = np.argsort(rows.astype(np.min_scalar_type(max(n_rows - 1, 0))), kind="stable")
    indptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=n_rows))])
    return scipy.sparse.csr_matrix((np.ones(len(rows)), cols[order], indptr),
                                   shape=(n_rows, n_cols))


def _set_scores(x: np.ndarray, w: np.ndarray, part: SetPart, table: np.ndarray) -> np.ndarray:
    """8×N scores of slot-major `x` and set part (`_slot_major`)."""
    n_dense = x.shape[0]
    scores = (np.einsum("fi,f->i", x, w[:n_dense]) + part.scores(table)).reshape(
        N_CANDIDATES, -1)
    return scores + (SLOTS @ w[n_dense:])[:, None]


def fit_set_probe(x: np.ndarray, y: np.ndarray, part: SetPart, n_sparse: int,
                  l2: float = 1e-3) -> tuple[np.ndarray, np.ndarray]:
    """The minimum of the conditional logit of `x`, the candidates' positions (`SLOTS`) and
    the sparse set part, all slot-major (`_slot_major`), plus `l2`/2 times the squared
    weights: (weights of x then of the slots, the set table). The loss is convex, so the
    probe is its one minimum, found by `minimise.minimise` (L-BFGS) on the weights scaled by
    `start_scale`: the same minimum, in a quarter of the evaluations."""
    n, n_w = len(y), x.shape[0] + N_CANDIDATES
    picked = (y, np.arange(n))

    def loss_grad(params: np.ndarray) -> tuple[float, np.ndarray]:
        w, table = params[:n_w], params[n_w:]
        scores = _set_scores(x, w, part, table)  # 8×N: a slot per row
        top = scores.max(axis=0)
        p = np.exp(scores - top)
        total = p.sum(axis=0)
        loss = float((np.log(total) + top - scores[picked]).sum()) / n
        p /= total
        p[picked] -= 1.0
        p = p.reshape(-1)
        # d/dw of Σ p·(x w + SLOTS w_slots): the slots' part from p's slot sums
        grad = np.concatenate([np.einsum("fi,i->f", x, p),
                               p.reshape(N_CANDIDATES, n).sum(axis=1) @ SLOTS,
                               part.grad(p)]) / n
        return loss + 0.5 * l2 * float((params * params).sum()), grad + l2 * params

    scale = start_scale(x, part, n, l2)

    def scaled(z: np.ndarray) -> tuple[float, np.ndarray]:
        loss, grad = loss_grad(scale * z)
        return loss, scale * grad

    params = scale * minimise(scaled, np.zeros(n_w + n_sparse))
    return params[:n_w], params[n_w:]


def start_scale(x: np.ndarray, part: SetPart, n: int, l2: float) -> np.ndarray:
    """1 / √(the loss's Hessian diagonal where the fit starts), per weight of
    `fit_set_probe`. A set entry seen in 3 of 20,000 matrices bends the loss a thousand times
    less than a feature does; L-BFGS, whose curvature estimate starts as a multiple of the
    identity, crawled along such weights (48-110 evaluations a group on the bench data set;
    16-32 with the scale, which also stopped nearer the minimum).

    At the start every weight is 0 and every candidate has p = 1/8, so the diagonal is
    (1/n) Σ_i (1/8) Σ_j (x_ij - x̄_i)² + l2 for a weight of candidates' values x_ij (x̄_i:
    their mean over matrix i's 8). That is the within-matrix variance for a feature's
    column; 1 for a position (`SLOTS` is scaled so); for a set entry of `set_entries`
    (label l, held by a = feat % 8 + 1 of the 8) in m columns, (m / n) (1/8) (1 - a/8)."""
    columns = x.reshape(x.shape[0], N_CANDIDATES, -1)
    within = (columns - columns.mean(axis=1, keepdims=True)) ** 2
    held = np.arange(part.n_sparse) % N_CANDIDATES + 1
    seen = np.diff(part.by_entry.indptr) / n
    diagonal = np.concatenate([within.mean(axis=(1, 2)), np.ones(N_CANDIDATES),
                               seen / N_CANDIDATES * (1 - held / N_CANDIDATES)]) + l2
    return 1 / np.sqrt(diagonal)


def _hits_of(scores: np.ndarray, y: np.ndarray) -> np.ndarray:
    top = np.isclose(scores, scores.max(axis=1, keepdims=True), rtol=0, atol=1e-9)
    return top[np.arange(len(y)), y] / top.sum(axis=1)


def probe_groups(element_type: np.ndarray, relation: np.ndarray, train: np.ndarray,
                 test: np.ndarray) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """(name, train rows, test rows) per element type and per relation x element type."""
    out = []
    for etype in sorted(set(element_type[test].tolist())):
        tr, te = train[element_type[train] == etype], test[element_type[test] == etype]
        out.append((etype, tr, te))
        for rel in sorted(set(relation[te].tolist())):
            out.append((f"{etype} x {rel}", tr[relation[tr] == rel], te[relation[te] == rel]))
    return out


def judge_groups(name: str, what: str, results: list[tuple[str, np.ndarray, int]],
                 note: str = "") -> Check:
    """One check over probe groups [(group, test hits, train size)]: fail when any group with
    at least MIN_PROBE_TEST test matrices has a 95% lower bound above chance + MARGIN."""
    limit = CHANCE + MARGIN
    figures, problems, parts, judged = {}, [], [], 0
    for group, hits, n_train in results:
        n = len(hits)
        acc = float(hits.mean()) if n else float("nan")
        lo, hi = wilson_interval(float(hits.sum()), n)
        judge = n >= MIN_PROBE_TEST and n_train >= MIN_PROBE_TEST
        judged += judge
        failed = judge and lo > limit
        figures[group] = {"accuracy": acc, "ci95": [lo, hi], "test": n, "train": n_train,
                          "judged": bool(judge), "failed": bool(failed)}
        if failed:
            problems.append(f"{group}: {what} scores {100 * acc:.1f}% without the context "
                            f"(95% CI {100 * lo:.1f}–{100 * hi:.1f}% on {n:,} matrices)")
        if n:
            parts.append(f"{group} {100 * acc:.1f}%" + ("" if judge else " (too few to judge)"))
    if not judged:
        return Check(name, "skip", f"too few matrices to probe any group (each needs "
                     f"{MIN_PROBE_TEST} train and test); {'; '.join(parts)}", figures)
    worst = max((f for f in figures.values() if f["judged"]), key=lambda f: f["ci95"][0])
    summary = (f"{what}, per element type and relation: " + ", ".join(parts)
               + f" (highest 95% lower bound {100 * worst['ci95'][0]:.1f}%; chance 12.5%, fail "
               f"if a lower bound > {100 * limit:.1f}%)" + note)
    return Check(name, "fail" if problems else "pass", summary, figures, problems)


def label_probe(view: CandidateView, answers: np.ndarray, train: np.ndarray,
                test: np.ndarray, element_type: np.ndarray, relation: np.ndarray,
                note: str = "") -> Check:
    """The context-blind probes on the candidates' labels, one per element type and one per
    relation x element type."""
    groups = probe_groups(element_type, relation, train, test)
    results = [(group, label_group_hits(view, answers, tr, te), len(tr))
               for group, tr, te in tqdm(groups, desc="label probes", unit="probe",
                                         disable=None)]
    return label_check(results, note)


def label_group_hits(view: CandidateView, answers: np.ndarray, train: np.ndarray,
                     test: np.ndarray) -> np.ndarray:
    """The label probe of one group (`probe_groups`): its hits on `test` after training on
    `train` (none when either is too small to judge)."""
    if len(train) < MIN_PROBE_TEST or len(test) < MIN_PROBE_TEST:
        return np.zeros(0)
    n_sparse = N_CANDIDATES * (1 + int(_label_index(view)[0].max(initial=0)))
    x_tr, x_te = _standardise(label_features(view, answers, train, train),
                              label_features(view, answers, train, test))
    x, part = _slot_major(x_tr, set_entries(view, train), n_sparse)
    w, table = fit_set_probe(x, answers[train], part, n_sparse)
    x, part = _slot_major(x_te, set_entries(view, test), n_sparse)
    return _hits_of(_set_scores(x, w, part, table).T, answers[test])


def label_check(results: list[tuple[str, np.ndarray, int]], note: str = "") -> Check:
    """The label probes' check from each group's (name, test hits, train size)."""
    return judge_groups("bias:probe-labels", "context-blind probe on candidate labels",
                        results, note)


def _feature_hits(feats: np.ndarray, rows: np.ndarray, answers: np.ndarray,
                  train: np.ndarray, test: np.ndarray, rng: np.random.Generator,
                  epochs: int, batch: int) -> np.ndarray:
    scale = float(np.std(feats[rows[train[: min(len(train), 2000)]]].astype(np.float32)))
    scale = scale if scale > 1e-8 else 1.0

    def gather(idx):
        x = feats[rows[idx]].astype(np.float32) / scale
        return x - x.mean(axis=1, keepdims=True)  # only differences between candidates count

    order = {"perm": rng.permutation(len(train)), "at": 0}

    def batches():
        if order["at"] + batch > len(train):
            order["perm"], order["at"] = rng.permutation(len(train)), 0
        idx = train[order["perm"][order["at"]: order["at"] + batch]]
        order["at"] += batch
        return gather(idx), answers[idx]

    steps = max(50, epochs * math.ceil(len(train) / batch))
    w = fit_probe(batches, feats.shape[1], steps, lr=0.01)
    return np.concatenate([probe_hits(gather(test[s: s + 4096]), answers[test[s: s + 4096]], w)
                           for s in range(0, len(test), 4096)])


def feature_probe(feats: np.ndarray, rows: np.ndarray, answers: np.ndarray, train: np.ndarray,
                  test: np.ndarray, rng: np.random.Generator, element_type: np.ndarray,
                  relation: np.ndarray, note: str = "", epochs: int = 5,
                  batch: int = 256) -> Check:
    """The probes on image features (`feats[rows[i, j]]` is candidate j of matrix i), one per
    element type and one per relation x element type."""
    results = []
    groups = probe_groups(element_type, relation, train, test)
    for group, tr, te in tqdm(groups, desc="feature probes", unit="probe", disable=None):
        if len(tr) < MIN_PROBE_TEST or len(te) < MIN_PROBE_TEST:
            results.append((group, np.zeros(0), len(tr)))
            continue
        results.append((group, _feature_hits(feats, rows, answers, tr, te, rng, epochs, batch),
                        len(tr)))
    return judge_groups("bias:probe-features", "context-blind probe on candidate image "
                        "features", results, note)
