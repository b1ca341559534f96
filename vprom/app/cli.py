"""The `vprom` command line: parses arguments, calls one `vprom.app.api` function, and turns
every failure into one line and an exit status.

A `Command`'s arguments are its API function's parameters (`vprom.app.options`), so an
option and its default are written once, in the API. A `VpromError` or `OSError` (with its
path and the fix) exits 1; a closed stdout exits 141 quietly; Ctrl-C 130 and SIGTERM 143, with
how to resume. `VPROM_DEBUG=1` shows tracebacks. Python swallows what a finalizer raises, and a
signal can land there, so interrupts are also recorded (SIGTERM handler,
`sys.unraisablehook`): a command that goes on still exits 143/130.
"""

from __future__ import annotations

import os
import signal
import threading


def _interrupted_while_starting(signum, frame):
    """Ctrl-C or SIGTERM while the stages are imported: one line, not an import's traceback."""
    by = "Ctrl-C" if signum == signal.SIGINT else "SIGTERM"
    os.write(2, f"vprom: interrupted ({by}) while starting; nothing was done\n".encode())
    os._exit(128 + signum)


_STARTING = {sig: signal.signal(sig, _interrupted_while_starting)
             for sig in (signal.SIGINT, signal.SIGTERM)
             if threading.current_thread() is threading.main_thread()}

import argparse  # after the guard above
import contextlib
import errno
import functools
import importlib
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from vprom import __version__
from vprom.app import api
from vprom.app.options import (
    OUT_FILE,
    OUT_FOLDER,
    Done,
    ListBackbones,
    add_parameters,
    duration,
    options_of,
    parameter_help,
    shard,
    size,
)
from vprom.baselines.config import LR_SCHEDULES, OPTIMIZERS
from vprom.claim import waiting
from vprom.errors import VpromError, in_chain
from vprom.features import config as extract_config
from vprom.features.crop_store import size_note
from vprom.generation.export import EXAMPLES as EXPORT_EXAMPLES
from vprom.generation.export import FORMATS
from vprom.generation.export.npz import STYLES
from vprom.generation.export.savir import HELP as SAVIR_HELP
from vprom.generation.export.vlm import LAYOUTS
from vprom.tables import SPLIT_PARTS

for _sig, _handler in _STARTING.items():
    signal.signal(_sig, _handler)


@dataclass(frozen=True)
class Command:
    """`vprom NAME`: calls `function` with the parsed arguments and shows its result."""

    name: str
    function: Callable
    example: str
    arguments: dict[str, dict] = field(default_factory=dict)  #: argparse settings by parameter
    one_of: tuple[str, ...] = ()  #: parameters of which exactly one must be given
    show: Callable[[Any, dict], None] | None = lambda result, options: print(result)

    @property
    def summary(self) -> str:
        return self.function.__doc__.strip().splitlines()[0].rstrip(".")


# what a command prints of its result (formatters imported when used: `--help` stays quick)
def _verdict(report, options):
    print(report.format())
    if not report.ok:
        raise VpromError(f"{options['dataset']}: verification failed ({report.failures()})")


def _printed(module: str, formatter: str) -> Callable[[Any, dict], None]:
    """Print the result through `module.formatter`; a tuple result is its arguments."""

    def show(result, options):
        arguments = result if isinstance(result, tuple) else (result,)
        print(getattr(importlib.import_module(module), formatter)(*arguments))

    return show


def _human_metrics(metrics, options):
    _printed("vprom.app.human.study", "format_human_metrics")(metrics, options)
    print(f"written to {options['study'] / 'metrics.json'}")


SOURCE = ("vg", "synthetic")

