"""`vprom extract --backbone labels`: perfect perception, each crop's labels as a multi-hot.

No pixel is read. The vector's dimensions are the data set's label vocabulary, read from
DATASET.h5's `vocab` group, in this fixed order (the file's `label_order` names them):

1. `object:<category>`: `vocab/labels/objects` with `vocab/object`, sorted;
2. `object_attribute:<label>`: `vocab/labels/object_attribute/label` with
   `vocab/object_attribute`, sorted;
3. `human_attribute:<label>`: likewise for the human table;
4. `name:<word>`: the person words that imply human attributes (`vocab/labels/implied/label`:
   "man", "bride", ...), sorted;
5. `count:<n>`: `vocab/count`, in numeric order.

A crop's bits are what the solver reads as its labels: every label of its `labels` column
(an object category, a person word, an attribute read in its own table, human crops in the
human one, others in the object one, and a count crop's number), the human attributes its
person words imply (human crops), and its element, always. Labels the vocabulary lacks (the
semantic attributes mining drops, such as "open") set nothing; the file counts them in
`labels_outside_vocabulary` and the summary names them.

Held-out labels are dimensions like any other: a model never saw them set in the training
matrices of the split that holds them out, which is what that split tests.

`label_noise` P flips every bit independently with probability P (0: the exact labels; 1:
every bit flipped), drawn from `numpy.random.default_rng(seed)` over the rows in crop-id
order, in blocks of `BLOCK_ROWS` rows, so the same seed gives the same bits.

The output is an ordinary FEATS.h5 (`crop_id`, `features` of 0/1 values in the stored dtype,
exact in float16, not normalised; an empty `missing_crop_id`), written atomically, with the
attributes `symbolic` (True), `label_order`, `label_noise` and `seed`, which its manifest's
config also records.
"""

from __future__ import annotations

import hashlib
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
from vprom.files import atomic_path
from vprom.manifest import (
    CONTENT_PREFIX,
    input_hashes,
    is_current,
    make_manifest,
    write_manifest,
)
from vprom.tables import STR, CropTable, open_h5, read_crop_table

GROUPS = ("object", "object_attribute", "human_attribute", "name", "count")
BLOCK_ROWS = 8192
HUMAN = ElementType.HUMAN_ATTRIBUTE.value
#: ExtractConfig fields that only concern pixels, with the value that means "not asked for"
PIXEL_OPTIONS = {"weights": "imagenet", "input_size": None, "region": "crop", "pool": "auto",
                 "decode": "auto", "compile": False, "cuda_graphs": False}


class LabelVocabulary:
    """The dimensions of the multi-hot (module doc) and how a crop's labels map onto them."""

    def __init__(self, groups: dict[str, list[str]], implied: dict[str, list[str]]):
        self.order = [f"{g}:{label}" for g in GROUPS for label in groups[g]]
        self.index = {name: i for i, name in enumerate(self.order)}
        self.implied = implied  # person word -> human attributes it implies

    @classmethod
    def read(cls, path) -> LabelVocabulary:
        check_kind(path, DATASET)
        with open_h5(path) as h5:
            if "vocab" not in h5:
                raise VpromError(f"{path}: no 'vocab' group; not a DATASET.h5 of `vprom "
                                 "generate`, or an old one: generate it again")
            vocab = h5["vocab"]

            def column(name):
                return vocab[name].asstr()[()].tolist() if name in vocab else []

            implied: dict[str, list[str]] = {}
            for word, value in zip(column("labels/implied/label"),
                                   column("labels/implied/value")):
                implied.setdefault(word, []).append(value)
            groups = {"object": column("labels/objects") + column("object"),
                      "name": list(implied)}
            for table in ("object_attribute", "human_attribute"):
                groups[table] = column(f"labels/{table}/label") + column(table)
            counts = column("count")
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
    """`bits` with each one flipped with probability `noise` (module doc), block by block."""
    out = bits.copy()
    if noise == 0:
        return out
    for start in range(0, len(bits), BLOCK_ROWS):
        block = out[start:start + BLOCK_ROWS]
        block ^= rng.random(block.shape) < noise
    return out


def check_label_options(config: ExtractConfig) -> None:
    """Refuse pixel options with the labels backbone (they would change nothing) and label
    options with any other backbone."""
    if config.backbone != BACKBONE:
        if config.label_noise:
            raise VpromError(f"--label-noise: only the labels backbone has labels to flip; "
                             f"drop it for {config.backbone}")
        return
    for name, unset in PIXEL_OPTIONS.items():
        if getattr(config, name) != unset:
            raise VpromError(f"--{name.replace('_', '-')}: the labels backbone reads no "
                             "pixels, so it changes nothing; drop it")


