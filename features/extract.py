"""`vprom extract`: backbone features for every crop of a DATASET.h5, into one FEATS.h5.

The unique boxes, sorted by image, are cut into batches and chunks (features/crops.py); rank
c % world_size writes chunk c under `<out>.partial/` (features/pipeline.py), where a killed run
resumes, and rank 0 assembles the rows by crop id: the same bytes however the work was split.
Crops without their image are NaN rows listed in `missing_crop_id`; unless `allow_missing`,
their chunks are dropped and the run fails naming the first.
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import shutil
import sys
import time
from dataclasses import dataclass, field, replace
from datetime import timedelta
from pathlib import Path

import h5py
import numpy as np
import torch

from vprom.errors import VpromError
from vprom.features import pipeline
from vprom.features.backbones import get_backbone, timm_version
from vprom.features.config import (H5_FILTERS, HEADS, SYMBOLIC_BACKBONE, ExtractConfig,
                                   default_batch_size)
from vprom.features.crops import (batch_layout, cores_per_process, open_work_folder,
                                  resolve_decoder)
from vprom.features.labels import extract_labels, sorted_crops
from vprom.features.perceive import with_heads
from vprom.features.pipeline import DTYPES, ExtractPlan
from vprom.claim import writes
from vprom.files import atomic_path
from vprom.manifest import CONTENT_PREFIX, input_hashes, is_current, make_manifest, manifest_of
from vprom.manifest import write_manifest
from vprom.runtime import World, joined_world
from vprom.tables import STR

MAX_GPU_WORKERS = 16
GRAPH_DEVICES = ("cuda",)  # where --cuda-graphs runs (tests add the CPU, with a stand-in)
FILES_MARGIN = 16  # open files this process may add while the workers run (HDF5, threads)
#: what `<out>.partial/` holds; a work folder with anything else is not removed
WORK_FILES = ("chunk-*.npy", "chunk-*.json", "manifest.json")
ASSEMBLE_ROWS = 16384
BLOCK_BYTES = 256 << 20  # rows read and written per step, at most
CHUNK_BYTES = 1 << 20  # HDF5 chunk size of a maps dataset
POOLING = {"avg": "global average pool over the last conv stage's feature map",
           "cls": "the model's own pooled output (forward_head pre_logits: the class token "
                  "after the final norm; an attention-pool head where the model has one)",
           "mean": "mean of the patch tokens (class and register tokens excluded)",
           "none": "none: the last conv stage's feature map of each crop, (C, H, W) (token "
                   "models: the patch tokens as a (C, H, W) grid)",
           "heads": "global average pool, then the perception model's heads: each crop's "
                    "predicted labels (label_order)"}
_L2 = "L2 (computed in float32, then cast to the stored dtype)"
NORMALISATION = {"avg": _L2, "cls": _L2, "mean": _L2,
                 "none": "none (the maps are stored as the trunk computes them)",
                 "heads": "none (probabilities: attributes by sigmoid, category and count by "
                          "softmax)"}
#: what FEATS.h5's attributes record as the manifest's `config` does
SHARED_ATTRS = ("backbone", "weights", "weights_sha256", "region", "decode", "pool", "dtype",
                "compression", "device_type", "autocast", "cuda_graphs", "batch_size",
                "data_config")


@dataclass
class ExtractSummary:
    out: Path
    backbone: str
    crops: int
    units: int
    extracted_units: int  # computed by this process in this run
    seconds: float  # the whole call: loading, extraction, assembling
    loop_seconds: float = 0.0  # from starting the workers to the last chunk file
    missing: list = field(default_factory=list)  # (crop_id, path, error)
    rank: int = 0
    world_size: int = 1

    def __str__(self) -> str:
        rate = self.extracted_units / self.seconds if self.seconds > 0 else 0.0
        lines = [f"{self.out}: {self.crops} crops ({self.units} distinct boxes), backbone "
                 f"{self.backbone}; this run extracted {self.extracted_units} boxes in "
                 f"{self.seconds:.1f} s ({rate:.1f} crops/s"
                 + (f" on rank {self.rank} of {self.world_size}" if self.world_size > 1 else "")
                 + f"); missing: {len(self.missing)}"]
        lines += [f"  missing crop {c}: {p or '(no file)'}: {e}" for c, p, e in self.missing[:20]]
        if len(self.missing) > 20:
            lines.append(f"  ... and {len(self.missing) - 20} more (see missing_crop_id)")
        return "\n".join(lines)


@writes(lambda a: a["config"].out, ("features",),
        inputs=lambda a: (a["config"].dataset, a["config"].vg))
def extract(config: ExtractConfig) -> ExtractSummary:
    """Extract features for every crop of `config.dataset` into `config.out` (see module doc)."""
    if config.backbone == SYMBOLIC_BACKBONE:
        return ExtractSummary(**extract_labels(config, write_features))
    start = time.perf_counter()
    # Ranks wait for the slowest at the end: allow long shards before timing out.
    with joined_world(config.device, timeout=timedelta(hours=12)) as world:
        plan = _prepare(config, world)
        finished = _finished(plan)
        loop_seconds = 0.0
        if finished is not None:
            extracted, missing = 0, finished
            if world.main:
                print(f"{config.out}: already complete with these settings; nothing to do "
                      "(--no-resume extracts it again)", file=sys.stderr)
        else:
            if world.main:
                _open_partial(plan)
            world.barrier()
            loop_start = time.perf_counter()
            extracted = pipeline.run_chunks(plan)
            loop_seconds = time.perf_counter() - loop_start
            world.barrier()
            missing = assemble(plan) if world.main else []
    return ExtractSummary(out=config.out, backbone=config.backbone,
                          crops=len(plan.layout.crop_id), units=len(plan.layout.unit_image),
                          extracted_units=extracted, seconds=time.perf_counter() - start,
                          loop_seconds=loop_seconds, missing=missing, rank=world.rank,
                          world_size=world.size)


def _prepare(config: ExtractConfig, world: World) -> ExtractPlan:
    backbone = get_backbone(config.backbone)
    device = world.device
    if config.region == "roi" and backbone.region_head is None:
        raise VpromError(f"--region roi: {backbone.name} is not a detector backbone; RoI "
                         "pooling of the whole image needs bottomup-r101 (or use --region "
                         "crop)")
    # --pool auto becomes the backbone's default here: the plan and the file record it
    heads = config.pool == HEADS
    config = replace(config, pool=config.pool if heads else backbone.pool_for(config.pool))
    loaded = backbone.load(config.weights, backbone.pool_for("auto") if heads else config.pool,
                           config.input_size)
    if heads:
        if config.region == "roi" or not Path(config.weights).is_file():
            raise VpromError("--pool heads reads the heads of a `vprom perceive` weights file: "
                             "pass --weights FILE, with --region crop")
        loaded = with_heads(loaded, Path(config.weights))
    if world.main:
        if config.weights == "none":
            print(f"WARNING: --weights none: {config.backbone} is RANDOMLY INITIALISED; its "
                  "features mean nothing for the benchmark (use it for tests and timing "
                  "only). This is recorded in the file's 'weights' attribute.", file=sys.stderr)
        for note in loaded.notes:
            print(f"{config.weights}: {note}", file=sys.stderr)
    crops = sorted_crops(config.dataset)
    size = config.input_size or (backbone.region_head.shortest_side if config.region == "roi"
                                 else backbone.preprocess.input_size)
    config = replace(config, batch_size=_batch_size(config, world, size))
    layout = batch_layout(crops, config.batch_size, config.chunk_batches)
    paths = layout.image_paths(config.vg)
    if config.cuda_graphs and device.type not in GRAPH_DEVICES:
        raise VpromError("--cuda-graphs needs a CUDA device; drop it on the CPU")
    decoder = resolve_decoder(config.decode, device)
    autocast = None
    if device.type == "cuda":
        autocast = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        torch.backends.cudnn.benchmark = False  # same algorithms every run: same bytes
    workers = _workers(config, device)
    if world.main and (config.decode == "auto" or config.workers is None):
        where = (f"{workers} DataLoader worker(s)" if workers else
                 f"in this process between forwards ({cores_per_process()} threads)")
        print(f"extract: decoding with {'Pillow' if decoder == 'cpu' else 'torchvision'} "
              f"(--decode {decoder}), {where}", file=sys.stderr)
    _check_open_files(workers, config.prefetch)
    plan = ExtractPlan(config, backbone, loaded, layout, paths, size, decoder, workers, autocast,
                       world)
    if config.pool == "avg" and backbone.feature_dim:  # known now: refused before any file
        plan.check_space((backbone.feature_dim,))
    return plan


def _batch_size(config: ExtractConfig, world: World, size: int) -> int:
    """--batch-size, or `default_batch_size` (a CPU torchrun job's smallest: threads differ)."""
    if config.batch_size is not None:
        return config.batch_size
    mine = default_batch_size(world.device.type, config.region, size, torch.get_num_threads())
    if world.size == 1 or world.device.type != "cpu":  # CUDA's default is the same everywhere
        return mine
    chosen = world.all_sum([float(mine) if r == world.rank else 0.0 for r in range(world.size)])
    return int(min(chosen))


def _workers(config: ExtractConfig, device: torch.device) -> int:
    """--workers, or on CUDA each GPU process's cores less the main and pinning threads."""
    if config.workers is not None:
        return config.workers
    if device.type == "cpu":  # this process decodes between forwards: workers would preempt it
        return 0
    return max(1, min(MAX_GPU_WORKERS, cores_per_process() - 2))


def _check_open_files(workers: int, prefetch: int) -> None:
    """Raise the open-file limit for the workers' tensors in flight, or refuse them in one line."""
    if workers == 0:
        return
    try:
        open_now = len(os.listdir("/proc/self/fd"))
    except OSError:  # not Linux: the margin covers it
        open_now = 0
    needed = open_now + FILES_MARGIN + workers * (4 + 2 * prefetch)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < needed and (hard == resource.RLIM_INFINITY or hard >= needed):
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))
    elif soft < needed:
        raise VpromError(f"--workers {workers}: the DataLoader workers need about {needed} open "
                         f"files, but this process may open {soft} (ulimit -n); raise the limit "
                         f"(ulimit -n {max(1024, needed)}) or pass --workers 0")


