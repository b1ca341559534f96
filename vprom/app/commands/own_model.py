"""The commands for models of one's own: a crop store of pixels, and scoring predictions."""

from __future__ import annotations

from pathlib import Path

from vprom.app.commands.base import Command
from vprom.app.options import add_out, add_workers, default, output_folder, positive
from vprom.features.crop_store import COMPRESSIONS, StoreJob, size_note


def add_crops(p):
    p.add_argument("dataset", type=Path, help="DATASET.h5 (every crop its matrices show)")
    p.add_argument("--vg", type=Path, required=True,
                   help="Visual Genome folder (holding VG_100K/)")
    p.add_argument("--size", type=positive(int), required=True,
                   help="side S of the square crops, in pixels; uint8 RGB costs 3*S*S bytes "
                        "a crop: " + size_note().replace("%", "%%"))
    add_out(p, "CROPS.h5 to write")
    add_workers(p, "decoding JPEGs", StoreJob)
    p.add_argument("--compression", choices=COMPRESSIONS,
                   default=default(StoreJob, "compression"),
                   help="HDF5 compression of the pixels (%(default)s; JPEG-like photos shrink "
                        "little, and compressed chunks cost time at every read)")
    p.add_argument("--chunk-crops", type=positive(int), default=default(StoreJob, "chunk_crops"),
                   help="crops per resumable chunk (%(default)s)")


def run_crops(args):
    from vprom.features.crop_store import build_crop_store

    build_crop_store(StoreJob(args.dataset, args.vg, args.size, args.out, args.workers,
                              args.compression, args.chunk_crops))


CROPS = Command(
    "crops", "every crop of a data set once, as uint8 SxS pixels, for pixel models "
    "(resumable, parallel)",
    "vprom crops build/dataset.h5 --vg data/vg --size 224 --out build/crops-224.h5",
    add_crops, run_crops)


def add_score(p):
    p.add_argument("dataset", type=Path, help="DATASET.h5 the predictions were made on")
    p.add_argument("predictions", type=Path,
                   help="CSV (header matrix_id,choice[,score_0..score_7]) or JSON lines "
                        "({\"matrix_id\": 17, \"choice\": 3[, \"scores\": [8 numbers]]}); "
                        "every test problem of the split once")
    p.add_argument("--split", default="neutral", help="the split whose test part is scored "
                   "(%(default)s)")
    p.add_argument("--out", type=output_folder, default=None,
                   help="folder for metrics.json (default: the folder holding PREDICTIONS); "
                        "`vprom report` takes it as a run")
    p.add_argument("--model", default=None,
                   help="the model's name in reports (default: the --out folder's name)")
    p.add_argument("--features", default="own",
                   help="what the model read, shown as the report's feature column "
                        "(%(default)s)")


def run_score(args):
    from vprom.app.score import format_scored, score_predictions

    print(format_scored(*score_predictions(args.dataset, args.predictions, args.split,
                                           args.out, args.model, args.features)))


SCORE = Command(
    "score", "score anyone's predictions like `vprom evaluate` (breakdowns, 95% intervals, "
    "metrics.json)",
    "vprom score build/dataset.h5 mymodel/predictions.csv --split neutral",
    add_score, run_score)


COMMANDS = (CROPS, SCORE)
