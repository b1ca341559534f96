"""The pools indexed for sampling. Images are dealt to the sides of two partitions, neutral and
held-out: the four combinations are the *cells*, and a matrix draws its 16 crops from one.
Each crop gets the bit mask of all its labels (explicit and implied) in its element type's
universe and, per relation, whether it shows what a held-out split bans from training.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Iterable

import numpy as np

from vprom.generation.labels import LabelVocabulary
from vprom.errors import VpromError
from vprom.domain import ElementType, Relation
from vprom.generation.draws import Draws
from vprom.generation.solver import Universe, group_masks
from vprom.splits.rules import HeldOutDesign, TrainBan, image_test_side
from vprom.tables import CropTable, row_codes

CELL_NAMES = ("neutral-train/held-out-train", "neutral-train/held-out-test",
              "neutral-test/held-out-train", "neutral-test/held-out-test")


def cell_of(neutral_side, held_side):
    """The `CELL_NAMES` index of a neutral and a held-out side (ints or arrays)."""
    return neutral_side * 2 + held_side


#: bit of each relation in `PoolIndex.banned`
RELATION_BIT = {r: 1 << k for k, r in enumerate(Relation)}


class PoolIndex:

    def __init__(self, crops: CropTable, seed: int, design: HeldOutDesign,
                 source: str = "pools", vocabulary: LabelVocabulary | None = None) -> None:
        self.crops, self.source = crops, source
        self.vocabulary = LabelVocabulary.of_crops(crops, vocabulary)
        n = len(crops)
        cell = cell_of(image_test_side(seed, design.neutral_partition, crops.image_id,
                                       design.neutral_test_fraction),
                       image_test_side(seed, design.held_partition, crops.image_id,
                                       design.held_test_fraction)).tolist()
        self.region = row_codes(crops.image_id, crops.x, crops.y, crops.w, crops.h).tolist()
        self.crop_id = crops.crop_id.tolist()
        self.element = crops.element.tolist()
        self.label_sets = self.vocabulary.label_sets(crops)  # explicit and implied
        self.masks = [0] * n  # explicit and implied labels
        self.element_id = [0] * n  # the crop's element as an id of its type's universe
        # per attribute type, its super-attributes' masks: the solver reads a panel in one
        self.solver_groups: dict[ElementType, list[int]] = {}
        self.banned, self.banned_categories, self.split_bans = _bans(
            self.vocabulary, design, crops.element_type.tolist(), self.label_sets)
        self.universe: dict[ElementType, Universe] = {}
        self.super_attribute: dict[ElementType, dict[int, str]] = {}
        self.elements_of: dict[ElementType, dict[str, list[str]]] = {}  # super-attribute's
        # cells[etype][cell][element id] -> crop rows
        self.cells: dict[ElementType, list[dict[int, list[int]]]] = {}
        for etype in ElementType:
            rows = np.flatnonzero(crops.element_type == etype.value)
            if len(rows):
                self._index_type(etype, rows, cell)

    def _index_type(self, etype: ElementType, rows: np.ndarray, cell: list[int]) -> None:
        crops, vocab = self.crops, self.vocabulary
        # attribute label -> super-attribute (no table for objects and counts)
        table = vocab.tables.get(etype.value, {})
        elements = crops.element[rows].tolist()
        names = set(elements) | (vocab.categories if etype is ElementType.OBJECT else set(table))
        universe = Universe(etype, names)
        ids = universe.ids
        for e in set(elements) - set(ids):
            raise VpromError(f"{self.source}: {etype.value} crop element '{e}' is not a count "
                             "1..10; re-mine the pools")
        cells: list[dict[int, list[int]]] = [{}, {}, {}, {}]
        supers = crops.super_attribute
        sa = {i: table[name] for name, i in ids.items() if table.get(name)}
        mask = lru_cache(maxsize=None)(universe.mask)  # label sets repeat a lot ("5|cows")
        for r, e in zip(rows.tolist(), elements):
            i = ids[e]
            # a crop always carries its own element, whatever its label list says
            self.masks[r] = mask(self.label_sets[r]) | (1 << i)
            self.element_id[r] = i
            cells[cell[r]].setdefault(i, []).append(r)
            if supers[r]:
                sa[i] = supers[r]
        self.universe[etype] = universe
        self.super_attribute[etype] = sa
        by_sa: dict[str, list[str]] = {}
        for i, name in sa.items():
            by_sa.setdefault(name, []).append(universe.names[i])
        self.elements_of[etype] = by_sa
        self.solver_groups[etype] = group_masks(universe, by_sa)
        self.cells[etype] = cells


def draw_crops(draws: Draws, elements: list[int], crops_of: dict[int, list[int]],
               region: list[int], used: Iterable[int] = ()) -> list[int] | None:
    """One crop row per element, no region twice nor any of `used` (None: 8 draws failed)."""
    u = draws.uniform
    rows, taken = [], set(used)
    for e in elements:
        crops = crops_of[e]
        for _ in range(8):
            r = crops[int(u() * len(crops))]
            if region[r] not in taken:
                break
        else:
            return None
        taken.add(region[r])
        rows.append(r)
    return rows


def _bans(vocab: LabelVocabulary, design: HeldOutDesign, element_types: list[str],
          label_sets: list[frozenset[str]]) -> tuple[list[int], list[int], list[int]]:
    """Per crop, the relations (`RELATION_BIT`) whose held-out splits ban it from training,
    the same for its object categories alone, and `ConceptTable.bits`."""
    bans = {r: design.train_side_ban(r.value) for r in Relation}
    if not any(b.super_attributes or b.object_thirds for b in bans.values()):
        return [0] * len(label_sets), [0] * len(label_sets), [0] * len(label_sets)
    table = vocab.concept_table(element_types, label_sets)
    per_set = np.zeros(len(label_sets), dtype=np.int64)
    per_category = np.zeros(len(label_sets), dtype=np.int64)
    for r, bit in RELATION_BIT.items():
        per_set[table.banned(bans[r], r.value)] |= bit
        if bans[r].object_thirds:
            categories = TrainBan(object_thirds=bans[r].object_thirds)
            per_category[table.banned(categories, r.value)] |= bit
    return per_set.tolist(), per_category.tolist(), table.bits(design.train_bans).tolist()
