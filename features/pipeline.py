"""The extraction loop: batches in, chunk files out, as an `ExtractPlan` (whose `settings`
are the output's manifest `config`) says.

DataLoader workers (or threads of this process, `--workers 0`) decode the crops or leave that
to the device; `Forward` copies a batch to the device, finishes it, runs the trunk (a CUDA graph
replay with `--cuda-graphs`), pools, L2-normalises and casts, on CUDA on a stream of its own.
The loop waits for the oldest result only when more than `in_flight` are queued, and writes a
chunk once all its batches have landed.
"""

from __future__ import annotations

import os
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np
import torch
from torch.nn import functional as F
from tqdm import tqdm

from vprom.errors import VpromError
from vprom.features.backbones import Backbone, Loaded
from vprom.features.bottomup import RESIZE_ROI, pooled_regions, region_maps, sides
from vprom.features.config import RESIZE, ExtractConfig
from vprom.features.crops import (RESIZE_TORCH, Batch, BatchLayout, CropDataset, clip_boxes,
                                  collate, cores_per_process, crop_resize, decode_many)
from vprom.files import free_space_for, write_json, write_npy
from vprom.processes import context, quiet_when_parent_gone
from vprom.runtime import World

NICE_WORKERS = 10  # CPU runs: DataLoader workers' priority below the forward's
INLINE_CROPS = 64  # `--workers 0`: crops decoded at a time, a whole number of batches
DTYPES = {"float16": np.float16, "float32": np.float32}  # ExtractConfig.dtype -> numpy


@dataclass
class ExtractPlan:
    config: ExtractConfig  # with pool and batch size resolved
    backbone: Backbone
    loaded: Loaded
    layout: BatchLayout
    paths: list  # per image group: its file, or None when the image is not there
    size: int  # crop side (region crop) or the image's shorter side (region roi)
    decoder: str  # "cpu" or "gpu", resolved from --decode
    workers: int  # resolved from --workers
    autocast: torch.dtype | None
    world: World

    @property
    def partial(self) -> Path:
        return self.config.out.with_name(self.config.out.name + ".partial")

    def chunk_file(self, c: int, suffix: str = ".npy") -> Path:
        return self.partial / f"chunk-{c:06d}{suffix}"

    def chunk_done(self, c: int) -> bool:
        return self.chunk_file(c).is_file() and self.chunk_file(c, ".json").is_file()

    @property
    def sides(self) -> tuple[int, int]:
        """(shorter side, longer-side limit) of the detector's resize (region roi)."""
        return sides(self.backbone.region_head, self.size)

    def resize_policy(self) -> str:
        if self.config.region == "roi":
            head = self.backbone.region_head
            short, long = self.sides
            return RESIZE_ROI.format(short=short, long=long, stride=head.stride, pooled=head.pooled)
        policy = RESIZE if self.decoder == "cpu" else RESIZE_TORCH
        pre = self.backbone.preprocess
        if pre.interpolation != "bilinear" or pre.crop_pct != 1:  # a timm model's eval crop
            policy = policy.replace("SxS", f"S/{pre.crop_pct:g} a side, centre crop SxS").replace(
                "bilinear", pre.interpolation)
        return policy

    def settings(self) -> dict:
        """What the output is made with (module doc): its manifest's `config`."""
        config = self.config
        return {"backbone": self.backbone.name, "weights": self.loaded.weights,
                "weights_sha256": self.loaded.weights_sha256, "input_size": self.size,
                "preprocess": self.backbone.preprocess.describe(), "decode": self.decoder,
                "region": config.region, "pool": config.pool, "dtype": config.dtype,
                "compression": config.compression, "batch_size": config.batch_size,
                "chunk_batches": config.chunk_batches, "device_type": self.world.device.type,
                "autocast": str(self.autocast), "compile": config.compile,
                "cuda_graphs": config.cuda_graphs, "torch": torch.__version__,
                **self.backbone.fingerprint_extra()}

    def check_space(self, row_shape: tuple) -> None:
        """Refuse before writing a disk without room for a row per unit and crop, twice."""
        row = int(np.prod(row_shape)) * np.dtype(DTYPES[self.config.dtype]).itemsize
        free_space_for(self.config.out, 2 * row * (len(self.layout.unit_image) +
                                                   len(self.layout.crop_id)),
                       " for the chunks and the features file")


