"""Which candidates complete a matrix given as label strings: the solver's masks, for tests."""

from __future__ import annotations

from vprom.domain import N_CANDIDATES, N_CONTEXT, RELATIONS_OF, ElementType, Relation
from vprom.generation.solver import Universe, completion_mask, group_masks


def valid_candidates(relation, element_type, labels, universe=None, groups=None) -> list[int]:
    """Indices 0..7 of the candidates that complete the matrix under any applicable relation
    and reading; arguments as `vprom.generation.solver.check_matrix` takes them."""
    element_type = ElementType(element_type)
    assert Relation(relation) in RELATIONS_OF[element_type]
    labels = [frozenset(l) for l in labels]
    u = Universe(element_type, universe if universe is not None else frozenset().union(*labels))
    masks = [u.mask(l) for l in labels]
    z = completion_mask(element_type, masks[:N_CONTEXT], group_masks(u, groups))
    return [k for k in range(N_CANDIDATES) if masks[N_CONTEXT + k] & z]
