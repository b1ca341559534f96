"""Building the crop store (`vprom crops`; its layout and reader: `vprom.crop_store`): every
crop a data set uses, decoded once with `vprom extract`'s rule (`features.crops.decode_crops`).

Crops sharing an (image, box) are decoded once, in chunks cut at image boundaries, by
`workers` processes, each chunk saved atomically under `<out>.partial/`, where a killed build
resumes; the store is then assembled atomically. A crop whose image is missing or whose box
lies outside it is refused, naming the image, and nothing is assembled.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np

from vprom.claim import writes
from vprom.crop_store import KIND, LAYOUT
from vprom.errors import VpromError
from vprom.features.config import COMPRESSIONS, RESIZE
from vprom.files import atomic_path, write_npy
from vprom.manifest import input_hashes, is_current, make_manifest, write_manifest
from vprom.processes import ordered_map
from vprom.tables import read_crop_table, read_matrix_table

#: what `<out>.partial/` holds; a work folder with anything else is not removed
WORK_FILES = ("chunk-*.npy", "manifest.json")
#: crops in the full V-PROM: Table 1's 143,634 panel images (an upper bound on distinct crops)
FULL_SCALE_CROPS = 143_634


def bytes_per_crop(size: int) -> int:
    return 3 * size * size


def size_note(size: int | None = None) -> str:
    """What a store costs per crop and at full scale (for `vprom crops --help`)."""
    sizes = (size,) if size else (224, 80)
    parts = [f"S={s}: {bytes_per_crop(s) / 1024:.1f} KiB a crop, "
             f"{bytes_per_crop(s) * FULL_SCALE_CROPS / 1e9:.1f} GB for the full V-PROM's "
             f"{FULL_SCALE_CROPS:,} crops" for s in sizes]
    return "; ".join(parts) + " (uncompressed)"


@dataclass(frozen=True)
class StoreJob:
    dataset: Path
    vg: Path
    size: int
    out: Path
    workers: int = 2
    compression: str = "none"
    chunk_crops: int = 256

    def settings(self) -> dict:
        """What the chunks are made with: the work folder's manifest `config`."""
        return {"size": self.size, "chunk_crops": self.chunk_crops, "resize": RESIZE}


def _used_crops(dataset: Path):
    """The crops table restricted to the crop ids that matrices/panels name."""
    crops = read_crop_table(dataset)
    used = np.unique(read_matrix_table(dataset).panels)
    absent = np.setdiff1d(used, crops.crop_id)
    if len(absent):
        raise VpromError(f"{dataset}: matrices name {len(absent)} crop ids the crops table "
                         f"lacks (e.g. {int(absent[0])}); the file is inconsistent, regenerate "
                         "it")
    return crops.take(np.isin(crops.crop_id, used))


def _decode_chunk(task: tuple) -> tuple[float, int | list[str]]:
    """Decode a `_task` into its .npy file: (seconds, images), or (-1, failures)."""
    from vprom.features.crops import DECODE_ERRORS, decode_crops

    file, size, units, images = task
    start = time.perf_counter()
    out = np.zeros((units, 3, size, size), np.uint8)
    failures = []
    for image_id, path, boxes, first in images:
        if path is None:
            failures.append(f"image {image_id}: no such file")
            continue
        try:
            pixels, errors = decode_crops(path, boxes, size)
        except DECODE_ERRORS as e:
            failures.append(f"image {image_id} ({path}): cannot decode ({e})")
            continue
        failures += [f"image {image_id}: {e}" for e in errors if e is not None]
        out[first:first + len(boxes)] = pixels.transpose(0, 3, 1, 2)
    if failures:
        return -1.0, failures
    write_npy(file, out)
    return time.perf_counter() - start, len(images)


def _task(layout, paths: list, size: int, folder: Path, c: int) -> tuple:
    """Chunk c's `_decode_chunk` task: its images' paths and boxes only."""
    first, last = layout.chunk_units(c)
    images = [(int(layout.unit_image[a]), paths[g], layout.unit_box[a:b], a - first)
              for g in layout.batches[c] for a, b in [layout.groups[g].tolist()]]
    return folder / f"chunk-{c:05d}.npy", size, last - first, images


