"""A DATASET.h5 in memory as `vprom verify`'s checks read it (`load`: two bounded reads in
forked children at once, `matrices/elements` in one and the rest in the other; the content
columns' hash, for the manifest check, is taken here), and how they name problems: a few
matrices by id (`examples`)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from functools import cached_property
from pathlib import Path

import h5py
import numpy as np

from vprom.bounded_read import read_bounded
from vprom.domain import N_PANELS
from vprom.generation.generate import read_vocab
from vprom.generation.labels import LabelVocabulary
from vprom.tables import (
    SPLIT_PARTS,
    CropTable,
    MatrixTable,
    columns_hash,
    content_datasets,
    crop_rows,
    existing_file,
    read_column,
)

MAX_EXAMPLES = 5
MATRIX_COLUMNS = tuple(f.name for f in fields(MatrixTable) if f.name != "splits")
CROP_COLUMNS = tuple(f.name for f in fields(CropTable))


@dataclass
class Data:
    """A DATASET.h5 in memory; `labels`: each crop's explicit and implied labels (`key_labels`
    of its `label_key`, a code per distinct element type and labels); `super_attributes`:
    type -> super-attribute -> elements (the solver's reading groups)."""

    path: Path
    crops: CropTable
    matrices: MatrixTable
    rows: np.ndarray  # N×16 crop rows, -1 where a crop id is unknown
    manifest: dict | None
    universes: dict[str, list[str]] = field(default_factory=dict)  # element type -> elements
    super_attributes: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    vocabulary: LabelVocabulary | None = None  # None: the crops' own (nothing implied)
    content_hash: str | None = None  # of the file's content columns (None: not from a file)

    def __post_init__(self) -> None:
        if self.vocabulary is None:
            self.vocabulary = LabelVocabulary.of_crops(self.crops)
        self.label_key, self.key_explicit, self.key_labels = (
            self.vocabulary.keyed_label_sets(self.crops))

    @cached_property
    def labels(self) -> list[frozenset[str]]:
        """Each crop's explicit and implied labels."""
        return [self.key_labels[k] for k in self.label_key.tolist()]

    @cached_property
    def explicit_labels(self) -> list[frozenset[str]]:
        return [self.key_explicit[k] for k in self.label_key.tolist()]


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


# the widest column, read by a second child alongside the first: its strings take h5py as
# long to decode as everything else together
ELEMENTS = "matrices/elements"


def _read(h5: h5py.File) -> tuple[list[str], tuple | None]:
    """In `read_bounded`'s child: the structural problems, or every content column but
    ELEMENTS (`read_column`), the split parts, the manifest attribute and the vocabulary."""
    problems = structure_problems(h5)
    if problems:
        return problems, None
    columns = {name: read_column(ds) for name, ds in content_datasets(h5).items()
               if name != ELEMENTS}
    parts = {s: [p for p in SPLIT_PARTS if p in h5["splits"][s]] for s in h5["splits"]}
    vocab = read_vocab(h5["vocab"], h5.filename) if "vocab" in h5 else ({}, {}, None)
    return [], (columns, parts, h5.attrs.get("manifest"), vocab)


def _read_elements(h5: h5py.File) -> tuple | None:
    """In a second child: ELEMENTS as `read_column` gives it (None if absent: the first child
    reports it)."""
    return read_column(h5[ELEMENTS]) if ELEMENTS in h5 else None


def load(path: Path, meanwhile: Callable[[], object] | None = None
         ) -> tuple[Data | None, list[str]]:
    """The data set, or None with the structural problems that prevent reading it; this
    process runs `meanwhile` while two children read the file."""
    path = existing_file(path)
    elements = None

    def alongside():
        nonlocal elements
        elements = read_bounded(path, _read_elements, meanwhile)

    problems, read = read_bounded(path, _read, alongside)
    if read is None:
        return None, problems
    coded, parts, manifest, (universes, sas, labels) = read
    coded[ELEMENTS] = elements
    columns = {name: values if codes is None else values[codes]
               for name, (values, codes) in coded.items()}
    crops = CropTable(**{f.name: columns[f"crops/{f.name}"] for f in fields(CropTable)})
    matrices = MatrixTable(**{c: columns[f"matrices/{c}"] for c in MATRIX_COLUMNS},
                           splits={s: {p: columns[f"splits/{s}/{p}"] for p in ps}
                                   for s, ps in parts.items()})
    if manifest is not None:
        try:
            manifest = json.loads(manifest)
        except (TypeError, ValueError):
            manifest = {"_unreadable": True}
    if labels is not None:
        labels = LabelVocabulary.of_crops(crops, labels)
    return Data(path, crops, matrices, crop_rows(crops.crop_id, matrices.panels), manifest,
                universes, sas, labels, columns_hash(coded)), []


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

