"""`vprom verify --learned`: a model trained on the candidates alone, on their symbolic labels.

As I-RAVEN and RAVEN-FAIR judge an answer set: vprom's context-blind DeepSets model
(`baselines/context_blind.py`, rewritten here since generation may not import baselines) fed
each candidate's label multi-hot (explicit and implied; labels unseen in training set no bit).
One model per probe group, fitted by Adam on the neutral train part (the epoch of least loss
on a held-out fifth kept), scored on its test part and judged as `audit`'s probes are.
"""

from __future__ import annotations

import copy
import math

import numpy as np

import vprom.generation.verify.audit as audit
from vprom.domain import N_CANDIDATES
from vprom.generation.verify.audit import MIN_PROBE_TEST

#: width, Adam's step size and weight decay, matrices per step, most passes and steps (a
#: tell read off the whole set takes many passes: 6 find 12.9% of a 20% count tell, these 16.7%)
HIDDEN, LEARNING_RATE, WEIGHT_DECAY = 32, 1e-2, 1e-4
BATCH, EPOCHS, MAX_STEPS = 256, 80, 1600
#: 1 in HOLD_OUT training matrices chooses the epoch; PATIENCE epochs without gain stop
HOLD_OUT, PATIENCE = 5, 10
#: the stream of `numpy.random.default_rng([seed, STREAM])` the groups' generators spawn from
STREAM = 51


def group_vocabulary(view: audit.CandidateView, train: np.ndarray,
                     rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """(R×L table of label ids 1..labels that `train` shows, 0-padded; len(rows)×8 rows into
    it; labels) of the label sets the candidates of `rows` show."""
    sets, candidates = np.unique(view.label_row[rows], return_inverse=True)
    owner, within, labels = audit.set_labels(view.label_index, sets)
    known = np.unique(labels[np.isin(sets[owner], view.label_row[train])])
    at = np.searchsorted(known, labels).clip(max=max(len(known) - 1, 0))
    ids = np.where(known[at] == labels if len(known) else False, at + 1, 0)
    table = np.zeros((len(sets), int(within.max(initial=0)) + 1), dtype=np.int64)
    table[owner, within] = ids
    return table, candidates.reshape(len(rows), N_CANDIDATES), len(known)


def context_blind(n_labels: int, rng: np.random.Generator):
    """The context-blind DeepSets model over label multi-hots, weights drawn by `rng`."""
    import torch
    from torch import nn

    class ContextBlindLabels(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.f1 = nn.EmbeddingBag(n_labels + 1, HIDDEN, mode="sum", padding_idx=0)
            self.f1_bias = nn.Parameter(torch.zeros(HIDDEN))
            self.f2 = nn.Linear(2 * HIDDEN, HIDDEN)
            self.score = nn.Linear(HIDDEN, 1, bias=False)  # one shift of 8 scores is no signal

        def forward(self, labels):  # [B, 8, L] label ids -> [B, 8] scores
            e = torch.relu(self.f1(labels.reshape(-1, labels.shape[-1])) + self.f1_bias)
            e = e.reshape(labels.shape[0], N_CANDIDATES, HIDDEN)
            summary = e.mean(1, keepdim=True).expand_as(e)
            return self.score(torch.relu(self.f2(torch.cat([e, summary], -1)))).squeeze(-1)

    model = ContextBlindLabels()
    with torch.no_grad():  # torch's scales (uniform, ±1/√fan-in), drawn by `rng`
        for p in model.parameters():
            bound = 0.0 if p.dim() == 1 else p.shape[1] ** -0.5
            p.copy_(torch.from_numpy(rng.uniform(-bound, bound, tuple(p.shape))))
        model.f1.weight[0] = 0.0  # the padding id
    return model


def learned_hits(view: audit.CandidateView, answers: np.ndarray, train: np.ndarray,
                 test: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """The hits on `test` of the model fitted on `train` (none if either is small)."""
    if len(train) < MIN_PROBE_TEST or len(test) < MIN_PROBE_TEST:
        return np.zeros(0)
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        table, candidates, n_labels = group_vocabulary(view, train,
                                                       np.concatenate([train, test]))
        table, candidates = torch.from_numpy(table), torch.from_numpy(candidates)
        model = context_blind(n_labels, rng)
        fit(model, table, candidates[:len(train)], torch.from_numpy(answers[train]), rng)
        with torch.no_grad():
            scores = model(table[candidates[len(train):]]).double().numpy()
    finally:
        torch.set_num_threads(threads)
    # equal label sets score alike; rounding keeps float noise from breaking their ties
    return audit.hits_of(scores.round(5), answers[test])


def fit(model, table, candidates, answers, rng: np.random.Generator) -> None:
    """Adam on `1 - 1/HOLD_OUT` of the matrices, kept at the epoch of least loss on the rest."""
    import torch
    from torch.nn.functional import cross_entropy

    order = rng.permutation(len(answers))
    held, fitted = order[:len(order) // HOLD_OUT], order[len(order) // HOLD_OUT:]
    optimiser = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE,
                                 weight_decay=WEIGHT_DECAY)
    batches = math.ceil(len(fitted) / BATCH)
    best, best_loss, since = None, math.inf, 0
    for _ in range(max(1, min(EPOCHS, MAX_STEPS // batches))):
        for batch in np.array_split(rng.permutation(fitted), batches):
            loss = cross_entropy(model(table[candidates[batch]]), answers[batch])
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
        with torch.no_grad():
            loss = float(cross_entropy(model(table[candidates[held]]), answers[held]))
        if loss < best_loss:
            best, best_loss, since = copy.deepcopy(model.state_dict()), loss, 0
        elif (since := since + 1) >= PATIENCE:
            break
    model.load_state_dict(best)


def group_stream(k: int, n_groups: int, seed: int = 0) -> np.random.Generator:
    """The k-th group's generator: groups fit in any order and process."""
    return np.random.default_rng([seed, STREAM]).spawn(n_groups)[k]
