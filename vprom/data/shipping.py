"""`loader`: whole batches from DataLoader workers through shared memory that is reused.

A torch DataLoader worker hands every batch to the main process in a fresh shared-memory
segment, and every tensor of the batch travels apart (a file descriptor each). On the 2-core
machine of bench/RESULTS.md, making and filling a fresh 4 MB segment cost 4.9 ms, 14 times
the gather of a batch of pooled features, so two workers delivered 0.05x of a bare read.

`loader(data, batch_size, ...)` is a `torch.utils.data.DataLoader` (`Loader`) over whole
batches (`VPROM.batch`, through a `BatchSampler`) whose workers instead write the panels into
a ring of slots of their own: one anonymous shared-memory file (`memfd`) per worker, mapped
once by each side. The worker's first batch carries the file's descriptor; later ones carry
only the slot's number, with the answers, ids and metadata as plain values.

A worker's message carries several whole batches: `group_size` batches, at least
`GROUP_PROBLEMS` problems but at most `GROUP_BYTES` of panels. A DataLoader round trip (queues,
pickling, the feeder threads) cost 1.2 ms of CPU between the two sides on that machine, four
times the 0.3 ms gather of a batch of 32 pooled vectors; shared by 8 batches it stops
mattering. The loader's iterator hands the batches out one at a time, in the sampler's order.

A slot is written again only after the main process has dropped every reference to the batch
it holds: the main process's array over the slot (which the tensor keeps alive, views and
`.numpy()` included) marks the slot free when it dies. A batch a user keeps is never
overwritten; a worker that finds none of its slots free hands that batch over in torch's way.
Each worker's ring has `(prefetch_factor + 2) x group_size` slots the size of its first
batch: about what torch's transport keeps in flight. Where there is no memfd (not Linux)
batches go torch's way. In the main process (`num_workers=0`) batches are `VPROM.batch`
itself, without the DataLoader's conversion of their metadata lists.
"""

from __future__ import annotations

import functools
import itertools
import math
import mmap
import os
import weakref
from multiprocessing.reduction import DupFd

import numpy as np
import torch
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    Dataset,
    RandomSampler,
    Sampler,
    SequentialSampler,
    get_worker_info,
)

#: the ring's first page holds one byte a slot: 1 while a batch in it is alive, 0 when free
HEADER = mmap.PAGESIZE
_rings = itertools.count()
#: a worker's message: whole batches of at least this many problems in all ...
GROUP_PROBLEMS = 256
#: ... unless their panels would pass this many bytes (a batch of big panels goes alone)
GROUP_BYTES = 16 << 20


@functools.cache
def _numpy_dtype(dtype: torch.dtype) -> np.dtype | None:
    try:
        return torch.empty(0, dtype=dtype).numpy().dtype
    except TypeError:
        return None


