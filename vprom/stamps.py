"""One up-to-date rule for every step that may be skipped (`build`'s stages, `reproduce`'s
features): an output is current when the record beside it, `X.build-config.json`, equals the
record of the inputs and settings it would be made from now.

A record is a small JSON object: input hashes (or, for a folder of large files, their names,
sizes and times), the settings that change the output, paths relative to the output's
folder. It is written after the output is complete, so an output without one (interrupted
before it, or made by hand) is never taken as current. `why_stale` says in a few words why an
output must be made again, for the line a re-run prints.

`extract` follows the same rule with its record kept inside its output (a FEATS.h5 holds the
hash of its settings, its `.partial/` folder their `config.json`), and names what changed
with `differences`, as `why_stale` does.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from vprom.io import write_json


def record_path(output: str | os.PathLike) -> Path:
    output = Path(output)
    return output.with_name(output.name + ".build-config.json")


def recorded(output: str | os.PathLike) -> dict | None:
    """The record beside `output`, None when there is none (or it cannot be read)."""
    try:
        value = json.loads(record_path(output).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def why_stale(output: str | os.PathLike, record: dict) -> str | None:
    """None when `output` is current for `record`; else why it must be made again."""
    if not Path(output).exists():
        return "not made yet"
    old = recorded(output)
    if old is None:
        return "no record of its inputs"
    changed = differences(old, record)
    return "its inputs or settings changed: " + ", ".join(changed) if changed else None


def differences(old: dict, new: dict) -> list[str]:
    """The keys whose values differ between two records (one missing counts as differing)."""
    return [k for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]


def stamp(output: str | os.PathLike, record: dict) -> None:
    """Record what the complete `output` was made from."""
    write_json(record_path(output), record)
