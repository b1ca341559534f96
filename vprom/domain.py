"""The data model: element types, relations, crops and matrices.

A *crop* is one annotated Visual Genome region shown as a panel, with every label its source
has. A *matrix* is 8 context panels (3×3 row-major, the last missing) plus 8 candidates.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum


class ElementType(str, Enum):
    OBJECT_ATTRIBUTE = "object_attribute"
    HUMAN_ATTRIBUTE = "human_attribute"
    OBJECT = "object"
    COUNT = "count"


class Relation(str, Enum):
    AND = "and"
    OR = "or"
    UNION = "union"
    PROGRESSION = "progression"


#: The relations of each element type (Progression is for counts only).
RELATIONS_OF: dict[ElementType, tuple[Relation, ...]] = {
    ElementType.OBJECT_ATTRIBUTE: (Relation.AND, Relation.OR, Relation.UNION),
    ElementType.HUMAN_ATTRIBUTE: (Relation.AND, Relation.OR, Relation.UNION),
    ElementType.OBJECT: (Relation.AND, Relation.OR, Relation.UNION),
    ElementType.COUNT: (Relation.AND, Relation.OR, Relation.UNION, Relation.PROGRESSION),
}

#: The paper's splits, in the order reports list them.
SPLITS: tuple[str, ...] = ("neutral", "interpolation", "extrapolation", "held_out_attributes",
                          "held_out_objects", "held_out_relation_attribute_pairs",
                          "held_out_relation_object_pairs")
N_CONTEXT = 8  # 3x3 row-major, the last missing
N_CANDIDATES = 8
N_PANELS = N_CONTEXT + N_CANDIDATES
CHANCE = 1 / N_CANDIDATES
#: How far above chance a probe or control may score (to 14.5%) before it counts as a shortcut.
SHORTCUT_MARGIN = 0.02
COUNTS: tuple[int, ...] = tuple(range(1, 11))
MIN_SIDE = 100  # mining drops regions under this many pixels in either dimension
#: Table 1 of the paper: distinct elements, images and matrices per element type.
PAPER_TABLE1: dict[ElementType, dict[str, int]] = {
    ElementType.OBJECT_ATTRIBUTE: {"elements": 84, "images": 36_750, "matrices": 45_000},
    ElementType.HUMAN_ATTRIBUTE: {"elements": 38, "images": 12_249, "matrices": 45_000},
    ElementType.OBJECT: {"elements": 346, "images": 82_905, "matrices": 45_000},
    ElementType.COUNT: {"elements": 10, "images": 11_730, "matrices": 100_000},
}
#: Matrices per element type at full scale (235,000 in all); `--scale` multiplies them.
TABLE1: dict[ElementType, int] = {t: row["matrices"] for t, row in PAPER_TABLE1.items()}
VAL_SIZE = 8_000  # training matrices of every split held out for validation at full scale
LABEL_SEPARATOR = "|"  # joins one crop's labels into one string column


@dataclass(frozen=True)
class Crop:
    """One annotated region, as one panel image for one element of one pool."""

    crop_id: int
    image_id: int
    x: int
    y: int
    w: int
    h: int
    element_type: ElementType
    element: str
    super_attribute: str = ""  # "" for objects and counts
    source_id: int = 0  # VG object id, or region id for counts
    phrase: str = ""  # the region description, for counts
    labels: tuple[str, ...] = ()  # every canonical label the source has for this region

    def __post_init__(self) -> None:
        object.__setattr__(self, "element_type", ElementType(self.element_type))
        object.__setattr__(self, "labels", tuple(self.labels))

    @property
    def box(self) -> tuple[int, int, int, int]:
        return (self.x, self.y, self.w, self.h)


@dataclass(frozen=True)
class Matrix:
    """One V-PROM instance. `panels`/`elements`: 8 context panels row-major, then 8 candidates."""

    id: int
    relation: Relation
    element_type: ElementType
    super_attribute: str
    panels: tuple[int, ...]  # 16 crop ids
    elements: tuple[str, ...]  # the element each panel shows
    answer: int  # index into the candidates, 0..7
    splits: tuple[tuple[str, str], ...] = field(default=())  # (split, part) pairs

    def __post_init__(self) -> None:
        object.__setattr__(self, "relation", Relation(self.relation))
        object.__setattr__(self, "element_type", ElementType(self.element_type))
        object.__setattr__(self, "panels", tuple(map(int, self.panels)))
        object.__setattr__(self, "elements", tuple(self.elements))
        splits = self.splits.items() if isinstance(self.splits, dict) else self.splits
        object.__setattr__(self, "splits", tuple(sorted((str(s), str(p)) for s, p in splits)))
        if len(self.panels) != N_PANELS or len(self.elements) != N_PANELS:
            raise ValueError(f"matrix {self.id}: needs {N_PANELS} panels and elements")
        if not 0 <= self.answer < N_CANDIDATES:
            raise ValueError(f"matrix {self.id}: answer {self.answer} is not in 0..7")
        if self.relation not in RELATIONS_OF[self.element_type]:
            raise ValueError(f"matrix {self.id}: {self.relation.value} does not apply to "
                             f"{self.element_type.value}")

    @property
    def context(self) -> tuple[int, ...]:
        return self.panels[:N_CONTEXT]

    @property
    def candidates(self) -> tuple[int, ...]:
        return self.panels[N_CONTEXT:]
