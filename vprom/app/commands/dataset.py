"""The commands that make, check, show and export a DATASET.h5."""

from __future__ import annotations

import argparse
from pathlib import Path

from vprom.app import api
from vprom.app.build import SYNTHETIC_IMAGES, SYNTHETIC_SCALE, VG_SCALE, build
from vprom.app.commands.base import Command
from vprom.app.options import (add_out, add_workers, default, output_file, output_folder,
                               positive, shard)
from vprom.errors import VpromError
from vprom.generation.generate import generate
from vprom.processes import usable_cores

# `build` and `reproduce` choose these defaults by source, so their options default to None.
SCALE_HELP = (f"fraction of Table 1's size (default {VG_SCALE} on VG, {SYNTHETIC_SCALE} "
              "synthetic)")
SYNTHETIC_SIZE_HELP = f"synthetic corpus size (default {SYNTHETIC_IMAGES:,} images)"


def add_generate(p):
    p.add_argument("pools", type=Path, help="POOLS.h5 from `vprom mine`")
    add_out(p, "DATASET.h5 to write")
    p.add_argument("--scale", type=positive(float), default=default(generate, "scale"),
                   help="fraction of Table 1's 235,000")
    p.add_argument("--seed", type=int, default=default(generate, "seed"),
                   help="same pools and seed, same data set")
    p.add_argument("--shard", type=shard, default=None, metavar="K/N",
                   help="K/N: only matrices i with i %% N == K (rows equal the single run's)")
    add_workers(p, "drawing matrices", generate)
    p.add_argument("--legacy-count-candidates", action="store_true",
                   help="draw count candidates the old way, whose left-out values give the "
                        "answer away: only to reproduce that flaw (docs/soundness.md)")


def run_generate(args):
    print(api.generate(args.pools, args.out, scale=args.scale, seed=args.seed, shard=args.shard,
                       legacy_counts=args.legacy_count_candidates, workers=args.workers))


GENERATE = Command(
    "generate", "sample matrices from the pools, prove each, assign every split",
    "vprom generate build/pools.h5 --out build/dataset.h5 --scale 0.1 --seed 0",
    add_generate, run_generate)


def add_merge(p):
    p.add_argument("shards", type=Path, nargs="+", help="the N shard files, any order")
    add_out(p, "DATASET.h5 to write")


def run_merge(args):
    print(api.merge(args.shards, args.out))


MERGE = Command(
    "merge", "join the DATASET.h5 files of all `generate --shard K/N` runs into one",
    "vprom merge build/shard-0.h5 build/shard-1.h5 --out build/dataset.h5",
    add_merge, run_merge)


def add_build(p):
    add_out(p, "build folder (stages already done there with the same settings are kept)",
            folder=True)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--vg", type=Path, help="an unpacked Visual Genome folder")
    src.add_argument("--synthetic", action="store_true", help="the built-in synthetic corpus")
    p.add_argument("--images", type=positive(int), default=default(build, "images"),
                   help=SYNTHETIC_SIZE_HELP)
    p.add_argument("--scale", type=positive(float), default=default(build, "scale"),
                   help=SCALE_HELP)
    p.add_argument("--seed", type=int, default=default(build, "seed"),
                   help="seed of the synthetic corpus and of the matrices")
    add_workers(p, "of every stage")


def run_build(args):
    api.build(args.out, vg=args.vg, synthetic=args.synthetic, images=args.images,
              scale=args.scale, seed=args.seed, workers=args.workers or usable_cores())


BUILD = Command(
    "build", "one shot: (synth or VG) -> mine -> generate -> verify -> stats",
    "vprom build --synthetic --out build/demo",
    add_build, run_build)


def add_verify(p):
    p.add_argument("dataset", type=Path, help="DATASET.h5 to check")
    p.add_argument("--pools", type=Path, default=None,
                   help="also check that the data set was generated from this POOLS.h5 (in a "
                        "build folder its pools.h5 and VG files are checked anyway)")
    p.add_argument("--features", type=Path, default=None,
                   help="also run the context-blind probes on these features (crops an "
                        "--allow-missing extraction lacks leave their matrices out)")
    add_workers(p, "sharing the checks")


def run_verify(args):
    from vprom.app.build import stale_stages

    report = api.verify(args.dataset, features=args.features,
                        workers=args.workers or usable_cores())
    print(report.format())
    if not report.ok:
        raise VpromError(f"{args.dataset}: verification failed ({report.failures()})")
    problems = stale_stages(args.dataset, args.pools)
    if problems:
        raise VpromError(f"{args.dataset}: verification failed (inputs: {'; '.join(problems)})")


