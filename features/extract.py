"""`vprom extract`: backbone features for every crop of a DATASET.h5, into one FEATS.h5.

Algorithm
1. Plan (features/crops.py): unique boxes ("units") sorted by image; batch k is units
   [k*B, (k+1)*B) (full batches), the units of one image within a batch one DataLoader item;
   batches form chunks of `chunk_batches`. The plan is a pure function of the crops table,
   the batch size and the chunking.
2. Work: chunk c belongs to rank c % world_size (one rank without torchrun). A DataLoader
   yields the uint8 crops of one batch (workers decode the JPEGs; on CPU runs at low
   priority, so they fill the forward's gaps instead of stalling its OpenMP threads; pinned
   memory on CUDA). The crops are copied to the device (non-blocking), normalised there, run
   through the trunk (channels_last; autocast bf16/fp16 and optional torch.compile on CUDA),
   average-pooled, L2-normalised in float32 and cast to the stored dtype.
3. Resume: each finished chunk is written atomically as `<out>.partial/chunk-NNNNNN.npy`
   (+ a JSON of its missing crops). The set of chunk files is the completion mask: a killed
   run (or rank) restarts with the chunks that are not there. `<out>.partial/config.json`
   holds a fingerprint of everything that changes the numbers (backbone, weights hash, input
   size, dtype, batch size, chunking, device type, autocast, compile, the crops' boxes); a
   partial folder with another fingerprint is discarded with a message, and a finished file
   with the same fingerprint is left alone.
4. Assemble (rank 0, after a barrier): rows sorted by crop id, each crop gets its unit's
   features (memory-mapped chunk files, streamed in blocks), written through
   `vprom.io.atomic_path`; only the complete file gets the final name. Crops whose image is
   missing or corrupt are NaN rows listed in `missing_crop_id`; unless `allow_missing`, their
   chunks are dropped (so a re-run after fixing the images redoes only those) and the run
   fails with a VpromError naming the first ones.

Because every run, resumed run and rank computes the same batches with the same weights,
the `crop_id` and `features` datasets are byte-identical however the work was split
(verified on CPU; on CUDA, cuDNN's deterministic algorithm choice is kept for this reason).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import time
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from pathlib import Path

import h5py
import numpy as np
import torch
from torch.nn import functional as F
from tqdm import tqdm

from features.backbones import Backbone, Loaded, get_backbone
from features.config import ExtractConfig
from features.crops import RESIZE, BatchPlan, CropDataset, collate, make_batch_plan
from features.devices import World, joined_world
from vprom.errors import VpromError
from vprom.images import ImageIndex
from vprom.io import atomic_path, make_manifest, manifest_path, sha256_file, write_json
from vprom.tables import read_crop_table, set_manifest

DTYPES = {"float16": np.float16, "float32": np.float32}  # ExtractConfig.dtype -> numpy
ASSEMBLE_ROWS = 16384
NICE_WORKERS = 10  # CPU runs: DataLoader workers' priority below the forward's
POOLING = "global average pool over the last conv stage's feature map"
NORMALISATION = "L2 (computed in float32, then cast to the stored dtype)"


@dataclass
class ExtractSummary:
    out: Path
    backbone: str
    crops: int
    units: int
    extracted_units: int  # computed by this process in this run
    seconds: float  # the whole call: loading, extraction, assembling
    loop_seconds: float = 0.0  # the extraction loop alone (decode + forward + chunk writes)
    missing: list = field(default_factory=list)  # (crop_id, path, error)
    rank: int = 0
    world_size: int = 1

    @property
    def crops_per_s(self) -> float:
        return self.extracted_units / self.seconds if self.seconds > 0 else 0.0

    def __str__(self) -> str:
        lines = [f"{self.out}: {self.crops} crops ({self.units} distinct boxes), backbone "
                 f"{self.backbone}; this run extracted {self.extracted_units} boxes in "
                 f"{self.seconds:.1f} s ({self.crops_per_s:.1f} crops/s"
                 + (f" on rank {self.rank} of {self.world_size}" if self.world_size > 1 else "")
                 + f"); missing: {len(self.missing)}"]
        lines += [f"  missing crop {c}: {p or '(no file)'}: {e}" for c, p, e in self.missing[:20]]
        if len(self.missing) > 20:
            lines.append(f"  ... and {len(self.missing) - 20} more (see missing_crop_id)")
        return "\n".join(lines)


# ------------------------------------------------------------------------- environment
def _autocast_dtype(device: torch.device) -> torch.dtype | None:
    if device.type != "cuda":
        return None
    return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16


# ---------------------------------------------------------------------------- the job
@dataclass
class Job:
    config: ExtractConfig
    backbone: Backbone
    loaded: Loaded
    plan: BatchPlan
    paths: list
    size: int
    autocast: torch.dtype | None
    world: World
    fingerprint: dict

    @property
    def partial(self) -> Path:
        return self.config.out.with_name(self.config.out.name + ".partial")

    def chunk_file(self, c: int, suffix: str = ".npy") -> Path:
        return self.partial / f"chunk-{c:06d}{suffix}"

    def chunk_done(self, c: int) -> bool:
        return self.chunk_file(c).is_file() and self.chunk_file(c, ".json").is_file()


def extract(config: ExtractConfig) -> ExtractSummary:
    """Extract features for every crop of `config.dataset` into `config.out` (see module doc)."""
    start = time.perf_counter()
    # Ranks wait for the slowest at the end: allow long shards before timing out.
    with joined_world(config.device, timeout=timedelta(hours=12)) as world:
        job = _prepare(config, world)
        loop_start = time.perf_counter()
        finished = _finished(job)
        if finished is not None:
            extracted, missing = 0, finished
            if world.main:
                print(f"{config.out}: already complete with these settings; nothing to do "
                      "(--no-resume extracts it again)", file=sys.stderr)
        else:
            if world.main:
                _open_partial(job)
            world.barrier()
            extracted = _run_chunks(job)
            world.barrier()
            missing = _assemble(job) if world.main else []
        loop_seconds = time.perf_counter() - loop_start
    return ExtractSummary(out=config.out, backbone=config.backbone, crops=len(job.plan.crop_id),
                          units=len(job.plan.unit_image), extracted_units=extracted,
                          seconds=time.perf_counter() - start, loop_seconds=loop_seconds,
                          missing=missing,
                          rank=world.rank, world_size=world.size)


def _prepare(config: ExtractConfig, world: World) -> Job:
    backbone = get_backbone(config.backbone)
    device = world.device
    loaded = backbone.load(config.weights)
    if config.weights == "none" and world.main:
        print(f"WARNING: --weights none: {config.backbone} is RANDOMLY INITIALISED; its features "
              "mean nothing for the benchmark (use it for tests and timing only). This is "
              "recorded in the file's 'weights' attribute.", file=sys.stderr)
    crops = read_crop_table(config.dataset)
    if len(crops) == 0:
        raise VpromError(f"{config.dataset}: the crops table is empty; nothing to extract")
    if len(np.unique(crops.crop_id)) != len(crops):
        raise VpromError(f"{config.dataset}: crop ids are not unique; regenerate the dataset")
    plan = make_batch_plan(crops, config.batch_size, config.chunk_batches)
    index = ImageIndex(config.vg)
    images = plan.unit_image[plan.groups[:, 0]]
    paths = [str(index.paths[i]) if int(i) in index.paths else None for i in images.tolist()]
    size = config.input_size or backbone.preprocess.input_size
    autocast = _autocast_dtype(device)
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = False  # same algorithms every run: same bytes
    fingerprint = _fingerprint(config, backbone, loaded, plan, size, device, autocast)
    return Job(config, backbone, loaded, plan, paths, size, autocast, world, fingerprint)


def _fingerprint(config, backbone, loaded, plan, size, device, autocast) -> dict:
    boxes = hashlib.sha256()
    for array in (plan.crop_id, plan.unit_of_row, plan.unit_image, plan.unit_box):
        boxes.update(np.ascontiguousarray(array, dtype=np.int64).tobytes())
    return {"backbone": backbone.name, "weights": loaded.weights,
            "weights_sha256": loaded.weights_sha256, "input_size": size,
            "preprocess": backbone.preprocess.describe(), "resize": RESIZE,
            "dtype": config.dtype, "batch_size": config.batch_size,
            "chunk_batches": config.chunk_batches, "device_type": device.type,
            "autocast": str(autocast), "compile": config.compile,
            "crops_sha256": boxes.hexdigest(), "torch": torch.__version__}


def config_hash(fingerprint: dict) -> str:
    return hashlib.sha256(json.dumps(fingerprint, sort_keys=True).encode()).hexdigest()


def _finished(job: Job) -> list | None:
    """The missing crops when `out` is already a complete file made with these settings."""
    out = job.config.out
    if not (job.config.resume and out.is_file() and not job.partial.exists()):
        return None
    try:
        with h5py.File(out, "r") as h5:
            same = (bool(h5.attrs.get("complete", False))
                    and h5.attrs.get("config_hash") == config_hash(job.fingerprint))
            missing = h5["missing_crop_id"][()].tolist() if same else []
    except (OSError, KeyError):
        return None
    if not same:
        return None
    if missing and not job.config.allow_missing:
        return None  # redo: the images may have been fixed since
    return [(int(c), "", "missing in the existing file") for c in missing]


def _open_partial(job: Job) -> None:
    partial, config_file = job.partial, job.partial / "config.json"
    if partial.exists():
        if not job.config.resume:
            print(f"{partial}: --no-resume: discarding the partial extraction", file=sys.stderr)
            shutil.rmtree(partial)
        else:
            try:
                old = json.loads(config_file.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                old = None
            if old != job.fingerprint:
                changed = sorted(k for k in job.fingerprint if (old or {}).get(k)
                                 != job.fingerprint[k])
                why = (f"made with other settings ({', '.join(changed)} differ)" if old
                       else "has no readable config.json")
                print(f"{partial}: {why}; starting over", file=sys.stderr)
                shutil.rmtree(partial)
            else:
                done = sum(job.chunk_done(c) for c in range(len(job.plan.chunks)))
                print(f"{partial}: resuming, {done} of {len(job.plan.chunks)} chunks done",
                      file=sys.stderr)
    partial.mkdir(parents=True, exist_ok=True)
    if not config_file.is_file():
        write_json(config_file, job.fingerprint)


# ------------------------------------------------------------------------- extraction
def _model(job: Job) -> torch.nn.Module:
    model = job.loaded.module.to(job.world.device, memory_format=torch.channels_last)
    if job.config.compile:
        model = torch.compile(model)
    return model


@torch.inference_mode()
def embed(model: torch.nn.Module, pixels: torch.Tensor, backbone: Backbone,
          autocast: torch.dtype | None, device: torch.device) -> torch.Tensor:
    """uint8 (B, S, S, 3) -> float32 (B, D): trunk, global average pool, L2 normalisation."""
    x = backbone.preprocess.normalise(pixels.to(device, non_blocking=True))
    with torch.autocast(device.type, dtype=autocast, enabled=autocast is not None):
        fmap = model(x)
    pooled = fmap.float().mean(dim=(2, 3))
    return F.normalize(pooled, dim=1)


def _worker_init(worker_id: int) -> None:
    """On a CPU run, decoding yields to the forward: the trunk's OpenMP threads wait for their
    slowest member at every layer, so a worker taking a core at normal priority stalls them
    all; at low priority it fills the gaps instead."""
    os.nice(NICE_WORKERS)


def _run_chunks(job: Job) -> int:
    plan, world = job.plan, job.world
    todo = [c for c in range(len(plan.chunks))
            if c % world.size == world.rank and not job.chunk_done(c)]
    if not todo:
        return 0
    batches = [plan.batches[b] for c in todo for b in plan.chunks[c]]
    loader = torch.utils.data.DataLoader(
        CropDataset(plan, job.paths, job.size), batch_sampler=batches, collate_fn=collate,
        num_workers=job.config.workers, pin_memory=job.world.device.type == "cuda",
        worker_init_fn=_worker_init if job.world.device.type == "cpu" else None,
        prefetch_factor=4 if job.config.workers else None)
    model = _model(job)
    total = sum(plan.batch_units(b) for c in todo for b in plan.chunks[c])
    bar = tqdm(total=total, unit="crop", desc=f"extract {job.backbone.name}", disable=None,
               smoothing=0.05, position=world.rank if world.size > 1 else None)
    results = iter(loader)
    extracted = 0
    with bar:
        for c in todo:
            start, stop = plan.chunk_units(c)
            out = np.full((stop - start, job.backbone.feature_dim), np.nan,
                          dtype=DTYPES[job.config.dtype])
            failed = []
            for _ in plan.chunks[c]:
                units, pixels, batch_failed = next(results)
                failed += batch_failed
                if len(units):
                    feats = embed(model, pixels, job.backbone, job.autocast, job.world.device)
                    out[units - start] = feats.cpu().numpy().astype(out.dtype)
                bar.update(len(units) + len(batch_failed))
                extracted += len(units) + len(batch_failed)
            _write_chunk(job, c, out, failed)
    return extracted


def _write_chunk(job: Job, c: int, features: np.ndarray, failed: list) -> None:
    """The chunk's JSON first, then its .npy: the .npy's presence means 'chunk done'."""
    start, stop = job.plan.chunk_units(c)
    write_json(job.chunk_file(c, ".json"), {"chunk": c, "units": [start, stop],
                                             "failed": [list(f) for f in failed]})
    with atomic_path(job.chunk_file(c)) as tmp:
        with open(tmp, "wb") as f:
            np.save(f, features)


# ------------------------------------------------------------------------- assembling
def _assemble(job: Job) -> list:
    plan, config = job.plan, job.config
    undone = [c for c in range(len(plan.chunks)) if not job.chunk_done(c)]
    if undone:
        raise VpromError(f"{job.partial}: chunks {undone[:5]} were not written by any rank; "
                         "re-run `vprom extract` with the same options to finish them")
    failed_units, bad_chunks = {}, []
    for c in range(len(plan.chunks)):
        failed = json.loads(job.chunk_file(c, ".json").read_text(encoding="utf-8"))["failed"]
        if failed:
            bad_chunks.append(c)
        failed_units.update({int(u): (p, e) for u, p, e in failed})
    missing = [(int(cid), *failed_units[int(u)]) for cid, u in zip(plan.crop_id, plan.unit_of_row)
               if int(u) in failed_units]
    if missing and not config.allow_missing:
        for c in bad_chunks:  # redo them after the images are fixed; keep the others
            job.chunk_file(c).unlink()
        cid, path, error = missing[0]
        raise VpromError(f"{config.dataset}: {len(missing)} crops have no readable image "
                         f"(first: crop {cid}, {path or 'no file'}: {error}); fix or "
                         f"re-download those images under {config.vg} and re-run (finished "
                         "chunks are kept in " f"{job.partial}), or pass --allow-missing")
    with atomic_path(config.out) as tmp:
        manifest = _write_final(job, tmp, np.asarray([m[0] for m in missing], dtype=np.int64))
    manifest["outputs"] = {config.out.name: sha256_file(config.out)}
    write_json(manifest_path(config.out), manifest)  # the self-describing copy beside it
    shutil.rmtree(job.partial)
    return missing


def _write_final(job: Job, tmp: Path, missing_ids: np.ndarray) -> dict:
    plan, config = job.plan, job.config
    n, dim = len(plan.crop_id), job.backbone.feature_dim
    chunk_starts = np.array([plan.chunk_units(c)[0] for c in range(len(plan.chunks))])
    arrays = [np.load(job.chunk_file(c), mmap_mode="r") for c in range(len(plan.chunks))]
    with h5py.File(tmp, "w") as h5:
        h5.create_dataset("crop_id", data=plan.crop_id)
        feats = h5.create_dataset("features", shape=(n, dim), dtype=DTYPES[config.dtype],
                                  chunks=(min(n, 1024), dim))
        for a in range(0, n, ASSEMBLE_ROWS):
            units = plan.unit_of_row[a:a + ASSEMBLE_ROWS]
            which = np.searchsorted(chunk_starts, units, side="right") - 1
            block = np.empty((len(units), dim), dtype=DTYPES[config.dtype])
            for c in np.unique(which):
                sel = which == c
                block[sel] = arrays[c][units[sel] - chunk_starts[c]]
            feats[a:a + len(units)] = block
        h5.create_dataset("missing_crop_id", data=missing_ids)
        for key, value in _attributes(job, len(missing_ids)).items():
            h5.attrs[key] = str(value) if isinstance(value, str) else value  # plain str
        manifest = make_manifest(
            "features", config={k: str(v) if isinstance(v, Path) else v
                                for k, v in asdict(config).items()},
            inputs={config.dataset.name: sha256_file(config.dataset)},
            counts={"crops": n, "distinct_boxes": len(plan.unit_image),
                    "missing": len(missing_ids)})
        set_manifest(h5, manifest)
    del arrays
    return manifest


def _attributes(job: Job, n_missing: int) -> dict:
    import PIL
    import torchvision

    from vprom import __version__

    fp, pre = job.fingerprint, job.backbone.preprocess
    return {"backbone": job.backbone.name, "weights": job.loaded.weights,
            "weights_sha256": job.loaded.weights_sha256,
            "random_weights": job.loaded.weights == "none",
            "input_size": np.array([job.size, job.size], dtype=np.int64),
            "pooling": POOLING, "normalisation": NORMALISATION, "resize": RESIZE,
            "pixel_normalisation": pre.describe(), "dtype": job.config.dtype,
            "feature_dim": job.backbone.feature_dim, "device_type": job.world.device.type,
            "autocast": fp["autocast"], "compiled": job.config.compile,
            "batch_size": job.config.batch_size, "n_missing": n_missing,
            "torch_version": torch.__version__, "torchvision_version": torchvision.__version__,
            "pillow_version": PIL.__version__, "vprom_version": __version__,
            "config_hash": config_hash(fp),
            "complete": True}

