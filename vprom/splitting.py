"""What generation and verification need from the split rules, without importing them.

The rules themselves (seven declarative spec files and one pure assignment function) are the
`splits` stage. Generation and verification stand on the same floor as `splits` and may not
import it, so the top floor loads the rules (`splits.assign.load_rules()`) and hands them in
as a `SplitRules`. This module fixes what they receive:

- `HeldOutDesign`: what the splits hold out, as generation must plan for it (which counts,
  super-attributes, relation x super-attribute pairs and object thirds go to test, how
  images are dealt to the two partitions, and per held-out split its `TrainBan`: the labels
  no training or validation matrix may show on any panel);
- `PanelInfo`: what the assignment needs beyond the matrix (each panel's image side in every
  partition, each panel crop's super-attribute, and, classified from ALL its labels, the
  object categories and the attribute super-attributes it shows);
- `SplitRules`: the design, the partitions, `assign` and `choose_val`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping, Protocol

import numpy as np

from vprom.records import Matrix
from vprom.sampling import image_test_side, object_third


@dataclass(frozen=True)
class TrainBan:
    """What no training or validation matrix of one held-out split may show, on any of its
    16 panels, as any label (explicit or implied), not only as the element it shows.

    `super_attributes`: label table ("object_attribute" / "human_attribute") -> the
    super-attributes whose labels are banned in matrices of every relation.
    `object_thirds`: relation -> the object thirds (`vprom.sampling.object_third`) whose
    categories are banned in matrices of that relation.
    """

    super_attributes: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    object_thirds: Mapping[str, tuple[int, ...]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # flat forms for `shows_banned`, which runs for every panel of every matrix
        object.__setattr__(self, "_pairs", frozenset(
            (table, sa) for table, sas in self.super_attributes.items() for sa in sas))

    def shows_banned(self, relation: str, categories: Iterable[str],
                     label_super_attributes: Iterable[tuple[str, str]]) -> bool:
        """Whether a panel of a `relation` matrix carrying these categories and attribute
        labels (as (table, super-attribute) pairs) shows something this ban holds out."""
        if self._pairs and not self._pairs.isdisjoint(label_super_attributes):
            return True
        thirds = self.object_thirds.get(relation)
        return bool(thirds) and any(object_third(c) in thirds for c in categories)


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
    #: held-out split -> what its training and validation matrices may not show at all
    train_bans: Mapping[str, TrainBan] = field(default_factory=dict)

    def train_side_ban(self, relation: str) -> TrainBan:
        """The union of every split's ban for matrices of `relation`: what a matrix planned on
        the train side of the held-out partition may not show, so it trains in every split."""
        sas: dict[str, set] = {}
        thirds: set[int] = set()
        for ban in self.train_bans.values():
            for table, names in ban.super_attributes.items():
                sas.setdefault(table, set()).update(names)
            thirds.update(ban.object_thirds.get(relation, ()))
        return TrainBan({t: tuple(sorted(v)) for t, v in sorted(sas.items())},
                        {relation: tuple(sorted(thirds))} if thirds else {})


@dataclass(frozen=True)
class PanelInfo:
    """What `assign` needs beyond the matrix: per partition the side (0 train, 1 test) of each
    panel's image, each panel crop's super-attribute ("" for objects and counts), and per panel
    the object categories and attribute (table, super-attribute) pairs among ALL its labels
    (None: not known, the panel's own element stands for its labels)."""

    sides: Mapping[str, tuple[int, ...]]
    super_attributes: tuple[str, ...]
    categories: tuple[frozenset[str], ...] | None = None
    label_super_attributes: tuple[frozenset[tuple[str, str]], ...] | None = None


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
