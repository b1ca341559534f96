"""`vprom extract --backbone labels`: perfect perception, each crop's labels as a multi-hot.

The dimensions (`label_order`) are DATASET.h5's `vocab` labels: `object:`, `object_attribute:`,
`human_attribute:`, `name:` (person words that imply human attributes), each sorted, then
`count:<n>` in numeric order. A crop sets what the solver reads as its labels, and its element.
`label_noise` P flips each bit with probability P, drawn from `default_rng(seed)` over the
rows in crop-id order, `BLOCK_ROWS` at a time.
"""

from __future__ import annotations

import json
import sys
import time
from collections import Counter

import h5py
import numpy as np

from vprom import __version__
from vprom.domain import ElementType
from vprom.errors import VpromError
from vprom.features.config import SYMBOLIC_BACKBONE as BACKBONE
from vprom.features.config import ExtractConfig
from vprom.file_kinds import DATASET, check_kind
from vprom.manifest import is_current
from vprom.tables import STR, CropTable, open_h5, read_crop_table

GROUPS = ("object", "object_attribute", "human_attribute", "name", "count")
BLOCK_ROWS = 8192
HUMAN = ElementType.HUMAN_ATTRIBUTE.value


def read_vocab(path) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """(DATASET.h5's `vocab` columns by path, person word -> the human attributes it implies)."""
    check_kind(path, DATASET)
    columns = {}
    with open_h5(path) as h5:
        if "vocab" not in h5:
            raise VpromError(f"{path}: no 'vocab' group; not a DATASET.h5 of `vprom "
                             "generate`, or an old one: generate it again")
        h5["vocab"].visititems(lambda name, obj: columns.update(
            {name: obj.asstr()[()].tolist()}) if isinstance(obj, h5py.Dataset) else None)
    implied: dict[str, list[str]] = {}
    for word, value in zip(columns.get("labels/implied/label", []),
                           columns.get("labels/implied/value", [])):
        implied.setdefault(word, []).append(value)
    return columns, implied


class LabelVocabulary:
    """The dimensions of the multi-hot (module doc) and how a crop's labels map onto them."""

    def __init__(self, groups: dict[str, list[str]], implied: dict[str, list[str]]):
        self.order = [f"{g}:{label}" for g in GROUPS for label in groups[g]]
        self.index = {name: i for i, name in enumerate(self.order)}
        self.implied = implied

    @classmethod
    def read(cls, path) -> LabelVocabulary:
        columns, implied = read_vocab(path)
        groups = {"object": columns.get("labels/objects", []) + columns.get("object", []),
                  "name": list(implied)}
        for table in ("object_attribute", "human_attribute"):
            groups[table] = columns.get(f"labels/{table}/label", []) + columns.get(table, [])
        counts = columns.get("count", [])
        if not all(c.isdigit() for c in counts):
            raise VpromError(f"{path}: vocab/count holds {counts}, not numbers; generate the "
                             "data set again")
        groups = {g: sorted(set(labels)) for g, labels in groups.items()}
        groups["count"] = sorted(set(counts), key=int)
        return cls(groups, implied)

    def crop_bits(self, element_type: str, element: str, labels: list[str],
                  outside: Counter) -> list[int]:
        """The dimensions one crop sets; labels that have none are counted in `outside`."""
        table = HUMAN if element_type == HUMAN else ElementType.OBJECT_ATTRIBUTE.value
        names = [f"{element_type}:{element}"]
        for label in labels:
            found = [n for n in (f"object:{label}", f"name:{label}", f"{table}:{label}")
                     if n in self.index]
            if element_type == ElementType.COUNT.value and f"count:{label}" in self.index:
                found.append(f"count:{label}")
            if not found:
                outside[label] += 1
            names += found
            if element_type == HUMAN:
                names += [f"{HUMAN}:{value}" for value in self.implied.get(label, ())]
        missing = [n for n in names if n not in self.index]
        if missing:  # only the element can be missing: every other name was looked up
            raise VpromError(f"crop of element {element!r} ({element_type}): {missing[0]} is "
                             "not in the data set's vocab group; generate the data set again")
        return sorted({self.index[n] for n in names})


