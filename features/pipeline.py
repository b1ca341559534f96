"""The extraction loop: batches in, chunk files out, with copies and compute overlapped.

Per batch, in order:
1. DataLoader workers prepare it (features/crops.py): ready uint8 crops, or images (file
   bytes for the device's decoder, decoded images for `--region roi`). On CUDA the batch
   arrives in pinned memory. With `--workers 0` (a CPU device's default) this process
   prepares it when the loop asks, with threads (`InlineBatches`): on a CPU, workers
   decoding beside the forward stall its OpenMP threads.
2. `Forward.prepare` queues the host-to-device copy and any decoding and cropping on an
   inbound stream and records an event (`Transfers.prepare`); on CUDA it runs in a thread up
   to `Transfers.ahead` batches before the forward (`ahead`). `Forward.__call__` makes the
   compute stream wait for that event, then queues normalisation, the trunk (or the
   detector's trunk, RoI pooling and head), pooling and L2 and a cast to the stored dtype;
   with `--cuda-graphs` all but the cast are one replay of a graph (`GraphedTrunk`), which
   spares the host the trunk's launches (no gain measured at batch 256 on an H200).
3. `Transfers.download` queues the copy of the result into pinned host memory on an outbound
   stream and records an event; the batch joins the in-flight queue.
4. Only when more than `in_flight` batches are queued does the loop wait, for the oldest
   one's event, and copy its rows into its chunk's array; a chunk whose batches have all
   arrived is written (`write_chunk`).
So the host never waits for the forward it has just queued, the GPU always has the next
batches' copies and kernels in its queues, and no `.cpu()` stalls the loop per batch. On a
CPU device every step is synchronous (`HostTransfers`): the queue then changes only when
rows are copied, not their values, so `in_flight` 0 (the plain loop) and >0 give identical
files (tested), as do CUDA runs with any `in_flight`.

The CUDA calls go through `CudaApi`, which tests replace with a stand-in that runs on the
CPU, so the GPU-only code is exercised without a GPU.
"""

from __future__ import annotations

import os
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from functools import partial

import numpy as np
import torch
from torch.nn import functional as F
from tqdm import tqdm

from vprom.errors import VpromError
from vprom.features.backbones import Backbone
from vprom.features.crops import Batch, CropDataset, collate, worker_mode
from vprom.features.decoding import (
    clip_boxes,
    cores_per_process,
    crop_resize,
    crop_resize_many,
    decode_many,
)
from vprom.features.job import DTYPES, TORCH_DTYPES, Job, check_space
from vprom.features.regions import pooled_regions, region_maps
from vprom.io import atomic_path, write_json
from vprom.processes import quiet_when_parent_gone

NICE_WORKERS = 10  # CPU runs: DataLoader workers' priority below the forward's
PREPARE_THREADS = 1  # CUDA: threads preparing batches ahead (decoding, cropping)
INLINE_CROPS = 64  # `--workers 0`: crops decoded at a time, a whole number of batches


# ------------------------------------------------------------------------- transfers
class CudaApi:
    """The CUDA calls of the loop, in one place (tests substitute a CPU stand-in)."""

    Stream = torch.cuda.Stream
    Event = torch.cuda.Event
    stream = staticmethod(torch.cuda.stream)
    current_stream = staticmethod(torch.cuda.current_stream)

    @staticmethod
    def record(tensor: torch.Tensor, stream) -> None:
        tensor.record_stream(stream)

    @staticmethod
    def pinned(like: torch.Tensor) -> torch.Tensor:
        return torch.empty(like.shape, dtype=like.dtype, pin_memory=True)

    @staticmethod
    def capture(fn, device: torch.device) -> tuple:
        """fn() as a CUDA graph, after two warm-up calls on a side stream (as capturing wants):
        (replay, the tensor fn returned, which each replay rewrites in place). Only this
        thread's calls are captured: the DataLoader's pinning thread runs on meanwhile, and
        in the default (global) mode its calls would invalidate the capture."""
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            for _ in range(2):
                fn()
        torch.cuda.current_stream(device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, capture_error_mode="thread_local"):
            out = fn()
        return graph.replay, out


class Pending:
    """A result on its way to the host; `result()` waits for it (event) and returns numpy."""

    def __init__(self, host: torch.Tensor, event=None):
        self.host, self.event = host, event

    def result(self) -> np.ndarray:
        if self.event is not None:
            self.event.synchronize()
        return self.host.numpy()


