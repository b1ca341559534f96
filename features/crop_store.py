"""Building the crop store (`vprom crops`; its layout and reader: `vprom.crop_store`): every
crop a data set uses, decoded once with `vprom extract`'s rule (`features.crops.decode_crops`).

Crops sharing an (image, box) are decoded once, in chunks cut at image boundaries
(`features.crops.batch_layout`), by `workers` processes, each chunk saved atomically as
`<out>.partial/chunk-NNNNN.npy`. A killed build resumes from the chunks there when the work
folder's manifest is current (`vprom.manifest.is_current`); then the store is assembled into
a temporary file and renamed. A crop whose image is missing or whose box lies outside it is
refused, naming the image; nothing is assembled then.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np

from vprom.claim import remove_work_folder, writes
from vprom.crop_store import KIND, LAYOUT
from vprom.errors import VpromError
from vprom.features.config import COMPRESSIONS
from vprom.files import atomic_path, write_npy
from vprom.images import ImageIndex
from vprom.manifest import input_hashes, is_current, make_manifest, why_stale, write_manifest
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
        from vprom.features.crops import RESIZE

        return {"size": self.size, "chunk_crops": self.chunk_crops, "resize": RESIZE}


def _used_crops(dataset: Path):
    """The crops table restricted to the crop ids that matrices/panels name."""
    crops = read_crop_table(dataset)
    used = np.unique(read_matrix_table(dataset).panels)
    keep = np.isin(crops.crop_id, used)
    absent = np.setdiff1d(used, crops.crop_id)
    if len(absent):
        raise VpromError(f"{dataset}: matrices name {len(absent)} crop ids the crops table "
                         f"lacks (e.g. {int(absent[0])}); the file is inconsistent, regenerate "
                         "it")
    return type(crops)(**{k: v[keep] for k, v in vars(crops).items()})


def _decode_chunk(task: tuple) -> tuple[float, int | list[str]]:
    """Decode one chunk's images into its .npy file: (seconds, images), or (-1, failures).
    `task`: (file, size, units, [(image id, path, boxes, first unit)])."""
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


def _tasks(layout, paths: list, size: int, folder: Path, todo: list) -> list[tuple]:
    """One small `_decode_chunk` task per chunk: its images' paths and boxes only."""
    tasks = []
    for c in todo:
        first, last = layout.chunk_units(c)
        images = []
        for g in layout.batches[c]:
            a, b = (int(v) for v in layout.groups[g])
            images.append((int(layout.unit_image[a]), paths[g], layout.unit_box[a:b], a - first))
        tasks.append((folder / f"chunk-{c:05d}.npy", size, last - first, images))
    return tasks


def _work_folder(job: StoreJob, log) -> Path:
    """`<out>.partial/`, started over unless it is current for the data set and settings."""
    folder = job.out.with_name(job.out.name + ".partial")
    if folder.exists() or folder.is_symlink():
        why = why_stale(folder, [job.dataset], job.settings())
        if why:
            log(f"{folder}: {why}; starting over")
            remove_work_folder(folder, KIND, WORK_FILES)
    if not folder.is_dir():
        folder.mkdir(parents=True)
        write_manifest(folder, make_manifest(KIND, job.settings(),
                                             inputs=input_hashes([job.dataset])))
    return folder


def _assemble(job: StoreJob, layout, folder: Path, timing: dict) -> None:
    from vprom.features.crops import RESIZE

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
            block = np.load(folder / f"chunk-{c:05d}.npy")
            rows = np.flatnonzero((layout.unit_of_row >= first) & (layout.unit_of_row < last))
            if len(rows):
                start, stop = int(rows[0]), int(rows[-1]) + 1
                if stop - start == len(rows):  # the usual case: crop ids follow their boxes
                    pixels[start:stop] = block[layout.unit_of_row[rows] - first]
                else:
                    for r in rows:
                        pixels[r] = block[layout.unit_of_row[r] - first]
        h5.attrs.update({"kind": KIND, "size": s, "resize": RESIZE, "layout": LAYOUT,
                         "compression": job.compression, "complete": True})
        write_manifest(h5, manifest)


@writes(lambda a: a["job"].out, (KIND,), inputs=lambda a: (a["job"].dataset, a["job"].vg),
        folder=False)
def build_crop_store(job: StoreJob, log=print) -> Path:
    """Write job.out (see the module docstring); returns its path. Resumes a killed build."""
    # features.crops imports torch; imported here so that `vprom --help` stays quick
    from vprom.features.crops import batch_layout

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
    index = ImageIndex(job.vg)
    images = layout.unit_image[layout.groups[:, 0]]
    paths = [str(index.paths[i]) if int(i) in index.paths else None for i in images.tolist()]
    folder = _work_folder(job, log)
    todo = [c for c in range(len(layout.chunks)) if not (folder / f"chunk-{c:05d}.npy").is_file()]
    log(f"{len(layout.crop_id):,} crops ({len(layout.unit_image):,} distinct boxes, "
        f"{len(np.unique(images)):,} images) at {job.size}x{job.size}: {len(todo)} of "
        f"{len(layout.chunks)} chunks to decode with {job.workers} process(es)")
    seconds, decoded, failures = 0.0, 0, []
    start = time.perf_counter()
    with ordered_map(_decode_chunk, _tasks(layout, paths, job.size, folder, todo), job.workers,
                     "crops", method="fork") as results:
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
    _assemble(job, layout, folder, timing)
    shutil.rmtree(folder)
    log(f"wrote {job.out} ({os.path.getsize(job.out) / 1e6:.1f} MB)")
    return job.out