def settings(config: ExtractConfig, vocabulary: LabelVocabulary) -> dict:
    """What the output is made with: its manifest's config."""
    return {"backbone": BACKBONE, "symbolic": True, "label_order": vocabulary.order,
            "label_noise": config.label_noise, "seed": config.seed, "dtype": config.dtype,
            "compression": config.compression}


def extract_labels(config: ExtractConfig) -> dict:
    """Write the labels FEATS.h5 of `config.dataset` (module doc); the fields of the
    `features.extract.ExtractSummary` it makes."""
    start = time.perf_counter()
    vocabulary = LabelVocabulary.read(config.dataset)
    crops = read_crop_table(config.dataset)
    if len(crops) == 0:
        raise VpromError(f"{config.dataset}: the crops table is empty; nothing to extract")
    order = np.argsort(crops.crop_id, kind="stable")
    crop_id = crops.crop_id[order]
    if len(np.unique(crop_id)) != len(crop_id):
        raise VpromError(f"{config.dataset}: crop ids are not unique; regenerate the dataset")
    config_record = settings(config, vocabulary)
    done = config.resume and is_current(config.out, [config.dataset], config_record)
    outside: Counter = Counter()
    if done:
        print(f"{config.out}: already complete with these settings; nothing to do "
              "(--no-resume extracts it again)", file=sys.stderr)
    else:
        bits, outside = label_matrix(crops.take(order), vocabulary)
        bits = with_noise(bits, config.label_noise, np.random.default_rng(config.seed))
        _write(config, crop_id, bits, vocabulary, outside, config_record)
    summary = {"out": config.out, "backbone": BACKBONE, "crops": len(crop_id),
               "units": len(crop_id), "extracted_units": 0 if done else len(crop_id),
               "seconds": time.perf_counter() - start}
    if outside:
        common = ", ".join(f"{label} ({n})" for label, n in outside.most_common(8))
        print(f"{config.out}: {sum(outside.values())} labels of the crops are outside the data "
              f"set's vocabulary and set no dimension: {common}", file=sys.stderr)
    return summary


def _write(config: ExtractConfig, crop_id: np.ndarray, bits: np.ndarray,
           vocabulary: LabelVocabulary, outside: Counter, config_record: dict) -> None:
    dtype = np.dtype(config.dtype)
    content = hashlib.sha256(np.ascontiguousarray(crop_id, dtype=np.int64))
    compression = {"none": {}, "lzf": {"compression": "lzf", "shuffle": True},
                   "gzip": {"compression": "gzip", "compression_opts": 4, "shuffle": True}}
    config.out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(config.out) as tmp, h5py.File(tmp, "w") as h5:
        h5.create_dataset("crop_id", data=crop_id)
        stored = h5.create_dataset("features", shape=bits.shape, dtype=dtype,
                                   chunks=(min(len(bits), 1024), bits.shape[1]),
                                   **compression[config.compression])
        for start in range(0, len(bits), BLOCK_ROWS):
            block = bits[start:start + BLOCK_ROWS].astype(dtype)
            stored[start:start + len(block)] = block
            content.update(block)
        h5.create_dataset("missing_crop_id", data=np.zeros(0, np.int64))
        h5.attrs.update({
            "backbone": BACKBONE, "symbolic": True, "weights": "", "weights_sha256": "",
            "random_weights": False, "label_noise": config.label_noise, "seed": config.seed,
            "pooling": "none: one multi-hot vector of labels per crop",
            "normalisation": "none (0/1 values)", "dtype": config.dtype,
            "compression": config.compression, "feature_dim": bits.shape[1], "n_missing": 0,
            "labels_outside_vocabulary": json.dumps(dict(sorted(outside.items()))),
            "vprom_version": __version__, "complete": True})
        h5.attrs.create("label_order", vocabulary.order, dtype=STR)
        write_manifest(h5, make_manifest(
            "features", config_record, inputs=input_hashes([config.dataset]),
            counts={"crops": len(crop_id), "distinct_boxes": len(crop_id), "missing": 0,
                    "dimensions": bits.shape[1], "bits_set": int(bits.sum())},
            outputs={"content_hash": CONTENT_PREFIX + content.hexdigest()}))