# ----------------------------------------------------------------------------- streams
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
        """(replay, fn's output tensor, rewritten by each replay) of fn() as a CUDA graph."""
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


class CudaStreams:
    """CUDA: the forwards and the copies of their results on a compute stream."""

    def __init__(self, device: torch.device, api=CudaApi):
        self.api, self.device = api, device
        self.compute = api.Stream(device)

    def forward(self, tensors: list):
        """The compute stream, after the batch's preparation; it owns `tensors` from now."""
        self.compute.wait_stream(self.api.current_stream(self.device))
        for tensor in tensors:
            self.api.record(tensor, self.compute)
        return self.api.stream(self.compute)

    def download(self, rows: torch.Tensor) -> tuple:
        """`rows`' queued copy into pinned memory, and the event that marks its end."""
        host = self.api.pinned(rows)
        host.copy_(rows, non_blocking=True)
        done = self.api.Event()
        done.record(self.compute)
        return host, done


def streams_for(device: torch.device, api=CudaApi) -> CudaStreams | None:
    """The CUDA streams, or None: on a CPU everything runs in turn."""
    return CudaStreams(device, api) if device.type == "cuda" else None


# --------------------------------------------------------------------------- forward
def finish(fmap: torch.Tensor, pool: str) -> torch.Tensor:
    """The last conv map -> what is stored: pooled and L2-normalised, or the map (pool none);
    with pool heads, the model's predicted labels as they are."""
    if pool in ("none", "heads"):
        return fmap.float()
    return F.normalize(fmap.float().mean(dim=(2, 3)), dim=1)


@torch.inference_mode()
def embed(model: torch.nn.Module, pixels: torch.Tensor, backbone: Backbone,
          autocast: torch.dtype | None, device: torch.device, pool: str = "avg") -> torch.Tensor:
    """uint8 (B, S, S, 3) -> float32 (B, D) (trunk, average pool, L2) or the maps (pool none)."""
    x = backbone.preprocess.normalise(pixels.to(device, non_blocking=True))
    # no cast cache: a graph captures none, and each weight is cast once a forward anyway
    with torch.autocast(device.type, dtype=autocast, enabled=autocast is not None,
                        cache_enabled=False):
        fmap = model(x)
    return finish(fmap, pool)


class GraphedTrunk:
    """`embed` at the batch size as one CUDA graph replay; a short batch is zero-padded."""

    def __init__(self, plan: ExtractPlan, model: torch.nn.Module, api=CudaApi):
        device = plan.world.device
        with torch.inference_mode():
            self.pixels = torch.zeros((plan.config.batch_size, plan.size, plan.size, 3),
                                      dtype=torch.uint8, device=device)
        try:
            self.replay, self.out = api.capture(partial(
                embed, model, self.pixels, plan.backbone, plan.autocast, device,
                plan.config.pool), device)
        except RuntimeError as e:  # torch's CUDA errors included
            raise VpromError(f"--cuda-graphs: the {plan.backbone.name} trunk could not be "
                             f"captured in a CUDA graph ({str(e).splitlines()[0]}); run "
                             "again without --cuda-graphs") from e

    @torch.inference_mode()
    def __call__(self, pixels: torch.Tensor) -> torch.Tensor:
        n = len(pixels)
        self.pixels[:n].copy_(pixels)
        self.pixels[n:].zero_()
        self.replay()
        return self.out[:n].clone()  # the graph's buffer is overwritten by the next replay


