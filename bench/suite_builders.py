"""The test suite's data builders, for the benchmarks that measure on the same data.

The benchmarks import vprom as installed and put no folder on the import path, so `tests` is
not importable from them; `load` executes one builder file under tests/ as a module of its
own name instead (the file itself may import only vprom and libraries)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent


def load(relative: str) -> ModuleType:
    """The module in `ROOT / relative`, e.g. load("tests/mining/hostile.py")."""
    path = ROOT / relative
    spec = importlib.util.spec_from_file_location(f"builders_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