def _finished(plan: ExtractPlan) -> list | None:
    """The missing crops when `out` is already a complete file made with these settings."""
    out = plan.config.out
    if (not plan.config.resume or plan.partial.exists()
            or not is_current(out, [plan.config.dataset], plan.settings())):
        return None
    try:
        with h5py.File(out, "r") as h5:
            missing = h5["missing_crop_id"][()].tolist()
    except (OSError, KeyError):
        return None
    if missing and not plan.config.allow_missing:
        return None  # redo: the images may have been fixed since
    layout = plan.layout
    row = np.searchsorted(layout.crop_id, np.asarray(missing, dtype=np.int64))
    images = layout.unit_image[layout.unit_of_row[row]]
    path_of = dict(zip(layout.unit_image[layout.groups[:, 0]].tolist(), plan.paths))
    return [(int(c), path_of.get(int(i)) or "", f"image {int(i)}: missing in the existing file")
            for c, i in zip(missing, images)]


def _open_partial(plan: ExtractPlan) -> None:
    if open_work_folder(plan.partial, "features", WORK_FILES, plan.config.dataset,
                        plan.settings(), None if plan.config.resume else "--no-resume"):
        done = sum(plan.chunk_done(c) for c in range(len(plan.layout.chunks)))
        print(f"{plan.partial}: resuming, {done} of {len(plan.layout.chunks)} chunks done",
              file=sys.stderr)


