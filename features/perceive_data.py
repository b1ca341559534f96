"""What `vprom perceive` may learn from: a split's training crops, their labels, their pixels.

Training crops are the panels of the split's training problems; validation crops the panels of
its validation problems that no training problem shows, plus a seeded `VAL_SHARE` of the
training boxes. A label that a test problem shows in its relation (context or answer) and no
training problem does is held out: it gets no output, and a crop with only such labels is
dropped. Nothing of a crop that only validation, test or excluded problems show is read.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np
from vprom.crop_store import CropStore
from vprom.features.crops import DECODE_ERRORS, cores_per_process, decode_crops
from vprom.features.labels import read_vocab

from vprom.domain import N_CONTEXT, ElementType
from vprom.errors import VpromError
from vprom.images import ImageIndex
from vprom.tables import CropTable, MatrixTable, read_crop_table, read_matrix_table

HEADS = ("attribute", "category", "count")
VAL_SHARE = 0.05  # of the training boxes, held back for validation


@dataclass
class LabelledCrops:
    """Crops (rows of one crops table) with their targets over the heads' vocabularies."""

    crops: CropTable
    attributes: np.ndarray  # (N, A) float32 multi-hot
    category: np.ndarray  # (N,) int64, -1: none
    count: np.ndarray  # (N,) int64, -1: none

    def __len__(self) -> int:
        return len(self.crops)


@dataclass
class PerceptionData:
    """The training and validation crops of one split, and the evidence of what was left out."""

    train: LabelledCrops
    val: LabelledCrops
    vocabulary: dict  # head -> its labels in output order (held-out labels left out)
    held_out: list  # the split's held-out labels
    counts: dict  # crops used / excluded, by reason


def relation_elements(matrices: MatrixTable, ids: np.ndarray) -> set[str]:
    """The elements the problems `ids` show in their relation: context panels and answer."""
    rows = np.flatnonzero(np.isin(matrices.id, ids))
    shown = matrices.elements[rows, :N_CONTEXT].ravel().tolist()
    shown += matrices.elements[rows, N_CONTEXT + matrices.answer[rows].astype(np.int64)].tolist()
    return set(shown)


def panels_of(matrices: MatrixTable, ids: np.ndarray) -> np.ndarray:
    return np.unique(matrices.panels[np.isin(matrices.id, ids)])


def targets(crops: CropTable, vocabulary: dict, implied: dict) -> LabelledCrops:
    """The targets of `crops` over `vocabulary` (labels outside it ignored; -1: no target).
    A crop's category is its element for an object crop, else its first category by name."""
    index = {head: {name: i for i, name in enumerate(names)} for head, names in vocabulary.items()}
    attributes = np.zeros((len(crops), len(vocabulary["attribute"])), np.float32)
    category = np.full(len(crops), -1, np.int64)
    count = np.full(len(crops), -1, np.int64)
    for row, labels in enumerate(crops.label_sets()):
        labels = set(labels).union(*(implied.get(label, ()) for label in labels))
        for name in labels:
            if name in index["attribute"]:
                attributes[row, index["attribute"][name]] = 1
        kind, element = crops.element_type[row], crops.element[row]
        names = sorted(n for n in labels if n in index["category"])
        if kind == ElementType.OBJECT.value and element in index["category"]:
            category[row] = index["category"][element]
        elif names:
            category[row] = index["category"][names[0]]
        if kind == ElementType.COUNT.value and element in index["count"]:
            count[row] = index["count"][element]
    return LabelledCrops(crops, attributes, category, count)


def load_perception_data(dataset: Path, split: str, seed: int = 0) -> PerceptionData:
    """The split's training and validation crops with their targets (module doc)."""
    matrices = read_matrix_table(dataset)
    if split not in matrices.splits:
        raise VpromError(f"{dataset}: has no split {split!r}; its splits are "
                         f"{', '.join(matrices.ordered_splits())}")
    parts = matrices.splits[split]
    if not len(parts.get("train", ())):
        raise VpromError(f"{dataset}: split {split!r} has no training problems; regenerate "
                         "at a larger --scale or pick another split")
    columns, implied = read_vocab(dataset)
    full = {"attribute": sorted(set(columns.get(ElementType.OBJECT_ATTRIBUTE.value, []))
                                | set(columns.get(ElementType.HUMAN_ATTRIBUTE.value, []))),
            "category": sorted(columns.get(ElementType.OBJECT.value, [])),
            "count": sorted(columns.get(ElementType.COUNT.value, []), key=int)}
    held = (relation_elements(matrices, parts.get("test", np.zeros(0, np.int64)))
            - relation_elements(matrices, parts["train"]))
    held_out = sorted(name for name in held if any(name in names for names in full.values()))
    vocabulary = {head: [n for n in names if n not in held] for head, names in full.items()}
    crops = read_crop_table(dataset)
    train_ids = panels_of(matrices, parts["train"])
    val_ids = np.setdiff1d(panels_of(matrices, parts.get("val", np.zeros(0, np.int64))), train_ids)
    train, val = (targets(crops.take(np.isin(crops.crop_id, ids)), vocabulary, implied)
                  for ids in (train_ids, val_ids))
    learnable, val_learnable = (d.attributes.any(1) | (d.category >= 0) | (d.count >= 0)
                                for d in (train, val))
    counts = {"train_crops": int(learnable.sum()),
              "train_crops_only_held_out_labels": int((~learnable).sum()),
              "val_crops": int(val_learnable.sum()),
              "crops_not_in_training_problems": int(len(crops) - len(train)),
              "crops_in_the_data_set": len(crops)}
    if not learnable.any():
        raise VpromError(f"{dataset}: no training crop of split {split!r} has a label that is "
                         "not held out; nothing to learn")
    train, val = by_box(keep(train, learnable)), by_box(keep(val, val_learnable))
    held_back = np.random.default_rng(seed).random(len(train)) < VAL_SHARE
    val = concat(val, keep(train, np.flatnonzero(held_back)))
    train = keep(train, np.flatnonzero(~held_back))
    counts.update(train_boxes=len(train), val_boxes=len(val),
                  val_boxes_held_back_from_training=int(held_back.sum()))
    return PerceptionData(train, val, vocabulary, held_out, counts)


