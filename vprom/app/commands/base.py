"""What a `vprom` subcommand is: a name, a summary, an example, its arguments and its runner.

Each command module (`corpus`, `dataset`, `learning`, ...) defines `add_<name>(parser)`, which
declares the arguments, and `run_<name>(args)`, which imports its stage lazily where that keeps
`vprom --help` quick and calls one library function; `vprom.app.cli` lists the modules'
`COMMANDS` explicitly, so `vprom NAME` can be followed to its two functions by reading.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Command:
    name: str
    summary: str
    example: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], object]
