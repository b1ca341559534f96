"""The `vprom` command line: parses arguments and calls library functions, nothing more.

Each subcommand is registered with its help text and an example; `run_<name>(args)` imports
its stage lazily (so `vprom --help` is quick and `vprom mine` never imports torch) and calls
one library function. A `VpromError` becomes one line on stderr and exit status 1.

Option defaults are read from the function or config dataclass that owns them (`default`),
never written twice; the config modules it reads import no torch.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from pathlib import Path


def _interrupted_while_starting(signum, frame):
    """Ctrl-C or SIGTERM while the stages below are imported: nothing has been done yet, so
    say so and leave at once, instead of a traceback from deep inside an import."""
    by = "Ctrl-C" if signum == signal.SIGINT else "SIGTERM"
    os.write(2, f"vprom: interrupted ({by}) while starting; nothing was done\n".encode())
    os._exit(128 + signum)


_STARTING = {sig: signal.signal(sig, _interrupted_while_starting)
             for sig in (signal.SIGINT, signal.SIGTERM)
             if threading.current_thread() is threading.main_thread()}

from vprom.baselines.config import (  # noqa: E402 - after the guard above
    DEFAULTS_FILE,
    OPTIMIZERS,
    TrainConfig,
)
from vprom.features.config import (  # noqa: E402
    COMPRESSIONS,
    DECODERS,
    POOLS,
    REGIONS,
    STORED_DTYPES,
    ExtractConfig,
)
from vprom.generation.dataset import generate  # noqa: E402
from vprom.mining.download import download, load_expected  # noqa: E402
from vprom.mining.pools import mine  # noqa: E402
from vprom.mining.synth import write_corpus  # noqa: E402
from vprom import __version__  # noqa: E402
from vprom.app.build import SYNTHETIC_IMAGES, SYNTHETIC_SCALE, VG_SCALE, build  # noqa: E402
from vprom.app.options import (  # noqa: E402
    default,
    duration,
    options_of,
    output_file,
    output_folder,
    positive,
    shard,
)
from vprom.app.reproduce import ReproduceConfig  # noqa: E402
from vprom.app.running import run_command  # noqa: E402
from vprom.errors import VpromError  # noqa: E402

for _sig, _handler in _STARTING.items():
    signal.signal(_sig, _handler)

COMMANDS: dict[str, tuple[str, str]] = {}  # name -> (summary, example)


def command(name: str, summary: str, example: str):
    """Register `add_<name>` (its arguments) under subcommand `name`."""

    def wrap(add_arguments):
        COMMANDS[name] = (summary, example)
        return add_arguments

    return wrap


# `build` and `reproduce` choose these defaults by source, so their options default to None.
SCALE_HELP = (f"fraction of Table 1's size (default {VG_SCALE} on VG, {SYNTHETIC_SCALE} "
              "synthetic)")
SYNTHETIC_SIZE_HELP = f"synthetic corpus size (default {SYNTHETIC_IMAGES:,} images)"


# ---------------------------------------------------------------- data set construction
@command("download", "fetch Visual Genome annotations (and images): resumable, verified",
         "vprom download --out data/vg")
def add_download(p):
    p.add_argument("--out", type=output_folder, required=True, help="folder for the VG files")
    p.add_argument("--base-url", default=None, help="mirror to fetch from instead of VG's own")
    p.add_argument("--no-images", action="store_true", help="annotations only (~1 GB zipped)")
    p.add_argument("--expected", type=Path, default=None, metavar="FILE",
                   help="sizes and sha256 of the files a mirror serves (JSON shaped like "
                        "mining/data/vg_files.json); replaces the pinned official ones")
    p.add_argument("--deadline", type=duration, default=default(download, "deadline"),
                   metavar="TIME", help="give up on one file after this long, keeping its part "
                                        "for a rerun to resume (seconds, or e.g. 90m, 8h; "
                                        f"default {default(download, 'deadline') / 3600:g} h)")


def run_download(args):
    expected = None if args.expected is None else load_expected(args.expected)
    print(download(args.out, base_url=args.base_url, images=not args.no_images,
                   expected=expected, deadline=args.deadline))


@command("synth", "write the built-in synthetic corpus in Visual Genome's layout and schema",
         "vprom synth --out data/synth --images 2000 --seed 0")
def add_synth(p):
    p.add_argument("--out", type=output_folder, required=True,
                   help="folder to write (an existing one only if it holds a synthetic corpus)")
    p.add_argument("--images", type=positive(int), default=default(write_corpus, "images"),
                   help="number of images")
    p.add_argument("--seed", type=int, default=default(write_corpus, "seed"),
                   help="same seed and size, same bytes")
    p.add_argument("--workers", type=int, default=default(write_corpus, "workers"),
                   help="rendering processes")


def run_synth(args):
    print(write_corpus(args.out, images=args.images, seed=args.seed, workers=args.workers))


@command("mine", "stream Visual Genome into the four element pools (POOLS.h5 + report)",
         "vprom mine --vg data/vg --out build/pools.h5")
def add_mine(p):
    p.add_argument("--vg", type=Path, required=True, help="folder with VG's JSON (or .json.zip)")
    p.add_argument("--out", type=output_file, required=True,
                   help="POOLS.h5 to write (its reports are written beside it)")
    p.add_argument("--min-side", type=int, default=default(mine, "min_side"),
                   help="drop regions smaller (px)")
    p.add_argument("--workers", type=int, default=default(mine, "workers"),
                   help="processes (one per file)")


def run_mine(args):
    report = mine(args.vg, args.out, min_side=args.min_side, workers=args.workers)
    print(report.summary())


@command("generate", "sample matrices from the pools, prove each, assign every split",
         "vprom generate build/pools.h5 --out build/dataset.h5 --scale 0.1 --seed 0")
def add_generate(p):
    p.add_argument("pools", type=Path, help="POOLS.h5 from `vprom mine`")
    p.add_argument("--out", type=output_file, required=True, help="DATASET.h5 to write")
    p.add_argument("--scale", type=positive(float), default=default(generate, "scale"),
                   help="fraction of Table 1's 235,000")
    p.add_argument("--seed", type=int, default=default(generate, "seed"),
                   help="same pools and seed, same data set")
    p.add_argument("--shard", type=shard, default=None, metavar="K/N",
                   help="K/N: only matrices i with i %% N == K (rows equal the single run's)")


def run_generate(args):
    from vprom.splits.assign import load_rules

    summary = generate(args.pools, args.out, load_rules(), scale=args.scale, seed=args.seed,
                       shard=args.shard)
    print(summary)


@command("merge", "join the DATASET.h5 files of all `generate --shard K/N` runs into one",
         "vprom merge build/shard-0.h5 build/shard-1.h5 --out build/dataset.h5")
def add_merge(p):
    p.add_argument("shards", type=Path, nargs="+", help="the N shard files, any order")
    p.add_argument("--out", type=output_file, required=True, help="DATASET.h5 to write")


def run_merge(args):
    from vprom.generation.dataset import merge_shards
    from vprom.splits.assign import load_rules

    print(merge_shards(args.shards, args.out, load_rules()))


@command("build", "one shot: (synth or VG) -> mine -> generate -> verify -> stats",
         "vprom build --synthetic --out build/demo")
def add_build(p):
    p.add_argument("--out", type=output_folder, required=True,
                   help="build folder (stages already done there with the same settings are kept)")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--vg", type=Path, help="an unpacked Visual Genome folder")
    src.add_argument("--synthetic", action="store_true", help="the built-in synthetic corpus")
    p.add_argument("--images", type=positive(int), default=default(build, "images"),
                   help=SYNTHETIC_SIZE_HELP)
    p.add_argument("--scale", type=positive(float), default=default(build, "scale"),
                   help=SCALE_HELP)
    p.add_argument("--seed", type=int, default=default(build, "seed"),
                   help="seed of the synthetic corpus and of the matrices")


def run_build(args):
    build(args.out, vg=args.vg, synthetic=args.synthetic, images=args.images,
          scale=args.scale, seed=args.seed)


@command("verify", "integrity, solver (implied labels too), splits, leakage, held-out labels, "
         "per-type bias probes and the perception-only ceiling (non-zero exit on failure)",
         "vprom verify build/dataset.h5")
def add_verify(p):
    p.add_argument("dataset", type=Path, help="DATASET.h5 to check")
    p.add_argument("--features", type=Path, default=None,
                   help="also run the context-blind probes on these features (crops an "
                        "--allow-missing extraction lacks leave their matrices out)")


def run_verify(args):
    from vprom.generation.verify import verify
    from vprom.splits.assign import load_rules

    report = verify(args.dataset, load_rules(), features=args.features)
    print(report.format())
    if not report.ok:
        raise VpromError(f"{args.dataset}: verification failed ({report.failures()})")


@command("stats", "Table 1, split sizes and the perception-only ceiling, as a table "
         "(and --json)",
         "vprom stats build/dataset.h5 --json build/stats.json")
def add_stats(p):
    p.add_argument("dataset", type=Path, help="DATASET.h5")
    p.add_argument("--json", type=output_file, default=None,
                   help="also write the figures as JSON")


def run_stats(args):
    from vprom.generation.stats import format_stats, stats, write_stats

    figures = stats(args.dataset)
    print(format_stats(figures))
    if args.json:
        write_stats(figures, args.json)


@command("show", "render one matrix and its candidates as a PNG",
         "vprom show build/dataset.h5 --id 0 --vg data/vg --out m0.png --answer")
def add_show(p):
    p.add_argument("dataset", type=Path, help="DATASET.h5")
    p.add_argument("--id", type=int, required=True, help="matrix id")
    p.add_argument("--vg", type=Path, required=True, help="folder holding the VG images")
    p.add_argument("--out", type=output_file, required=True, help="PNG to write")
    p.add_argument("--answer", action="store_true", help="mark the answer, relation, elements")


def run_show(args):
    from vprom.show import show

    print(show(args.dataset, args.id, args.vg, args.out, answer=args.answer))


@command("export", "the data set as JSON lines, the original release's layout, or npz files",
         "vprom export build/dataset.h5 --format original --vg data/vg --out build/release")
def add_export(p):
    from vprom.generation.export import EXAMPLES, FORMATS
    from vprom.generation.export_npz import DEFAULT_SIZE

    p.epilog += "".join(f"\n  {e}" for e in EXAMPLES) + (
        "\n\nClients of the original release read it from the folder holding V-PROM/ "
        "(cd build/release\nbefore starting one). Layouts and formats: docs/release-layout.md.")
    p.add_argument("dataset", type=Path, help="DATASET.h5")
    p.add_argument("--format", choices=tuple(FORMATS), required=True,
                   help="; ".join(f"{k}: {v}" for k, v in FORMATS.items()))
    p.add_argument("--out", type=Path, required=True,
                   help="a file for jsonl, a folder for original and npz")
    p.add_argument("--vg", type=Path, default=None,
                   help="Visual Genome folder (VG_100K/, VG_100K_2/): original and npz")
    panels = p.add_mutually_exclusive_group()
    panels.add_argument("--copy", action="store_true",
                        help="original layout: panels as plain copies instead of symlinks, for "
                             "file systems without symlinks; clients that open panels through "
                             "os.readlink (Slot-Abstractor's loader) cannot read this copy")
    panels.add_argument("--symlink", action="store_true",
                        help="original layout: panels as symlinks, the default now (kept so "
                             "that older commands still run)")
    p.add_argument("--split", default="neutral",
                   help="npz: the split whose train, val and test problems are written")
    p.add_argument("--size", type=positive(int), default=DEFAULT_SIZE,
                   help="npz: panel side in pixels")


def run_export(args):
    from vprom.generation.export import export

    check = output_file if args.format == "jsonl" else output_folder
    try:  # before any work: --out must be writable as what the format writes
        out = check(str(args.out))
    except argparse.ArgumentTypeError as e:
        raise VpromError(f"--out {e}") from None
    print(export(args.dataset, args.format, out, vg_dir=args.vg, copy=args.copy,
                 split=args.split, size=args.size))


# ---------------------------------------------------------------- features and baselines
@command("extract", "backbone features per crop into one HDF5 file (resumable, multi-GPU)",
         "vprom extract build/dataset.h5 --vg data/vg --backbone resnet101 --weights imagenet "
         "--out build/feats/resnet101.h5")
def add_extract(p):
    p.add_argument("dataset", type=Path, nargs="?", help="DATASET.h5 (its crops are extracted)")
    p.add_argument("--vg", type=Path, help="Visual Genome folder (holding VG_100K/)")
    p.add_argument("--backbone", help="see `vprom extract --list`")
    p.add_argument("--weights", default=default(ExtractConfig, "weights"),
                   help="imagenet | none | PATH to a state dict")
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
        ("--pool", POOLS, "avg (default): one pooled, L2-normalised vector per crop; none: the "
         "last conv map per crop as an (N, C, H, W) dataset 'maps' (float16: about 200 KB per "
         "crop for resnet101 at 224, 2048x7x7; 800 KB for bottomup-r101, 2048x14x14); `vprom "
         "train` takes pooled vectors only")):
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
        from vprom.features.backbones import get_backbone, list_backbones

        for name in list_backbones():
            print(f"{name:15s} {get_backbone(name).description}")
        return
    absent = [flag for flag, key in (("DATASET", "dataset"), ("--vg", "vg"),
                                     ("--backbone", "backbone"), ("--out", "out"))
              if options[key] is None]
    if absent:
        raise VpromError(f"missing {', '.join(absent)}; e.g. {COMMANDS['extract'][1]}")
    print(extract(ExtractConfig(**options)))


@command("train", "train one baseline on one split (resumes an interrupted run by default)",
         "vprom train build/dataset.h5 --features build/feats/resnet101.h5 --model rn "
         "--split neutral --aux --out runs/rn-neutral-aux")
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


@command("evaluate", "test accuracy with a 95% interval and per-relation/element-type breakdowns",
         "vprom evaluate runs/rn-neutral-aux")
def add_evaluate(p):
    # dest "run_dir": "run" is where the parser keeps each command's function
    p.add_argument("run_dir", type=Path, metavar="RUN", help="a run folder of `vprom train`")
    p.add_argument("--device", default=None, help="default: cuda if available")


def run_evaluate(args):
    from vprom.baselines.evaluate import evaluate, format_metrics

    print(format_metrics(evaluate(args.run_dir, device=args.device)))


@command("report", "Table 2 and models x splits tables (Markdown, CSV) and plots over runs; "
         "flags runs that did not learn",
         "vprom report runs/* --out reports/")
def add_report(p):
    p.add_argument("runs", type=Path, nargs="+",
                   help="evaluated run folders, or folders holding them")
    p.add_argument("--out", type=output_folder, required=True,
                   help="folder for the tables and plots")


def run_report(args):
    from vprom.baselines.report import report

    print(report(args.runs, args.out))


@command("reproduce", "the paper's full grid (models x features x aux x splits) in one command",
         "vprom reproduce --vg data/vg --out repro/")
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
                   help="comma list, one per backbone (default: imagenet for torchvision ones)")
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


# ---------------------------------------------------------------- entry point
def build_parser() -> argparse.ArgumentParser:
    lines = [f"  {name:10s} {summary}\n             e.g. {example}"
             for name, (summary, example) in COMMANDS.items()]
    parser = argparse.ArgumentParser(
        prog="vprom",
        description="Build the V-PROM benchmark from Visual Genome and run its baselines.",
        epilog="commands:\n" + "\n".join(lines) + "\n\nQuick start: vprom build --synthetic "
               "--out build/demo",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"vprom {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (summary, example) in COMMANDS.items():
        p = sub.add_parser(name, help=summary.replace("%", "%%"), description=f"{summary}.",
                           epilog=f"example:\n  {example}",
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        globals()[f"add_{name}"](p)
        p.set_defaults(run=globals()[f"run_{name}"])
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one `vprom` command (see `vprom.app.running.run_command` for errors and signals)."""
    return run_command(build_parser, argv)


if __name__ == "__main__":
    sys.exit(main())
