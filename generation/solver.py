"""The symbolic solver that proves every matrix has exactly one answer.

A candidate completes a matrix when, for SOME relation of the element type, SOME reading group
(an attribute's super-attribute; objects and counts are one) and SOME choice of one label per
panel, explicit or implied, rows 1-3 obey the relation; every panel is read in the same group.
A matrix is sound when only its answer completes it. The work is on bit masks of element ids.
"""

from __future__ import annotations

from typing import Iterable, Mapping, Sequence

import numpy as np

from vprom.domain import N_CONTEXT, N_PANELS, RELATIONS_OF, ElementType, Matrix, Relation
from vprom.generation.relations import RULES, mask_of
from vprom.tables import string_codes

_RULES_OF = {t: tuple(RULES[r] for r in rels) for t, rels in RELATIONS_OF.items()}


class Universe:
    """The elements of one element type, as bit positions (counts: the count itself)."""

    def __init__(self, element_type: ElementType | str, names: Iterable[str]) -> None:
        self.element_type = ElementType(element_type)
        names = set(names)
        if self.element_type is ElementType.COUNT:
            # only labels that are counts belong to the universe ("5", not "bowl")
            self.ids = {n: int(n) for n in names if n.isdigit() and int(n) > 0}
        else:
            self.ids = {n: i for i, n in enumerate(sorted(names))}
        self.names = {i: n for n, i in self.ids.items()}

    def mask(self, labels: Iterable[str]) -> int:
        return mask_of(self.ids[label] for label in labels if label in self.ids)


def completion_mask(element_type: ElementType, context: Sequence[int],
                    groups: Sequence[int] = ()) -> int:
    """The elements completing row 3 under any relation and reading group (none: one group)."""
    z = 0
    for g in groups or (-1,):
        if not context[0] & g:  # the usual miss, found before building the list
            continue
        within = [c & g for c in context]
        if all(within):  # every relation reads every context panel
            for rule in _RULES_OF[element_type]:
                z |= rule.completions(within)
    return z


def group_masks(u: Universe, groups: Mapping[str, Iterable[str]] | None) -> list[int]:
    """The masks of `groups` in `u`, plus one of the universe's labels no group holds."""
    if not groups:
        return []
    out = [m for _, g in sorted(groups.items()) if (m := u.mask(g))]
    rest = u.mask(set(u.ids).difference(*groups.values()))
    return out + ([rest] if rest else [])


def check_matrix(matrix: Matrix, labels: Sequence[frozenset[str]],
                 universe: frozenset[str] | None = None,
                 groups: Mapping[str, Iterable[str]] | None = None) -> str | None:
    """`check_matrices` on one matrix's 16 label sets; `universe`: its type's elements (None:
    all labels); `groups`: name -> labels of one reading group (None: one group)."""
    labels = [frozenset(l) for l in labels]
    if len(labels) != N_PANELS:
        raise ValueError(f"a matrix has {N_PANELS} panels; got {len(labels)} label sets")
    u = Universe(matrix.element_type,
                 universe if universe is not None else frozenset().union(*labels))
    return check_matrices(u, group_masks(u, groups), [matrix.relation.value],
                          np.array([matrix.elements], dtype=object),
                          np.arange(N_PANELS)[None],
                          np.array([u.mask(l) for l in labels], dtype=object),
                          [matrix.answer])[0]


def check_matrices(u: Universe, groups: Sequence[int], relations: Sequence[str],
                   elements: np.ndarray, panels: np.ndarray, masks: np.ndarray,
                   answers: Sequence[int]) -> list[str | None]:
    """Per matrix None when sound, else a reason. `panels`: N×16 indices into `masks` (label
    masks in `u`, Python ints). Sound: every panel carries its element, the 9 elements obey
    the relation, and only the answer completes it in the reading groups `groups`."""
    names, codes = string_codes(elements)
    ids = np.array([u.ids.get(n, -1) for n in names], dtype=np.int64)[codes]
    # each distinct (label mask, claimed id) pair tested once: panels repeat across matrices
    width = max(u.ids.values(), default=0) + 2
    pairs, pair_of = np.unique(np.asarray(panels, dtype=np.int64) * width + ids + 1,
                               return_inverse=True)
    carried = np.array([i > 0 and (mask >> (i - 1)) & 1 for mask, i in
                        zip(masks[pairs // width].tolist(), (pairs % width).tolist())], dtype=bool)
    carried = carried[pair_of.reshape(ids.shape)]
    answers = np.asarray(answers, dtype=np.int64)
    nine = np.concatenate([ids[:, :N_CONTEXT],
                           ids[np.arange(len(ids)), N_CONTEXT + answers][:, None]], axis=1)
    relations = np.asarray(relations, dtype=object)
    obeys = np.zeros(len(ids), dtype=bool)
    for relation in set(relations.tolist()):
        mine = relations == relation
        obeys[mine] = RULES[Relation(relation)].holds(nine[mine].reshape(-1, 3, 3))
    out: list[str | None] = [None] * len(ids)
    for k in np.flatnonzero(~carried.all(axis=1)).tolist():
        panel = int(np.argmin(carried[k]))
        out[k] = f"panel {panel} claims '{elements[k, panel]}' but its labels lack it"
    for k in np.flatnonzero(carried.all(axis=1) & ~obeys).tolist():
        out[k] = (f"the elements {list(elements[k, :N_CONTEXT])} + answer "
                  f"'{elements[k, N_CONTEXT + answers[k]]}' do not obey {relations[k]}")
    solvable = np.flatnonzero(carried.all(axis=1) & obeys)
    for k, shown, answer in zip(solvable.tolist(), masks[panels[solvable]].tolist(),
                                answers[solvable].tolist()):
        z = completion_mask(u.element_type, shown[:N_CONTEXT], groups=groups)
        valid = [j for j, mask in enumerate(shown[N_CONTEXT:]) if mask & z]
        if valid != [answer]:
            completing = sorted(u.names[i] for i in range(z.bit_length()) if (z >> i) & 1)
            out[k] = (f"candidates {valid} complete the matrix (answer {answer}); "
                      f"completing elements {completing}")
    return out
