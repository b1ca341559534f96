"""Bias audit of a built data set: can the answer be found without looking at the context?

1. Answer position: χ² of the answer index against N/8 per position, overall and per type.
2. "Pick a most frequent element" and "pick the odd one out" (1/8 unless they are tells).
3. Context-blind probes per element type and relation x element type, fitted on the neutral
   train part, scored on its test part: softmax over the 8 of w·x_j, w an L2-penalised logistic
   fit (scipy's L-BFGS-B) on j's position, dense label features and an indicator per (label of
   j, how many of the other 7 carry it); or, with image features, on j's feature vector.

The verdict: each group tests "a held-out matrix's hit (the chance the pick is its answer) has
mean 1/8". `tail_p` bounds the hits' sum's tail by Bentkus's inequality (Ann. Probab. 2004;
8-way ties left out). Holm's step-down over every judged group of a data set keeps the
family-wise error at `FAMILY_ALPHA`; a group fails when its adjusted p is below it AND its rate
is at least chance + `SHORTCUT_MARGIN`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property
from itertools import chain
from typing import TYPE_CHECKING

import numpy as np

from vprom.domain import CHANCE, N_CANDIDATES, SHORTCUT_MARGIN
from vprom.statistics import wilson_interval

if TYPE_CHECKING:
    import scipy.sparse

MIN_PROBE_TEST = 50  # fewer test matrices than this tell nothing; the probe is skipped
FOLDS = 5  # the label probe's answer rates for training rows come from the other folds
L2 = 1e-3  # the label probe's penalty, times half the squared weights
#: the feature probe's penalty (at unit deviation; a weak one overfits) and iterations
FEATURE_L2, FEATURE_ITERATIONS = 1.0, 100
#: the label probe's position features: one-hot, standardised (mean 1/8, deviation √7/8)
SLOTS = (np.eye(N_CANDIDATES) - 1 / N_CANDIDATES) / (math.sqrt(N_CANDIDATES - 1) / N_CANDIDATES)

#: family-wise error rate of one data set's bias checks
FAMILY_ALPHA = 0.01
#: the smallest rate that fails (with significance): chance plus the practical tolerance
LIMIT = CHANCE + SHORTCUT_MARGIN


def tail_p(hits: float, n: int) -> float:
    """Bentkus's bound on P(S >= hits), S a sum of n independent hits in [0, 1] of mean 1/8:
    min over integers h < hits of E(T - h)+ / (hits - h), T ~ Binomial(n, 1/8)."""
    from scipy.special import bdtrc

    if hits <= n * CHANCE:
        return 1.0
    h = np.arange(int(np.ceil(hits)))
    stop_loss = n * CHANCE * bdtrc(h - 1, n - 1, CHANCE) - h * bdtrc(h, n, CHANCE)
    return float(min(1.0, (stop_loss / (hits - h)).min()))


def group_test(hits: np.ndarray, n_train: int | None = None, min_n: int = 50) -> dict:
    """A group's figures from its held-out hits: rate, 95% interval, counts and p-value (when
    test and train, if given, reach `min_n`); `decide` gives the verdict."""
    hits = np.asarray(hits, dtype=np.float64)
    n = len(hits)
    lo, hi = wilson_interval(float(hits.sum()), n)
    judged = n >= min_n and (n_train is None or n_train >= min_n)
    tested = hits[hits != CHANCE]
    return {"accuracy": float(np.mean(hits)) if n else float("nan"), "ci95": [lo, hi],
            "test": n, "train": n_train, "judged": bool(judged),
            # fsum: exactly rounded, so the order of the hits cannot move the p-value
            "p": tail_p(math.fsum(tested), len(tested)) if judged else None,
            "p_adjusted": None, "failed": False}


def holm(p_values) -> np.ndarray:
    """Holm's step-down adjusted p-values (statsmodels is no dependency for six lines)."""
    p = np.asarray(p_values, dtype=float)
    order = np.argsort(p, kind="stable")
    stepped = np.maximum.accumulate((len(p) - np.arange(len(p))) * p[order])
    out = np.empty_like(p)
    out[order] = np.minimum(stepped, 1.0)
    return out


def family_groups(checks) -> list[tuple[object, str, dict]]:
    """(check, group, figures) of every judged group with a p-value: the family."""
    return [(c, g, f) for c in checks for g, f in c.figures.items()
            if isinstance(f, dict) and f.get("judged") and f.get("p") is not None]