def assemble(plan: ExtractPlan) -> list:
    """Write the final file; returns the missing crops as (crop_id, path, error)."""
    layout, config = plan.layout, plan.config
    undone = [c for c in range(len(layout.chunks)) if not plan.chunk_done(c)]
    if undone:
        raise VpromError(f"{plan.partial}: chunks {undone[:5]} were not written by any rank; "
                         "re-run `vprom extract` with the same options to finish them")
    failed_units, bad_chunks = {}, []
    for c in range(len(layout.chunks)):
        failed = json.loads(plan.chunk_file(c, ".json").read_text(encoding="utf-8"))["failed"]
        if failed:
            bad_chunks.append(c)
        failed_units.update({int(u): (p, e) for u, p, e in failed})
    missing = [(int(cid), *failed_units[int(u)])
               for cid, u in zip(layout.crop_id, layout.unit_of_row)
               if int(u) in failed_units]
    if missing and not config.allow_missing:
        for c in bad_chunks:  # redo them after the images are fixed; keep the others
            plan.chunk_file(c).unlink()
        cid, path, error = missing[0]
        raise VpromError(f"{config.dataset}: {len(missing)} crops have no readable image "
                         f"(first: crop {cid}, {error}; looked at {path}); fix or re-download "
                         f"those images under {config.vg} and re-run (finished chunks are "
                         f"kept in {plan.partial}), or pass --allow-missing")
    chunks = range(len(layout.chunks))
    chunk_starts = np.array([layout.chunk_units(c)[0] for c in chunks])
    arrays = [np.load(plan.chunk_file(c), mmap_mode="r") for c in chunks]
    row_shape = arrays[0].shape[1:]
    row_bytes = int(np.prod(row_shape)) * arrays[0].dtype.itemsize
    step = max(1, min(ASSEMBLE_ROWS, BLOCK_BYTES // row_bytes))

    def blocks():
        for a in range(0, len(layout.crop_id), step):
            units = layout.unit_of_row[a:a + step]
            which = np.searchsorted(chunk_starts, units, side="right") - 1
            block = np.empty((len(units), *row_shape), dtype=DTYPES[config.dtype])
            for c in np.unique(which):
                sel = which == c
                block[sel] = arrays[c][units[sel] - chunk_starts[c]]
            yield block

    write_features(config, layout.crop_id, blocks(), row_shape,
                   np.asarray([m[0] for m in missing], dtype=np.int64),
                   attributes(plan, len(missing), row_shape), plan.settings(),
                   counts={"crops": len(layout.crop_id),
                           "distinct_boxes": len(layout.unit_image), "missing": len(missing)})
    shutil.rmtree(plan.partial)
    return missing


def write_features(config: ExtractConfig, crop_id: np.ndarray, blocks, row_shape: tuple,
                   missing: np.ndarray, attrs: dict, settings: dict, counts: dict) -> None:
    """FEATS.h5 at `config.out`, atomically: `crop_id`, the rows of `blocks` (`maps` or
    `features`), `missing_crop_id`, `attrs` and the manifest (its hash: ids and rows)."""
    n, dtype = len(crop_id), DTYPES[config.dtype]
    row_bytes = int(np.prod(row_shape)) * np.dtype(dtype).itemsize
    name, rows = "features", 1024
    if config.pool == "none":
        name, rows = "maps", max(1, CHUNK_BYTES // row_bytes)
    content = hashlib.sha256(np.ascontiguousarray(crop_id, dtype=np.int64))
    with atomic_path(config.out) as tmp, h5py.File(tmp, "w") as h5:
        h5.create_dataset("crop_id", data=crop_id)
        stored = h5.create_dataset(name, shape=(n, *row_shape), dtype=dtype,
                                   chunks=(min(n, rows), *row_shape),
                                   **H5_FILTERS[config.compression])
        at = 0
        for block in blocks:
            stored[at:at + len(block)] = block
            content.update(block)
            at += len(block)
        h5.create_dataset("missing_crop_id", data=missing)
        for key, value in attrs.items():
            h5.attrs[key] = str(value) if isinstance(value, str) else value  # plain str
        # the data set's hash says where the features belong, the content hash what they are
        write_manifest(h5, make_manifest(
            "features", settings, inputs=input_hashes([config.dataset]), counts=counts,
            outputs={"content_hash": CONTENT_PREFIX + content.hexdigest()}))


def attributes(plan: ExtractPlan, n_missing: int, row_shape: tuple) -> dict:
    import PIL
    import torchvision

    from vprom import __version__

    settings, config, weights = plan.settings(), plan.config, plan.loaded.weights
    size = list(plan.sides) if config.region == "roi" else [plan.size, plan.size]
    # data_config: a timm model's preprocessing, as timm resolved it
    attrs = {k: settings[k] for k in SHARED_ATTRS if k in settings} | {
        "weights_notes": "; ".join(plan.loaded.notes),
        # "perception-weights" for `vprom perceive`'s: reports name the feature source
        "weights_kind": (manifest_of(weights) or {}).get("kind", "")
        if Path(weights).is_file() else "",
        "random_weights": weights == "none", "input_size": np.array(size, dtype=np.int64),
        "pooling": POOLING[config.pool], "normalisation": NORMALISATION[config.pool],
        "resize": plan.resize_policy(), "pixel_normalisation": settings["preprocess"],
        "feature_dim": int(row_shape[0]), "compiled": config.compile, "n_missing": n_missing,
        "torch_version": torch.__version__, "torchvision_version": torchvision.__version__,
        "pillow_version": PIL.__version__, "vprom_version": __version__,
        "timm_version": timm_version(), "complete": True}
    if config.pool == "none":
        attrs["map_shape"] = np.array(row_shape, dtype=np.int64)
    if config.pool == HEADS:
        attrs["label_order"] = np.array(plan.loaded.module.label_order, dtype=STR)
    return attrs