class Ring:
    """A worker's slots: `slots` of `slot_bytes` each, in one memfd after the header."""

    def __init__(self, slot_bytes: int, slots: int):
        self.slot_bytes = -(-slot_bytes // mmap.PAGESIZE) * mmap.PAGESIZE
        self.size = HEADER + slots * self.slot_bytes
        self.fd = os.memfd_create("vprom-batches", os.MFD_CLOEXEC)
        os.ftruncate(self.fd, self.size)
        self.map = mmap.mmap(self.fd, self.size)
        self.taken = np.frombuffer(self.map, np.uint8, slots)
        self.key = (os.getpid(), next(_rings))
        self.announced = False  # whether a parcel has carried the descriptor yet

    def take(self, shape: tuple, dtype: torch.dtype) -> tuple[int, torch.Tensor] | None:
        """(slot, a tensor over it) for a batch of `shape`, or None if none is free or fits."""
        np_dtype = _numpy_dtype(dtype)
        if np_dtype is None:  # no numpy twin (bfloat16): torch's transport
            return None
        free = np.flatnonzero(self.taken == 0)
        if not len(free) or math.prod(shape) * np_dtype.itemsize > self.slot_bytes:
            return None
        slot = int(free[0])
        self.taken[slot] = 1
        return slot, torch.from_numpy(self._array(slot, shape, np_dtype))

    def _array(self, slot: int, shape: tuple, dtype: np.dtype) -> np.ndarray:
        offset = HEADER + slot * self.slot_bytes
        return np.frombuffer(self.map, dtype, math.prod(shape), offset).reshape(shape)


class Parcel:
    """A batch whose panels lie in `slot` of `ring`; unpickled, it is the batch again."""

    def __init__(self, ring: Ring, slot: int, batch: dict):
        panels = batch["panels"]
        self.ring, self.slot = ring, slot
        self.shape, self.dtype = tuple(panels.shape), _numpy_dtype(panels.dtype).str
        self.rest = {key: value.numpy() if isinstance(value, torch.Tensor) else value
                     for key, value in batch.items() if key != "panels"}

    def __reduce__(self):
        fd = None
        if not self.ring.announced:  # the worker's queue pickles its parcels in order
            fd, self.ring.announced = DupFd(self.ring.fd), True
        offset = HEADER + self.slot * self.ring.slot_bytes
        return _unpack, (self.ring.key, fd, self.ring.size, self.slot, offset, self.shape,
                         self.dtype, self.rest)


#: the receiving process's maps of the workers' rings, by (worker pid, ring number)
_maps: dict[tuple[int, int], mmap.mmap] = {}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _unpack(key, fd, size, slot, offset, shape, dtype, rest) -> dict:
    if fd is not None:
        for old in [k for k in _maps if not _alive(k[0])]:  # ended workers' rings: their
            del _maps[old]                              # batches still alive keep the map
        handle = fd.detach()
        try:
            _maps[key] = mmap.mmap(handle, size)
        finally:
            os.close(handle)
    ring = _maps[key]
    panels = np.frombuffer(ring, dtype, math.prod(shape), offset).reshape(shape)
    weakref.finalize(panels, np.frombuffer(ring, np.uint8, 1, slot).fill, 0)
    return {"panels": torch.from_numpy(panels),
            **{key: torch.from_numpy(value) if isinstance(value, np.ndarray) else value
               for key, value in rest.items()}}


class Batches(Dataset):
    """`data`'s whole batches by groups of lists of indices; in a worker, as parcels over its
    ring."""

    def __init__(self, data, slots: int):
        self.data, self.slots, self.ring = data, slots, None

    def __len__(self) -> int:
        return len(self.data)

    def __getstate__(self) -> dict:
        return {**self.__dict__, "ring": None}  # a worker makes its own

    def _slot(self, shape: tuple, dtype: torch.dtype, taken: list) -> torch.Tensor | None:
        if self.ring is None:
            if not hasattr(os, "memfd_create"):  # not Linux: torch's transport
                return None
            nbytes = math.prod(shape) * torch.empty(0, dtype=dtype).element_size()
            self.ring = Ring(nbytes, self.slots)
        got = self.ring.take(shape, dtype)
        if got is None:
            return None
        taken.append(got[0])
        return got[1]

    def __getitem__(self, group: list) -> list:
        if get_worker_info() is None:
            return [self.data.batch(indices) for indices in group]
        return [self._parcel(indices) for indices in group]

    def _parcel(self, indices) -> dict | Parcel:
        taken = []
        batch = self.data.batch(indices, out=lambda shape, dtype: self._slot(shape, dtype, taken))
        return Parcel(self.ring, taken[0], batch) if taken else batch


def _as_is(group):
    """The batches as `Batches` made them (the DataLoader's default would walk their lists)."""
    return group


class Groups(Sampler):
    """The lists of `batches` (a BatchSampler), `size` at a time."""

    def __init__(self, batches: BatchSampler, size: int):
        self.batches, self.size = batches, size

    def __iter__(self):
        batches = iter(self.batches)
        while group := list(itertools.islice(batches, self.size)):
            yield group

    def __len__(self) -> int:
        return -(-len(self.batches) // self.size)


class Loader(DataLoader):
    """A DataLoader over groups of batches that yields the batches one at a time."""

    def __iter__(self):
        for group in super().__iter__():
            yield from group

    def __len__(self) -> int:
        return len(self.sampler.batches)


def group_size(data, batch_size: int, workers: int) -> int:
    """Batches a worker's message carries (see the module doc): 1 without workers."""
    if not workers or not len(data):
        return 1
    problem_bytes = max(1, data.batch([0])["panels"].nbytes)
    return max(1, min(GROUP_PROBLEMS // batch_size, GROUP_BYTES // (problem_bytes * batch_size)))


def loader(data, batch_size: int, shuffle: bool = False, sampler=None, drop_last: bool = False,
           group: int | None = None, **kwargs) -> Loader:
    """A DataLoader of `data`'s whole batches of `batch_size` (see the module doc).

    `sampler` orders the problems (e.g. a `DistributedSampler`; `shuffle` when there is
    none); `group`: batches a worker sends at once (default `group_size`'s choice); the
    other keywords go to the DataLoader (`num_workers`, `pin_memory`,
    `persistent_workers`, `prefetch_factor`, ...)."""
    if sampler is None:
        sampler = RandomSampler(data) if shuffle else SequentialSampler(data)
    elif shuffle:
        raise ValueError("loader: give `shuffle` or a `sampler`, not both")
    size = group or group_size(data, batch_size, kwargs.get("num_workers", 0))
    slots = ((kwargs.get("prefetch_factor") or 2) + 2) * size
    kwargs.setdefault("collate_fn", _as_is)
    return Loader(Batches(data, slots), batch_size=None,
                  sampler=Groups(BatchSampler(sampler, batch_size, drop_last), size), **kwargs)
