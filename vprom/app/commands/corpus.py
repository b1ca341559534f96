"""The commands that bring Visual Genome (or the synthetic corpus) in and mine it into pools."""

from __future__ import annotations

import argparse
from pathlib import Path

from vprom.app import api
from vprom.app.commands.base import Command
from vprom.app.options import add_out, add_workers, default, duration, positive
from vprom.mining.download import download, load_expected
from vprom.mining.download.space import parse_size
from vprom.mining.pools import mine
from vprom.mining.synth import write_corpus


def add_download(p):
    add_out(p, "folder for the VG files", folder=True)
    p.add_argument("--base-url", default=None, help="mirror to fetch from instead of VG's own")
    p.add_argument("--no-images", action="store_true", help="annotations only (~1 GB zipped)")
    p.add_argument("--expected", type=Path, default=None, metavar="FILE",
                   help="sizes and sha256 of the files a mirror serves (JSON shaped like "
                        "mining/data/vg_files.json); replaces the pinned official ones")
    p.add_argument("--deadline", type=duration, default=default(download, "deadline"),
                   metavar="TIME", help="give up on one file after this long (connecting, headers "
                                        "and retries included), keeping its part for a rerun "
                                        "to resume (seconds, or e.g. 90m, 8h; "
                                        f"default {default(download, 'deadline') / 3600:g} h)")
    p.add_argument("--reserve", type=_size, default=default(download, "reserve"),
                   metavar="SIZE", help="free space to leave on the disk, never written into "
                                        "(bytes, or e.g. 500M, 2G; default "
                                        f"{default(download, 'reserve') >> 30} GiB)")


def _size(text: str) -> int:
    try:
        return parse_size(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def run_download(args):
    expected = None if args.expected is None else load_expected(args.expected)
    print(download(args.out, base_url=args.base_url, images=not args.no_images,
                   expected=expected, deadline=args.deadline, reserve=args.reserve))


DOWNLOAD = Command(
    "download", "fetch Visual Genome annotations (and images): resumable, verified",
    "vprom download --out data/vg",
    add_download, run_download)


def add_synth(p):
    add_out(p, "folder to write (an existing one only if it holds a synthetic corpus)",
            folder=True)
    p.add_argument("--images", type=positive(int), default=default(write_corpus, "images"),
                   help="number of images")
    p.add_argument("--seed", type=int, default=default(write_corpus, "seed"),
                   help="same seed and size, same bytes")
    add_workers(p, "rendering the images", write_corpus)


def run_synth(args):
    print(api.synth(args.out, images=args.images, seed=args.seed, workers=args.workers))


SYNTH = Command(
    "synth", "write the built-in synthetic corpus in Visual Genome's layout and schema",
    "vprom synth --out data/synth --images 2000 --seed 0",
    add_synth, run_synth)


def add_mine(p):
    p.add_argument("--vg", type=Path, required=True, help="folder with VG's JSON (or .json.zip)")
    add_out(p, "POOLS.h5 to write (its reports are written beside it)")
    p.add_argument("--min-side", type=int, default=default(mine, "min_side"),
                   help="drop regions smaller (px)")
    add_workers(p, "reading the JSON (both passes share them)", mine)


def run_mine(args):
    report = api.mine(args.vg, args.out, min_side=args.min_side, workers=args.workers)
    print(report.summary())


MINE = Command(
    "mine", "stream Visual Genome into the four element pools (POOLS.h5 + report)",
    "vprom mine --vg data/vg --out build/pools.h5",
    add_mine, run_mine)


COMMANDS = (DOWNLOAD, SYNTH, MINE,)
