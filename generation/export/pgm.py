"""The PGM convention for `vprom export --format npz` (`--style pgm`, the default): what the
loaders written for DeepMind's PGM and for RAVEN read, file for file.

Layout, as PGM's archives unpack (one folder per regime) — a regime name holds no `_`,
because PGM's own tooling splits file names on `_` and reads the part at position 2:

    OUT/<regime>/PGM_<regime>_<part>_<id>.npz     regime: the split with '_' -> '.'
                                                  (held_out_objects -> held.out.objects)
    OUT/embedding.npy                             RAVEN's loader: token -> vector
    OUT/README.txt, OUT/manifest.json

SRAN's `PGMdataset` takes `OUT/<regime>` as its root (it globs `root/*.npz`); WReN-PyTorch's
and RAVEN's `dataset` take `OUT` (they glob `root/*/*.npz`). All of them keep the files
whose path contains the part's name (`train`, `val`, `test`).

Each file holds what those loaders read, in PGM's dtypes and shapes:

    image                       (16, S, S) uint8   grayscale (Pillow's "L": ITU-R 601-2
                                luma) panels, 8 context (row-major) then 8 candidates;
                                `reshape(16, 160, 160)` is the identity at S = 160
    target                      int64 ()           the answer, 0..7
    meta_target                 (12,) int64        the OR of relation_structure_encoded's rows
    relation_structure_encoded  (4, 12) int64      one row per rule: PGM has up to 4, a V-PROM
                                                   matrix has one; rows 1-3 are zero
    relation_structure          (1, 3) bytes       [element type, super-attribute, relation]
                                                   (PGM: [object, attribute, relation])
    structure, meta_structure   (RAVEN) the rule's tokens (str) and their one-hot over
                                `embedding.npy`'s vocabulary
    meta_target_names (12,) str, relation, element_type, super_attribute, id, panels,
                                elements: V-PROM's own, as in the colour style

The 12 positions keep PGM's grouping: 0-6 are what a rule acts on (PGM: shape, line,
color, number, position, size, type), 7-11 the relation (PGM: progression, XOR, OR, AND,
consistent_union). V-PROM's relations take PGM's slots of the same meaning (progression 7,
or 9, and 10, union 11; XOR 8 stays 0); its four element types take slots 0-3; 4-6 stay 0.
`meta_target_names` names every slot.

`embedding.npy` is a pickled dict (numpy 1.x-readable, `npy_pickle`) mapping every
structure token to a 300-long list (RAVEN's width): the token's one-hot code in vocabulary
order. These are not word vectors (RAVEN ships GloVe ones); they let its loader run and
identify each token exactly.
"""

from __future__ import annotations

import numpy as np
from PIL import Image

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
RESAMPLE = Image.Resampling.BILINEAR


def regime(split: str) -> str:
    """The PGM regime name of a split: no underscores."""
    return split.replace("_", ".")


def pgm_name(split: str, part: str, matrix_id: int) -> str:
    """A problem's file, relative to OUT."""
    r = regime(split)
    return f"{r}/{PREFIX}_{r}_{part}_{matrix_id}.npz"


def gray_tile(crop: Image.Image, size: int) -> np.ndarray:
    """One panel: the crop stretched to size×size, grayscale uint8."""
    return np.asarray(crop.convert("L").resize((size, size), RESAMPLE), dtype=np.uint8)


def rule_row(relation: str, element_type: str) -> np.ndarray:
    row = np.zeros(N_SLOTS, dtype=np.int64)
    row[SLOT_NAMES.index(element_type)] = 1
    row[SLOT_NAMES.index(relation)] = 1
    return row


def structure_tokens(relation: str, element_type: str, super_attribute: str) -> list[str]:
    """RAVEN's `structure`: the rule's tokens (at most 6 are read; ours are 2 or 3)."""
    return [relation, element_type] + ([super_attribute] if super_attribute else [])


def vocabulary(super_attributes) -> list[str]:
    """Every structure token of a data set, in a fixed order (relations, types, sorted
    super-attributes)."""
    supers = sorted({s for s in super_attributes if s})
    tokens = [r.value for r in Relation] + [e.value for e in ElementType] + supers
    if len(tokens) > EMBEDDING_DIM:
        raise ValueError(f"{len(tokens)} structure tokens do not fit one-hot codes of "
                         f"{EMBEDDING_DIM}")
    return tokens


def embedding_table(tokens: list[str]) -> dict[str, list[float]]:
    """RAVEN's embedding.npy content: token -> its one-hot code (plain Python)."""
    out = {}
    for k, token in enumerate(tokens):
        code = [0.0] * EMBEDDING_DIM
        code[k] = 1.0
        out[token] = code
    return out


def pgm_arrays(relation: str, element_type: str, super_attribute: str,
               tokens: list[str]) -> dict[str, np.ndarray]:
    """The PGM and RAVEN keys of one problem (besides image and target)."""
    encoded = np.zeros((MAX_RULES, N_SLOTS), dtype=np.int64)
    encoded[0] = rule_row(relation, element_type)
    structure = structure_tokens(relation, element_type, super_attribute)
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
