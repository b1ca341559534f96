"""The label vocabulary the pools were mined with. A region named "man" shows a male adult even
when no attribute says so: a human crop's labels include those its names imply. The held-out
splits ban labels, so each is classed as an object category and/or an attribute of a
super-attribute (`concepts`). Without a recorded vocabulary, the crops' own labels serve.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping

import h5py
import numpy as np

from vprom.errors import VpromError
from vprom.domain import LABEL_SEPARATOR, ElementType
from vprom.splits.rules import ConceptTable
from vprom.tables import CropTable, write_label_vocabulary

HUMAN = ElementType.HUMAN_ATTRIBUTE.value
OBJECT_TABLE = ElementType.OBJECT_ATTRIBUTE.value
TABLES = (OBJECT_TABLE, HUMAN)


@dataclass(frozen=True)
class LabelVocabulary:
    categories: frozenset[str]
    tables: Mapping[str, Mapping[str, str]]  # table -> attribute label -> super-attribute
    implied: Mapping[str, tuple[str, ...]]  # name -> implied human-attribute values
    recorded: bool = True  # False: made up from the crops alone (no vocabulary recorded)

    @classmethod
    def of_crops(cls, crops: CropTable, base: "LabelVocabulary | None" = None
                 ) -> "LabelVocabulary":
        """`base` (or nothing) completed with the crops' own elements."""
        etype, element, sa = crops.element_type, crops.element, crops.super_attribute
        categories = set(element[etype == ElementType.OBJECT.value].tolist())
        tables = {t: dict(zip(element[etype == t].tolist(), sa[etype == t].tolist()))
                  for t in TABLES}
        implied: dict[str, tuple[str, ...]] = {}
        if base is not None:
            categories |= base.categories
            for t in TABLES:
                tables[t] = {**tables[t], **base.tables.get(t, {})}
            implied = dict(base.implied)
        return cls(frozenset(categories), tables, implied,
                   recorded=base is not None and base.recorded)

    @classmethod
    def read(cls, group: h5py.Group | None, where: str) -> "LabelVocabulary | None":
        """The vocabulary in `group` (POOLS.h5 `vocabulary`, DATASET.h5 `vocab/labels`) or None."""
        if group is None:
            return None
        try:
            def col(path):
                return group[path].asstr()[()].tolist()

            tables = {t: dict(zip(col(f"{t}/label"), col(f"{t}/super_attribute")))
                      for t in TABLES}
            implied: dict[str, list[str]] = {}
            for name, value in zip(col("implied/label"), col("implied/value")):
                implied.setdefault(name, []).append(value)
            objects = col("objects")
        except (KeyError, TypeError, ValueError, OSError) as e:
            raise VpromError(f"{where}: its vocabulary group {group.name} is incomplete ({e}); "
                             "re-run `vprom mine` (or `vprom generate`) to rewrite it") from None
        for name, values in implied.items():
            for v in values:
                if v not in tables[HUMAN]:
                    raise VpromError(f"{where}: {group.name}/implied says '{name}' implies "
                                     f"'{v}', which its human-attribute table lacks; re-run "
                                     "`vprom mine` with a valid vocabulary")
        return cls(frozenset(objects), tables, {k: tuple(v) for k, v in implied.items()})

    def write(self, group: h5py.Group) -> None:
        write_label_vocabulary(group, self.categories,
                               {t: self.tables.get(t, {}) for t in TABLES}, self.implied)

    def implied_of(self, element_type: str, labels: Iterable[str]) -> frozenset[str]:
        """The values a crop's names imply that its labels do not already hold."""
        if element_type != HUMAN or not self.implied:
            return frozenset()
        labels = frozenset(labels)
        out = {v for label in labels for v in self.implied.get(label, ())}
        return frozenset(out - labels)

    def label_sets(self, crops: CropTable) -> list[frozenset[str]]:
        """Each crop's explicit and implied labels."""
        key, _, full = self.keyed_label_sets(crops)
        return [full[k] for k in key.tolist()]

    def keyed_label_sets(self, crops: CropTable
                         ) -> tuple[np.ndarray, list[frozenset[str]], list[frozenset[str]]]:
        """(each crop's key, per key its explicit labels, per key its explicit and implied
        labels): crops repeat (element type, labels) pairs, so each distinct pair is one key
        and its sets are made once."""
        pairs: dict[tuple[str, str], int] = {}
        key = np.fromiter((pairs.setdefault(p, len(pairs)) for p in
                           zip(crops.element_type.tolist(), crops.labels.tolist())),
                          dtype=np.int64, count=len(crops))
        explicit = [frozenset(labels.split(LABEL_SEPARATOR)) - {""} for _, labels in pairs]
        full = [s | self.implied_of(etype, s) for (etype, _), s in zip(pairs, explicit)]
        return key, explicit, full

    def concepts(self, element_type: str, labels: frozenset[str]
                 ) -> tuple[frozenset[str], frozenset[tuple[str, str]]]:
        """(object categories, attribute (table, super-attribute) pairs) among `labels`."""
        table = HUMAN if element_type == HUMAN else OBJECT_TABLE
        sas = self.tables.get(table, {})
        return labels & self.categories, frozenset((table, sas[label])
                                                   for label in sas.keys() & labels)

    def concept_table(self, element_types: Iterable[str],
                      label_sets: Iterable[frozenset[str]]) -> ConceptTable:
        crops = list(zip(element_types, label_sets))
        concepts = {crop: self.concepts(*crop) for crop in set(crops)}  # label sets repeat
        return ConceptTable([concepts[crop] for crop in crops])

    def counts(self) -> dict:
        return {"recorded": self.recorded, "categories": len(self.categories),
                "attributes": {t: len(self.tables.get(t, {})) for t in TABLES},
                "implied_names": len(self.implied)}