def decide(checks) -> None:
    """Holm over `checks`' groups: each group's adjusted p and verdict, each check's status."""
    members = family_groups(checks)
    adjusted = holm([f["p"] for _, _, f in members])
    for (_, _, f), q in zip(members, adjusted):
        f["p_adjusted"] = float(q)
        f["failed"] = bool(q < FAMILY_ALPHA and f["accuracy"] >= LIMIT)
    for c in {id(c): c for c, _, _ in members}.values():
        c.problems = [f"{g}: {100 * f['accuracy']:.1f}% without the context "
                      f"(95% CI {100 * f['ci95'][0]:.1f}–{100 * f['ci95'][1]:.1f}% on "
                      f"{f['test']:,} matrices; p={f['p']:.2g}, adjusted {f['p_adjusted']:.2g})"
                      for g, f in c.figures.items() if isinstance(f, dict) and f.get("failed")]
        c.status = "fail" if c.problems else "pass"


def format_group(group: str, f: dict) -> str:
    """One report line: rate, interval, n, p, adjusted p and verdict."""
    if not f["test"]:
        return f"{group:30s} no test matrices"
    verdict = ("FAIL" if f["failed"] else "pass") if f["judged"] else "too few to judge"
    p = ("" if f["p"] is None else f"  p={f['p']:.2g}"
         + ("" if f["p_adjusted"] is None else f"  adjusted={f['p_adjusted']:.2g}"))
    return (f"{group:30s} {100 * f['accuracy']:5.1f}%  ({100 * f['ci95'][0]:.1f}–"
            f"{100 * f['ci95'][1]:.1f})  n={f['test']:,}{p}  {verdict}")


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


def answer_position(answers: np.ndarray, groups: dict[str, np.ndarray]) -> Check:
    """χ² test of uniform answer positions, overall and per group."""
    from scipy.special import chdtrc  # the χ² tail of scipy.stats.chi2.sf, without its 0.5 s

    tests = {"all": np.asarray(answers)}
    tests.update({g: np.asarray(answers)[idx] for g, idx in sorted(groups.items())})
    figures = {}
    for group, a in tests.items():
        if len(a) == 0:
            continue
        counts = np.bincount(a.astype(np.int64), minlength=N_CANDIDATES)[:N_CANDIDATES]
        expected = len(a) / N_CANDIDATES
        stat = float(((counts - expected) ** 2).sum() / expected)
        top = int(counts.max())
        figures[group] = {"counts": counts.tolist(), "chi2": round(stat, 3),
                          "accuracy": top / len(a), "ci95": list(wilson_interval(top, len(a))),
                          "test": len(a), "train": None, "judged": True,
                          "p": float(chdtrc(N_CANDIDATES - 1, stat)), "p_adjusted": None,
                          "failed": False}
    overall = figures["all"]
    check = Check("bias:position", "pass", f"answer positions {overall['counts']} "
                  f"(chi2={overall['chi2']:.1f}, p={overall['p']:.3g}; the rate: the most "
                  "frequent position's share)", figures)
    decide([check])
    return check


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


