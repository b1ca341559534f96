"""Columnar HDF5 storage of crops and matrices (the formats of docs/formats.md).

`CropTable` is the `crops` group of POOLS.h5 and DATASET.h5, `MatrixTable` the `matrices` and
`splits` groups of DATASET.h5: 1-D columns of equal length, strings as object arrays.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from functools import cached_property
from json.encoder import encode_basestring
from pathlib import Path

import h5py
import numpy as np

from vprom.bounded_read import check_readable
from vprom.domain import LABEL_SEPARATOR, N_PANELS, SPLITS, Crop, Matrix
from vprom.errors import VpromError
from vprom.file_kinds import DATASET, check_kind

STR = h5py.string_dtype(encoding="utf-8")
INT_COLUMNS = {"crop_id": np.int64, "image_id": np.int64, "x": np.int32, "y": np.int32,
               "w": np.int32, "h": np.int32, "source_id": np.int64}
SPLIT_PARTS = ("train", "val", "test")
MATRIX_COLUMNS = ("id", "relation", "element_type", "super_attribute", "answer", "panels",
                  "elements")
CONTENT_GROUPS = ("crops", "matrices", "splits", "vocab", "vocabulary")


def _strings(values) -> np.ndarray:
    """`values` as an object array of str; one that already is one is kept as it is."""
    if isinstance(values, np.ndarray) and values.dtype == object and values.ndim == 1 and (
            set(map(type, values.tolist())) == {str}):
        return values
    return np.array([str(v) for v in values], dtype=object)


def row_codes(*columns: np.ndarray) -> np.ndarray:
    """Per row, the rank of its distinct tuple of `columns` (ints): equal rows, equal codes."""
    rows = np.stack(columns, axis=1).astype(np.int64).reshape(-1, len(columns))
    return np.unique(rows, axis=0, return_inverse=True)[1].reshape(-1)


def string_codes(values, key=None) -> tuple[list[str], np.ndarray]:
    """`np.unique(values.astype(str), return_inverse=True)` (names as a list, codes in `values`'
    shape) by a dictionary pass, ten times faster; `key` (str -> str) rewrites each text first."""
    values = np.asarray(values)
    values = values.astype(str) if values.dtype.kind == "S" else values
    flat = values.ravel().tolist()
    text = {v: v if type(v) is str else str(v) for v in dict.fromkeys(flat)}
    if key is not None:
        text = {v: key(t) for v, t in text.items()}
    names = sorted(set(text.values()))
    index = {name: i for i, name in enumerate(names)}
    code = {v: index[t] for v, t in text.items()}
    return names, np.fromiter(map(code.__getitem__, flat), np.int64,
                              len(flat)).reshape(values.shape)


@dataclass
class CropTable:
    crop_id: np.ndarray
    image_id: np.ndarray
    x: np.ndarray
    y: np.ndarray
    w: np.ndarray
    h: np.ndarray
    element_type: np.ndarray
    element: np.ndarray
    super_attribute: np.ndarray
    source_id: np.ndarray
    phrase: np.ndarray
    labels: np.ndarray  # "|"-joined

    def __post_init__(self) -> None:
        n = len(self.crop_id)
        for f in fields(self):
            col = getattr(self, f.name)
            col = (np.asarray(col, dtype=INT_COLUMNS[f.name]) if f.name in INT_COLUMNS
                   else _strings(col))
            if len(col) != n:
                raise ValueError(f"crops column {f.name} has {len(col)} rows, expected {n}")
            setattr(self, f.name, col)

    def __len__(self) -> int:
        return len(self.crop_id)

    def row(self, i: int) -> Crop:
        values = {f.name: getattr(self, f.name)[i] for f in fields(self)}
        for name in INT_COLUMNS:
            values[name] = int(values[name])
        values["labels"] = tuple(l for l in values["labels"].split(LABEL_SEPARATOR) if l)
        return Crop(**values)

    def label_sets(self) -> list[frozenset[str]]:
        return [frozenset(s.split(LABEL_SEPARATOR)) - {""} for s in self.labels.tolist()]

    def take(self, index) -> CropTable:
        return CropTable(**{f.name: getattr(self, f.name)[index] for f in fields(self)})

    def write(self, group: h5py.Group) -> None:
        _write_columns(group, self, [f.name for f in fields(self)])

    @classmethod
    def read(cls, group: h5py.Group) -> CropTable:
        return cls(**{f.name: _column(group, f.name, f"{group.file.filename}: {group.name} has "
                                      f"no column '{f.name}'; rebuild the file with this vprom "
                                      "version") for f in fields(cls)})


@dataclass
class MatrixTable:
    id: np.ndarray
    relation: np.ndarray
    element_type: np.ndarray
    super_attribute: np.ndarray
    answer: np.ndarray
    panels: np.ndarray  # N×16 crop ids
    elements: np.ndarray  # N×16 str
    splits: dict  # split -> part -> matrix ids

    def __post_init__(self) -> None:
        n = len(self.id)
        self.id = np.asarray(self.id, dtype=np.int64)
        self.answer = np.asarray(self.answer, dtype=np.int8)
        self.panels = np.asarray(self.panels, dtype=np.int64).reshape(n, N_PANELS)
        self.elements = _strings(np.asarray(self.elements, dtype=object).reshape(-1)
                                 ).reshape(n, N_PANELS)
        for name in ("relation", "element_type", "super_attribute"):
            setattr(self, name, _strings(getattr(self, name)))
        self.splits = {s: {p: np.asarray(ids, dtype=np.int64) for p, ids in parts.items()}
                       for s, parts in self.splits.items()}

    def __len__(self) -> int:
        return len(self.id)

    def ordered_splits(self) -> list[str]:  # the paper's order, then any others by name
        return [s for s in SPLITS if s in self.splits] + sorted(set(self.splits) - set(SPLITS))

    def part_columns(self) -> dict[str, np.ndarray]:  # split -> every row's part or 'excluded'
        out = {}
        for split, parts in self.splits.items():
            column = np.full(len(self), "excluded", dtype=object)
            for part in SPLIT_PARTS:
                column[np.isin(self.id, parts.get(part, np.zeros(0, np.int64)))] = part
            out[split] = column
        return out

    def part_rows(self, path: Path, split: str, part: str) -> np.ndarray:
        """The rows of the matrices `split`/`part` lists, in its order (`path` names the file)."""
        if split not in self.splits:
            raise VpromError(f"{path}: has no split {split!r} (it has "
                             f"{', '.join(sorted(self.splits)) or 'none'}); regenerate the dataset")
        ids = np.asarray(self.splits[split].get(part, np.zeros(0, np.int64)), np.int64)
        rows = crop_rows(self.id, ids)
        if (rows < 0).any():
            raise VpromError(f"{path}: splits/{split}/{part} lists matrix id "
                             f"{int(ids[np.argmax(rows < 0)])}, which is not in 'matrices'; "
                             "the file is inconsistent, regenerate it")
        return rows

    def parts_of(self) -> dict[int, dict[str, str]]:  # matrix id -> {split: part}
        columns = self.part_columns()
        return {int(mid): {s: str(columns[s][i]) for s in columns}
                for i, mid in enumerate(self.id)}

    def row(self, i: int, parts: dict[int, dict[str, str]] | None = None) -> Matrix:
        mid = int(self.id[i])
        split_parts = (parts or self.parts_of()).get(mid, {})
        return Matrix(id=mid, relation=self.relation[i], element_type=self.element_type[i],
                      super_attribute=self.super_attribute[i], panels=tuple(self.panels[i]),
                      elements=tuple(self.elements[i]), answer=int(self.answer[i]),
                      splits=tuple(sorted(split_parts.items())))

    def write(self, matrices: h5py.Group, splits: h5py.Group) -> None:
        _write_columns(matrices, self, MATRIX_COLUMNS)
        for split in sorted(self.splits):
            g = splits.create_group(split)
            for part in SPLIT_PARTS:
                g.create_dataset(part, data=self.splits[split].get(part, np.zeros(0, np.int64)))

    @classmethod
    def read(cls, matrices: h5py.Group, splits: h5py.Group) -> MatrixTable:
        return cls(**{name: _column(matrices, name, f"{matrices.file.filename}: matrices has no "
                                    f"column '{name}'") for name in MATRIX_COLUMNS},
                   splits={s: {p: splits[s][p][()] for p in SPLIT_PARTS if p in splits[s]}
                           for s in splits})


def _write_columns(group: h5py.Group, table, names) -> None:
    for name in names:
        values = getattr(table, name)
        group.create_dataset(name, data=values, dtype=STR if values.dtype == object else None)


def _column(group: h5py.Group, name: str, missing: str) -> np.ndarray:
    if name not in group:
        raise VpromError(missing)
    ds = group[name]
    return ds.asstr()[()] if ds.dtype.kind in "OS" else ds[()]


def write_label_vocabulary(group: h5py.Group, objects: Iterable[str],
                           tables: Mapping[str, Mapping[str, str]],
                           implied: Mapping[str, Iterable[str]]) -> None:
    """A label vocabulary as string columns: `objects`, `<table>/{label, super_attribute}` per
    attribute table, and `implied/{label, value}`."""

    def column(g, name, values):
        g.create_dataset(name, data=_strings(list(values)), dtype=STR)

    column(group, "objects", sorted(objects))
    for name, table in tables.items():
        g = group.create_group(name)
        labels = sorted(table)
        column(g, "label", labels)
        column(g, "super_attribute", [table[label] for label in labels])
    pairs = [(n, v) for n, values in sorted(implied.items()) for v in values]
    g = group.create_group("implied")
    column(g, "label", [n for n, _ in pairs])
    column(g, "value", [v for _, v in pairs])


def set_manifest(h5: h5py.File, manifest: dict) -> None:
    h5.attrs["manifest"] = json.dumps(manifest, sort_keys=True)


def read_manifest(path: str | Path) -> dict:
    path = Path(path)
    with open_h5(path) as h5:
        if "manifest" not in h5.attrs:
            raise VpromError(f"{path}: no 'manifest' attribute; not a vprom file, or an "
                             "incomplete one — rebuild it")
        return json.loads(h5.attrs["manifest"])


class _File(h5py.File):
    """An HDF5 file whose read errors inside `with` name the file (HDF5's do not)."""

    def __exit__(self, kind, error, tb):
        super().__exit__(kind, error, tb)
        if isinstance(error, (OSError, RuntimeError)) and not isinstance(error, VpromError):
            raise VpromError(f"{self.vprom_path}: cannot be read ({error}); the file is damaged "
                             "or incomplete: make it again or fetch it again") from None
        return False


def existing_file(path: str | Path) -> Path:
    """`path`, or a VpromError if it is a folder or not there."""
    path = Path(path)
    if path.is_dir():
        raise VpromError(f"{path}: is a folder; give the path of an HDF5 file inside it")
    if not path.is_file():
        raise VpromError(f"{path}: no such file")
    return path


def open_h5(path: str | Path) -> h5py.File:
    """Open an HDF5 file to read; 'not there', 'not HDF5' and 'damaged' are a VpromError."""
    path = existing_file(path)
    check_readable(path)
    try:
        h5 = _File(path, "r")
        h5.vprom_path = path
        return h5
    except OSError as e:
        raise VpromError(f"{path}: cannot be opened as HDF5 ({e}); is it complete and the "
                         "right file?") from None


def read_crop_table(path: str | Path, kind: str = DATASET) -> CropTable:
    """The crops table of a file of `kind` (DATASET.h5 or POOLS.h5)."""
    check_kind(path, kind)
    with open_h5(path) as h5:
        if "crops" not in h5:
            raise VpromError(f"{path}: a {kind} without its 'crops' group; the file is "
                             "damaged: make it again")
        return CropTable.read(h5["crops"])


def read_matrix_table(path: str | Path) -> MatrixTable:
    check_kind(path, DATASET)
    with open_h5(path) as h5:
        if "matrices" not in h5 or "splits" not in h5:
            raise VpromError(f"{path}: a DATASET.h5 without its 'matrices' or 'splits' group; "
                             "the file is damaged: generate it again")
        return MatrixTable.read(h5["matrices"], h5["splits"])


@dataclass
class DatasetFile:
    """A whole DATASET.h5 in memory: `crops`, `matrices` (with every split) and `manifest`."""

    path: Path
    crops: CropTable
    matrices: MatrixTable
    manifest: dict

    @classmethod
    def read(cls, path: str | Path) -> DatasetFile:
        path = Path(path)
        return cls(path, read_crop_table(path), read_matrix_table(path), read_manifest(path))

    @cached_property
    def _parts(self) -> dict[int, dict[str, str]]:
        return self.matrices.parts_of()

    def matrix(self, row: int) -> Matrix:
        """Row `row` of the matrices table as a `Matrix` record, its splits included."""
        return self.matrices.row(row, self._parts)


def content_datasets(h5: h5py.File) -> dict[str, h5py.Dataset]:
    """Every dataset under CONTENT_GROUPS by its path, e.g. 'matrices/panels'."""
    out: dict[str, h5py.Dataset] = {}
    for group in CONTENT_GROUPS:
        if group in h5:
            h5[group].visititems(lambda name, obj, g=group: out.update(
                {f"{g}/{name}": obj}) if isinstance(obj, h5py.Dataset) else None)
    return out


def read_column(ds: h5py.Dataset) -> tuple[np.ndarray, np.ndarray | None]:
    """(values, None) of a numeric dataset; of a string dataset (its distinct strings as an
    object array of str, each value's index among them in the dataset's shape): columns repeat
    a few hundred labels, and the indices travel between processes as plain integers."""
    values = np.asarray(ds[()])
    if ds.dtype.kind not in "OS":
        return values, None
    flat = values.ravel().tolist()
    index = {v: k for k, v in enumerate(dict.fromkeys(flat))}
    names = np.empty(len(index), dtype=object)
    names[:] = [v.decode() if isinstance(v, bytes) else v for v in index]
    return names, np.fromiter(map(index.__getitem__, flat), np.int64,
                              len(flat)).reshape(values.shape)


def columns_hash(columns: Mapping[str, tuple[np.ndarray, np.ndarray | None]]) -> str:
    """sha256 over named columns (as `read_column` gives them), independent of HDF5 byte
    layout: in sorted name order, each column as its name, kind, shape and values (ints as
    little-endian int64, floats as float64, strings as the UTF-8 of
    `json.dumps(list, ensure_ascii=False)`)."""
    h = hashlib.sha256()
    for name in sorted(columns):
        values, codes = columns[name]
        if codes is not None:
            kind, shape = "str", codes.shape
            text = np.array([encode_basestring(v) for v in values], dtype=object)
            body = ("[" + ", ".join(text[codes.ravel()].tolist()) + "]").encode()
        else:
            kind, shape = ("float" if values.dtype.kind == "f" else "int"), values.shape
            body = np.ascontiguousarray(values, "<f8" if kind == "float" else "<i8").tobytes()
        h.update(json.dumps([name, kind, list(shape), len(body)]).encode() + b"\n" + body)
    return "sha256:" + h.hexdigest()


def content_hash(f: str | Path | h5py.File) -> str:
    """`columns_hash` of a DATASET.h5's or POOLS.h5's `content_datasets` (not the manifest)."""
    if not isinstance(f, h5py.File):
        with open_h5(f) as h5:
            return content_hash(h5)
    return columns_hash({name: read_column(ds) for name, ds in content_datasets(f).items()})


def crop_rows(crop_ids: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """The row of each wanted crop id in `crop_ids` (same shape as `wanted`), -1 where absent;
    an id twice: its first row. Ids within a small range go through a lookup table, ten times
    faster than a binary search."""
    wanted = np.asarray(wanted, dtype=np.int64)
    if len(crop_ids) == 0:
        return np.full(wanted.shape, -1, dtype=np.int64)
    ids, first = np.unique(crop_ids, return_index=True)
    low, span = int(ids[0]), int(ids[-1]) - int(ids[0]) + 1
    if span <= 4 * len(ids) + wanted.size:
        table = np.full(span + 1, -1, dtype=np.int64)  # the last slot: ids out of the range
        table[ids - low] = first
        return table[np.where((wanted >= low) & (wanted < low + span), wanted - low, span)]
    pos = np.minimum(np.searchsorted(ids, wanted), len(ids) - 1)
    return np.where(ids[pos] == wanted, first[pos], -1)


def present_rows(ids: np.ndarray, wanted) -> np.ndarray:
    """The rows in `ids` of the wanted ids that are there, in the wanted order."""
    rows = crop_rows(ids, np.asarray(wanted, dtype=np.int64).reshape(-1))
    return rows[rows >= 0]
