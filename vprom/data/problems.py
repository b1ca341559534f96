"""`VPROM`: the problems of one split part as a PyTorch dataset, for anyone's model.

An item is one problem: 16 panels in the paper's order, the answer 0..7, the matrix id, relation,
element type, the answer's element and super-attribute. A panel is what `source` holds: pooled
vectors (float32 `[16, D]`, in memory), maps (float32 `[16, C, H, W]`) or a crop store's pixels
(uint8 `[16, 3, S, S]`, then `transform`), the last two read lazily and opened anew in each
process (safe with DataLoader workers and DDP). Augmentations, seeded by (seed, epoch, index):
`shuffle_candidates`, and `swap_rows` (context rows 1 and 2, with probability 1/2).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import BatchSampler, DataLoader, RandomSampler, SequentialSampler

from vprom.crop_store import CropStore, store_rows
from vprom.domain import N_CONTEXT, N_PANELS, SPLITS
from vprom.errors import VpromError
from vprom.feature_files import check_features_source, load_features, open_maps, rows_of
from vprom.file_kinds import CROPS, FEATS, MAPS, kind_of
from vprom.tables import SPLIT_PARTS, open_h5, read_matrix_table

METADATA = ("relation", "element_type", "element", "super_attribute")


class VPROM(torch.utils.data.Dataset):
    """The problems of `split`'s `part` in DATASET.h5 over `source`."""

    def __init__(self, dataset_h5: str | Path, split: str = "neutral", part: str = "train",
                 source: str | Path | None = None, transform=None,
                 shuffle_candidates: bool = False, swap_rows: bool = False, seed: int = 0):
        self.dataset, self.split, self.part = Path(dataset_h5), split, part
        if source is None:
            raise VpromError("VPROM needs a source: a FEATS.h5, a maps file or a crop store")
        self.source, self.transform = Path(source), transform
        self.shuffle_candidates, self.swap_rows = shuffle_candidates, swap_rows
        self.seed, self.epoch = seed, 0
        self._load_problems()
        open_h5(self.source).close()  # a file not there, not HDF5 or damaged is refused by name
        self.kind = {FEATS: "features", MAPS: "maps", CROPS: "crops"}.get(kind_of(self.source))
        if self.kind is None:
            raise VpromError(f"{self.source}: neither a FEATS.h5 (`vprom extract`, pooled or "
                             "--pool none) nor a crop store (`vprom crops`); pass one of those "
                             "as source")
        self._check_source()
        self._reader, self._pid = None, None

    def _load_problems(self) -> None:
        if self.split not in SPLITS or self.part not in SPLIT_PARTS:
            raise VpromError(f"unknown split part {self.split}/{self.part}; splits: "
                             f"{', '.join(SPLITS)}; parts: {', '.join(SPLIT_PARTS)}")
        table = read_matrix_table(self.dataset)
        rows = table.part_rows(self.dataset, self.split, self.part)
        self.ids, self.panels = table.id[rows], table.panels[rows]
        self.answer = table.answer[rows].astype(np.int64)
        self.relation, self.element_type = table.relation[rows], table.element_type[rows]
        self.super_attribute = table.super_attribute[rows]
        self.element = table.elements[rows, N_CONTEXT + self.answer]

    def _check_source(self) -> None:
        if self.kind == "crops":
            with CropStore(self.source) as store:
                self.rows = store_rows(store, self.dataset, self.panels,
                                       f"{self.split}/{self.part}")
            return
        check_features_source(self.dataset, self.source)
        if self.kind == "features":
            self.features = load_features(self.source)
            crop_id, missing = self.features.crop_id, self.features.missing_crop_id
        else:
            with open_maps(self.source) as maps:
                crop_id, missing = maps.crop_id, maps.missing_crop_id
        self.rows = rows_of(crop_id, self.panels, self.source)
        lost = np.isin(self.panels, missing)
        if lost.any():
            raise VpromError(f"{self.source}: crop {int(self.panels[lost][0])} of "
                             f"{self.split}/{self.part} was extracted without its image "
                             "(--allow-missing; its features are NaN); restore the image and "
                             "re-run `vprom extract`")

    def __len__(self) -> int:
        return len(self.ids)

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_reader": None, "_pid": None}  # h5py handles do not pickle

    def _open(self):  # the lazy reader of this process
        if self._reader is None or self._pid != os.getpid():
            opener = open_maps if self.kind == "maps" else CropStore
            self._reader, self._pid = opener(self.source), os.getpid()
        return self._reader

    def _read(self, rows: np.ndarray) -> torch.Tensor:
        if self.kind == "features":
            return torch.from_numpy(self.features.features[rows])
        reader = self._open()
        if self.kind == "maps":
            return torch.from_numpy(reader.gather(reader.crop_id[rows]))
        return torch.from_numpy(reader.read_rows(rows))

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def order(self, index: int) -> tuple[np.ndarray, int]:
        """The panel order of item `index` (positions into its stored 16) and its answer."""
        order, answer = np.arange(N_PANELS), int(self.answer[index])
        if not (self.shuffle_candidates or self.swap_rows):
            return order, answer
        rng = np.random.default_rng([self.seed, self.epoch, index])
        if self.swap_rows and rng.random() < 0.5:
            order[:6] = order[[3, 4, 5, 0, 1, 2]]
        if self.shuffle_candidates:
            perm = rng.permutation(N_PANELS - N_CONTEXT)
            order[N_CONTEXT:] = N_CONTEXT + perm
            answer = int(np.flatnonzero(perm == answer)[0])
        return order, answer

    def _indices(self, indices) -> np.ndarray:  # negative ones count from the end
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        bad = (idx < -len(self)) | (idx >= len(self))
        if bad.any():
            raise IndexError(f"index {int(idx[bad][0])} out of range for {len(self)} problems")
        return idx % max(len(self), 1)

    def loader(self, batch_size: int, **kwargs) -> DataLoader:
        """A DataLoader of whole batches (see `loader`)."""
        return loader(self, batch_size, **kwargs)

    def __getitem__(self, index) -> dict:
        """Problem `index`; a list of indices gives a whole batch, collated (see `batch`)."""
        if isinstance(index, (list, tuple, np.ndarray, torch.Tensor)):
            return self.batch(index)
        return self.__getitems__([index])[0]

    def __getitems__(self, indices) -> list[dict]:
        """The items at `indices`, read as one `batch` (a DataLoader's call per batch)."""
        b = self.batch(indices)
        return [{"panels": b["panels"][k], "answer": int(b["answer"][k]), "id": int(b["id"][k]),
                 **{key: b[key][k] for key in METADATA}} for k in range(len(b["id"]))]

    def batch(self, indices) -> dict:
        """The problems at `indices`, collated: `panels` [B, 16, ...], `answer` and `id` int64
        [B], the metadata as lists."""
        indices = self._indices(indices)
        if self.shuffle_candidates or self.swap_rows:
            orders = [self.order(i) for i in indices.tolist()]
            rows = np.stack([self.rows[i][o] for i, (o, _) in zip(indices, orders)])
            answers = np.array([answer for _, answer in orders], dtype=np.int64)
        else:  # the stored order: one vectorised look-up
            rows, answers = self.rows[indices], self.answer[indices]
        panels = self._read(rows.reshape(-1))
        panels = panels.view(len(indices), N_PANELS, *panels.shape[1:])
        if self.kind == "crops" and self.transform is not None:
            panels = torch.stack([self.transform(p) for p in panels])
        return {"panels": panels, "answer": torch.from_numpy(answers),
                "id": torch.from_numpy(self.ids[indices]),
                **{key: list(map(str, getattr(self, key)[indices].tolist())) for key in METADATA}}


def _whole(batch: dict) -> dict:
    return batch  # `loader`'s collate step: `VPROM.batch` gives a batch collated already


def loader(data: VPROM, batch_size: int, shuffle: bool = False, sampler=None,
           drop_last: bool = False, **kwargs) -> DataLoader:
    """A DataLoader of `data`'s whole batches (`VPROM.batch`), ordered by `sampler` (a
    `DistributedSampler`, say) or `shuffle`; other keywords go to DataLoader."""
    if sampler is None:
        sampler = RandomSampler(data) if shuffle else SequentialSampler(data)
    elif shuffle:
        raise ValueError("loader: give `shuffle` or a `sampler`, not both")
    kwargs.setdefault("collate_fn", _whole)
    return DataLoader(data, batch_size=None,
                      sampler=BatchSampler(sampler, batch_size, drop_last), **kwargs)
