"""Assembling FEATS.h5 from the finished chunk files (rank 0, after every rank is done).

Each crop, in crop-id order, gets its box's row, copied from the memory-mapped chunks in
blocks of at most 256 MB into `features` (N, D) or `maps` (N, C, H, W), under a temporary
name. Crops without their image are NaN rows listed in `missing_crop_id`; unless
`allow_missing`, their chunks are dropped and the run fails naming the first.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import h5py
import numpy as np
import torch

from vprom.errors import VpromError
from vprom.features.plan import DTYPES, ExtractPlan
from vprom.features.timm_backbones import timm_version
from vprom.files import atomic_path
from vprom.manifest import (CONTENT_PREFIX, input_hashes, make_manifest, manifest_of,
                            write_manifest)

ASSEMBLE_ROWS = 16384
BLOCK_BYTES = 256 << 20  # rows read and written per step, at most
CHUNK_BYTES = 1 << 20  # HDF5 chunk size of a maps dataset
POOLING = {"avg": "global average pool over the last conv stage's feature map",
           "cls": "the model's own pooled output (forward_head pre_logits: the class token "
                  "after the final norm; an attention-pool head where the model has one)",
           "mean": "mean of the patch tokens (class and register tokens excluded)",
           "none": "none: the last conv stage's feature map of each crop, (C, H, W) (token "
                   "models: the patch tokens as a (C, H, W) grid)"}
_L2 = "L2 (computed in float32, then cast to the stored dtype)"
NORMALISATION = {"avg": _L2, "cls": _L2, "mean": _L2,
                 "none": "none (the maps are stored as the trunk computes them)"}


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
    with atomic_path(config.out) as tmp:
        _write(plan, tmp, np.asarray([m[0] for m in missing], dtype=np.int64))
    shutil.rmtree(plan.partial)
    return missing


def _dataset(h5: h5py.File, plan: ExtractPlan, n: int, row_shape: tuple) -> h5py.Dataset:
    dtype = DTYPES[plan.config.dtype]
    row_bytes = int(np.prod(row_shape)) * np.dtype(dtype).itemsize
    if plan.config.pool == "none":
        name, rows = "maps", max(1, CHUNK_BYTES // row_bytes)
    else:
        name, rows = "features", 1024
    compression = {"none": {}, "lzf": {"compression": "lzf", "shuffle": True},
                   "gzip": {"compression": "gzip", "compression_opts": 4, "shuffle": True}}
    return h5.create_dataset(name, shape=(n, *row_shape), dtype=dtype,
                             chunks=(min(n, rows), *row_shape),
                             **compression[plan.config.compression])


def _write(plan: ExtractPlan, tmp: Path, missing_ids: np.ndarray) -> None:
    layout, config = plan.layout, plan.config
    n = len(layout.crop_id)
    chunk_starts = np.array([layout.chunk_units(c)[0] for c in range(len(layout.chunks))])
    arrays = [np.load(plan.chunk_file(c), mmap_mode="r") for c in range(len(layout.chunks))]
    row_shape = arrays[0].shape[1:]
    row_bytes = int(np.prod(row_shape)) * arrays[0].dtype.itemsize
    step = max(1, min(ASSEMBLE_ROWS, BLOCK_BYTES // row_bytes))
    content = hashlib.sha256(np.ascontiguousarray(layout.crop_id, dtype=np.int64))
    with h5py.File(tmp, "w") as h5:
        h5.create_dataset("crop_id", data=layout.crop_id)
        stored = _dataset(h5, plan, n, row_shape)
        for a in range(0, n, step):
            units = layout.unit_of_row[a:a + step]
            which = np.searchsorted(chunk_starts, units, side="right") - 1
            block = np.empty((len(units), *row_shape), dtype=DTYPES[config.dtype])
            for c in np.unique(which):
                sel = which == c
                block[sel] = arrays[c][units[sel] - chunk_starts[c]]
            stored[a:a + len(units)] = block
            content.update(block)
        h5.create_dataset("missing_crop_id", data=missing_ids)
        for key, value in attributes(plan, len(missing_ids), row_shape).items():
            h5.attrs[key] = str(value) if isinstance(value, str) else value  # plain str
        # the data set's hash names where these features belong, whatever later happens to
        # its file; the content hash names the features themselves
        write_manifest(h5, make_manifest(
            "features", plan.settings(), inputs=input_hashes([config.dataset]),
            counts={"crops": n, "distinct_boxes": len(layout.unit_image),
                    "missing": len(missing_ids)},
            outputs={"content_hash": CONTENT_PREFIX + content.hexdigest()}))
    del arrays


def attributes(plan: ExtractPlan, n_missing: int, row_shape: tuple) -> dict:
    import PIL
    import torchvision

    from vprom import __version__

    settings, pre, config = plan.settings(), plan.backbone.preprocess, plan.config
    size = list(plan.sides) if config.region == "roi" else [plan.size, plan.size]
    attrs = {"backbone": plan.backbone.name, "weights": plan.loaded.weights,
             "weights_sha256": plan.loaded.weights_sha256,
             "weights_notes": "; ".join(plan.loaded.notes),
             # "perception-weights" for `vprom perceive`'s: reports name the feature source
             "weights_kind": (manifest_of(plan.loaded.weights) or {}).get("kind", "")
             if Path(plan.loaded.weights).is_file() else "",
             "random_weights": plan.loaded.weights == "none",
             "input_size": np.array(size, dtype=np.int64),
             "region": config.region, "decode": plan.decoder, "pool": config.pool,
             "pooling": POOLING[config.pool], "normalisation": NORMALISATION[config.pool],
             "resize": plan.resize_policy(), "pixel_normalisation": pre.describe(),
             "dtype": config.dtype, "compression": config.compression,
             "feature_dim": int(row_shape[0]), "device_type": plan.world.device.type,
             "autocast": settings["autocast"], "compiled": config.compile,
             "cuda_graphs": config.cuda_graphs,
             "batch_size": config.batch_size, "n_missing": n_missing,
             "torch_version": torch.__version__, "torchvision_version": torchvision.__version__,
             "pillow_version": PIL.__version__, "vprom_version": __version__,
             "timm_version": timm_version(), "complete": True}
    if "data_config" in settings:  # a timm model's preprocessing, as timm resolved it
        attrs["data_config"] = settings["data_config"]
    if config.pool == "none":
        attrs["map_shape"] = np.array(row_shape, dtype=np.int64)
    return attrs
