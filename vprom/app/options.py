"""What the command line takes from its users, checked before any work starts.

Argparse types that refuse a bad value at parse time with a one-line message (`output_file`,
`output_folder`, `positive`, `shard`, `duration`), `default`, which reads an option's default
from the function or config dataclass that owns it (so no default is written twice), and
`options_of`, the parsed options as keyword arguments; `add_out` and `add_workers`, which
declare the two options most commands share; `add_fields`, which declares the options of a
config dataclass from its fields (`vprom.fields.option`).
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import math
import typing
from pathlib import Path

from vprom.mining.download import parse_duration
from vprom.errors import VpromError
from vprom.claim import check_output


def default(owner, name: str):
    """The default of parameter `name` of a function or config dataclass."""
    return inspect.signature(owner).parameters[name].default


def options_of(args: argparse.Namespace) -> dict:
    """The parsed options as keyword arguments for a job's config dataclass."""
    return {k: v for k, v in vars(args).items() if k not in ("command", "run", "wait")}


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


def add_out(parser: argparse.ArgumentParser, what: str, folder: bool = False) -> None:
    """The required `--out`, `what` it is; checked before any work starts."""
    parser.add_argument("--out", type=output_folder if folder else output_file, required=True,
                        help=what)


def add_workers(parser: argparse.ArgumentParser, does: str, owner=None) -> None:
    """`--workers N`: processes that do `does`. The default is the `workers` parameter of
    `owner` (a function or config dataclass), or without one, one per CPU core."""
    value = None if owner is None else default(owner, "workers")
    shown = "one per CPU core" if value is None else value
    parser.add_argument("--workers", type=positive(int), default=value,
                        help=f"processes {does} (default: {shown}); the output is the same "
                             "for any number")


def shard(text: str) -> tuple[int, int]:
    """K/N: shard K of N (argparse type)."""
    try:
        k, n = (int(v) for v in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"shard must look like K/N (e.g. 0/4), got {text!r}")
    if not 0 <= k < n:
        raise argparse.ArgumentTypeError(f"shard {text}: need 0 <= K < N")
    return k, n


def duration(text: str) -> float:
    """A time such as 90, 90m or 8h, in seconds (argparse type)."""
    try:
        return parse_duration(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


# ---------------------------------------------------------------- options from a config
def add_fields(parser: argparse.ArgumentParser, config: type, names=None, *,
               optional: bool = False) -> None:
    """Add the fields of dataclass `config` declared with `vprom.fields.option` (or only
    `names`) to `parser`: flag, default, help, choices and type all come from the field, so
    each is written once. `optional`: no argument is required (for a command whose other
    mode, such as `extract --list`, needs none)."""
    hints = typing.get_type_hints(config)
    for field in dataclasses.fields(config):
        if "help" not in field.metadata or (names is not None and field.name not in names):
            continue
        parser.add_argument(*_flags(field), **_argument(field, hints[field.name], optional))


def _flags(field: dataclasses.Field) -> list[str]:
    if field.metadata["positional"]:
        return [field.name]
    return [field.metadata["flag"] or "--" + field.name.replace("_", "-")]


def _argument(field: dataclasses.Field, hint, optional: bool) -> dict:
    meta, required = field.metadata, field.default is dataclasses.MISSING
    out = {"help": meta["help"]}
    if not meta["positional"]:
        out["dest"] = field.name
    if hint is bool:  # a switch: --name turns on a False default, --no-name turns off a True one
        out["action"] = "store_false" if field.default else "store_true"
        return out
    kind = next((a for a in typing.get_args(hint) if a is not type(None)), hint)
    out["type"] = {"file": output_file, "folder": output_folder}.get(meta["output"], kind)
    out["default"] = None if required else field.default
    if required and meta["positional"]:
        out["nargs"] = "?" if optional else None
    elif not meta["positional"]:
        out["required"] = required and not optional
    for key in ("choices", "metavar"):
        if meta[key] is not None:
            out[key] = meta[key]
    return out