#: every command, in the order `vprom --help` lists them
COMMANDS = {c.name: c for c in (
    Command("download", api.download, "vprom download --out data/vg",
            arguments={"out": OUT_FOLDER, "expected": {"metavar": "FILE"},
                       "deadline": {"type": duration, "metavar": "TIME"},
                       "reserve": {"type": size, "metavar": "SIZE"}}),
    Command("synth", api.synth, "vprom synth --out data/synth --images 2000 --seed 0",
            arguments={"out": OUT_FOLDER}),
    Command("mine", api.mine, "vprom mine --vg data/vg --out build/pools.h5",
            arguments={"out": OUT_FILE}, show=lambda report, options: print(report.summary())),
    Command("generate", api.generate,
            "vprom generate build/pools.h5 --out build/dataset.h5 --scale 0.1 --seed 0",
            arguments={"out": OUT_FILE, "shard": {"type": shard, "metavar": "K/N"},
                       "legacy_counts": {"flag": "--legacy-count-candidates"}}),
    Command("merge", api.merge,
            "vprom merge build/shard-0.h5 build/shard-1.h5 --out build/dataset.h5",
            arguments={"out": OUT_FILE}),
    Command("build", api.build, "vprom build --synthetic --out build/demo",
            arguments={"out": OUT_FOLDER}, one_of=SOURCE, show=None),
    Command("verify", api.verify, "vprom verify build/dataset.h5", show=_verdict),
    Command("stats", api.stats, "vprom stats build/dataset.h5 --json build/stats.json",
            arguments={"json": OUT_FILE},
            show=_printed("vprom.generation.verify.stats", "format_stats")),
    Command("show", api.show_matrix,
            "vprom show build/dataset.h5 --id 0 --vg data/vg --out m0.png --answer",
            arguments={"matrix_id": {"flag": "--id"}, "out": OUT_FILE}),
    Command("export", api.export,
            "\n".join([("vprom export build/dataset.h5 --format original --vg data/vg "
                        "--out build/release"), *EXPORT_EXAMPLES]),
            arguments={"format": {"choices": (*FORMATS, "savir-t"), "help": "; ".join(
                           f"{k}: {v}" for k, v in {**FORMATS, "savir-t": SAVIR_HELP}.items())},
                       "style": {"choices": STYLES}, "part": {"choices": SPLIT_PARTS},
                       "layout": {"choices": LAYOUTS}}),
    Command("extract", api.extract,
            "vprom extract build/dataset.h5 --vg data/vg --backbone resnet101 --weights "
            "imagenet --out build/feats/resnet101.h5",
            arguments={"out": OUT_FILE, "vg": {"required": False},  # labels need no images
                       "workers": {"type": int},  # 0: decode in this process
                       "dtype": {"choices": extract_config.STORED_DTYPES},
                       "decode": {"choices": extract_config.DECODERS},
                       "region": {"choices": extract_config.REGIONS},
                       "pool": {"choices": extract_config.POOLS},
                       "compression": {"choices": extract_config.COMPRESSIONS},
                       "list": {"action": ListBackbones, "nargs": 0, "default": argparse.SUPPRESS,
                                "help": "list the backbones and exit"}}),
    Command("perceive", api.perceive,
            "vprom perceive build/dataset.h5 --vg data/vg --split neutral --backbone resnet18 "
            "--out build/perceive/resnet18.pt",
            one_of=("vg", "crops"), arguments={"out": OUT_FILE}),
    Command("train", api.train,
            "vprom train build/dataset.h5 --features build/feats/resnet101.h5 --model rn "
            "--split neutral --aux --out runs/rn-neutral-aux",
            one_of=("features", "maps", "crops"),
            arguments={"out": OUT_FOLDER, "optimizer": {"choices": OPTIMIZERS},
                       "lr_schedule": {"choices": LR_SCHEDULES}}, show=None),
    Command("evaluate", api.evaluate, "vprom evaluate runs/rn-neutral-aux",
            show=_printed("vprom.baselines.evaluate", "format_metrics")),
    Command("report", api.report, "vprom report runs/* --out reports/",
            arguments={"out": OUT_FOLDER}),
    Command("reproduce", api.reproduce, "vprom reproduce --vg data/vg --out repro/",
            arguments={"out": OUT_FOLDER}, one_of=SOURCE, show=None),
    Command("crops", api.crops,
            "vprom crops build/dataset.h5 --vg data/vg --size 224 --out build/crops-224.h5",
            arguments={"size": {"help": f"{parameter_help(api.crops)['size']}: {size_note()}"},
                       "out": OUT_FILE, "compression": {"choices": extract_config.COMPRESSIONS}}),
    Command("score", api.score,
            "vprom score build/dataset.h5 mymodel/predictions.csv --split neutral",
            arguments={"out": OUT_FOLDER}, show=_printed("vprom.app.score", "format_scored")),
    Command("human-study", api.human_study,
            "vprom human-study build/dataset.h5 --vg data/vg --split neutral --n 60 "
            "--out study/",
            arguments={"out": OUT_FOLDER, "part": {"choices": ("train", "val", "test")}}),
    Command("human-serve", api.human_serve, "vprom human-serve study/ --port 8000", show=None),
    Command("human-score", api.human_score, "vprom human-score study/", show=_human_metrics),
)}