class HostTransfers:
    """A CPU device: every operation is synchronous, and nothing is prepared ahead."""

    ahead = 0  # batches prepared ahead of the forward, in a thread

    def __init__(self, device: torch.device):
        self.device = device

    def running(self):
        return nullcontext()

    def prepare(self, fn, *args) -> tuple:
        return fn(*args), None

    def upload(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor.to(self.device)

    def take(self, ready, tensors: list) -> None:
        pass

    def download(self, tensor: torch.Tensor) -> Pending:
        return Pending(tensor.cpu())


class CudaTransfers(HostTransfers):
    """Preparation (copies in, decoding, cropping) on an inbound stream, in a thread up to
    `ahead` batches before the forward; the forward on a compute stream; copies out on an
    outbound stream; events between. None of them is the legacy default stream, whose work
    waits for every other stream's: a library call that syncs there (nvjpeg's) would else
    wait for the forwards queued before it."""

    ahead = 2

    def __init__(self, device: torch.device, api=CudaApi):
        super().__init__(device)
        self.api = api
        self.compute, self.inbound, self.outbound = (api.Stream(device) for _ in range(3))
        self.compute.wait_stream(api.current_stream(device))  # the model's weights, uploaded

    def running(self):
        """The loop's forwards run on the compute stream."""
        return self.api.stream(self.compute)

    def prepare(self, fn, *args) -> tuple:
        """fn(*args) queued on the inbound stream, and an event recorded after it."""
        with self.api.stream(self.inbound):
            out = fn(*args)
            ready = self.api.Event()
            ready.record(self.inbound)
        return out, ready

    def upload(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor.to(self.device, non_blocking=True)

    def take(self, ready, tensors: list) -> None:
        """Tensors `prepare` made, now used on the compute stream: it waits for their event,
        and their memory is not reused before it is done with them."""
        self.compute.wait_event(ready)
        for tensor in tensors:
            self.api.record(tensor, self.compute)

    def download(self, tensor: torch.Tensor) -> Pending:
        self.outbound.wait_stream(self.compute)
        with self.api.stream(self.outbound):
            host = self.api.pinned(tensor)
            host.copy_(tensor, non_blocking=True)
            done = self.api.Event()
            done.record(self.outbound)
        self.api.record(tensor, self.outbound)
        return Pending(host, done)


def transfers_for(device: torch.device, api=CudaApi) -> HostTransfers:
    return CudaTransfers(device, api) if device.type == "cuda" else HostTransfers(device)


# --------------------------------------------------------------------------- forward
def finish(fmap: torch.Tensor, pool: str) -> torch.Tensor:
    """The last conv map -> what is stored: pooled and L2-normalised (avg; cls and mean, whose
    trunks return a 1x1 map or the patch grid), or the map (none)."""
    if pool == "none":
        return fmap.float()
    return F.normalize(fmap.float().mean(dim=(2, 3)), dim=1)


@torch.inference_mode()
def embed(model: torch.nn.Module, pixels: torch.Tensor, backbone: Backbone,
          autocast: torch.dtype | None, device: torch.device, pool: str = "avg") -> torch.Tensor:
    """uint8 (B, S, S, 3) -> float32 (B, D) (trunk, average pool, L2) or the maps (pool none)."""
    x = backbone.preprocess.normalise(pixels.to(device, non_blocking=True))
    # no cast cache: each weight is cast once a forward anyway, and graphs capture no cache
    with torch.autocast(device.type, dtype=autocast, enabled=autocast is not None,
                        cache_enabled=False):
        fmap = model(x)
    return finish(fmap, pool)


class GraphedTrunk:
    """`embed` at the batch size, replayed from one CUDA graph (`--cuda-graphs`): a batch is
    copied into the graph's input (the rows past a short batch zeroed), one replay runs the
    whole trunk in place of some hundred kernel launches, and its rows are copied out in the
    stored dtype (the next replay rewrites the graph's output). A row's features depend on
    its own pixels only, and every batch, a short one too, runs the captured kernels at the
    full batch size."""

    def __init__(self, job: Job, model: torch.nn.Module, api=CudaApi):
        device, self.dtype = job.world.device, TORCH_DTYPES[job.config.dtype]
        with torch.inference_mode():
            self.pixels = torch.zeros((job.config.batch_size, job.size, job.size, 3),
                                      dtype=torch.uint8, device=device)
        try:
            self.replay, self.out = api.capture(partial(embed, model, self.pixels, job.backbone,
                                                        job.autocast, device, job.config.pool),
                                                device)
        except RuntimeError as e:  # torch's CUDA errors included
            raise VpromError(f"--cuda-graphs: the {job.backbone.name} trunk could not be "
                             f"captured in a CUDA graph ({str(e).splitlines()[0]}); run "
                             "again without --cuda-graphs") from e

    @torch.inference_mode()
    def __call__(self, pixels: torch.Tensor) -> torch.Tensor:
        n = len(pixels)
        self.pixels[:n].copy_(pixels)
        self.pixels[n:].zero_()
        self.replay()
        return self.out[:n].to(self.dtype, copy=True)


class Forward:
    """A `Batch` -> `prepare` (copies in, decoding, cropping) -> `__call__` (the forward) ->
    (units, its stored rows queued on the device, failures)."""

    def __init__(self, job: Job, model: torch.nn.Module, transfers: HostTransfers,
                 trunk: GraphedTrunk | None = None):
        self.job, self.model, self.transfers, self.trunk = job, model, transfers, trunk
        self.device = job.world.device
        self.dtype = TORCH_DTYPES[job.config.dtype]

    def prepare(self, batch: Batch) -> tuple:
        """(units, parts, failures) queued on the device, and the event that says ready."""
        return self.transfers.prepare(self._prepare, batch)

    @torch.inference_mode()
    def _prepare(self, batch: Batch) -> tuple[list, list, list]:
        failed, units, parts = list(batch.failed), [], []
        if len(batch.units):
            units.append(batch.units)
            parts.append(self.transfers.upload(batch.pixels))
        for source_units, payload in self._sources(batch.sources, failed):
            units.append(source_units)
            parts.append(payload)
        return units, parts, failed

    @torch.inference_mode()
    def __call__(self, prepared: tuple) -> tuple[np.ndarray, torch.Tensor | None, list]:
        (units, parts, failed), ready = prepared
        job = self.job
        if not units:
            return np.zeros(0, np.int64), None, failed
        # region roi's parts are (image, corners)
        self.transfers.take(ready, [p[0] if isinstance(p, tuple) else p for p in parts])
        if job.config.region == "roi":
            out = self._regions(parts)
        else:
            pixels = parts[0] if len(parts) == 1 else torch.cat(parts)
            out = (self.trunk(pixels) if self.trunk else
                   embed(self.model, pixels, job.backbone, job.autocast, self.device,
                         job.config.pool))
        return np.concatenate(units), out.to(self.dtype), failed

    def _sources(self, sources: list, failed: list) -> list:
        """Decode on the device (if still encoded), clip the boxes; (units, crops) of all
        the images for region crop, (units, (image, corners)) per image for region roi."""
        encoded = [s for s in sources if s.encoded]
        decoded = dict(zip(map(id, encoded), decode_many([s.data for s in encoded],
                                                         self.device)))
        kept = []
        for s in sources:
            image = decoded.get(id(s), s.data)
            if isinstance(image, Exception):
                failed += [(int(u), s.path, f"image {s.image_id}: cannot decode ({image})")
                           for u in s.units]
                continue
            image = image.to(self.device, non_blocking=True)
            corners, errors = clip_boxes(s.boxes, image.shape[2], image.shape[1])
            failed += [(int(u), s.path, f"image {s.image_id}: {e}")
                       for u, e in zip(s.units, errors) if e is not None]
            ok = [e is None for e in errors]
            if any(ok):
                kept.append((s.units[ok], image, [c for c, k in zip(corners, ok) if k]))
        if self.job.config.region == "roi":
            return [(units, (image, corners)) for units, image, corners in kept]
        if not kept:
            return []
        units, images, corners = zip(*kept)
        return [(np.concatenate(units), cut_crops(list(images), list(corners), self.job.size,
                                                  self.job.backbone.preprocess,
                                                  self.batched_crops))]

    @property
    def batched_crops(self) -> bool:
        return self.device.type == "cuda"

    def _regions(self, parts: list) -> torch.Tensor:
        job = self.job
        short, long = job.sides
        cells = [pooled_regions(self.model, image, corners, job.backbone.preprocess,
                                job.backbone.region_head, short, long, job.autocast)
                 for image, corners in parts]
        return finish(region_maps(self.model, torch.cat(cells), job.autocast), job.config.pool)


def cut_crops(images: list, corners: list, size: int, preprocess, batched: bool) -> torch.Tensor:
    """The crops of decoded images, in order: `batched` (on CUDA) by `crop_resize_many` in half
    precision, else image by image by `crop_resize` (what the workers run)."""
    if batched:
        return crop_resize_many(images, corners, size, preprocess.interpolation,
                                preprocess.crop_pct)
    return torch.cat([crop_resize(image, c, size, preprocess.interpolation,
                                  preprocess.crop_pct) for image, c in zip(images, corners)])


def row_shape(job: Job, model: torch.nn.Module) -> tuple:
    """One crop's stored shape: (D,) pooled, or its map's (C, H, W) (a probe forward for maps
    and for backbones built on demand, whose size depends on the model and pooling); the loop
    takes it from its first result instead, and asks this only when that batch has none."""
    if job.config.pool == "avg" and job.backbone.feature_dim:
        return (job.backbone.feature_dim,)
    device, head = job.world.device, job.backbone.region_head
    with torch.inference_mode():
        if job.config.region == "roi":
            fmap = model.backbone_features(torch.zeros(1, 3, 64, 64, device=device))
            cells = torch.zeros(1, fmap.shape[1], head.pooled, head.pooled, device=device)
            return tuple(model.roi_head(cells).shape[1:])
        pixels = torch.zeros(1, job.size, job.size, 3, dtype=torch.uint8)
        return tuple(embed(model, pixels, job.backbone, None, device,
                           job.config.pool).shape[1:])


def warm_up(job: Job, model: torch.nn.Module) -> None:
    """On CUDA, one forward at the batch size while the workers start: cuDNN's first calls
    (kernel choice, lazy module loading) then cost nothing inside the loop."""
    if job.world.device.type != "cuda" or job.config.region != "crop":
        return
    pixels = torch.zeros(job.config.batch_size, job.size, job.size, 3, dtype=torch.uint8)
    embed(model, pixels, job.backbone, job.autocast, job.world.device, job.config.pool)


# ------------------------------------------------------------------------------ loop
def build_model(job: Job) -> torch.nn.Module:
    model = job.loaded.module.to(job.world.device, memory_format=torch.channels_last)
    if job.config.compile:
        model = torch.compile(model)
    return model


def _worker_init(worker_id: int, nice: int) -> None:
    """A stopped extract leaves no worker tracebacks. On a CPU run (`nice` > 0), decoding
    yields to the forward: the trunk's OpenMP threads wait for their slowest member at every
    layer, so a worker taking a core at normal priority stalls them all; at low priority it
    fills the gaps instead."""
    quiet_when_parent_gone()
    if nice:
        os.nice(nice)


class InlineBatches:
    """`--workers 0`: batches prepared in this process when the loop asks for them, their
    image groups decoded by a pool of threads (Pillow and torch release the GIL while they
    decode and resize). Nothing runs beside the forward: on a CPU device that is the point
    (see `DEFAULT_CPU_WORKERS`). `ahead` batches are decoded at a time, all their groups in
    one go, so that the threads share many images and wait less for the slowest one (a CPU
    batch of 8 crops holds 2-3 images); the batches are the same either way."""

    def __init__(self, dataset: CropDataset, batches: list, threads: int, pin: bool,
                 ahead: int = 1):
        self.dataset, self.batches, self.threads, self.pin = dataset, batches, threads, pin
        self.ahead = ahead

    def __iter__(self):
        with ThreadPoolExecutor(self.threads) as pool:
            for at in range(0, len(self.batches), self.ahead):
                run = self.batches[at:at + self.ahead]
                items = iter(list(pool.map(self.dataset.__getitem__,
                                           [g for groups in run for g in groups])))
                for groups in run:
                    batch = collate([next(items) for _ in groups])
                    yield batch.pin_memory() if self.pin else batch


def loader(job: Job, batches: list):
    """The batches' pixels: DataLoader worker processes, or this process (`--workers 0`)."""
    cpu = job.world.device.type == "cpu"
    mode = worker_mode(job.decoder, job.config.region, job.decode_on_device)
    dataset = CropDataset(job.layout, job.paths, job.size, mode, job.config.vg,
                          job.backbone.preprocess.interpolation,
                          job.backbone.preprocess.crop_pct)
    if job.workers == 0:
        return InlineBatches(dataset, batches, cores_per_process(), pin=not cpu,
                             ahead=max(1, INLINE_CROPS // job.config.batch_size))
    return torch.utils.data.DataLoader(
        dataset, batch_sampler=batches, collate_fn=collate, num_workers=job.workers,
        pin_memory=not cpu, worker_init_fn=partial(_worker_init, nice=NICE_WORKERS if cpu else 0),
        prefetch_factor=job.config.prefetch)


class Chunks:
    """The arrays of the chunks in progress; a chunk is written when its last batch lands."""

    def __init__(self, job: Job, model: torch.nn.Module):
        self.job, self.model, self.open = job, model, {}

    def receive(self, c: int, units: np.ndarray, pending: Pending | None, failed: list) -> int:
        job, result = self.job, None if pending is None else pending.result()
        if not job.row_shape:  # the first result's, or a probe's if it has none (all failed)
            job.row_shape = result.shape[1:] if result is not None else row_shape(job,
                                                                                  self.model)
            check_space(job.config, job.layout, job.row_shape)  # maps, timm: now known
        if c not in self.open:
            start, stop = job.layout.chunk_units(c)
            rows = np.full((stop - start, *job.row_shape), np.nan, DTYPES[job.config.dtype])
            self.open[c] = [rows, [], len(job.layout.chunks[c])]
        entry = self.open[c]
        if result is not None:
            entry[0][units - job.layout.chunk_units(c)[0]] = result
        entry[1] += failed
        entry[2] -= 1
        if entry[2] == 0:
            write_chunk(job, c, entry[0], entry[1])
            del self.open[c]
        return len(units) + len(failed)


def run_chunks(job: Job, api=CudaApi) -> int:
    """Extract this rank's unfinished chunks (see the module doc); returns the boxes done."""
    layout, world = job.layout, job.world
    todo = [c for c in range(len(layout.chunks))
            if c % world.size == world.rank and not job.chunk_done(c)]
    if not todo:
        return 0
    batch_ids = [b for c in todo for b in layout.chunks[c]]
    chunk_of = [c for c in todo for _ in layout.chunks[c]]
    # Workers (if any) start first: they decode the first batches while the model is built.
    batches = iter(loader(job, [layout.batches[b] for b in batch_ids]))
    model = build_model(job)
    warm_up(job, model)
    trunk = GraphedTrunk(job, model, api) if job.config.cuda_graphs else None
    transfers = transfers_for(world.device, api)
    forward, chunks = Forward(job, model, transfers, trunk), Chunks(job, model)
    queue = deque()
    bar = tqdm(total=sum(layout.batch_units(b) for b in batch_ids), unit="crop",
               desc=f"extract {job.backbone.name}", disable=None, smoothing=0.05,
               position=world.rank if world.size > 1 else None)
    done = 0

    def land() -> None:  # the oldest queued batch: wait for its rows, file them
        nonlocal done
        n = chunks.receive(*queue.popleft())
        done += n
        bar.update(n)

    with bar, transfers.running():
        for c, prepared in zip(chunk_of, ahead(batches, forward.prepare, transfers.ahead,
                                               PREPARE_THREADS)):
            units, result, failed = forward(prepared)
            queue.append((c, units, None if result is None else transfers.download(result),
                          failed))
            while len(queue) > job.config.in_flight:  # wait only with newer batches queued
                land()
        while queue:
            land()
    return done


def ahead(items, fn, depth: int, threads: int = 1):
    """fn(item) for each item in order, computed up to `depth` items ahead in `threads`
    threads (depth 0: in this thread, when asked)."""
    if depth == 0:
        yield from map(fn, items)
        return
    with ThreadPoolExecutor(threads, thread_name_prefix="vprom-prepare") as pool:
        queue = deque()
        for item in items:
            queue.append(pool.submit(fn, item))
            if len(queue) > depth:
                yield queue.popleft().result()
        while queue:
            yield queue.popleft().result()


def write_chunk(job: Job, c: int, rows: np.ndarray, failed: list) -> None:
    """The chunk's JSON first, then its .npy: the .npy's presence means 'chunk done'."""
    start, stop = job.layout.chunk_units(c)
    write_json(job.chunk_file(c, ".json"), {"chunk": c, "units": [start, stop],
                                             "failed": [list(f) for f in failed]})
    with atomic_path(job.chunk_file(c)) as tmp:
        with open(tmp, "wb") as f:
            np.save(f, rows)