def label_matrix(crops: CropTable, vocabulary: LabelVocabulary) -> tuple[np.ndarray, Counter]:
    """(N, V) bool: row i the labels of crop row i; and the labels outside the vocabulary."""
    bits = np.zeros((len(crops), len(vocabulary.order)), dtype=bool)
    outside: Counter = Counter()
    for row, (etype, element, labels) in enumerate(zip(crops.element_type.tolist(),
                                                       crops.element.tolist(),
                                                       crops.label_sets())):
        bits[row, vocabulary.crop_bits(etype, element, sorted(labels), outside)] = True
    return bits, outside


def with_noise(bits: np.ndarray, noise: float, rng: np.random.Generator) -> np.ndarray:
    """`bits` with each one flipped with probability `noise`, block by block."""
    out = bits.copy()
    if noise == 0:
        return out
    for start in range(0, len(bits), BLOCK_ROWS):
        block = out[start:start + BLOCK_ROWS]
        block ^= rng.random(block.shape) < noise
    return out


def sorted_crops(dataset) -> CropTable:
    """DATASET.h5's crops table in crop-id order, refused when empty or its ids repeat."""
    crops = read_crop_table(dataset)
    if len(crops) == 0:
        raise VpromError(f"{dataset}: the crops table is empty; nothing to extract")
    crops = crops.take(np.argsort(crops.crop_id, kind="stable"))
    if (np.diff(crops.crop_id) == 0).any():
        raise VpromError(f"{dataset}: crop ids are not unique; regenerate the dataset")
    return crops


def extract_labels(config: ExtractConfig, write_features) -> dict:
    """Write the labels FEATS.h5 of `config.dataset` with `features.extract.write_features`;
    the fields of its `ExtractSummary`."""
    start = time.perf_counter()
    vocabulary = LabelVocabulary.read(config.dataset)
    crops = sorted_crops(config.dataset)
    settings = {"backbone": BACKBONE, "symbolic": True, "label_order": vocabulary.order,
                "label_noise": config.label_noise, "seed": config.seed, "dtype": config.dtype,
                "compression": config.compression}
    done = config.resume and is_current(config.out, [config.dataset], settings)
    if done:
        print(f"{config.out}: already complete with these settings; nothing to do "
              "(--no-resume extracts it again)", file=sys.stderr)
    else:
        bits, outside = label_matrix(crops, vocabulary)
        bits = with_noise(bits, config.label_noise, np.random.default_rng(config.seed))
        attrs = {"backbone": BACKBONE, "symbolic": True, "weights": "", "weights_sha256": "",
                 "random_weights": False, "label_noise": config.label_noise,
                 "seed": config.seed, "pooling": "none: one multi-hot vector of labels per crop",
                 "normalisation": "none (0/1 values)", "dtype": config.dtype,
                 "compression": config.compression, "feature_dim": bits.shape[1],
                 "n_missing": 0, "vprom_version": __version__, "complete": True,
                 "labels_outside_vocabulary": json.dumps(dict(sorted(outside.items()))),
                 "label_order": np.array(vocabulary.order, dtype=STR)}
        blocks = (bits[a:a + BLOCK_ROWS].astype(config.dtype)
                  for a in range(0, len(bits), BLOCK_ROWS))
        write_features(config, crops.crop_id, blocks, bits.shape[1:], np.zeros(0, np.int64),
                       attrs, settings, counts={
                           "crops": len(crops), "distinct_boxes": len(crops), "missing": 0,
                           "dimensions": bits.shape[1], "bits_set": int(bits.sum())})
        if outside:
            common = ", ".join(f"{label} ({n})" for label, n in outside.most_common(8))
            print(f"{config.out}: {sum(outside.values())} labels of the crops are outside the "
                  f"data set's vocabulary and set no dimension: {common}", file=sys.stderr)
    return {"out": config.out, "backbone": BACKBONE, "crops": len(crops), "units": len(crops),
            "extracted_units": 0 if done else len(crops),
            "seconds": time.perf_counter() - start}
