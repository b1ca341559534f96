"""The commands of a human study: write it, serve it, score it (`vprom.app.human`)."""

from __future__ import annotations

from pathlib import Path

from vprom.app.commands.base import Command
from vprom.app.human.study import DEFAULT_SIZE, make_study
from vprom.app.options import add_out, default, positive


def add_human_study(p):
    p.add_argument("dataset", type=Path, help="DATASET.h5")
    p.add_argument("--vg", type=Path, required=True, help="Visual Genome folder (its images)")
    p.add_argument("--split", default=default(make_study, "split"),
                   help=f"the split whose problems are sampled (default: "
                        f"{default(make_study, 'split')})")
    p.add_argument("--part", default=default(make_study, "part"),
                   choices=("train", "val", "test"),
                   help=f"which part of the split (default: {default(make_study, 'part')})")
    p.add_argument("--n", type=positive(int), default=default(make_study, "n"),
                   help="problems in the study, even across relations and element types "
                        f"(default: {default(make_study, 'n')})")
    p.add_argument("--seed", type=int, default=default(make_study, "seed"),
                   help="same data set, options and seed: the same study")
    p.add_argument("--size", type=positive(int), default=DEFAULT_SIZE,
                   help=f"panel side in pixels (default: {DEFAULT_SIZE})")
    add_out(p, "study folder to write", folder=True)


def run_human_study(args):
    print(make_study(args.dataset, args.vg, args.out, split=args.split, n=args.n,
                     part=args.part, seed=args.seed, size=args.size))


def add_human_serve(p):
    p.add_argument("study", type=Path, help="a folder written by `vprom human-study`")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default: 127.0.0.1, this machine only; "
                        "0.0.0.0 for every interface)")
    p.add_argument("--port", type=int, default=8000, help="(default: 8000; 0: any free port)")


def run_human_serve(args):
    from vprom.app.human.server import serve

    serve(args.study, args.host, args.port)


def add_human_score(p):
    p.add_argument("study", type=Path, help="a folder written by `vprom human-study`")
    p.add_argument("responses", type=Path, nargs="*",
                   help="JSON-lines response files (default: STUDY/responses/*.jsonl)")


def run_human_score(args):
    from vprom.app.human.scoring import format_human_metrics, score_study

    print(format_human_metrics(score_study(args.study, args.responses)))
    print(f"written to {args.study / 'metrics.json'}")


HUMAN_STUDY = Command(
    "human-study", "sample V-PROM problems into a self-contained browser study folder",
    "vprom human-study build/dataset.h5 --vg data/vg --split neutral --n 60 --out study/",
    add_human_study, run_human_study)

HUMAN_SERVE = Command(
    "human-serve", "serve a study on this machine and record each answer (JSON lines)",
    "vprom human-serve study/ --port 8000",
    add_human_serve, run_human_serve)

HUMAN_SCORE = Command(
    "human-score", "human accuracy and skips by relation and element type, beside the paper's",
    "vprom human-score study/",
    add_human_score, run_human_score)

COMMANDS = (HUMAN_STUDY, HUMAN_SERVE, HUMAN_SCORE)
