"""The `vprom` command line: parses arguments and calls library functions, nothing more.

Each subcommand is registered with its help text and an example; `run_<name>(args)` imports
its stage lazily (so `vprom --help` is quick and `vprom mine` never imports torch) and calls
one library function. A `VpromError` becomes one line on stderr and exit status 1.

Option defaults are read from the function or config dataclass that owns them (`default`),
never written twice; the config modules it reads import no torch.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import inspect
import math
import os
import signal
import sys
from pathlib import Path

from baselines.config import OPTIMIZERS, TrainConfig
from features.config import STORED_DTYPES, ExtractConfig
from generation.dataset import generate
from mining.pools import mine
from mining.synth import write_corpus
from vprom import __version__
from vprom.app.build import build
from vprom.app.reproduce import ReproduceConfig
from vprom.errors import VpromError
from vprom.io import check_output

COMMANDS: dict[str, tuple[str, str]] = {}  # name -> (summary, example)


def command(name: str, summary: str, example: str):
    """Register `add_<name>` (its arguments) under subcommand `name`."""

    def wrap(add_arguments):
        COMMANDS[name] = (summary, example)
        return add_arguments

    return wrap


def default(owner, name: str):
    """The default of parameter `name` of a function or config dataclass."""
    return inspect.signature(owner).parameters[name].default


def _options(args: argparse.Namespace) -> dict:
    """The parsed options as keyword arguments for a job's config dataclass."""
    return {k: v for k, v in vars(args).items() if k not in ("command", "run")}


def output_file(text: str) -> Path:
    """An output file path, checked before any work starts (argparse type)."""
    try:
        return check_output(text)
    except VpromError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def output_folder(text: str) -> Path:
    """An output folder path, checked before any work starts (argparse type)."""
    try:
        return check_output(text, folder=True)
    except VpromError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def positive(kind):
    """An argparse type for a finite number > 0 of `kind` (int or float)."""

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            what = "an integer" if kind is int else "a number"
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
        if not (math.isfinite(value) and value > 0):
            raise argparse.ArgumentTypeError(f"must be a finite number above 0, got {text}")
        return value

    return parse


def _shard(text: str) -> tuple[int, int]:
    try:
        k, n = (int(v) for v in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"shard must look like K/N (e.g. 0/4), got {text!r}")
    if not 0 <= k < n:
        raise argparse.ArgumentTypeError(f"shard {text}: need 0 <= K < N")
    return k, n


# ---------------------------------------------------------------- data set construction
@command("download", "fetch Visual Genome annotations (and images): resumable, verified",
         "vprom download --out data/vg")
def add_download(p):
    p.add_argument("--out", type=Path, required=True, help="folder for the VG files")
    p.add_argument("--base-url", default=None, help="mirror to fetch from instead of VG's own")
    p.add_argument("--no-images", action="store_true", help="annotations only (~1 GB zipped)")


def run_download(args):
    from mining.download import download

    print(download(args.out, base_url=args.base_url, images=not args.no_images))


@command("synth", "write the built-in synthetic corpus in Visual Genome's layout and schema",
         "vprom synth --out data/synth --images 2000 --seed 0")
def add_synth(p):
    p.add_argument("--out", type=output_folder, required=True)
    p.add_argument("--images", type=positive(int), default=default(write_corpus, "images"))
    p.add_argument("--seed", type=int, default=default(write_corpus, "seed"))
    p.add_argument("--workers", type=int, default=default(write_corpus, "workers"),
                   help="rendering processes")


def run_synth(args):
    print(write_corpus(args.out, images=args.images, seed=args.seed, workers=args.workers))


@command("mine", "stream Visual Genome into the four element pools (POOLS.h5 + report)",
         "vprom mine --vg data/vg --out build/pools.h5")
def add_mine(p):
    p.add_argument("--vg", type=Path, required=True, help="folder with VG's JSON (or .json.zip)")
    p.add_argument("--out", type=output_file, required=True)
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
    p.add_argument("pools", type=Path)
    p.add_argument("--out", type=output_file, required=True)
    p.add_argument("--scale", type=positive(float), default=default(generate, "scale"),
                   help="fraction of Table 1's 235,000")
    p.add_argument("--seed", type=int, default=default(generate, "seed"))
    p.add_argument("--shard", type=_shard, default=None,
                   help="K/N: only matrices i with i %% N == K (rows equal the single run's)")


