"""The grayscale npz styles, as DeepMind PGM's loaders (SRAN, WReN-PyTorch, TFDS) and RAVEN's
read them: `OUT/<regime>/<name>.npz` (the split with '_' -> '.': PGM's tooling splits names
on '_'), with `image` (16, S, S), `target` and meta vectors. `pgm` sets PGM's 12 slots (0-6
what a rule acts on, 7-11 its relation) of the same meaning; `raven` sets RAVEN's rule (`or`
is none of RAVEN's) and attribute, a panel being RAVEN's `center_single` configuration.
"""

from __future__ import annotations

import numpy as np

from vprom.domain import ElementType, Relation

STYLES = ("pgm", "raven", "color")
N_SLOTS = 12
MAX_RULES = 4  # PGM's relation_structure_encoded rows
UNUSED = "(unused)"
#: slot -> what it means in a V-PROM export (PGM's slot meanings in the docstring)
SLOT_NAMES = (tuple(e.value for e in ElementType) + (UNUSED,) * 3
              + (Relation.PROGRESSION.value, UNUSED, Relation.OR.value, Relation.AND.value,
                 Relation.UNION.value))

#: RAVEN's META_TARGET_FORMAT and META_STRUCTURE_FORMAT (src/dataset/const.py)
RAVEN_TARGET_NAMES = ("Constant", "Progression", "Arithmetic", "Distribute_Three", "Number",
                      "Position", "Type", "Size", "Color")
RAVEN_STRUCTURE_NAMES = (
    "Singleton", "Left_Right", "Up_Down", "Out_In", "Left", "Right", "Up", "Down", "Out", "In",
    "Grid", "Center_Single", "Distribute_Four", "Distribute_Nine", "Left_Center_Single",
    "Right_Center_Single", "Up_Center_Single", "Down_Center_Single", "Out_Center_Single",
    "In_Center_Single", "In_Distribute_Four")
RAVEN_RULE = {Relation.AND.value: "Constant", Relation.UNION.value: "Distribute_Three",
              Relation.PROGRESSION.value: "Progression"}
#: an element type's RAVEN attribute, else its super-attribute's
RAVEN_ATTRIBUTE = {ElementType.COUNT.value: "Number", ElementType.OBJECT.value: "Type",
                   "shape": "Type", "color": "Color", "clothing color": "Color"}
#: RAVEN's serialize_aot of center_single: the tree Scene/Singleton/Grid/Center_Single
RAVEN_STRUCTURE = ("Scene", "Singleton", "Grid", "Center_Single", "/", "/", "/", "/")
RAVEN_MAX_RULES = 8  # meta_matrix rows
EMBEDDING_DIM = 300  # RAVEN's loader: torch.zeros((6, 300))


def regime(split: str) -> str:
    return split.replace("_", ".")


def problem_name(style: str, split: str, part: str, matrix_id: int) -> str:
    r = regime(split)
    if style == "raven":
        return f"{r}/RAVEN_{matrix_id}_{part}.npz"
    return f"{r}/PGM_{r}_{part}_{matrix_id}.npz"


def raven_embedding() -> dict[str, list[float]]:
    """embedding.npy's content: each structure word -> its one-hot code (plain Python)."""
    words = ("Scene",) + RAVEN_STRUCTURE_NAMES
    return {w: [float(j == k) for j in range(EMBEDDING_DIM)] for k, w in enumerate(words)}


def pgm_arrays(relation: str, element_type: str, super_attribute: str) -> dict[str, np.ndarray]:
    """PGM's keys of one problem (besides image and target)."""
    encoded = np.zeros((MAX_RULES, N_SLOTS), dtype=np.int64)  # one rule: rows 1-3 stay 0
    encoded[0, [SLOT_NAMES.index(element_type), SLOT_NAMES.index(relation)]] = 1
    return {"meta_target": encoded.max(axis=0), "relation_structure_encoded": encoded,
            "relation_structure": np.array([[element_type, super_attribute, relation]],
                                           dtype=np.bytes_),
            "meta_target_names": np.array(SLOT_NAMES)}


def raven_arrays(relation: str, element_type: str, super_attribute: str) -> dict[str, np.ndarray]:
    """RAVEN's keys of one problem (besides image and target), uint8 like RAVEN's."""
    matrix = np.zeros((RAVEN_MAX_RULES, len(RAVEN_TARGET_NAMES)), dtype=np.uint8)
    for word in (RAVEN_RULE.get(relation),
                 RAVEN_ATTRIBUTE.get(element_type, RAVEN_ATTRIBUTE.get(super_attribute))):
        if word:
            matrix[0, RAVEN_TARGET_NAMES.index(word)] = 1
    meta_structure = np.isin(RAVEN_STRUCTURE_NAMES, RAVEN_STRUCTURE).astype(np.uint8)
    return {"meta_matrix": matrix, "meta_target": np.bitwise_or.reduce(matrix),
            "structure": np.array(RAVEN_STRUCTURE), "meta_structure": meta_structure,
            "meta_target_names": np.array(RAVEN_TARGET_NAMES),
            "meta_structure_names": np.array(RAVEN_STRUCTURE_NAMES)}