def _assemble(job: StoreJob, layout, folder: Path, timing: dict) -> None:
    n, s = len(layout.crop_id), job.size
    manifest = make_manifest(KIND, {**job.settings(), "compression": job.compression},
                             inputs=input_hashes([job.dataset]),
                             counts={"crops": n, "units": len(layout.unit_image),
                                     "timing": timing})
    compression = None if job.compression == "none" else job.compression
    with atomic_path(job.out) as tmp, h5py.File(tmp, "w") as h5:
        h5.create_dataset("crop_id", data=layout.crop_id)
        pixels = h5.create_dataset("pixels", shape=(n, 3, s, s), dtype=np.uint8,
                                   chunks=(1, 3, s, s), compression=compression)
        for c in range(len(layout.chunks)):
            first, last = layout.chunk_units(c)
            rows = np.flatnonzero((layout.unit_of_row >= first) & (layout.unit_of_row < last))
            if len(rows):  # usually one run (crop ids follow their boxes): one slice
                start, stop = int(rows[0]), int(rows[-1]) + 1
                block = np.load(folder / f"chunk-{c:05d}.npy")[layout.unit_of_row[rows] - first]
                pixels[slice(start, stop) if stop - start == len(rows) else rows] = block
        h5.attrs.update({"kind": KIND, "size": s, "resize": RESIZE, "layout": LAYOUT,
                         "compression": job.compression, "complete": True})
        write_manifest(h5, manifest)


@writes(lambda a: a["job"].out, (KIND,), inputs=lambda a: (a["job"].dataset, a["job"].vg),
        folder=False)
def build_crop_store(job: StoreJob, log=print) -> Path:
    """Write job.out (see the module docstring); returns its path. Resumes a killed build."""
    # features.crops imports torch; imported here so that `vprom --help` stays quick
    from vprom.features.crops import batch_layout, open_work_folder

    if job.size < 1 or job.workers < 1 or job.compression not in COMPRESSIONS:
        raise VpromError(f"--size and --workers must be positive and --compression one of "
                         f"{', '.join(COMPRESSIONS)}")
    settings = {**job.settings(), "compression": job.compression}
    partial = job.out.with_name(job.out.name + ".partial")
    if not partial.exists() and is_current(job.out, [job.dataset], settings):
        log(f"{job.out}: already complete with these settings; nothing to do")
        return job.out
    crops = _used_crops(job.dataset)
    layout = batch_layout(crops, job.chunk_crops, 1, whole_images=True)
    paths = layout.image_paths(job.vg)
    open_work_folder(partial, KIND, WORK_FILES, job.dataset, job.settings(), log=log)
    todo = [c for c in range(len(layout.chunks)) if not (partial / f"chunk-{c:05d}.npy").is_file()]
    log(f"{len(layout.crop_id):,} crops ({len(layout.unit_image):,} distinct boxes, "
        f"{len(np.unique(layout.unit_image)):,} images) at {job.size}x{job.size}: {len(todo)} of "
        f"{len(layout.chunks)} chunks to decode with {job.workers} process(es)")
    seconds, decoded, failures = 0.0, 0, []
    start = time.perf_counter()
    tasks = [_task(layout, paths, job.size, partial, c) for c in todo]
    with ordered_map(_decode_chunk, tasks, job.workers, "crops", method="fork") as results:
        for took, images_done in results:
            if took < 0:
                failures += images_done
            else:
                seconds, decoded = seconds + took, decoded + images_done
    if failures:
        raise VpromError(f"{job.vg}: {len(failures)} crops could not be cut ({failures[0]}; "
                         f"{'; '.join(failures[1:3])}); restore those images (or pass the "
                         "Visual Genome folder this data set was built from) and re-run: the "
                         "chunks done so far are kept")
    timing = {"wall_s": round(time.perf_counter() - start, 3), "decode_cpu_s": round(seconds, 3),
              "image_groups": decoded, "workers": job.workers}
    _assemble(job, layout, partial, timing)
    shutil.rmtree(partial)
    log(f"wrote {job.out} ({os.path.getsize(job.out) / 1e6:.1f} MB)")
    return job.out
