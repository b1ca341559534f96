"""A DATASET.h5 in memory as `vprom verify`'s checks read it, and how they name problems.

`load` reads the crops and matrices tables, the manifest and the vocabularies (the element
universes, the super-attributes and the label vocabulary with the implied labels:
`generation.labels`), and finds each panel's row in the crops table; a file whose structure
is broken is not read but described (`structure_problems`), so `verify` can report it instead
of failing deep inside. Problems name matrices by id, a few examples each (`examples`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import h5py
import numpy as np

from vprom.generation.labels import LabelRows, LabelVocabulary
from vprom.domain import N_PANELS
from vprom.tables import (CropTable, MatrixTable, crop_rows, from_codes, open_h5,
                          read_string_codes)

MAX_EXAMPLES = 5
MATRIX_COLUMNS = ("id", "relation", "element_type", "super_attribute", "answer", "panels",
                  "elements")
CROP_COLUMNS = ("crop_id", "image_id", "x", "y", "w", "h", "element_type", "element",
                "super_attribute", "source_id", "phrase", "labels")


@dataclass
class Data:
    """A DATASET.h5 in memory, with each panel's row in the crops table."""

    path: Path
    crops: CropTable
    matrices: MatrixTable
    rows: np.ndarray  # N×16 crop rows, -1 where a crop id is unknown
    manifest: dict | None
    vocab: dict[str, frozenset[str]] = field(default_factory=dict)
    # element type -> super-attribute -> its elements (the solver's reading groups)
    super_attributes: dict[str, dict[str, frozenset[str]]] = field(default_factory=dict)
    labels: LabelVocabulary | None = None  # None: only what the crops say (nothing implied)
    _label_rows: LabelRows | None = field(default=None, repr=False)
    _per_crop: dict = field(default_factory=dict, repr=False)
    _pending: Callable | None = field(default=None, repr=False)  # see `load`

    def complete(self) -> None:
        """Set the matrices' elements from what `load`'s `elements` returns, if it was given
        (a no-op otherwise, or once done)."""
        if self._pending is not None:
            self.matrices.elements = from_codes(*self._pending())
            self._pending = None

    @property
    def vocabulary(self) -> LabelVocabulary:
        """The label vocabulary the file records, or the crops' own (nothing implied)."""
        if self.labels is None:
            self.labels = LabelVocabulary.of_crops(self.crops)
        return self.labels

    def label_rows(self) -> LabelRows:
        """The crops' label sets, a row per distinct (element type, label list); made once
        (in `vprom verify`, before its workers fork)."""
        if self._label_rows is None:
            self._label_rows = self.vocabulary.label_rows(self.crops)
        return self._label_rows

    def label_sets(self) -> list[frozenset[str]]:
        """Per crop: every label it has, explicit and implied."""
        return self._crop_values("both")

    def explicit_label_sets(self) -> list[frozenset[str]]:
        """Per crop: the labels it carries itself (equal to `CropTable.label_sets`' sets)."""
        return self._crop_values("explicit")

    def _crop_values(self, name: str) -> list:
        if name not in self._per_crop:
            rows = self.label_rows()
            self._per_crop[name] = rows.per_crop(getattr(rows, name))
        return self._per_crop[name]


def structure_problems(h5: h5py.File) -> list[str]:
    """What makes the file unreadable as a DATASET.h5 (empty when the layout is right)."""
    problems = []
    for group in ("crops", "matrices", "splits"):
        if group not in h5:
            problems.append(f"no '{group}' group")
    if problems:
        return problems
    for group, columns in (("matrices", MATRIX_COLUMNS), ("crops", CROP_COLUMNS)):
        missing = [c for c in columns if c not in h5[group]]
        if missing:
            problems.append(f"{group} lacks column(s) {', '.join(missing)}")
            continue
        n = h5[group][columns[0]].shape[0] if h5[group][columns[0]].shape else 0
        for c in columns:
            shape = h5[group][c].shape
            want = (n, N_PANELS) if c in ("panels", "elements") else (n,)
            if shape != want:
                problems.append(f"{group}/{c} has shape {shape}, expected {want}")
    for split in h5["splits"]:
        for part in h5["splits"][split]:
            if len(h5["splits"][split][part].shape) != 1:
                problems.append(f"splits/{split}/{part} is not a 1-D list of matrix ids")
    return problems


