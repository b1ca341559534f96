"""Tiny DATASET.h5 + FEATS.h5 pairs for the training, evaluation and report tests.

Each element is a random unit vector in R^D; a crop's feature is its element's vector plus a
little noise, L2-normalised (like the extractor's). Every matrix shows one element per row
(an "and"-style pattern in feature space) and its answer candidate shows the third row's
element, so a baseline can learn the tiny set in a few epochs. Relations and element types
cycle through every valid pair, so the breakdowns and the auxiliary targets cover all classes.
"""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

from vprom.manifest import input_hashes, make_manifest
from vprom.domain import RELATIONS_OF, SPLITS, ElementType
from vprom.tables import CropTable, MatrixTable, set_manifest

DIM = 16
N_ELEMENTS = 12
PAIRS = [(et.value, r.value) for et in ElementType for r in RELATIONS_OF[et]]


def _matrices(n: int, rng: np.random.Generator):
    """Panels as element numbers [n, 16], answers [n], and the relation / element type columns."""
    elements = np.zeros((n, 16), dtype=np.int64)
    answer = rng.integers(0, 8, size=n)
    for i in range(n):
        rows = rng.choice(N_ELEMENTS, size=3, replace=False)
        elements[i, :8] = np.repeat(rows, 3)[:8]
        wrong = rng.choice([e for e in range(N_ELEMENTS) if e != rows[2]], size=7, replace=False)
        candidates = list(wrong)
        candidates.insert(int(answer[i]), rows[2])
        elements[i, 8:] = candidates
    pairs = [PAIRS[i % len(PAIRS)] for i in range(n)]
    return elements, answer, [p[1] for p in pairs], [p[0] for p in pairs]


def _splits(n: int, rng: np.random.Generator, empty_train: tuple[str, ...]) -> dict:
    """Every split: 60% train, 20% val, 20% test of a split-specific shuffle of the ids."""
    out = {}
    for split in SPLITS:
        order = rng.permutation(n)
        train, val, test = np.split(order, [int(0.6 * n), int(0.8 * n)])
        if split in empty_train:
            train = train[:0]
        out[split] = {"train": np.sort(train), "val": np.sort(val), "test": np.sort(test)}
    return out


def write_pair(folder: Path, n: int = 200, seed: int = 0, dim: int = DIM,
               empty_train: tuple[str, ...] = (), drop_crops: int = 0,
               backbone: str = "resnet18", side: int = 120) -> tuple[Path, Path]:
    """Write folder/dataset.h5 and folder/feats.h5; returns their paths.

    The features' manifest records their source as `vprom extract` does (the data set file's
    name, sha256 and path); `side` is every crop box's width and height.
    """
    rng = np.random.default_rng(seed)
    elements, answer, relation, element_type = _matrices(n, rng)
    crop_ids = 1000 + np.arange(n * 16, dtype=np.int64)
    panels = crop_ids.reshape(n, 16)
    vectors = rng.normal(size=(N_ELEMENTS, dim))
    feats = vectors[elements.reshape(-1)] + 0.1 * rng.normal(size=(n * 16, dim))
    feats /= np.linalg.norm(feats, axis=1, keepdims=True)
    names = np.array([f"e{e}" for e in range(N_ELEMENTS)], dtype=object)
    crop_types = np.repeat(element_type, 16)
    crops = CropTable(crop_id=crop_ids, image_id=crop_ids // 4, x=np.zeros(n * 16),
                      y=np.zeros(n * 16), w=np.full(n * 16, side), h=np.full(n * 16, side),
                      element_type=crop_types, element=names[elements.reshape(-1)],
                      super_attribute=[""] * (n * 16), source_id=crop_ids,
                      phrase=[""] * (n * 16), labels=names[elements.reshape(-1)])
    table = MatrixTable(id=np.arange(n), relation=relation, element_type=element_type,
                        super_attribute=[""] * n, answer=answer, panels=panels,
                        elements=names[elements], splits=_splits(n, rng, empty_train))
    folder.mkdir(parents=True, exist_ok=True)
    dataset, features = folder / "dataset.h5", folder / "feats.h5"
    with h5py.File(dataset, "w") as h5:
        crops.write(h5.create_group("crops"))
        table.write(h5.create_group("matrices"), h5.create_group("splits"))
        set_manifest(h5, make_manifest("dataset", {"n": n}, seed=seed))
    keep = len(crop_ids) - drop_crops
    with h5py.File(features, "w") as h5:
        h5.create_dataset("crop_id", data=crop_ids[:keep])
        h5.create_dataset("features", data=feats[:keep].astype(np.float16))
        h5.create_dataset("done", data=np.ones(keep, bool))
        h5.attrs.update({"backbone": backbone, "weights": "none", "complete": True,
                         "feature_dim": dim, "pooling": "avg", "normalisation": "l2"})
        set_manifest(h5, make_manifest("features", {"backbone": backbone,
                                                    "dataset": str(dataset)},
                                       inputs=input_hashes([dataset])))
    return dataset, features


@pytest.fixture(scope="session")
def tiny_pair(tmp_path_factory) -> tuple[Path, Path]:
    """A learnable 200-matrix dataset and its 16-d features (shared; tests must not modify)."""
    return write_pair(tmp_path_factory.mktemp("tiny"))


def small_config(dataset: Path, features: Path, out: Path, **overrides):
    """A TrainConfig sized for the tests: tiny model, few epochs, CPU."""
    from vprom.baselines.config import TrainConfig

    options = dict(dataset=dataset, features=features, model="mlp-sum-2", split="neutral",
                   out=out, epochs=2, batch_size=16, hidden=16, device="cpu")
    options.update(overrides)
    return TrainConfig(**options)


@pytest.fixture(autouse=True)
def one_thread():
    """One torch thread per test: these models are tiny, and on a shared 2-core machine a
    second spinning thread costs more than it gives."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
