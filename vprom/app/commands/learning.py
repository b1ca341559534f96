"""The commands that extract features and train, evaluate and report the baselines."""

from __future__ import annotations

import argparse
from pathlib import Path

from vprom.app.commands.base import Command
from vprom.app.commands.dataset import SCALE_HELP, SYNTHETIC_SIZE_HELP
from vprom.app.options import default, options_of, output_file, output_folder, positive
from vprom.app.reproduce import ReproduceConfig
from vprom.baselines.config import DEFAULTS_FILE, OPTIMIZERS, TrainConfig
from vprom.errors import VpromError
from vprom.features.config import (
    COMPRESSIONS,
    DECODERS,
    POOLS,
    REGIONS,
    STORED_DTYPES,
    ExtractConfig,
)


def add_extract(p):
    p.add_argument("dataset", type=Path, nargs="?", help="DATASET.h5 (its crops are extracted)")
    p.add_argument("--vg", type=Path, help="Visual Genome folder (holding VG_100K/)")
    p.add_argument("--backbone", help="see `vprom extract --list`")
    p.add_argument("--weights", default=default(ExtractConfig, "weights"),
                   help="imagenet | none | PATH to a state dict; timm:<name>: FILE (.safetensors "
                   "or .pth, weights only), none, or pretrained (only if already in the "
                   "Hugging Face cache: vprom never downloads)")
    p.add_argument("--out", type=output_file, help="FEATS.h5 to write")
    p.add_argument("--batch-size", type=int, default=default(ExtractConfig, "batch_size"),
                   help="crops per forward (%(default)s; 256 suits a large GPU)")
    p.add_argument("--workers", type=int, default=default(ExtractConfig, "workers"),
                   help="DataLoader processes reading/decoding JPEGs (default: 2 on CPU; on "
                   "CUDA the CPU cores per GPU process less 2, at most 16)")
    p.add_argument("--prefetch", type=int, default=default(ExtractConfig, "prefetch"),
                   help="batches each worker prepares ahead (%(default)s)")
    p.add_argument("--in-flight", type=int, default=default(ExtractConfig, "in_flight"),
                   help="batches queued on the device before the oldest result is awaited "
                   "(%(default)s; 0 waits for every batch)")
    for flag, choices, text in (
        ("--decode", DECODERS, "where JPEGs are decoded: cpu = Pillow in the workers; gpu = "
         "torchvision on the device (nvjpeg; on a CPU device torchvision's CPU decoder in the "
         "workers); auto (default) = gpu on CUDA nodes with under 12 CPU cores per GPU, else "
         "cpu"),
        ("--region", REGIONS, "crop (default): each box warped to SxS through the whole trunk; "
         "roi (bottomup-r101): the detector's procedure: whole image at shorter side 600, res4 "
         "once per image, 14x14 RoI max pooling per box, res5"),
        ("--pool", POOLS, "auto (default): the backbone's own (avg; cls for timm token "
         "models); avg: one pooled, L2-normalised vector per crop; cls / mean (timm ViTs): "
         "the model's pooled output (class token; SigLIP's attention pool) / the patch tokens' "
         "mean, L2-normalised; none: the last conv map (ViTs: the patch tokens as a grid) per "
         "crop as an (N, C, H, W) dataset 'maps' (float16: about 200 KB per crop for resnet101 "
         "at 224, 2048x7x7; 800 KB for bottomup-r101, 2048x14x14); `vprom train` takes pooled "
         "vectors only")):
        p.add_argument(flag, choices=choices, default=default(ExtractConfig, flag[2:]),
                       help=text)
    p.add_argument("--compression", choices=COMPRESSIONS,
                   default=default(ExtractConfig, "compression"),
                   help="HDF5 compression of the stored dataset (%(default)s; gzip is readable "
                   "everywhere, lzf only by h5py)")
    p.add_argument("--device", default=default(ExtractConfig, "device"),
                   help="cuda, cuda:N or cpu (default: cuda if available; under torchrun "
                   "each process takes its LOCAL_RANK's GPU)")
    p.add_argument("--dtype", choices=STORED_DTYPES, default=default(ExtractConfig, "dtype"),
                   help="stored dtype (pooling and L2 run in float32)")
    p.add_argument("--no-resume", dest="resume", action="store_false",
                   help="start over even if a matching partial file exists")
    p.add_argument("--allow-missing", action="store_true",
                   help="finish even if some images are missing (they are reported)")
    p.add_argument("--compile", action="store_true", help="torch.compile the backbone (CUDA)")
    p.add_argument("--input-size", type=int, default=default(ExtractConfig, "input_size"),
                   help="crop side in pixels (default: the backbone's, 224); with --region roi "
                   "the image's shorter side (default 600)")
    p.add_argument("--chunk-batches", type=int, default=default(ExtractConfig, "chunk_batches"),
                   help="batches per resumable chunk (a killed run redoes at most one chunk)")
    p.add_argument("--list", action="store_true", help="list the backbones and exit")


