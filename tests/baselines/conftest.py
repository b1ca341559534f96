"""Tiny DATASET.h5 + FEATS.h5 pairs (or maps, or crop stores) for the training, evaluation and
report tests, and the learnable task in memory.

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


def _panels(kind: str, elements: np.ndarray, rng: np.random.Generator, dim: int,
            side: int) -> np.ndarray:
    """Each element's random prototype, and every panel its element's plus noise:
    vectors   a unit vector in R^dim, noise 0.1, L2-normalised;
    maps      a [dim, side, side] map, noise 0.1 per value;
    pixels    a random colour in each quadrant of a side x side RGB crop, noise of 8 grey
              levels (uint8, as a crop store holds them)."""
    shape = {"vectors": (dim,), "maps": (dim, side, side), "pixels": (3, 2, 2)}[kind]
    crops = rng.normal(size=(N_ELEMENTS, *shape))[elements.reshape(-1)]
    if kind == "pixels":
        crops = np.kron(128 + 64 * np.clip(crops, -2, 2), np.ones((side // 2, side // 2)))
        return np.clip(crops + rng.normal(0, 8, crops.shape), 0, 255).astype(np.uint8)
    crops = crops + 0.1 * rng.normal(size=crops.shape)
    if kind == "vectors":
        crops /= np.linalg.norm(crops, axis=1, keepdims=True)
    return crops


def write_pair(folder: Path, n: int = 200, seed: int = 0, dim: int = DIM,
               empty_train: tuple[str, ...] = (), drop_crops: int = 0,
               backbone: str = "resnet18", side: int = 120,
               kind: str = "vectors", weights: str = "none") -> tuple[Path, Path]:
    """Write folder/dataset.h5 and the panels of its crops; returns their paths.

    The panels are folder/feats.h5 (`kind` vectors), folder/maps.h5 (maps of dim x 2 x 2) or
    folder/crops.h5 (pixels: a crop store of 16 x 16 crops), each with a manifest that records
    its source as `vprom extract` and `vprom crops` do; `side` is every crop box's width and
    height.
    """
    rng = np.random.default_rng(seed)
    elements, answer, relation, element_type = _matrices(n, rng)
    crop_ids = 1000 + np.arange(n * 16, dtype=np.int64)
    panels = crop_ids.reshape(n, 16)
    feats = _panels(kind, elements, rng, dim, {"vectors": 0, "maps": 2, "pixels": 16}[kind])
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
    dataset = folder / "dataset.h5"
    features = folder / {"vectors": "feats.h5", "maps": "maps.h5", "pixels": "crops.h5"}[kind]
    with h5py.File(dataset, "w") as h5:
        crops.write(h5.create_group("crops"))
        table.write(h5.create_group("matrices"), h5.create_group("splits"))
        set_manifest(h5, make_manifest("dataset", {"n": n}, seed=seed))
    keep = len(crop_ids) - drop_crops
    with h5py.File(features, "w") as h5:
        h5.create_dataset("crop_id", data=crop_ids[:keep])
        if kind == "pixels":
            h5.create_dataset("pixels", data=feats[:keep], chunks=(1, *feats.shape[1:]))
            h5.attrs.update({"kind": "vprom-crops", "size": feats.shape[-1], "complete": True})
            set_manifest(h5, make_manifest("vprom-crops", {"size": feats.shape[-1]},
                                           inputs=input_hashes([dataset])))
            return dataset, features
        stored = "maps" if kind == "maps" else "features"
        h5.create_dataset(stored, data=feats[:keep].astype(np.float16))
        h5.create_dataset("done", data=np.ones(keep, bool))
        h5.attrs.update({"backbone": backbone, "weights": weights, "complete": True,
                         "feature_dim": dim, "pooling": "avg" if kind == "vectors" else "none",
                         "normalisation": "l2"})
        set_manifest(h5, make_manifest("features", {"backbone": backbone,
                                                    "dataset": str(dataset)},
                                       inputs=input_hashes([dataset])))
    return dataset, features


@pytest.fixture(scope="session")
def tiny_sources(tmp_path_factory):
    """kind -> a learnable 200-matrix data set and its panels of that kind (made on first use;
    shared, tests must not modify them)."""
    made: dict[str, tuple[Path, Path]] = {}

    def pair(kind: str) -> tuple[Path, Path]:
        if kind not in made:
            made[kind] = write_pair(tmp_path_factory.mktemp(f"tiny-{kind}"), kind=kind)
        return made[kind]

    return pair


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


def learnable_split(kind: str = "vectors", n: int = 2400, seed: int = 0, dim: int = 256,
                    side: int = 0, mark_answer: bool = False):
    """The learnable task in memory, as `vprom.baselines.data.SplitData` (neutral split,
    60/20/20), with one crop per panel of the input kind (`_panels`).

    `mark_answer` brightens the answer crop (vectors and maps: +1 on the first channel; pixels:
    a white top-left corner), so the candidates alone give the answer away: a task for the
    context-blind controls.
    """
    from types import SimpleNamespace

    from vprom.baselines.data import SplitData, matrix_set

    rng = np.random.default_rng(seed)
    elements, answer, relation, element_type = _matrices(n, rng)
    crops = _panels(kind, elements, rng, dim, side)
    rows = np.arange(n * 16).reshape(n, 16)
    if mark_answer:
        marked = rows[np.arange(n), 8 + answer]
        if kind == "pixels":
            crops[marked, :, : side // 4, : side // 4] = 255
        else:
            crops[marked, 0] += 1
    table = SimpleNamespace(id=np.arange(n), answer=answer, relation=np.array(relation),
                            element_type=np.array(element_type))
    train, val, test = np.split(rng.permutation(n), [int(0.6 * n), int(0.8 * n)])
    parts = {name: matrix_set(table, np.sort(p), rows[np.sort(p)])
             for name, p in (("train", train), ("val", val), ("test", test))}
    crops = crops if kind == "pixels" else crops.astype(np.float32)
    return SplitData(torch.from_numpy(crops), parts, {"backbone": kind})


#: the learnable task's size per input kind: the standard one for pooled features, a small one
#: for the costlier map and pixel models
LEARNABLE = {"vectors": {"n": 2400, "dim": 256}, "maps": {"n": 800, "dim": 16, "side": 3},
             "pixels": {"n": 800, "side": 16}}


def learnable_task(model: str):
    """The learnable task of `model`'s input kind; for a control, with the answer marked."""
    from vprom.baselines.metrics import CONTROL_MODELS
    from vprom.baselines.registry import input_kind

    kind = input_kind(model)
    return learnable_split(kind, mark_answer=model in CONTROL_MODELS, **LEARNABLE[kind])