def label_index(label_ids: list[tuple[int, ...]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The label sets `label_ids` flat: (every label id, each set's start, its size)."""
    sizes = np.array([len(ids) for ids in label_ids], dtype=np.int64)
    flat = np.fromiter(chain.from_iterable(label_ids), dtype=np.int64, count=int(sizes.sum()))
    return flat, np.cumsum(sizes) - sizes, sizes


def set_labels(index: tuple[np.ndarray, np.ndarray, np.ndarray],
               sets: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every label of the label sets `sets` (by `label_index`): (its set's place in `sets`, its
    place in the set, its id)."""
    flat, starts, sizes = index
    n = sizes[sets]
    within = np.arange(int(n.sum()), dtype=np.int64) - np.repeat(np.cumsum(n) - n, n)
    return (np.repeat(np.arange(len(sets), dtype=np.int64), n), within,
            flat[np.repeat(starts[sets], n) + within])


def label_overlap(label_ids: list[tuple[int, ...]], candidate_rows: np.ndarray) -> np.ndarray:
    """M×8: per candidate (a row of `label_ids`), the share of the other 7 sharing a label."""
    owner, _, label = set_labels(label_index(label_ids), np.arange(len(label_ids)))
    # each row's labels as bits, one row of `words` per 64 label ids
    words = np.zeros((int(label.max(initial=0)) // 64 + 1, len(label_ids)), dtype=np.uint64)
    np.bitwise_or.at(words, (label // 64, owner),
                     np.left_shift(np.uint64(1), (label % 64).astype(np.uint64)))
    shares = np.zeros(candidate_rows.shape + (N_CANDIDATES,), dtype=bool)  # M×8×8
    for word in words:
        bits = word[candidate_rows]
        shares |= (bits[:, :, None] & bits[:, None, :]) != 0
    diagonal = np.arange(N_CANDIDATES)
    return (shares.sum(axis=2) - shares[:, diagonal, diagonal]) / (N_CANDIDATES - 1)


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

    @cached_property
    def label_index(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return label_index(self.row_labels)


def label_features(view: CandidateView, answers: np.ndarray, train: np.ndarray,
                   rows: np.ndarray) -> np.ndarray:
    """N_rows×8×F dense features of `rows`' candidates; a training row's element answer rates
    come from the other folds of `train` (leave-one-out would leak)."""
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


def set_entries(view: CandidateView, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(candidate i*8+j, column l*8+c) per label l of candidate j, c of the other 7 carry l."""
    cand, _, label = set_labels(view.label_index, view.label_row[rows].ravel())
    # how many of the matrix's 8 candidates carry each (matrix, label) pair
    n_ids = int(view.label_index[0].max(initial=0)) + 1
    _, pair, count = np.unique((cand // N_CANDIDATES) * n_ids + label,
                               return_inverse=True, return_counts=True)
    return cand, label * N_CANDIDATES + count[pair.ravel()] - 1


def label_design(x: np.ndarray, entries: tuple[np.ndarray, np.ndarray],
                 n_sparse: int) -> tuple[np.ndarray, scipy.sparse.csr_matrix]:
    """A row per candidate, slot-major (j*N + i): x's F columns, `n_sparse` indicators."""
    import scipy.sparse

    n, _, f = x.shape
    cand, feat = entries
    rows = cand % N_CANDIDATES * n + cand // N_CANDIDATES
    # x column-major (in float64, as the fit): BLAS's two products both read columns
    return (x.astype(np.float64).transpose(2, 1, 0).reshape(f, -1).T,
            scipy.sparse.csr_matrix((np.ones(len(cand)), (rows, feat)),
                                    shape=(n * N_CANDIDATES, n_sparse)))


def logit_scores(design: tuple[np.ndarray, scipy.sparse.csr_matrix], w: np.ndarray):
    """N×8 scores under weights `w` (F dense, 8 position, then sparse weights)."""
    f = design[0].shape[1]
    scores = (design[0] @ w[:f] + design[1] @ w[f + N_CANDIDATES:]).reshape(N_CANDIDATES, -1)
    return (scores + (SLOTS @ w[f:f + N_CANDIDATES])[:, None]).T


def fit_logit(design: tuple[np.ndarray, scipy.sparse.csr_matrix], answers: np.ndarray,
              l2: float = L2) -> np.ndarray:
    """The weights minimising the mean negative log-likelihood plus `l2`/2 their squares."""
    n = len(answers)
    dense, sparse = design
    # searching z = weights times their column's RMS (a rare label bends the loss up to 1000x
    # less than a feature) takes a third of the evaluations
    held = np.bincount(sparse.indices, minlength=sparse.shape[1]) / sparse.shape[0]  # 0/1s
    scale = 1 / np.sqrt(np.concatenate([np.square(dense).mean(axis=0), np.ones(N_CANDIDATES),
                                        held]) + l2)
    sparse_t = sparse.T.tocsr()

    def loss_grad(z: np.ndarray) -> tuple[float, np.ndarray]:
        w = scale * z
        loss, residual = softmax_residual(logit_scores(design, w), answers)
        r = residual.T.ravel()  # slot-major, as the design's rows
        grad = np.concatenate([r @ dense, residual.sum(axis=0) @ SLOTS, sparse_t @ r])
        return loss / n + 0.5 * l2 * float(np.square(w).sum()), scale * (grad / n + l2 * w)

    return scale * lbfgs(loss_grad, np.zeros(len(scale)), ftol=1e-8)


def lbfgs(loss_grad, start: np.ndarray, maxiter: int = 15_000, ftol: float = 1e-6):
    """scipy's L-BFGS-B minimum of `loss_grad(array) -> (loss, gradient)` from `start`."""
    from scipy.optimize import minimize

    def flat_loss_grad(z: np.ndarray) -> tuple[float, np.ndarray]:
        loss, grad = loss_grad(z.reshape(start.shape))
        return loss, grad.ravel()

    return minimize(flat_loss_grad, start.ravel(), jac=True, method="L-BFGS-B",
                    options={"maxiter": maxiter, "ftol": ftol}).x.reshape(start.shape)


def softmax_residual(scores: np.ndarray, answers: np.ndarray) -> tuple[float, np.ndarray]:
    """(summed negative log-likelihood of `answers` under row softmaxes, its score gradient)."""
    scores = scores - scores.max(axis=1, keepdims=True)
    p = np.exp(scores)
    total = p.sum(axis=1)
    picked = (np.arange(len(answers)), answers)
    loss = float((np.log(total) - scores[picked]).sum())
    p /= total[:, None]
    p[picked] -= 1.0
    return loss, p


def chunked_hits(scores_of, rows: np.ndarray, answers: np.ndarray) -> np.ndarray:
    """`hits_of(scores_of(rows))`, 4,096 rows at a time."""
    return np.concatenate([hits_of(scores_of(part), answers[part])
                           for part in np.array_split(rows, -(-len(rows) // 4096))])


def hits_of(scores: np.ndarray, answers: np.ndarray) -> np.ndarray:
    """Per matrix: the share of its best-scoring candidates that is the answer."""
    top = np.isclose(scores, scores.max(axis=1, keepdims=True), rtol=0, atol=1e-9)
    return top[np.arange(len(answers)), answers] / top.sum(axis=1)


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


def judge_groups(name: str, what: str, results: list[tuple[str, np.ndarray, int | None]],
                 note: str = "") -> Check:
    """One check over groups' (name, test hits, train size), judged as a family of its own."""
    figures = {group: group_test(hits, n_train, MIN_PROBE_TEST)
               for group, hits, n_train in results}
    if not any(f["judged"] for f in figures.values()):
        return Check(name, "skip", f"{what}: too few matrices to judge any group (each needs "
                     f"{MIN_PROBE_TEST} train and test)", figures)
    check = Check(name, "pass", what + note, figures)
    decide([check])
    return check


def group_hits(element_type: np.ndarray, relation: np.ndarray, train: np.ndarray,
               test: np.ndarray, hits) -> list[tuple[str, np.ndarray, int]]:
    """(group, `hits(train rows, test rows)` or none if too few, train size) per group."""
    return [(group, hits(tr, te) if min(len(tr), len(te)) >= MIN_PROBE_TEST else np.zeros(0),
             len(tr)) for group, tr, te in probe_groups(element_type, relation, train, test)]


def label_group_hits(view: CandidateView, answers: np.ndarray, train: np.ndarray,
                     test: np.ndarray) -> np.ndarray:
    """The label probe's hits on `test` after fitting on `train` (none if either is small)."""
    if len(train) < MIN_PROBE_TEST or len(test) < MIN_PROBE_TEST:
        return np.zeros(0)
    n_sparse = N_CANDIDATES * (1 + int(view.label_index[0].max(initial=0)))
    x_tr, x_te = (label_features(view, answers, train, rows) for rows in (train, test))
    flat = x_tr.reshape(-1, x_tr.shape[-1])
    mean, std = flat.mean(axis=0), flat.std(axis=0)
    std[std < 1e-8] = 1.0  # a constant column stays 0
    x_tr, x_te = (x_tr - mean) / std, (x_te - mean) / std
    w = fit_logit(label_design(x_tr, set_entries(view, train), n_sparse), answers[train])
    return hits_of(logit_scores(label_design(x_te, set_entries(view, test), n_sparse), w),
                   answers[test])


def feature_probe(feats: np.ndarray, rows: np.ndarray, answers: np.ndarray, train: np.ndarray,
                  test: np.ndarray, element_type: np.ndarray, relation: np.ndarray,
                  note: str = "") -> Check:
    """The probes on image features (`feats[rows[i, j]]`: candidate j of matrix i)."""
    def group(train: np.ndarray, test: np.ndarray) -> np.ndarray:
        # each train crop once, in float32; a softmax ignores a shared shift: scale only
        crops, local = np.unique(rows[train], return_inverse=True)
        x = feats[crops].astype(np.float32)
        scale = max(float(x.std()), 1e-8)
        x /= scale
        local = local.reshape(len(train), N_CANDIDATES)

        def loss_grad(w: np.ndarray) -> tuple[float, np.ndarray]:
            loss, residual = softmax_residual((x @ w.astype(np.float32))[local], answers[train])
            per_crop = np.bincount(local.ravel(), residual.ravel(), minlength=len(crops))
            return (loss / len(train) + 0.5 * FEATURE_L2 * float(w @ w),
                    per_crop.astype(np.float32) @ x / len(train) + FEATURE_L2 * w)

        w = lbfgs(loss_grad, np.zeros(feats.shape[1]), maxiter=FEATURE_ITERATIONS)
        w = (w / scale).astype(np.float32)
        return chunked_hits(lambda idx: feats[rows[idx]].astype(np.float32) @ w, test, answers)

    return judge_groups("bias:probe-features", "context-blind probe on candidate image "
                        "features", group_hits(element_type, relation, train, test, group), note)