def run_generate(args):
    from splits.assign import load_rules

    summary = generate(args.pools, args.out, load_rules(), scale=args.scale, seed=args.seed,
                       shard=args.shard)
    print(summary)


@command("merge", "join the DATASET.h5 files of all `generate --shard K/N` runs into one",
         "vprom merge build/shard-0.h5 build/shard-1.h5 --out build/dataset.h5")
def add_merge(p):
    p.add_argument("shards", type=Path, nargs="+", help="the N shard files, any order")
    p.add_argument("--out", type=output_file, required=True)


def run_merge(args):
    from generation.dataset import merge_shards
    from splits.assign import load_rules

    print(merge_shards(args.shards, args.out, load_rules()))


@command("build", "one shot: (synth or VG) -> mine -> generate -> verify -> stats",
         "vprom build --synthetic --out build/demo")
def add_build(p):
    p.add_argument("--out", type=output_folder, required=True)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--vg", type=Path, help="an unpacked Visual Genome folder")
    src.add_argument("--synthetic", action="store_true", help="the built-in synthetic corpus")
    p.add_argument("--images", type=positive(int), default=default(build, "images"),
                   help="synthetic corpus size")
    p.add_argument("--scale", type=positive(float), default=default(build, "scale"),
                   help="fraction of Table 1's size")
    p.add_argument("--seed", type=int, default=default(build, "seed"))


def run_build(args):
    build(args.out, vg=args.vg, synthetic=args.synthetic, images=args.images,
          scale=args.scale, seed=args.seed)


@command("verify", "integrity, solver (implied labels too), splits, leakage, held-out labels, "
         "per-type bias probes and the perception-only ceiling (non-zero exit on failure)",
         "vprom verify build/dataset.h5")
def add_verify(p):
    p.add_argument("dataset", type=Path)
    p.add_argument("--features", type=Path, default=None,
                   help="also run the context-blind probes on these features (crops an "
                        "--allow-missing extraction lacks leave their matrices out)")


def run_verify(args):
    from generation.verify import verify
    from splits.assign import load_rules

    report = verify(args.dataset, load_rules(), features=args.features)
    print(report.format())
    if not report.ok:
        raise VpromError(f"{args.dataset}: verification failed ({report.failures()})")


@command("stats", "Table 1, split sizes and the perception-only ceiling, as a table "
         "(and --json)",
         "vprom stats build/dataset.h5 --json build/stats.json")
def add_stats(p):
    p.add_argument("dataset", type=Path)
    p.add_argument("--json", type=output_file, default=None, help="also write the figures as JSON")


def run_stats(args):
    from generation.stats import format_stats, stats, write_stats

    figures = stats(args.dataset)
    print(format_stats(figures))
    if args.json:
        write_stats(figures, args.json)


@command("show", "render one matrix and its candidates as a PNG",
         "vprom show build/dataset.h5 --id 0 --vg data/vg --out m0.png --answer")
def add_show(p):
    p.add_argument("dataset", type=Path)
    p.add_argument("--id", type=int, required=True)
    p.add_argument("--vg", type=Path, required=True, help="folder holding the VG images")
    p.add_argument("--out", type=output_file, required=True)
    p.add_argument("--answer", action="store_true", help="mark the answer, relation, elements")


def run_show(args):
    from vprom.show import show

    show(args.dataset, args.id, args.vg, args.out, answer=args.answer)


@command("export", "JSON lines, or the original release's one-folder-per-problem layout",
         "vprom export build/dataset.h5 --format jsonl --out build/dataset.jsonl")