VERIFY = Command(
    "verify", "integrity, solver (implied labels too), splits, leakage, held-out labels, "
    "per-type bias probes and the perception-only ceiling (non-zero exit on failure)",
    "vprom verify build/dataset.h5",
    add_verify, run_verify)


def add_stats(p):
    p.add_argument("dataset", type=Path, help="DATASET.h5")
    p.add_argument("--json", type=output_file, default=None,
                   help="also write the figures as JSON")


def run_stats(args):
    from vprom.generation.verify.stats import format_stats, write_stats
    from vprom.claim import claim

    if args.json is None:
        print(format_stats(api.stats(args.dataset)))
        return
    with claim(args.json, ("stats",), inputs=(args.dataset,)):
        figures = api.stats(args.dataset)
        print(format_stats(figures))
        write_stats(figures, args.json)


STATS = Command(
    "stats", "Table 1, split sizes and the perception-only ceiling, as a table "
    "(and --json)",
    "vprom stats build/dataset.h5 --json build/stats.json",
    add_stats, run_stats)


def add_show(p):
    p.add_argument("dataset", type=Path, help="DATASET.h5")
    p.add_argument("--id", type=int, required=True, help="matrix id")
    p.add_argument("--vg", type=Path, required=True, help="folder holding the VG images")
    add_out(p, "PNG to write")
    p.add_argument("--answer", action="store_true", help="mark the answer, relation, elements")


def run_show(args):
    from vprom.show import show

    print(show(args.dataset, args.id, args.vg, args.out, answer=args.answer))


SHOW = Command(
    "show", "render one matrix and its candidates as a PNG",
    "vprom show build/dataset.h5 --id 0 --vg data/vg --out m0.png --answer",
    add_show, run_show)


def add_export(p):
    from vprom.generation.export import EXAMPLES, FORMATS
    from vprom.generation.export.npz import DEFAULT_SIZE
    from vprom.generation.export.pgm import STYLES
    from vprom.generation.export.savir import HELP as SAVIR_HELP

    p.epilog += "".join(f"\n  {e}" for e in EXAMPLES) + (
        "\n\nClients of the original release read it from the folder holding V-PROM/ "
        "(cd build/release\nbefore starting one). Layouts and formats: docs/release-layout.md.")
    p.add_argument("dataset", type=Path, help="DATASET.h5")
    formats = {**FORMATS, "savir-t": SAVIR_HELP}
    p.add_argument("--format", choices=tuple(formats), required=True,
                   help="; ".join(f"{k}: {v}" for k, v in formats.items()))
    p.add_argument("--out", type=Path, required=True,
                   help="a file for jsonl, a folder for original and npz")
    p.add_argument("--vg", type=Path, default=None,
                   help="Visual Genome folder (VG_100K/, VG_100K_2/): original and npz")
    p.add_argument("--features", type=Path, default=None,
                   help="savir-t: the resnet101 maps file (`vprom extract --pool none`)")
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
    p.add_argument("--style", choices=STYLES, default=STYLES[0],
                   help="npz: pgm (DeepMind PGM's files: grayscale (16,S,S) image, 12-slot "
                        "meta_target, for SRAN/WReN/RAVEN loaders) or color (RGB panels)")


def run_export(args):
    check = output_file if args.format == "jsonl" else output_folder
    try:  # before any work: --out must be writable as what the format writes
        out = check(str(args.out))
    except argparse.ArgumentTypeError as e:
        raise VpromError(f"--out {e}") from None
    if args.format == "savir-t":
        from vprom.generation.export.savir import export_savir, summary

        if args.features is None:
            raise VpromError("--format savir-t reads the panels' maps: pass --features "
                             "MAPS.h5 (from `vprom extract --backbone resnet101 --pool none`)")
        print(summary(out, export_savir(args.dataset, args.features, out)))
        return
    verify_text = None
    if args.format == "hf":  # the card quotes the verification; unsound data is not shared
        report = api.verify(args.dataset)
        if not report.ok:
            raise VpromError(f"{args.dataset}: verification failed ({report.failures()}); "
                             "an hf export is for sharing, so it needs a verified data set")
        verify_text = report.format()
    print(api.export(args.dataset, args.format, out, vg=args.vg, copy=args.copy,
                     split=args.split, size=args.size, style=args.style,
                     verify_text=verify_text))


EXPORT = Command(
    "export", "the data set as JSON lines, the original release's layout, or npz files",
    "vprom export build/dataset.h5 --format original --vg data/vg --out build/release",
    add_export, run_export)


COMMANDS = (GENERATE, MERGE, BUILD, VERIFY, STATS, SHOW, EXPORT,)
