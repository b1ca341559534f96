"""The solver and the sampler called directly, on label strings and in memory, for tests."""

from __future__ import annotations

from vprom.domain import N_CANDIDATES, N_CONTEXT, RELATIONS_OF, ElementType, Matrix, Relation
from vprom.generation.sampler import PlanSampler
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


def generate_matrices(pool, plan, indices, legacy_counts: bool = False) -> list[Matrix]:
    """The matrices with the given indices, straight from the sampler, without their splits."""
    sampler, out = PlanSampler(pool, plan, legacy_counts=legacy_counts), []
    for i in indices:
        sa, rows, _ = sampler.draw(i)
        group = plan.groups[plan.group_of[i]]
        out.append(Matrix(i, group.relation, group.element_type, sa,
                          [pool.crop_id[r] for r in rows], [pool.element[r] for r in rows],
                          int(plan.answer[i])))
    return out
