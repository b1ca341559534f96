"""Config dataclass fields that carry their own command-line help, so each is written once.

A job's config (`TrainConfig`, `ExtractConfig`, `ReproduceConfig`) declares each setting as

    epochs: int = option(20, help="maximum epochs")

and the command line (`vprom.app.options.add_fields`) turns every field declared this way
into an argument: the default comes from the field, the help from its metadata, the flag from
its name (`batch_size` -> `--batch-size`) unless `flag` says otherwise, the type from its
annotation. The few argparse details a field may need are plain data here (`choices`,
`metavar`, `positional`, `output`), so a config module stays free of the command line and of
torch. `like` lets one config borrow another's setting, help and default included.
"""

from __future__ import annotations

import dataclasses
from typing import Any

#: where `like` records the config a field was borrowed from
BORROWED = "borrowed_from"


def option(default: Any = dataclasses.MISSING, *, help: str, flag: str | None = None,
           choices: tuple | None = None, metavar: str | None = None, positional: bool = False,
           output: str | None = None) -> Any:
    """A dataclass field that is also a command-line option.

    `flag`: the option's name when it is not `--<field-name>` (e.g. "--no-resume" for a
    field that defaults to True); `positional`: an argument without a flag; `output`:
    "file" or "folder", an output path checked before any work starts. A field without a
    default is a required argument.
    """
    meta = {"help": help, "flag": flag, "choices": choices, "metavar": metavar,
            "positional": positional, "output": output}
    return dataclasses.field(default=default, metadata=meta)


def like(config: type, name: str, **changes) -> Any:
    """Field `name` of dataclass `config` (its default and help) for another config;
    `changes` replace parts of it, e.g. `default=None`."""
    field = {f.name: f for f in dataclasses.fields(config)}[name]
    meta = {**field.metadata, BORROWED: config.__name__}
    default = changes.pop("default", field.default)
    meta.update(changes)
    return dataclasses.field(default=default, metadata=meta)


def borrowed(config: Any, target: type) -> dict:
    """The values of the fields `config` borrowed (with `like`, from any config) that dataclass
    `target` also has, as keyword arguments for a `target`: a setting borrowed once is handed
    on to every stage that takes it."""
    names = {f.name for f in dataclasses.fields(target)}
    return {f.name: getattr(config, f.name) for f in dataclasses.fields(config)
            if BORROWED in f.metadata and f.name in names}