def run_extract(args):
    from vprom.features.extract import extract

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
    print(extract(ExtractConfig(**options)))


EXTRACT = Command(
    "extract", "backbone features per crop into one HDF5 file (resumable, multi-GPU)",
    "vprom extract build/dataset.h5 --vg data/vg --backbone resnet101 --weights imagenet "
    "--out build/feats/resnet101.h5",
    add_extract, run_extract)


def add_train(p):
    p.add_argument("dataset", type=Path, help="DATASET.h5")
    p.add_argument("--features", type=Path, required=True, help="FEATS.h5 from `vprom extract` "
                   "on this DATASET.h5 (features of another data set are refused)")
    p.add_argument("--model", required=True, help="a registered model, e.g. rn, mlp-sum-6, gru")
    p.add_argument("--split", required=True, help="neutral, interpolation, ...")
    p.add_argument("--aux", action="store_true", help="add the relation/element-type loss")
    p.add_argument("--out", type=output_folder, required=True,
                   help="run folder; re-running the same command resumes or, when finished, "
                        "does nothing")
    p.add_argument("--epochs", type=int, default=default(TrainConfig, "epochs"),
                   help="maximum epochs")
    model_default = (f"default: the model's, from baselines/{DEFAULTS_FILE} "
                     "(docs/training-defaults.md)")
    p.add_argument("--batch-size", type=int, default=default(TrainConfig, "batch_size"),
                   help="matrices per optimiser step, over all processes; " + model_default)
    p.add_argument("--optimizer", choices=OPTIMIZERS, default=default(TrainConfig, "optimizer"),
                   help="AdaDelta is the paper's; " + model_default)
    p.add_argument("--lr", type=float, default=default(TrainConfig, "lr"),
                   help=model_default + " (for another optimizer than the model's, that "
                        "optimizer's own default)")
    p.add_argument("--rho", type=float, default=default(TrainConfig, "rho"),
                   help="AdaDelta's decay; " + model_default)
    p.add_argument("--eps", type=float, default=default(TrainConfig, "eps"), help=model_default)
    p.add_argument("--hidden", type=int, default=default(TrainConfig, "hidden"),
                   help="width of every hidden layer; " + model_default)
    p.add_argument("--score-init", type=float, default=default(TrainConfig, "score_init"),
                   help="scale of the score head's initial weights; " + model_default)
    p.add_argument("--patience", type=int, default=default(TrainConfig, "patience"),
                   help="epochs without val gain before stop")
    p.add_argument("--shuffle-context", action="store_true",
                   help="control: each matrix's context replaced by another matrix's")
    p.add_argument("--center-features", action="store_true",
                   help="subtract the training crops' mean feature, re-normalise "
                   "(see docs/training.md)")
    p.add_argument("--seed", type=int, default=default(TrainConfig, "seed"),
                   help="weights, batch order and the shuffled-context derangement")
    p.add_argument("--device", default=None, help="cuda, cuda:N or cpu (default: cuda if "
                   "available; under torchrun each process takes its LOCAL_RANK's GPU)")
    p.add_argument("--cuda-graphs", action="store_true",
                   help="replay each training step from a captured CUDA graph (one GPU, "
                        "faster; see docs/gpus.md)")
    p.add_argument("--restart", action="store_true",
                   help="train the run folder's run again from epoch 1 (even with other "
                        "settings); its files are replaced only once the new run has "
                        "finished an epoch")
    # resuming is the default now; the flag is accepted so that older scripts keep working
    p.add_argument("--resume", action="store_true", help=argparse.SUPPRESS)


