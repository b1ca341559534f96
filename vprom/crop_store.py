"""Reading a crop store (`vprom crops`): every crop a data set uses, once, as uint8 pixels.

The file holds `crop_id` (N,) sorted and `pixels` uint8 (N, 3, S, S), each crop resized to
S x S with `vprom extract`'s rule (aspect ratio not kept), one crop per HDF5 chunk; attributes
give the kind, size, resize rule and manifest, whose inputs name the DATASET.h5.
"""

from __future__ import annotations

import mmap
from pathlib import Path

import numpy as np

from vprom.errors import VpromError
from vprom.feature_files import OpenFile
from vprom.file_kinds import CROPS, check_kind
from vprom.manifest import check_made_from, manifest_of
from vprom.tables import crop_rows, open_h5

KIND = "vprom-crops"
LAYOUT = "pixels: uint8 (N, 3, S, S) RGB, channels first, one crop per HDF5 chunk"


class CropStore(OpenFile):
    """An open crop store, read lazily: raw crops (one an uncompressed chunk) from a memory map
    of this process at their chunks' offsets, about 3x faster than h5py's per-crop read."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        check_kind(self.path, CROPS)
        self._h5 = open_h5(self.path)
        self._bytes, self._offsets = None, None
        try:
            if self._h5.attrs.get("kind") != KIND or "pixels" not in self._h5:
                raise VpromError(f"{self.path}: not a crop store of `vprom crops`")
            if not bool(self._h5.attrs.get("complete", False)):
                raise VpromError(f"{self.path}: incomplete crop store; re-run `vprom crops`")
            self.pixels = self._h5["pixels"]
            self.crop_id = self._h5["crop_id"][()].astype(np.int64)
            self.size = int(self._h5.attrs["size"])
        except BaseException:
            self._h5.close()
            raise

    def close(self) -> None:
        self._bytes = None  # the map goes once no array points into it any more
        super().close()

    def rows_of(self, crop_ids) -> np.ndarray:
        """Rows of `crop_ids`; -1 where the store lacks the crop."""
        return crop_rows(self.crop_id, crop_ids)

    def _raw_offsets(self) -> np.ndarray | None:
        """Each crop's byte offset (-1: never written), or None for crops not stored raw."""
        pixels = self.pixels
        if pixels.compression is not None or pixels.chunks != (1, *pixels.shape[1:]):
            return None
        offsets = np.full(len(self), -1, np.int64)
        crop_bytes = int(np.prod(pixels.shape[1:]))

        def note(info) -> None:
            if info.filter_mask == 0 and info.size == crop_bytes:
                offsets[info.chunk_offset[0]] = info.byte_offset
        pixels.id.chunk_iter(note)
        return offsets

    def read_rows(self, rows) -> np.ndarray:
        """uint8 (k, 3, S, S) of the store's rows `rows` (any order, repeats allowed)."""
        rows = np.asarray(rows, dtype=np.int64).reshape(-1)
        out = np.empty((len(rows), *self.pixels.shape[1:]), np.uint8)
        if self._offsets is None:
            self._offsets = self._raw_offsets()
            if self._offsets is not None:
                with open(self.path, "rb") as f:
                    self._bytes = np.frombuffer(
                        mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ), np.uint8)
        n = out[0].size if len(rows) else 0
        crops = out.reshape(len(rows), n)
        for k, r in enumerate(rows.tolist()):
            start = -1 if self._offsets is None else int(self._offsets[r])
            if start < 0:  # h5py: another layout, or a chunk never written (the fill value)
                out[k] = self.pixels[r]
            else:
                crops[k] = self._bytes[start:start + n]
        return out


def store_rows(store: CropStore, dataset: str | Path, crop_ids: np.ndarray, what: str
               ) -> np.ndarray:
    """The rows of `crop_ids` (of `what`); refuses a store of another data set or lacking one."""
    check_made_from((manifest_of(store.path) or {}).get("inputs"), dataset, str(store.path),
                    f"build a crop store of this one: `vprom crops {dataset} --vg DIR --size S "
                    "--out CROPS.h5`")
    rows = store.rows_of(crop_ids)
    if (rows < 0).any():
        missing = np.unique(np.asarray(crop_ids)[rows < 0])
        raise VpromError(f"{store.path}: lacks {len(missing)} crops that {what} shows (e.g. "
                         f"{int(missing[0])}); rebuild it with `vprom crops {dataset}`")
    return rows