def by_box(data: LabelledCrops) -> LabelledCrops:
    """One row per distinct (image, box), in image order, its crops' labels united (category
    and count: the first crop's that has one)."""
    c = data.crops
    keys = np.stack([c.image_id, c.x, c.y, c.w, c.h], axis=1).astype(np.int64)
    _, first, group = np.unique(keys, axis=0, return_index=True, return_inverse=True)
    group = group.reshape(-1)
    attributes = np.zeros((len(first), data.attributes.shape[1]), np.float32)
    np.maximum.at(attributes, group, data.attributes)
    merged = []
    for column in (data.category, data.count):
        out = np.full(len(first), -1, np.int64)
        valid = np.flatnonzero(column >= 0)
        groups, at = np.unique(group[valid], return_index=True)
        out[groups] = column[valid[at]]
        merged.append(out)
    return LabelledCrops(c.take(first), attributes, *merged)


def concat(a: LabelledCrops, b: LabelledCrops) -> LabelledCrops:
    return LabelledCrops(*(
        CropTable(**{c.name: np.concatenate([getattr(a.crops, c.name), getattr(b.crops, c.name)])
                     for c in fields(CropTable)}) if f.name == "crops"
        else np.concatenate([getattr(a, f.name), getattr(b, f.name)]) for f in fields(a)))


def keep(data: LabelledCrops, rows: np.ndarray) -> LabelledCrops:
    return LabelledCrops(data.crops.take(rows), data.attributes[rows], data.category[rows],
                         data.count[rows])


def load_pixels(crops: CropTable, size: int, vg: Path | None, store: Path | None,
                interpolation: str = "bilinear", keep_fraction: float = 1.0) -> np.ndarray:
    """uint8 (N, S, S, 3) pixels of `crops` in their order, from a crop store or the images."""
    if store is not None:
        with CropStore(store) as opened:
            if opened.size != size:
                raise VpromError(f"{store}: holds {opened.size}-pixel crops, not {size}; pass "
                                 f"--input-size {opened.size} or a store of `vprom crops "
                                 f"--size {size}`")
            rows = opened.rows_of(crops.crop_id)
            if (rows < 0).any():
                raise VpromError(f"{store}: lacks crop {int(crops.crop_id[rows < 0][0])} of "
                                 "this data set; make the store from this DATASET.h5")
            return opened.read_rows(rows).transpose(0, 2, 3, 1).copy()
    index = ImageIndex(vg)
    out = np.zeros((len(crops), size, size, 3), np.uint8)
    boxes = np.stack([crops.x, crops.y, crops.w, crops.h], axis=1)
    images = np.unique(crops.image_id)

    def decode(image_id: int) -> None:
        rows = np.flatnonzero(crops.image_id == image_id)
        if image_id not in index:
            raise VpromError(f"{vg}: image {image_id} (crop {int(crops.crop_id[rows[0]])}) is "
                             "missing; pass the Visual Genome folder this data set was built "
                             "from")
        path = index.path(image_id)
        try:
            pixels, errors = decode_crops(path, boxes[rows], size, interpolation, keep_fraction)
        except DECODE_ERRORS as e:
            raise VpromError(f"{path}: cannot decode image {image_id} ({e}); restore the "
                             "file") from None
        bad = [(int(crops.crop_id[r]), e) for r, e in zip(rows, errors) if e is not None]
        if bad:
            raise VpromError(f"{path}: crop {bad[0][0]}: {bad[0][1]}; the data set does not "
                             "match these images")
        out[rows] = pixels

    with ThreadPoolExecutor(cores_per_process()) as pool:
        list(pool.map(decode, images.tolist()))
    return out
