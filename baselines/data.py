"""The matrices of one split as tensors: one table holds the panels of the crops the split shows
(float32 vectors, maps or uint8 pixels) and each matrix is a row of 16 indices into it, so a batch
is one gather. The shuffled-context control gives each matrix another's context (a seeded
derangement); `--center-features` removes the large direction pooled CNN features share."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from vprom.baselines.parts import N_CONTEXT, element_type_class, relation_class
from vprom.errors import VpromError
from vprom.feature_files import load_features, open_maps
from vprom.crop_store import CropStore
from vprom.tables import SPLIT_PARTS, read_matrix_table


@dataclass(frozen=True)
class MatrixSet:
    ids: np.ndarray  # [n] matrix ids
    rows: torch.Tensor  # [n, 16] int64 rows of the feature table (8 context, 8 candidates)
    answer: torch.Tensor  # [n] int64, 0..7
    relation: torch.Tensor  # [n] int64, index into parts.RELATION_CLASSES
    element_class: torch.Tensor  # [n] int64, index into parts.ELEMENT_TYPE_CLASSES
    relation_name: np.ndarray  # [n] str: and / or / union / progression
    element_type: np.ndarray  # [n] str: the dataset's four element types

    def __len__(self) -> int:
        return len(self.ids)

    def take(self, index: np.ndarray) -> "MatrixSet":
        t = torch.from_numpy(np.asarray(index, dtype=np.int64)).to(self.rows.device)
        return MatrixSet(*(v[t] if torch.is_tensor(v) else v[index] for v in vars(self).values()))

    def to(self, device: torch.device | str) -> "MatrixSet":
        return MatrixSet(*(v.to(device) if torch.is_tensor(v) else v for v in vars(self).values()))


@dataclass(frozen=True)
class SplitData:
    features: torch.Tensor  # [N_crops, D] float32
    parts: dict[str, MatrixSet]  # "train", "val", "test"
    attrs: dict  # FEATS.h5 attributes (backbone, weights, preprocessing, versions)

    @property
    def feature_dim(self) -> int:
        """D of vectors, C of maps, 3 of pixels."""
        return int(self.features.shape[1])

    @property
    def side(self) -> int:
        """H = W of maps, S of pixels; 0 for vectors."""
        return int(self.features.shape[-1]) if self.features.dim() > 2 else 0

    def panels(self, part: MatrixSet, index: torch.Tensor) -> torch.Tensor:
        return self.features[part.rows[index]]

    def to(self, device: torch.device | str) -> "SplitData":
        return SplitData(self.features.to(device),
                         {name: part.to(device) for name, part in self.parts.items()},
                         self.attrs)


def derangement(n: int, rng: np.random.Generator) -> np.ndarray:
    """A permutation without fixed points (the identity for n < 2, which has none)."""
    if n < 2:
        return np.arange(n)
    order = rng.permutation(n)
    out = np.empty(n, dtype=np.int64)
    out[order] = np.roll(order, -1)
    return out


def centred(features: np.ndarray, train_rows: np.ndarray) -> np.ndarray:
    """Features minus the mean over the distinct training crops, L2-normalised again."""
    mean = features[np.unique(train_rows)].astype(np.float64).mean(axis=0)
    out = features - mean.astype(features.dtype)
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    return out / np.maximum(norms, 1e-12)


def read_panels(path: Path, kind: str, crop_ids: np.ndarray) -> tuple[np.ndarray, dict]:
    """The panels of `crop_ids` (sorted, distinct) in `path`, and the file's attributes."""
    if kind == "pixels":
        with CropStore(path) as store:
            rows = store.rows_of(crop_ids)
            if (rows < 0).any():
                raise VpromError(f"{path}: lacks crop {int(crop_ids[rows < 0][0])} of the split; "
                                 "build the crop store of this data set with `vprom crops`")
            return store.read_rows(rows), {"backbone": f"crops {store.size}px", "weights": ""}
    if kind == "maps":
        with open_maps(path) as maps:
            found = maps.gather(crop_ids, dtype=maps.dtype), maps.missing_crop_id, maps.attrs
    else:
        feats = load_features(path)
        found = feats.features[feats.index_of(crop_ids)], feats.missing_crop_id, feats.attrs
    lost = np.isin(crop_ids, found[1])
    if lost.any():
        raise VpromError(f"{path}: crop {int(crop_ids[lost][0])} was extracted without its "
                         "image (--allow-missing); its features are NaN. Restore the image "
                         "and re-run `vprom extract`")
    return found[0], found[2]


def matrix_set(table, positions: np.ndarray, rows: np.ndarray) -> MatrixSet:
    """The matrices of `table` at `positions`, their panels at `rows` of the panel table."""
    relation_name, element_type = table.relation[positions], table.element_type[positions]
    return MatrixSet(
        ids=table.id[positions],
        rows=torch.from_numpy(np.ascontiguousarray(rows, dtype=np.int64)),
        answer=torch.from_numpy(table.answer[positions].astype(np.int64)),
        relation=torch.tensor([relation_class(r) for r in relation_name], dtype=torch.int64),
        element_class=torch.tensor([element_type_class(e) for e in element_type],
                                   dtype=torch.int64),
        relation_name=relation_name,
        element_type=element_type,
    )


def load_split(dataset: str | Path, features: str | Path, split: str, kind: str = "vectors",
               shuffle_context: bool = False, seed: int = 0, center: bool = False) -> SplitData:
    """`split`'s matrices over the panels of `features`; `seed` fixes the shuffled context."""
    dataset, features = Path(dataset), Path(features)
    table = read_matrix_table(dataset)
    positions = {part: table.part_rows(dataset, split, part) for part in SPLIT_PARTS}
    if center and kind != "vectors":
        raise VpromError(f"--center-features centres pooled vectors; drop it for {kind}")
    shown = np.unique(np.concatenate([table.panels[p].reshape(-1) for p in positions.values()]))
    panels, attrs = read_panels(features, kind, shown)
    parts = {}
    for number, part in enumerate(SPLIT_PARTS):
        at = positions[part]
        rows = np.searchsorted(shown, table.panels[at])
        if shuffle_context:
            rng = np.random.default_rng(np.random.SeedSequence([seed, number]))
            rows[:, :N_CONTEXT] = rows[derangement(len(rows), rng), :N_CONTEXT]
        parts[part] = matrix_set(table, at, rows)
    if center:
        panels = centred(panels, parts["train"].rows.numpy())
    return SplitData(torch.from_numpy(panels), parts, attrs)
