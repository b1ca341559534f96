"""A command's arguments, read from its API function's signature and docstring.

Each parameter becomes an argument: flag from its name (`batch_size` -> `--batch-size`),
default from the signature, type from the annotation, help from the docstring's `Args:`.
A bool is a switch (`--no-name` when it defaults to True); a list takes one or more values,
a tuple none or more. Checked types, choices and other flags are the command's `arguments`.
"""

from __future__ import annotations

import argparse
import inspect
import math
import re
import types
import typing

from vprom.claim import check_output
from vprom.errors import VpromError
from vprom.mining.download import parse_duration
from vprom.mining.download.archives import parse_size

#: inputs a command takes without a flag (when its function takes them before `*`)
POSITIONAL = ("dataset", "pools", "shards", "run", "runs", "study", "predictions", "responses")
#: options that take a finite number above 0
POSITIVE = ("workers", "images", "scale", "size", "limit", "n", "chunk_crops")


def parameter_help(function) -> dict[str, str]:
    """The Google-style `Args:` of `function`'s docstring as {parameter: text} (inspect has
    no reader for it; a docstring-parser dependency for a dozen lines is not worth it)."""
    helps, name = {}, None
    lines = inspect.getdoc(function).splitlines()
    for line in lines[lines.index("Args:") + 1:] if "Args:" in lines else []:
        entry = re.match(r"    (\w+): (.*)", line)
        if entry:
            name, helps[entry[1]] = entry[1], entry[2]
        elif line.startswith("        ") and name:
            helps[name] += " " + line.strip()
        else:
            break
    return helps


def add_parameters(parser: argparse.ArgumentParser, command) -> None:
    """The arguments of `command` (a `vprom.app.cli.Command`), in its function's order."""
    helps = parameter_help(command.function)
    hints = typing.get_type_hints(command.function)
    group = (parser.add_mutually_exclusive_group(required=True) if command.one_of else None)
    parameters = inspect.signature(command.function).parameters
    for name, parameter in parameters.items():
        settings = _settings(name, parameter, hints[name], helps[name], command)
        flags = settings.pop("flags")
        (group if name in command.one_of else parser).add_argument(*flags, **settings)
    for name, settings in command.arguments.items():  # those the function does not take
        if name not in parameters:
            parser.add_argument("--" + name, **settings)


def _settings(name: str, parameter: inspect.Parameter, hint, help: str, command) -> dict:
    settings = dict(command.arguments.get(name, {}))
    default, required = parameter.default, parameter.default is inspect.Parameter.empty
    flag = "--" + name.replace("_", "-")
    kind, many = _kind(hint)
    if kind is bool:
        settings.setdefault("flag", flag.replace("--", "--no-") if default else flag)
        settings["action"] = "store_false" if default else "store_true"
    else:
        settings.setdefault("type", positive(kind) if name in POSITIVE else kind)
        if many:
            settings["nargs"] = "+" if required else "*"
        if not required:
            settings["default"] = default
    if not (required or default is None or kind is bool or "default" in help):
        help += f" (default: {default})"
    settings["help"] = settings.get("help", help).replace("%", "%%")
    if name in POSITIONAL and parameter.kind is parameter.POSITIONAL_OR_KEYWORD:
        settings["flags"] = [name]
        settings.pop("flag", None)
    else:
        settings["flags"] = [settings.pop("flag", flag)]
        settings["dest"] = name
        if required:  # a command's `arguments` may make it optional (extract's --vg)
            settings.setdefault("required", True)
    return settings


def _kind(hint) -> tuple[type, bool]:
    """The type of one value of `hint`, and whether it takes a list."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        hint = next(a for a in typing.get_args(hint) if a is not type(None))
    if typing.get_origin(hint) is list or typing.get_args(hint)[1:] == (...,):
        return typing.get_args(hint)[0], True
    return hint, False


def options_of(args: argparse.Namespace) -> dict:
    """The parsed arguments as keyword arguments for the command's function."""
    return {k: v for k, v in vars(args).items()
            if not k.startswith("_") and k not in ("command", "wait")}


def _argument(parse, errors: type[Exception] = ValueError):
    """An argparse type: `parse`, its `errors` told as argparse's one line."""

    def checked(text: str):
        try:
            return parse(text)
        except errors as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    return checked


OUT_FILE = {"type": _argument(lambda text: check_output(text, folder=False), VpromError)}
OUT_FOLDER = {"type": _argument(lambda text: check_output(text, folder=True), VpromError)}
duration = _argument(parse_duration)  # 90, 90m or 8h, in seconds
size = _argument(parse_size)  # bytes: 500M or 2G


def positive(kind):
    """A finite number > 0 of `kind` (int or float)."""

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
    """K/N: shard K of N."""
    try:
        k, n = (int(v) for v in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"shard must look like K/N (e.g. 0/4), got {text!r}")
    if not 0 <= k < n:
        raise argparse.ArgumentTypeError(f"shard {text}: need 0 <= K < N")
    return k, n


class Done(Exception):
    """The command finished while its arguments were parsed (`extract --list`)."""


class ListBackbones(argparse.Action):
    """`--list`: print the backbones and finish, like `--version`."""

    def __call__(self, parser, namespace, values, option_string=None):
        from vprom.features.backbones import BACKBONES, get_backbone, list_backbones
        from vprom.features.config import SYMBOLIC_BACKBONE

        for name in list_backbones():
            print(f"{name:15s} {get_backbone(name).description}")
        for usage in BACKBONES.families().values():
            print(usage)
        print(f"{SYMBOLIC_BACKBONE:15s} each crop's labels as a multi-hot, no pixels read: "
              "perfect perception (--label-noise P)")
        raise Done()