class Forward:
    """A `Batch` copied in, decoded and cropped on the device, then the forward."""

    def __init__(self, plan: ExtractPlan, model: torch.nn.Module, streams: CudaStreams | None,
                 trunk: GraphedTrunk | None = None):
        self.plan, self.model, self.streams, self.trunk = plan, model, streams, trunk
        self.device = plan.world.device
        self.dtype = getattr(torch, plan.config.dtype)

    @torch.inference_mode()
    def __call__(self, batch: Batch) -> tuple[np.ndarray, tuple | None, list, object]:
        """(units, their rows on the way to the host, failures, the largest magnitude)."""
        failed, pairs = list(batch.failed), []
        if len(batch.units):
            pairs.append((batch.units, batch.pixels.to(self.device, non_blocking=True)))
        pairs += self._sources(batch.sources, failed)
        if not pairs:
            return np.zeros(0, np.int64), None, failed, None
        plan, units, parts = self.plan, [u for u, _ in pairs], [part for _, part in pairs]
        tensors = [p[0] if isinstance(p, tuple) else p for p in parts]  # roi: (image, corners)
        with self.streams.forward(tensors) if self.streams else nullcontext():
            if plan.config.region == "roi":
                out = self._regions(parts)
            else:
                pixels = parts[0] if len(parts) == 1 else torch.cat(parts)
                out = (self.trunk(pixels) if self.trunk else
                       embed(self.model, pixels, plan.backbone, plan.autocast, self.device,
                             plan.config.pool))
            rows = out.to(self.dtype)
            held = self.streams.download(rows) if self.streams else (rows, None)
            return np.concatenate(units), held, failed, out.abs().amax()

    def _sources(self, sources: list, failed: list) -> list:
        """Decoded and cut: [(units, crops)], or [(units, (image, corners))] for region roi."""
        encoded = [s for s in sources if s.encoded]
        decoded = dict(zip(map(id, encoded), decode_many([s.data for s in encoded], self.device)))
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
        if self.plan.config.region == "roi":
            return [(units, (image, corners)) for units, image, corners in kept]
        if not kept:
            return []
        pre = self.plan.backbone.preprocess
        return [(np.concatenate([units for units, _, _ in kept]),
                 torch.cat([crop_resize(image, corners, self.plan.size, pre.interpolation,
                                        pre.crop_pct) for _, image, corners in kept]))]

    def _regions(self, parts: list) -> torch.Tensor:
        plan = self.plan
        short, long = plan.sides
        cells = [pooled_regions(self.model, image, corners, plan.backbone.preprocess,
                                plan.backbone.region_head, short, long, plan.autocast)
                 for image, corners in parts]
        return finish(region_maps(self.model, torch.cat(cells), plan.autocast), plan.config.pool)


def row_shape(plan: ExtractPlan, model: torch.nn.Module) -> tuple:
    """One crop's stored shape, (D,) or (C, H, W); a probe forward finds what is not known."""
    if plan.config.pool == "avg" and plan.backbone.feature_dim:
        return (plan.backbone.feature_dim,)
    device, head = plan.world.device, plan.backbone.region_head
    with torch.inference_mode():
        if plan.config.region == "roi":
            fmap = model.backbone_features(torch.zeros(1, 3, 64, 64, device=device))
            cells = torch.zeros(1, fmap.shape[1], head.pooled, head.pooled, device=device)
            return tuple(model.roi_head(cells).shape[1:])
        pixels = torch.zeros(1, plan.size, plan.size, 3, dtype=torch.uint8)
        return tuple(embed(model, pixels, plan.backbone, None, device, plan.config.pool).shape[1:])


# ------------------------------------------------------------------------------ loop
def build_model(plan: ExtractPlan) -> torch.nn.Module:
    model = plan.loaded.module.to(plan.world.device, memory_format=torch.channels_last)
    return torch.compile(model) if plan.config.compile else model


def _worker_init(worker_id: int, nice: int) -> None:
    """No tracebacks when extract stops; on a CPU decoding yields to the forward's threads."""
    quiet_when_parent_gone()
    if nice:
        os.nice(nice)


def inline_batches(dataset: CropDataset, batches: list, threads: int, pin: bool, ahead: int = 1):
    """`--workers 0`: batches prepared `ahead` at a time by this process's threads."""
    with ThreadPoolExecutor(threads) as pool:
        for at in range(0, len(batches), ahead):
            run = batches[at:at + ahead]
            items = iter(list(pool.map(dataset.__getitem__, [g for groups in run for g in groups])))
            for groups in run:
                batch = collate([next(items) for _ in groups])
                yield batch.pin_memory() if pin else batch


