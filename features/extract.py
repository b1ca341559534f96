"""`vprom extract`: backbone features for every crop of a DATASET.h5, into one FEATS.h5.

The plan (features/crops.py, plan.py) cuts the unique boxes, sorted by image, into batches
and chunks; chunk c belongs to rank c % world_size, whose pipeline (features/pipeline.py)
writes it as `<out>.partial/chunk-NNNNNN.npy` with a JSON of its missing crops. A killed run
redoes the chunks that are not there; a work folder or finished file made with other
settings (`ExtractPlan.settings`, `vprom.manifest.is_current`) is started over. Rank 0 then
assembles the rows by crop id (features/assemble.py). Every split of the work computes the
same batches with the same weights, so the file is byte-identical however it was made.
"""

from __future__ import annotations

import os
import resource
import sys
import time
from dataclasses import dataclass, field, replace
from datetime import timedelta
from pathlib import Path

import h5py
import numpy as np
import torch

from vprom.errors import VpromError
from vprom.features import assemble, pipeline
from vprom.features.backbones import get_backbone
from vprom.features.config import SYMBOLIC_BACKBONE, ExtractConfig, default_batch_size
from vprom.features.crops import batch_layout
from vprom.features.decoding import cores_per_process, resolve_decoder
from vprom.features.labels import check_label_options, extract_labels
from vprom.features.plan import ExtractPlan
from vprom.images import ImageIndex
from vprom.claim import remove_work_folder, writes
from vprom.manifest import input_hashes, is_current, make_manifest, why_stale, write_manifest
from vprom.runtime import World, joined_world
from vprom.tables import read_crop_table

MAX_GPU_WORKERS = 16
GRAPH_DEVICES = ("cuda",)  # where --cuda-graphs runs (tests add the CPU, with a stand-in)
# A CPU device decodes in this process between forwards: workers would preempt its threads.
DEFAULT_CPU_WORKERS = 0
FILES_MARGIN = 16  # open files this process may add while the workers run (HDF5, threads)
#: what `<out>.partial/` holds; a work folder with anything else is not removed
WORK_FILES = ("chunk-*.npy", "chunk-*.json", "manifest.json")


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


def _autocast_dtype(device: torch.device) -> torch.dtype | None:
    if device.type != "cuda":
        return None
    return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16


@writes(lambda a: a["config"].out, ("features",),
        inputs=lambda a: (a["config"].dataset, a["config"].vg))
def extract(config: ExtractConfig) -> ExtractSummary:
    """Extract features for every crop of `config.dataset` into `config.out` (see module doc)."""
    check_label_options(config)
    if config.backbone == SYMBOLIC_BACKBONE:  # no pixels, no processes: features/labels.py
        return ExtractSummary(**extract_labels(config))
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
            missing = assemble.assemble(plan) if world.main else []
    return ExtractSummary(out=config.out, backbone=config.backbone,
                          crops=len(plan.layout.crop_id),
                          units=len(plan.layout.unit_image), extracted_units=extracted,
                          seconds=time.perf_counter() - start, loop_seconds=loop_seconds,
                          missing=missing,
                          rank=world.rank, world_size=world.size)


def _prepare(config: ExtractConfig, world: World) -> ExtractPlan:
    backbone = get_backbone(config.backbone)
    device = world.device
    if config.region == "roi" and backbone.region_head is None:
        raise VpromError(f"--region roi: {backbone.name} is not a detector backbone; RoI "
                         "pooling of the whole image needs bottomup-r101 (or use --region "
                         "crop)")
    # --pool auto becomes the backbone's default here: the plan and the file record it
    config = replace(config, pool=backbone.pool_for(config.pool))
    loaded = backbone.load(config.weights, config.pool, config.input_size)
    if world.main:
        if config.weights == "none":
            print(f"WARNING: --weights none: {config.backbone} is RANDOMLY INITIALISED; its "
                  "features mean nothing for the benchmark (use it for tests and timing "
                  "only). This is recorded in the file's 'weights' attribute.", file=sys.stderr)
        for note in loaded.notes:
            print(f"{config.weights}: {note}", file=sys.stderr)
    crops = read_crop_table(config.dataset)
    if len(crops) == 0:
        raise VpromError(f"{config.dataset}: the crops table is empty; nothing to extract")
    if len(np.unique(crops.crop_id)) != len(crops):
        raise VpromError(f"{config.dataset}: crop ids are not unique; regenerate the dataset")
    if config.region == "roi":
        size = config.input_size or backbone.region_head.shortest_side
    else:
        size = config.input_size or backbone.preprocess.input_size
    # the batch size the plan and the file record
    config = replace(config, batch_size=_batch_size(config, world, size))
    layout = batch_layout(crops, config.batch_size, config.chunk_batches)
    index = ImageIndex(config.vg)
    images = layout.unit_image[layout.groups[:, 0]]
    paths = [str(index.paths[i]) if int(i) in index.paths else None for i in images.tolist()]
    if config.cuda_graphs and device.type not in GRAPH_DEVICES:
        raise VpromError("--cuda-graphs needs a CUDA device; drop it on the CPU")
    decoder = resolve_decoder(config.decode, device)
    autocast = _autocast_dtype(device)
    if device.type == "cuda":
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
    """--batch-size, or `default_batch_size` for this device and crop side; the processes of
    a CPU torchrun job, whose defaults depend on their threads, take the smallest."""
    if config.batch_size is not None:
        return config.batch_size
    mine = default_batch_size(world.device.type, config.region, size, torch.get_num_threads())
    if world.size == 1 or world.device.type != "cpu":  # CUDA's default is the same everywhere
        return mine
    chosen = world.all_sum([float(mine) if r == world.rank else 0.0 for r in range(world.size)])
    return int(min(chosen))


def _workers(config: ExtractConfig, device: torch.device) -> int:
    """--workers, or `DEFAULT_CPU_WORKERS` on a CPU and on CUDA each GPU process's cores less
    two (the main and pinning threads), at most 16."""
    if config.workers is not None:
        return config.workers
    if device.type == "cpu":
        return DEFAULT_CPU_WORKERS
    return max(1, min(MAX_GPU_WORKERS, cores_per_process() - 2))


def _check_open_files(workers: int, prefetch: int) -> None:
    """Refuse DataLoader workers the open-file limit cannot serve (each tensor in flight holds
    a descriptor), after raising a soft limit towards the hard one."""
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


def _inputs(plan: ExtractPlan) -> tuple[list, dict]:
    """What the output is made from (for `vprom.manifest`): the data set, the settings."""
    return [plan.config.dataset], plan.settings()


def _finished(plan: ExtractPlan) -> list | None:
    """The missing crops when `out` is already a complete file made with these settings."""
    out = plan.config.out
    if not plan.config.resume or plan.partial.exists() or not is_current(out, *_inputs(plan)):
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
    partial = plan.partial
    if partial.exists():
        why = None if plan.config.resume else "--no-resume"
        why = why or why_stale(partial, *_inputs(plan))
        if why:
            print(f"{partial}: {why}; starting over", file=sys.stderr)
            remove_work_folder(partial, "features", WORK_FILES)
        else:
            done = sum(plan.chunk_done(c) for c in range(len(plan.layout.chunks)))
            print(f"{partial}: resuming, {done} of {len(plan.layout.chunks)} chunks done",
                  file=sys.stderr)
    if not partial.is_dir():
        partial.mkdir(parents=True)
        inputs, settings = _inputs(plan)
        write_manifest(partial, make_manifest("features", settings,
                                              inputs=input_hashes(inputs)))
