"""The manifest every vprom output carries, and the one rule for "this output is current".

A manifest is a JSON object (`make_manifest`) held in an HDF5 file's root attribute `manifest`,
a folder's `manifest.json` (a training run's `config.json`) or a file's `<name>.manifest.json`.
An input's hash is the content hash an HDF5 input records (or a DATASET.h5's, computed), else
its sha256. `is_current`: the recorded inputs are exactly the inputs' hashes now, and the
recorded config holds every given setting.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterable, Mapping
from functools import lru_cache
from pathlib import Path

import h5py

from vprom import __version__
from vprom.bounded_read import read_bounded
from vprom.errors import VpromError
from vprom.file_kinds import is_hdf5
from vprom.files import sha256_file, write_json
from vprom.tables import content_hash, open_h5, set_manifest

FORMAT_VERSION = 2
FOLDER_MANIFESTS = ("manifest.json", "config.json")  # config.json: a training run's folder
CONTENT_PREFIX = "sha256:"  # a content hash; a file's sha256 is bare hex


def make_manifest(kind: str, config: dict, seed: int | None = None,
                  inputs: dict[str, str] | None = None, counts: dict | None = None,
                  outputs: dict[str, str] | None = None) -> dict:
    """A manifest: `config` holds the settings that change the output; `inputs`, `outputs`
    map names to hashes."""
    return {"format_version": FORMAT_VERSION, "vprom_version": __version__, "kind": kind,
            "config": config, "seed": seed, "inputs": inputs or {}, "counts": counts or {},
            "outputs": outputs or {}}


def manifest_file(path: str | os.PathLike) -> Path:
    """Where the manifest of the folder or non-HDF5 file `path` lives."""
    path = Path(path)
    return path / FOLDER_MANIFESTS[0] if path.is_dir() else path.with_name(
        path.name + ".manifest.json")


def json_object(path: Path) -> dict | None:
    with contextlib.suppress(OSError, ValueError, UnicodeDecodeError):
        value = json.loads(path.read_text(encoding="utf-8"))
        return value if isinstance(value, dict) else None
    return None


def manifest_of(path: str | os.PathLike) -> dict | None:
    """The manifest of the output at `path` wherever it lives, or None."""
    path = Path(path)
    if path.is_dir():
        return next(filter(None, (json_object(path / name) for name in FOLDER_MANIFESTS)), None)
    if not path.is_file():
        return None
    if not is_hdf5(path):
        return json_object(manifest_file(path))
    with contextlib.suppress(OSError, ValueError, VpromError):
        value = json.loads(read_bounded(path, lambda h5: h5.attrs.get("manifest")) or "null")
        return value if isinstance(value, dict) else None
    return None


def write_manifest(target: str | os.PathLike | h5py.File, manifest: dict) -> None:
    """Store `manifest` for `target`: an open HDF5 file, a folder or a file."""
    if isinstance(target, h5py.File):
        set_manifest(target, manifest)
    else:
        write_json(manifest_file(target), manifest)


@lru_cache(maxsize=64)
def _hash(path: str, size: int, mtime_ns: int) -> str:
    if is_hdf5(path):
        recorded = ((manifest_of(path) or {}).get("outputs") or {}).get("content_hash")
        if isinstance(recorded, str):
            return recorded
        with open_h5(path) as h5:
            dataset = "matrices" in h5 and "crops" in h5
        if dataset:  # a DATASET.h5 from another tool: its content, hashed now
            return content_hash(path)
    return sha256_file(path)


def check_content(path: str | os.PathLike) -> None:
    """Refuse a POOLS.h5 or DATASET.h5 whose data differs from the content hash it records."""
    recorded = ((manifest_of(path) or {}).get("outputs") or {}).get("content_hash")
    if isinstance(recorded, str) and content_hash(path) != recorded:
        raise VpromError(f"{path}: its data differs from the content hash its manifest records "
                         "(the file was damaged or changed after it was written); make it again")


def input_hash(path: str | os.PathLike) -> str:
    """The hash an output records for its input `path`; cached per file state."""
    stat = Path(path).stat()
    return _hash(str(Path(path).resolve()), stat.st_size, stat.st_mtime_ns)


def input_hashes(paths: Iterable[str | os.PathLike]) -> dict[str, str]:
    return {Path(p).name: input_hash(p) for p in paths}


def why_stale(output: str | os.PathLike, inputs: Iterable[str | os.PathLike],
              config: dict) -> str | None:
    """None when `output` is current for `inputs` and `config`; else why not."""
    manifest = manifest_of(output)
    if manifest is None:
        return "no manifest" if Path(output).exists() else "not made yet"
    if not isinstance(manifest.get("format_version"), int) or (
            manifest["format_version"] > FORMAT_VERSION):
        return "its manifest is of a format this vprom does not read"
    recorded = manifest.get("inputs") or {}
    now = input_hashes(inputs)
    changed = [name for name, value in now.items() if value not in recorded.values()]
    if not changed and sorted(now.values()) != sorted(map(str, recorded.values())):
        changed = sorted(set(recorded) - set(now)) or ["inputs"]
    wanted = json.loads(json.dumps(config))  # tuples as lists, as the manifest holds them
    settings = manifest.get("config") or {}
    differ = [f"{k} {settings.get(k)!r} vs {v!r}" for k, v in sorted(wanted.items())
              if settings.get(k) != v]
    why = ([f"its inputs changed: {', '.join(changed)}"] if changed else []) + (
        [f"its settings changed: {', '.join(differ)}"] if differ else [])
    return "; ".join(why) or None


def is_current(output: str | os.PathLike, inputs: Iterable[str | os.PathLike],
               config: dict) -> bool:
    """True when `output` may be kept or resumed."""
    return why_stale(output, inputs, config) is None


def made_from(recorded: Mapping | None, source: str | os.PathLike) -> bool | None:
    """Whether `source` is one of the inputs `recorded` names; None when it names none."""
    hashes = [v for v in (recorded or {}).values() if isinstance(v, str)]
    if not hashes:
        return None
    if input_hash(source) in hashes:
        return True
    # files written by earlier releases record the data set's file sha256
    files = [h for h in hashes if not h.startswith(CONTENT_PREFIX)]
    return bool(files) and sha256_file(source) in files


def check_made_from(recorded: Mapping | None, dataset: str | os.PathLike, output: str,
                    fix: str) -> str:
    """Refuse `output` (inputs `recorded`) made from another data set; says how it decided."""
    if not Path(dataset).is_file():
        raise VpromError(f"{dataset}: no such file; {output} was made from it")
    found = made_from(recorded, dataset)
    if found is None:
        return "unchecked: no source data set is recorded"
    if not found:
        theirs = next(v for v in recorded.values() if isinstance(v, str))
        raise VpromError(f"{output} was made from another data set than {dataset} (it "
                         f"records {theirs[:19]}…, {Path(dataset).name} is "
                         f"{input_hash(dataset)[:19]}…); {fix}")
    return "recorded hash"