def add_export(p):
    p.add_argument("dataset", type=Path)
    p.add_argument("--format", choices=("jsonl", "original"), required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--vg", type=Path, default=None, help="VG images (needed for 'original')")
    p.add_argument("--symlink", action="store_true",
                   help="original layout: link shared crops instead of copying them")


def run_export(args):
    from generation.export import export

    export(args.dataset, args.format, args.out, vg_dir=args.vg, symlink=args.symlink)


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
    p.add_argument("--out", type=Path, help="FEATS.h5 to write")
    p.add_argument("--batch-size", type=int, default=default(ExtractConfig, "batch_size"))
    p.add_argument("--workers", type=int, default=default(ExtractConfig, "workers"),
                   help="DataLoader workers")
    p.add_argument("--device", default=None, help="cuda, cuda:N or cpu (default: cuda if "
                   "available; under torchrun each process takes its LOCAL_RANK's GPU)")
    p.add_argument("--dtype", choices=STORED_DTYPES, default=default(ExtractConfig, "dtype"))
    p.add_argument("--no-resume", dest="resume", action="store_false",
                   help="start over even if a matching partial file exists")
    p.add_argument("--allow-missing", action="store_true",
                   help="finish even if some images are missing (they are reported)")
    p.add_argument("--compile", action="store_true", help="torch.compile the backbone (CUDA)")
    p.add_argument("--input-size", type=int, default=None,
                   help="crop side in pixels (default: the backbone's, 224)")
    p.add_argument("--chunk-batches", type=int, default=default(ExtractConfig, "chunk_batches"),
                   help="batches per resumable chunk (a killed run redoes at most one chunk)")
    p.add_argument("--list", action="store_true", help="list the backbones and exit")


def run_extract(args):
    from features.extract import extract

    options = _options(args)
    if options.pop("list"):
        from features.backbones import get_backbone, list_backbones

        for name in list_backbones():
            print(f"{name:15s} {get_backbone(name).description}")
        return
    absent = [flag for flag, key in (("DATASET", "dataset"), ("--vg", "vg"),
                                     ("--backbone", "backbone"), ("--out", "out"))
              if options[key] is None]
    if absent:
        raise VpromError(f"missing {', '.join(absent)}; e.g. {COMMANDS['extract'][1]}")
    print(extract(ExtractConfig(**options)))


@command("train", "train one baseline on one split",
         "vprom train build/dataset.h5 --features build/feats/resnet101.h5 --model rn "
         "--split neutral --aux --out runs/rn-neutral-aux")
def add_train(p):
    p.add_argument("dataset", type=Path)
    p.add_argument("--features", type=Path, required=True, help="FEATS.h5 from `vprom extract`")
    p.add_argument("--model", required=True, help="a registered model, e.g. rn, mlp-sum-6, gru")
    p.add_argument("--split", required=True, help="neutral, interpolation, ...")
    p.add_argument("--aux", action="store_true", help="add the relation/element-type loss")
    p.add_argument("--out", type=Path, required=True, help="run folder")
    p.add_argument("--epochs", type=int, default=default(TrainConfig, "epochs"))
    p.add_argument("--batch-size", type=int, default=default(TrainConfig, "batch_size"))
    p.add_argument("--optimizer", choices=OPTIMIZERS, default=default(TrainConfig, "optimizer"))
    p.add_argument("--lr", type=float, default=None, help="default: 1.0 AdaDelta, 1e-4 Adam")
    p.add_argument("--hidden", type=int, default=default(TrainConfig, "hidden"))
    p.add_argument("--patience", type=int, default=default(TrainConfig, "patience"),
                   help="epochs without val gain before stop")
    p.add_argument("--shuffle-context", action="store_true",
                   help="control: each matrix's context replaced by another matrix's")
    p.add_argument("--center-features", action="store_true",
                   help="subtract the training crops' mean feature, re-normalise (see README)")
    p.add_argument("--seed", type=int, default=default(TrainConfig, "seed"))
    p.add_argument("--device", default=None, help="cuda, cuda:N or cpu (default: cuda if "
                   "available; under torchrun each process takes its LOCAL_RANK's GPU)")
    p.add_argument("--resume", action="store_true", help="continue from the run's checkpoint")


def run_train(args):
    from baselines.train import train

    train(TrainConfig(**_options(args)))


@command("evaluate", "test accuracy with a 95% interval and per-relation/element-type breakdowns",
         "vprom evaluate runs/rn-neutral-aux")
def add_evaluate(p):
    # dest "run_dir": "run" is where the parser keeps each command's function
    p.add_argument("run_dir", type=Path, metavar="RUN", help="a run folder of `vprom train`")
    p.add_argument("--device", default=None, help="default: cuda if available")


def run_evaluate(args):
    from baselines.evaluate import evaluate, format_metrics

    print(format_metrics(evaluate(args.run_dir, device=args.device)))


@command("report", "Table 2 and models x splits tables (Markdown, CSV) and plots over runs",
         "vprom report runs/* --out reports/")
def add_report(p):
    p.add_argument("runs", type=Path, nargs="+")
    p.add_argument("--out", type=Path, required=True)


def run_report(args):
    from baselines.report import report

    print(report(args.runs, args.out))


@command("reproduce", "the paper's full grid (models x features x aux x splits) in one command",
         "vprom reproduce --vg data/vg --out repro/")
def add_reproduce(p):
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--vg", type=Path, help="an unpacked Visual Genome folder")
    src.add_argument("--synthetic", action="store_true", help="the synthetic corpus (smoke test)")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--scale", type=float, default=None,
                   help="fraction of Table 1 (default 1.0 on VG, 0.05 synthetic)")
    p.add_argument("--images", type=int, default=None, help="synthetic corpus size")
    p.add_argument("--backbones", default=default(ReproduceConfig, "backbones"))
    p.add_argument("--weights", default=None,
                   help="comma list, one per backbone (default: imagenet for torchvision ones)")
    p.add_argument("--models", default=default(ReproduceConfig, "models"))
    p.add_argument("--splits", default=default(ReproduceConfig, "splits"))
    p.add_argument("--epochs", type=int, default=default(ReproduceConfig, "epochs"))
    p.add_argument("--seed", type=int, default=default(ReproduceConfig, "seed"))
    p.add_argument("--device", default=None)
    p.add_argument("--input-size", type=int, default=None,
                   help="crop side for extraction (default: the backbone's, 224)")
    p.add_argument("--center-features", action="store_true",
                   help="train on centred features (as `vprom train --center-features`)")


