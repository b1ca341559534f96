"""What the command line takes from its users, checked before any work starts.

Argparse types that refuse a bad value at parse time with a one-line message (`output_file`,
`output_folder`, `positive`, `shard`, `duration`), `default`, which reads an option's default
from the function or config dataclass that owns it (so no default is written twice), and
`options_of`, the parsed options as keyword arguments.
"""

from __future__ import annotations

import argparse
import inspect
import math
from pathlib import Path

from vprom.mining.download import parse_duration
from vprom.errors import VpromError
from vprom.io import check_output


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