def build_parser() -> argparse.ArgumentParser:
    lines = [f"  {c.name:11s} {c.summary}\n              e.g. {c.example.splitlines()[0]}"
             for c in COMMANDS.values()]
    parser = argparse.ArgumentParser(
        prog="vprom",
        description="Build the V-PROM benchmark from Visual Genome and run its baselines.",
        epilog="commands:\n" + "\n".join(lines) + "\n\nQuick start: vprom build --synthetic "
               "--out build/demo",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"vprom {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND",
                                help="one of the commands below; `vprom COMMAND --help` "
                                     "tells more")
    for c in COMMANDS.values():
        p = sub.add_parser(c.name, description=f"{c.summary}.",
                           epilog="example:\n  " + c.example.replace("\n", "\n  "),
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        add_parameters(p, c)
        if c.name == "evaluate" or any(o in p._option_string_actions  # evaluate: into RUN
                                       for o in ("--out", "--json")):
            p.add_argument("--wait", action="store_true",
                           help="if another vprom run is writing the same output, wait for it "
                                "to finish instead of refusing at once")
        p.set_defaults(_command=c)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one `vprom` command."""
    return run_command(build_parser, argv)


#: how to resume an interrupted command (the others start over)
RESUME_HINT = {
    "build": "run the same command again: finished stages are kept",
    "download": "run the same command again: downloads resume where they stopped",
    "extract": "run the same command again: finished chunks are kept",
    "train": "run the same command again: it resumes after the last finished epoch",
    "reproduce": "run the same command again: finished steps and runs are kept",
}


class Terminated(BaseException):
    """SIGTERM, handled like Ctrl-C: stop, clean up, exit with 143."""


INTERRUPTS = (KeyboardInterrupt, Terminated)
#: interrupts received during the running command, kept in case a finalizer swallowed them
_received: list[BaseException] = []


def _terminate(signum, frame):
    _received.append(Terminated())
    raise _received[-1]


def _keep_swallowed_interrupts(previous_hook, unraisable) -> None:
    """sys.unraisablehook: an interrupt swallowed by a finalizer is kept, not printed."""
    if isinstance(unraisable.exc_value, INTERRUPTS):
        _received.append(unraisable.exc_value)
    else:
        previous_hook(unraisable)


def os_error_message(e: OSError, near: object = None) -> str:
    """One line for a file-system error: what, which path, what to do; one that names no
    file (HDF5's) is told as met while working on `near`, the command's output or input."""
    path = e.filename if e.filename is not None else f"{near or 'vprom'} (while working on it)"
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
        errno.EMFILE: "too many open files; raise the limit (ulimit -n 4096) and run it again",
        errno.ENFILE: "the system's open-file table is full; close other programs and run it "
                      "again",
    }
    fix = fixes.get(e.errno, "check the path and try again")
    return f"{path}: {e.strerror or type(e).__name__} ({fix})"


def run_command(build_parser, argv: list[str] | None = None) -> int:
    """Parse `argv`, call the command's function and show its result (see the module doc)."""
    _received.clear()
    previous, previous_hook = signal.signal(signal.SIGTERM, _terminate), sys.unraisablehook
    sys.unraisablehook = functools.partial(_keep_swallowed_interrupts, previous_hook)
    try:
        return _run(build_parser, argv)
    finally:
        signal.signal(signal.SIGTERM, previous)
        sys.unraisablehook = previous_hook


def _run(build_parser, argv: list[str] | None) -> int:
    debug = os.environ.get("VPROM_DEBUG", "") not in ("", "0")
    args = options = None
    try:
        parser = build_parser()
        args = parser.parse_args(argv)  # `--help`, `--list` and bad arguments exit here
        if args.command is None:
            parser.print_help()
            return 2
        command, options = args._command, options_of(args)
        with waiting(getattr(args, "wait", False)):
            result = command.function(**options)
        if _received:  # an interrupt that a finalizer swallowed: the command did not stop
            raise _received[0]
        if command.show is not None:
            command.show(result, options)
    except Done:
        return 0
    except BaseException as e:
        if isinstance(e, SystemExit):
            raise
        interrupt = in_chain(e, INTERRUPTS) or (_received[0] if _received else None)
        if interrupt is None and isinstance(e, BrokenPipeError):
            # `vprom evaluate RUN | head -1`: keep Python's final flush off the closed pipe
            with contextlib.suppress(OSError, ValueError):  # stdout may not be a real file
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 141
        if debug or (interrupt is None and not isinstance(e, (VpromError, OSError))):
            raise
        if interrupt is None:
            near = next((options[k] for k in ("out", "json", "dataset", "run")
                         if (options or {}).get(k) is not None), None)
            text = os_error_message(e, near) if isinstance(e, OSError) else str(e)
            print(f"vprom {args.command}: error: {text}", file=sys.stderr)
            return 1
        by = "SIGTERM" if isinstance(interrupt, Terminated) else "Ctrl-C"
        if options is None:
            print(f"vprom: interrupted ({by}) while starting; nothing was done", file=sys.stderr)
        else:
            how = RESUME_HINT.get(args.command, "run the same command again (it starts over)")
            print(f"vprom {args.command}: interrupted ({by}); no partial output was left "
                  f"looking finished; {how}", file=sys.stderr)
        return 143 if isinstance(interrupt, Terminated) else 130
    return 0

