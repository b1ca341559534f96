"""The pools indexed for sampling: label masks, regions, and crops per element and cell.

Visual Genome images are dealt by hash of (seed, image id) to a side of two partitions:
`neutral` (test 1/3) and `held_out` (test 1/3, shared by the six held-out splits). The four
combinations are the *cells*. A matrix draws all 16 crops from the images of one cell (neutral
side x held-out side): its neutral side from the plan, its held-out side from its group. No
region can then sit on both sides of any split (see `splits.assign`).

Each crop gets a bit mask of all its labels in its element type's universe (`vprom.solver`),
which is what the solver and the distractor choice compare.
"""

from __future__ import annotations

import numpy as np

from vprom.errors import VpromError
from vprom.records import LABEL_SEPARATOR, ElementType
from vprom.sampling import image_test_side
from vprom.solver import Universe
from vprom.splitting import HeldOutDesign
from vprom.tables import CropTable

CELL_NAMES = ("neutral-train/held-out-train", "neutral-train/held-out-test",
              "neutral-test/held-out-train", "neutral-test/held-out-test")


class PoolIndex:
    """The pools prepared for sampling: per crop its label mask (in its element type's
    universe), region id and cell; per element type and cell the crops of each element."""

    def __init__(self, crops: CropTable, seed: int, design: HeldOutDesign,
                 source: str = "pools") -> None:
        self.crops, self.source = crops, source
        n = len(crops)
        nside = image_test_side(seed, design.neutral_partition, crops.image_id,
                                design.neutral_test_fraction)
        hside = image_test_side(seed, design.held_partition, crops.image_id,
                                design.held_test_fraction)
        self.neutral_side = nside.tolist()
        self.held_side = hside.tolist()
        cell = (nside * 2 + hside).tolist()
        self.region = _regions(crops).tolist()
        self.crop_id = crops.crop_id.tolist()
        self.element = crops.element.tolist()
        self.masks = [0] * n
        self.universe: dict[ElementType, Universe] = {}
        self.super_attribute: dict[ElementType, dict[int, str]] = {}
        # cells[etype][cell][element id] -> crop rows
        self.cells: dict[ElementType, list[dict[int, list[int]]]] = {}
        etypes = crops.element_type
        for etype in ElementType:
            rows = np.flatnonzero(etypes == etype.value)
            if len(rows):
                self._index_type(etype, rows, cell)

    def _index_type(self, etype: ElementType, rows: np.ndarray, cell: list[int]) -> None:
        crops = self.crops
        elements = crops.element[rows].tolist()
        universe = Universe(etype, set(elements))
        ids = universe.ids
        for e in set(elements) - set(ids):
            raise VpromError(f"{self.source}: {etype.value} crop element '{e}' is not a count "
                             "1..10; re-mine the pools")
        cells: list[dict[int, list[int]]] = [{}, {}, {}, {}]
        sa: dict[int, str] = {}
        labels, supers = crops.labels, crops.super_attribute
        by_text: dict[str, int] = {}  # label lists repeat a lot ("5|cows")
        for r, e in zip(rows.tolist(), elements):
            i = ids[e]
            text = labels[r]
            m = by_text.get(text)
            if m is None:
                m = by_text[text] = universe.mask(text.split(LABEL_SEPARATOR))
            # a crop always carries its own element, whatever its label list says
            self.masks[r] = m | (1 << i)
            cells[cell[r]].setdefault(i, []).append(r)
            sa.setdefault(i, supers[r])
        self.universe[etype] = universe
        self.super_attribute[etype] = sa
        self.cells[etype] = cells


def _regions(crops: CropTable) -> np.ndarray:
    """One id per distinct image region (image id and box): crops of one region share it."""
    cols = (crops.h, crops.w, crops.y, crops.x, crops.image_id)
    order = np.lexsort(cols)
    change = np.zeros(len(order), dtype=bool)
    for c in cols:
        s = c[order]
        change[1:] |= s[1:] != s[:-1]
    region = np.empty(len(order), dtype=np.int64)
    region[order] = np.cumsum(change)
    return region