def load(path: Path, elements: Callable | None = None) -> tuple[Data | None, list[str]]:
    """The data set, or None with the structural problems that prevent reading it.

    `elements`: a function returning `element_codes(path)`, which another process reads
    meanwhile (`vprom verify --workers`: the elements are 3.76 million of the 4 million
    strings at scale 1, and most of the time `load` takes). The matrices' elements are then
    None until `Data.complete()` sets them: call it before anything reads them."""
    with open_h5(path) as h5:
        problems = structure_problems(h5)
        if problems:
            return None, problems
        crops = CropTable.read(h5["crops"])
        column = h5["matrices/elements"]
        later = elements is not None and column.dtype.kind == "O" and \
            h5py.check_string_dtype(column.dtype) is not None  # as `MatrixTable.read` decodes
        matrices = MatrixTable.read(h5["matrices"], h5["splits"], elements=not later)
        manifest = None
        if "manifest" in h5.attrs:
            try:
                manifest = json.loads(h5.attrs["manifest"])
            except (TypeError, ValueError):
                manifest = {"_unreadable": True}
        vocab, sas, labels = {}, {}, None
        if "vocab" in h5:
            for name, ds in h5["vocab"].items():
                if isinstance(ds, h5py.Dataset) and ds.dtype.kind == "O":
                    vocab[name] = frozenset(ds.asstr()[()].ravel().tolist())
            for etype, g in h5["vocab"].get("super_attributes", {}).items():
                sas[etype] = {sa: frozenset(g[sa].asstr()[()].tolist()) for sa in g}
            if "labels" in h5["vocab"]:
                labels = LabelVocabulary.of_crops(
                    crops, LabelVocabulary.read(h5["vocab/labels"], str(path)))
    return Data(path, crops, matrices, crop_rows(crops.crop_id, matrices.panels), manifest,
                vocab, sas, labels, _pending=elements if later else None), []


def element_codes(path: Path) -> tuple[list[str], np.ndarray]:
    """`read_string_codes` of a DATASET.h5's matrices' elements (for `load`'s `elements`)."""
    with open_h5(path) as h5:
        return read_string_codes(h5["matrices/elements"])


def in_memory(dataset, path: str = "<memory>") -> Data:
    """A `generation.generate.Dataset` (what `generate_dataset` returns) as `vprom verify` reads
    the file `generate` would write from it (for benchmarks and tests)."""
    m = dataset.matrices
    sas = {t: {sa: frozenset(v) for sa, v in by.items()}
           for t, by in dataset.super_attributes.items()}
    return Data(Path(path), dataset.crops, m, crop_rows(dataset.crops.crop_id, m.panels),
                {"seed": (dataset.counts or {}).get("seed")},
                {t: frozenset(v) for t, v in dataset.universes.items()}, sas,
                dataset.vocabulary)


def examples(what: str, ids, reasons=None) -> list[str]:
    ids = list(ids)
    out = [f"matrix {int(i)}: {what}" + (f" ({reasons[k]})" if reasons else "")
           for k, i in enumerate(ids[:MAX_EXAMPLES])]
    if len(ids) > MAX_EXAMPLES:
        out.append(f"... {len(ids) - MAX_EXAMPLES:,} more: {what}")
    return out


def bad(mask: np.ndarray, ids: np.ndarray, what: str) -> list[str]:
    """Examples of the matrices (by id) where `mask` is set."""
    return examples(what, ids[np.flatnonzero(mask)]) if mask.any() else []

