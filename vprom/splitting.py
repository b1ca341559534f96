"""What generation and verification need from the split rules, without importing them.

The rules themselves (seven declarative spec files and one pure assignment function) are the
`splits` stage. Generation and verification stand on the same floor as `splits` and may not
import it, so the top floor loads the rules (`splits.assign.load_rules()`) and hands them in
as a `SplitRules`. This module fixes what they receive:

- `HeldOutDesign`: what the splits hold out, as generation must plan for it (which counts,
  super-attributes, relation x super-attribute pairs and object thirds go to test, and how
  images are dealt to the two partitions);
- `PanelInfo`: what the assignment needs beyond the matrix (each panel's image side in every
  partition, each panel crop's super-attribute);
- `SplitRules`: the design, the partitions, `assign` and `choose_val`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Protocol

import numpy as np

from vprom.records import Matrix
from vprom.sampling import image_test_side


@dataclass(frozen=True)
class HeldOutDesign:
    """What the split specs hold out, as generation needs it (built by `splits.assign`)."""

    neutral_partition: str
    neutral_test_fraction: float
    held_partition: str
    held_test_fraction: float
    count_train_sets: tuple[tuple[int, ...], ...]
    count_test_sets: tuple[tuple[int, ...], ...]
    held_super_attributes: Mapping[str, tuple[str, ...]]  # element type -> super-attributes
    held_pairs: Mapping[str, Mapping[str, tuple[str, ...]]]  # type -> relation -> s.-attrs
    object_test_thirds: Mapping[str, tuple[int, ...]]  # relation -> thirds


@dataclass(frozen=True)
class PanelInfo:
    """What `assign` needs beyond the matrix: per partition the side (0 train, 1 test) of each
    panel's image, and each panel crop's super-attribute ("" for objects and counts)."""

    sides: Mapping[str, tuple[int, ...]]
    super_attributes: tuple[str, ...]


class SplitRules(Protocol):
    """The split rules as generation and verification use them."""

    @property
    def design(self) -> HeldOutDesign: ...

    @property
    def partitions(self) -> Mapping[str, float]:
        """Every partition of images the splits use -> its test fraction."""
        ...

    def assign(self, matrix: Matrix, panels: PanelInfo) -> dict[str, str]:
        """split -> "train" | "test" | "excluded" (validation is chosen later from train)."""
        ...

    def choose_val(self, train_ids, seed: int, split: str,
                   scale: float) -> tuple[np.ndarray, np.ndarray]:
        """(train, val): the validation ids drawn from a split's training ids."""
        ...


def image_sides(rules: SplitRules, seed: int, image_ids) -> dict[str, np.ndarray]:
    """partition -> the side (0 train, 1 test) of every image id, in the ids' shape."""
    ids = np.asarray(image_ids, dtype=np.int64)
    return {partition: image_test_side(seed, partition, ids.ravel(), fraction).reshape(ids.shape)
            for partition, fraction in rules.partitions.items()}