def run_train(args):
    from vprom.baselines.train import train

    options = options_of(args)
    options.pop("resume")
    train(TrainConfig(**options))


TRAIN = Command(
    "train", "train one baseline on one split (resumes an interrupted run by default)",
    "vprom train build/dataset.h5 --features build/feats/resnet101.h5 --model rn "
    "--split neutral --aux --out runs/rn-neutral-aux",
    add_train, run_train)


def add_evaluate(p):
    # dest "run_dir": "run" is where the parser keeps each command's function
    p.add_argument("run_dir", type=Path, metavar="RUN", help="a run folder of `vprom train`")
    p.add_argument("--device", default=None, help="default: cuda if available")


def run_evaluate(args):
    from vprom.baselines.evaluate import evaluate, format_metrics

    print(format_metrics(evaluate(args.run_dir, device=args.device)))


EVALUATE = Command(
    "evaluate", "test accuracy with a 95% interval and per-relation/element-type breakdowns",
    "vprom evaluate runs/rn-neutral-aux",
    add_evaluate, run_evaluate)


def add_report(p):
    p.add_argument("runs", type=Path, nargs="+",
                   help="evaluated run folders, or folders holding them")
    p.add_argument("--out", type=output_folder, required=True,
                   help="folder for the tables and plots")


def run_report(args):
    from vprom.baselines.report import report

    print(report(args.runs, args.out))


REPORT = Command(
    "report", "Table 2 and models x splits tables (Markdown, CSV) and plots over runs; "
    "flags runs that did not learn",
    "vprom report runs/* --out reports/",
    add_report, run_report)


def add_reproduce(p):
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--vg", type=Path, help="an unpacked Visual Genome folder")
    src.add_argument("--synthetic", action="store_true", help="the synthetic corpus (smoke test)")
    p.add_argument("--out", type=output_folder, required=True,
                   help="folder for the build, features, runs and report")
    p.add_argument("--scale", type=positive(float), default=None, help=SCALE_HELP)
    p.add_argument("--images", type=positive(int), default=None, help=SYNTHETIC_SIZE_HELP)
    p.add_argument("--backbones", default=default(ReproduceConfig, "backbones"),
                   help="comma list (see `vprom extract --list`)")
    p.add_argument("--weights", default=None,
                   help="comma list, one per backbone (default: imagenet for torchvision ones, "
                   "pretrained for timm:<name>, from the local Hugging Face cache only)")
    p.add_argument("--models", default=default(ReproduceConfig, "models"),
                   help="comma list of models, each trained without and with --aux, "
                        f"at its defaults from baselines/{DEFAULTS_FILE}")
    p.add_argument("--splits", default=default(ReproduceConfig, "splits"), help="comma list")
    p.add_argument("--epochs", type=int, default=default(ReproduceConfig, "epochs"),
                   help="maximum epochs per run")
    p.add_argument("--seed", type=int, default=default(ReproduceConfig, "seed"),
                   help="seed of the build and of every run")
    p.add_argument("--device", default=None, help="as `vprom train --device`")
    p.add_argument("--input-size", type=int, default=None,
                   help="crop side for extraction (default: the backbone's, 224)")
    p.add_argument("--center-features", action="store_true",
                   help="train on centred features (as `vprom train --center-features`)")


def run_reproduce(args):
    from vprom.app.reproduce import reproduce

    reproduce(ReproduceConfig(**options_of(args)))


REPRODUCE = Command(
    "reproduce", "the paper's full grid (models x features x aux x splits) in one command",
    "vprom reproduce --vg data/vg --out repro/",
    add_reproduce, run_reproduce)


COMMANDS = (EXTRACT, TRAIN, EVALUATE, REPORT, REPRODUCE,)