def run_reproduce(args):
    from vprom.app.reproduce import reproduce

    reproduce(ReproduceConfig(**_options(args)))


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


#: What to tell a user whose command was interrupted.
RESUME_HINT = {
    "build": "run the same command again: finished stages are kept",
    "download": "run the same command again: downloads resume where they stopped",
    "extract": "run the same command again: finished chunks are kept",
    "train": "run the same command again to resume from the last finished epoch",
    "reproduce": "run the same command again: finished steps and runs are kept",
}


class Terminated(BaseException):
    """SIGTERM, handled like Ctrl-C: stop, clean up, exit with 143."""


def _terminate(signum, frame):
    raise Terminated()


def os_error_message(e: OSError) -> str:
    """One line for a file-system error: what, which path, and what to do."""
    path = e.filename if e.filename is not None else "a file"
    fixes = {
        errno.EACCES: "no permission; choose another path or fix its permissions",
        errno.EPERM: "not permitted; choose another path or fix its permissions",
        errno.EROFS: "the file system is read-only; choose another path",
        errno.ENOSPC: "no space left on the device; free some space or choose another path",
        errno.EDQUOT: "the disk quota is used up; free some space or choose another path",
        errno.EISDIR: "is a folder where a file is needed; choose another path",
        errno.ENOTDIR: "a file stands where a folder is needed; choose another path",
        errno.EEXIST: "already exists in the way; move it or choose another path",
        errno.ENOENT: "no such file or folder; check the path",
    }
    fix = fixes.get(e.errno, "check the path and try again")
    return f"{path}: {e.strerror or type(e).__name__} ({fix})"


def main(argv: list[str] | None = None) -> int:
    """Run one command; errors become one line on stderr and a non-zero exit status.

    `VPROM_DEBUG=1` lets every error through with its traceback.
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    debug = os.environ.get("VPROM_DEBUG", "") not in ("", "0")
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        args.run(args)
    except BrokenPipeError:
        # stdout was closed (`vprom evaluate RUN | head -1`): stop quietly, and keep Python's
        # final flush from failing on the same pipe.
        with contextlib.suppress(OSError, ValueError):  # stdout may not be a real file
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except (KeyboardInterrupt, Terminated) as e:
        if debug:
            raise
        how = RESUME_HINT.get(args.command, "run the same command again (it starts over)")
        print(f"vprom {args.command}: interrupted; no partial output was left looking "
              f"finished; {how}", file=sys.stderr)
        return 143 if isinstance(e, Terminated) else 130
    except (VpromError, OSError) as e:
        if debug:
            raise
        text = os_error_message(e) if isinstance(e, OSError) else str(e)
        print(f"vprom {args.command}: error: {text}", file=sys.stderr)
        return 1
    finally:
        signal.signal(signal.SIGTERM, previous)
    return 0


if __name__ == "__main__":
    sys.exit(main())