def loader(plan: ExtractPlan, batches: list):
    """The batches' pixels: DataLoader worker processes, or this process (`--workers 0`)."""
    cpu = plan.world.device.type == "cpu"
    mode = ("bytes" if plan.decoder == "gpu" else
            "pillow-crops" if plan.config.region == "crop" else "pillow-image")
    dataset = CropDataset(plan.layout, plan.paths, plan.size, mode, plan.config.vg,
                          plan.backbone.preprocess.interpolation,
                          plan.backbone.preprocess.crop_pct)
    if plan.workers == 0:
        return inline_batches(dataset, batches, cores_per_process(), pin=not cpu,
                              ahead=max(1, INLINE_CROPS // plan.config.batch_size))
    return torch.utils.data.DataLoader(
        dataset, batch_sampler=batches, collate_fn=collate, num_workers=plan.workers,
        pin_memory=not cpu, worker_init_fn=partial(_worker_init, nice=NICE_WORKERS if cpu else 0),
        prefetch_factor=plan.config.prefetch, multiprocessing_context=context(None))


def run_chunks(plan: ExtractPlan, api=CudaApi) -> int:
    """Extract this rank's unfinished chunks (see the module doc); returns the boxes done."""
    layout, world = plan.layout, plan.world
    todo = [c for c in range(len(layout.chunks))
            if c % world.size == world.rank and not plan.chunk_done(c)]
    if not todo:
        return 0
    batch_ids = [b for c in todo for b in layout.chunks[c]]
    chunk_of = [c for c in todo for _ in layout.chunks[c]]
    # workers start first: they decode the first batches while the model is built
    batches = iter(loader(plan, [layout.batches[b] for b in batch_ids]))
    try:
        model = build_model(plan)
        shape = row_shape(plan, model)
        plan.check_space(shape)  # maps, timm: known now, before the first chunk is written
        if world.device.type == "cuda" and plan.config.region == "crop":
            # one forward at the batch size while the workers start: cuDNN's first calls
            embed(model, torch.zeros(plan.config.batch_size, plan.size, plan.size, 3,
                                     dtype=torch.uint8), plan.backbone, plan.autocast,
                  world.device, plan.config.pool)
        trunk = GraphedTrunk(plan, model, api) if plan.config.cuda_graphs else None
        forward = Forward(plan, model, streams_for(world.device, api), trunk)
        chunks = {}  # chunk -> [its rows, its failures, its batches still to land]
        queue = deque()
        total = sum(layout.batch_units(b) for b in batch_ids)  # each lands as rows or failures
        bar = tqdm(total=total, unit="crop", desc=f"extract {plan.backbone.name}", disable=None,
                   smoothing=0.05, position=world.rank if world.size > 1 else None)

        def land() -> None:  # the oldest queued batch: wait for its rows, file them
            c, units, pending, failed, peak = queue.popleft()
            start, stop = layout.chunk_units(c)
            if c not in chunks:
                rows = np.full((stop - start, *shape), np.nan, DTYPES[plan.config.dtype])
                chunks[c] = [rows, [], len(layout.chunks[c])]
            entry = chunks[c]
            if pending is not None:
                rows, event = pending
                if event is not None:
                    event.synchronize()
                check_finite(plan, rows.numpy(), peak)
                entry[0][units - start] = rows.numpy()
            entry[1] += failed
            entry[2] -= 1
            if entry[2] == 0:  # its last batch: the chunk is complete
                write_chunk(plan, c, entry[0], entry[1])
                del chunks[c]
            bar.update(len(units) + len(failed))

        with bar:
            for c, batch in zip(chunk_of, batches):
                queue.append((c, *forward(batch)))
                while len(queue) > plan.config.in_flight:  # wait only with newer batches queued
                    land()
            while queue:
                land()
        return total
    finally:
        # workers left to the garbage collector outlive an interrupt, and their deaths raise
        getattr(batches, "_shutdown_workers", lambda: None)()


def check_finite(plan: ExtractPlan, rows: np.ndarray, peak: torch.Tensor) -> None:
    """Refuse a batch holding a value that is not finite (a float16 overflow too)."""
    if np.isfinite(rows).all():
        return
    peak, name = float(peak), plan.backbone.name
    if np.isfinite(peak):
        raise VpromError(f"--backbone {name}: its {plan.config.pool} features reach "
                         f"{peak:.6g}, beyond {plan.config.dtype}'s range "
                         f"(±{float(np.finfo(rows.dtype).max):,.0f}); extract again with "
                         "--dtype float32")
    raise VpromError(f"--backbone {name}: its trunk gives values that are not finite "
                     f"({peak}) on {int((~np.isfinite(rows)).sum())} values of one batch; "
                     "check its weights (--weights)")


def write_chunk(plan: ExtractPlan, c: int, rows: np.ndarray, failed: list) -> None:
    """The chunk's JSON first, then its .npy: the .npy's presence means 'chunk done'."""
    start, stop = plan.layout.chunk_units(c)
    write_json(plan.chunk_file(c, ".json"), {"chunk": c, "units": [start, stop],
                                              "failed": [list(f) for f in failed]})
    write_npy(plan.chunk_file(c), rows)
