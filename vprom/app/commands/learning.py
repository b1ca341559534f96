"""The commands that extract features and train, evaluate and report the baselines.

Their options are the fields of the config dataclasses (`add_fields`): each default and help
text is written once, beside the setting it describes."""

from __future__ import annotations

import argparse
from pathlib import Path

from vprom.app import api
from vprom.app.commands.base import Command
from vprom.app.commands.dataset import SCALE_HELP, SYNTHETIC_SIZE_HELP
from vprom.app.options import add_fields, add_out, options_of, positive
from vprom.app.reproduce import ReproduceConfig
from vprom.baselines.config import TrainConfig
from vprom.errors import VpromError
from vprom.features.config import ExtractConfig


def add_extract(p):
    # no argument is required: `vprom extract --list` needs none (run_extract checks the rest)
    add_fields(p, ExtractConfig, optional=True)
    p.add_argument("--list", action="store_true", help="list the backbones and exit")


def run_extract(args):
    options = options_of(args)
    if options.pop("list"):
        from vprom.features.backbones import BACKBONES, get_backbone, list_backbones

        for name in list_backbones():
            print(f"{name:15s} {get_backbone(name).description}")
        for usage in BACKBONES.families().values():
            print(usage)
        return
    absent = [flag for flag, key in (("DATASET", "dataset"), ("--vg", "vg"),
                                     ("--backbone", "backbone"), ("--out", "out"))
              if options[key] is None]
    if absent:
        raise VpromError(f"missing {', '.join(absent)}; e.g. {EXTRACT.example}")
    print(api.extract(**options))


EXTRACT = Command(
    "extract", "backbone features per crop into one HDF5 file (resumable, multi-GPU)",
    "vprom extract build/dataset.h5 --vg data/vg --backbone resnet101 --weights imagenet "
    "--out build/feats/resnet101.h5",
    add_extract, run_extract)


def add_train(p):
    add_fields(p, TrainConfig)
    # resuming is the default now; the flag is accepted so that older scripts keep working
    p.add_argument("--resume", action="store_true", help=argparse.SUPPRESS)


def run_train(args):
    options = options_of(args)
    options.pop("resume")
    api.train(**options)


TRAIN = Command(
    "train", "train one baseline on one split (resumes an interrupted run by default)",
    "vprom train build/dataset.h5 --features build/feats/resnet101.h5 --model rn "
    "--split neutral --aux --out runs/rn-neutral-aux",
    add_train, run_train)


def add_evaluate(p):
    # dest "run_dir": "run" is where the parser keeps each command's function
    p.add_argument("run_dir", type=Path, metavar="RUN", help="a run folder of `vprom train`")
    add_fields(p, TrainConfig, ["device"])


def run_evaluate(args):
    from vprom.baselines.evaluate import format_metrics

    print(format_metrics(api.evaluate(args.run_dir, device=args.device)))


EVALUATE = Command(
    "evaluate", "test accuracy with a 95% interval and per-relation/element-type breakdowns",
    "vprom evaluate runs/rn-neutral-aux",
    add_evaluate, run_evaluate)


def add_report(p):
    p.add_argument("runs", type=Path, nargs="+",
                   help="evaluated run folders, or folders holding them")
    add_out(p, "folder for the tables and plots", folder=True)


def run_report(args):
    print(api.report(args.runs, args.out))


REPORT = Command(
    "report", "Table 2 and models x splits tables (Markdown, CSV) and plots over runs; "
    "flags runs that did not learn",
    "vprom report runs/* --out reports/",
    add_report, run_report)


def add_reproduce(p):
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--vg", type=Path, help="an unpacked Visual Genome folder")
    src.add_argument("--synthetic", action="store_true", help="the synthetic corpus (smoke test)")
    p.add_argument("--scale", type=positive(float), default=None, help=SCALE_HELP)
    p.add_argument("--images", type=positive(int), default=None, help=SYNTHETIC_SIZE_HELP)
    add_fields(p, ReproduceConfig)


def run_reproduce(args):
    api.reproduce(**options_of(args))


REPRODUCE = Command(
    "reproduce", "the paper's full grid (models x features x aux x splits) in one command",
    "vprom reproduce --vg data/vg --out repro/",
    add_reproduce, run_reproduce)


COMMANDS = (EXTRACT, TRAIN, EVALUATE, REPORT, REPRODUCE,)
