"""The PGM convention for `vprom export --format npz --style pgm`: what the loaders written for
DeepMind's PGM and for RAVEN (SRAN, WReN-PyTorch, RAVEN's `dataset`) read, file for file.

Problems are `OUT/<regime>/PGM_<regime>_<part>_<id>.npz`, the regime being the split with
'_' -> '.' (PGM's tooling splits file names on '_'); `OUT/embedding.npy` maps every structure
token to a one-hot code of RAVEN's width 300 (not word vectors: they let its loader run).
Each file holds grayscale `image` (16, S, S) uint8, `target`, and PGM's 12-slot
`meta_target` and `relation_structure_encoded` (4, 12): slots 0-6 what a rule acts on, 7-11
the relation, V-PROM's element types taking slots 0-3 and its relations PGM's slots of the
same meaning (`SLOT_NAMES`); plus RAVEN's `structure` and `meta_structure` and V-PROM's own
fields.
"""

from __future__ import annotations

import numpy as np

from vprom.domain import ElementType, Relation

STYLES = ("pgm", "color")
PREFIX = "PGM"
N_SLOTS = 12
MAX_RULES = 4  # PGM's relation_structure_encoded rows
EMBEDDING_DIM = 300  # RAVEN's loader: torch.zeros((6, 300))
UNUSED = "(unused)"
#: slot -> what it means in a V-PROM export (PGM's slot meanings in the docstring)
SLOT_NAMES = (tuple(e.value for e in ElementType) + (UNUSED,) * 3
              + (Relation.PROGRESSION.value, UNUSED, Relation.OR.value, Relation.AND.value,
                 Relation.UNION.value))


def regime(split: str) -> str:
    """The PGM regime name of a split: no underscores."""
    return split.replace("_", ".")


def pgm_name(split: str, part: str, matrix_id: int) -> str:
    """A problem's file, relative to OUT."""
    r = regime(split)
    return f"{r}/{PREFIX}_{r}_{part}_{matrix_id}.npz"


def vocabulary(super_attributes) -> list[str]:
    """Every structure token: the relations, the element types, the sorted super-attributes."""
    supers = sorted({s for s in super_attributes if s})
    tokens = [r.value for r in Relation] + [e.value for e in ElementType] + supers
    if len(tokens) > EMBEDDING_DIM:
        raise ValueError(f"{len(tokens)} structure tokens do not fit one-hot codes of "
                         f"{EMBEDDING_DIM}")
    return tokens


def embedding_table(tokens: list[str]) -> dict[str, list[float]]:
    """RAVEN's embedding.npy content: token -> its one-hot code (plain Python)."""
    return {token: [1.0 if j == k else 0.0 for j in range(EMBEDDING_DIM)]
            for k, token in enumerate(tokens)}


def pgm_arrays(relation: str, element_type: str, super_attribute: str,
               tokens: list[str]) -> dict[str, np.ndarray]:
    """The PGM and RAVEN keys of one problem (besides image and target)."""
    encoded = np.zeros((MAX_RULES, N_SLOTS), dtype=np.int64)  # one rule: rows 1-3 stay 0
    encoded[0, [SLOT_NAMES.index(element_type), SLOT_NAMES.index(relation)]] = 1
    # RAVEN's `structure`: the rule's tokens (at most 6 are read; ours are 2 or 3)
    structure = [relation, element_type] + ([super_attribute] if super_attribute else [])
    meta_structure = np.zeros(len(tokens), dtype=np.int64)
    meta_structure[[tokens.index(t) for t in structure]] = 1
    return {
        "meta_target": encoded.max(axis=0),
        "relation_structure_encoded": encoded,
        "relation_structure": np.array([[element_type, super_attribute, relation]],
                                       dtype=np.bytes_),
        "structure": np.array(structure, dtype=str),
        "meta_structure": meta_structure,
        "meta_target_names": np.array(SLOT_NAMES),
    }