def fit(model: str, data, epochs: int, target: float = 1.0, seed: int = 0,
        **settings) -> list[float]:
    """Train `model` on `data` (a SplitData) with the real loop (`train_one_epoch`, `evaluate`)
    at its defaults, `settings` overriding them; stops at the first epoch whose validation
    accuracy reaches `target`. Returns the validation accuracy of every epoch."""
    from vprom.baselines.config import TrainConfig
    from vprom.baselines.parts import ModelConfig
    from vprom.baselines.registry import get_model
    from vprom.baselines.train import epoch_batches, evaluate, make_optimizer, train_one_epoch
    from vprom.runtime import World

    config = TrainConfig(dataset="-", features="-", out="-", model=model, split="neutral",
                         device="cpu", seed=seed, **settings).resolved()
    panel = data.features.shape[1:]
    torch.manual_seed(seed)
    net = get_model(model, ModelConfig(feature_dim=panel[0], hidden=config.hidden,
                                       score_init=config.score_init,
                                       side=panel[-1] if len(panel) > 1 else 0))
    optimizer = make_optimizer(config, net)
    world = World(0, 1, 0, torch.device("cpu"), owns_group=False)
    history: list[float] = []
    for epoch in range(epochs):
        torch.manual_seed(seed + epoch)
        batches = epoch_batches(len(data.parts["train"]), config.batch_size, seed, epoch, world)
        train_one_epoch(net, optimizer, data, batches, False, world)
        history.append(evaluate(net, data, "val", world))
        if history[-1] >= target:
            break
    return history
