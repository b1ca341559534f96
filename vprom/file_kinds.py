"""What a file given to a command is, told the same way by every command.

`kind_of` names an HDF5 file's kind by its layout (so another tool's file is recognised too),
else by its manifest's `kind`. `check_kind` refuses only a file of another known kind: one of
no known kind goes on to the reader, which names the group it lacks.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import h5py

from vprom.errors import VpromError

POOLS, DATASET, FEATS, MAPS, CROPS = "POOLS.h5", "DATASET.h5", "FEATS.h5", "MAPS.h5", "CROPS.h5"
MADE_BY = {POOLS: "the pools of `vprom mine`",
           DATASET: "a data set of `vprom generate` or `vprom build`",
           FEATS: "pooled features of `vprom extract`",
           MAPS: "spatial maps of `vprom extract --pool none`",
           CROPS: "a crop store of `vprom crops`"}
_MANIFEST_KINDS = {"pools": POOLS, "dataset": DATASET, "vprom-crops": CROPS}
HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"


def _by_layout(h5: h5py.File) -> str | None:
    if "matrices" in h5 and "splits" in h5:
        return DATASET
    if "crop_id" in h5:
        return next((kind for kind, name in ((FEATS, "features"), (MAPS, "maps"),
                                             (CROPS, "pixels")) if name in h5), None)
    if "crops" in h5 and "vocabulary" in h5:
        return POOLS
    with contextlib.suppress(TypeError, ValueError, AttributeError, KeyError):
        kind = json.loads(h5.attrs.get("manifest", "null"))["kind"]
        return _MANIFEST_KINDS.get(kind, FEATS if kind == "features" else None)
    return None


def is_hdf5(path: str | Path) -> bool:
    with contextlib.suppress(OSError), open(path, "rb") as f:
        return f.read(8) == HDF5_MAGIC
    return False


def kind_of(path: str | Path) -> str | None:
    """The kind of the file at `path`, or None."""
    if not is_hdf5(path):
        return None
    with contextlib.suppress(OSError), h5py.File(path, "r") as h5:
        return _by_layout(h5)
    return None


def describe(path: str | Path) -> str:
    """What `path` is, in a few words: "a FEATS.h5 (pooled features of `vprom extract`)"."""
    path = Path(path)
    if path.is_dir():
        return "a folder"
    if not path.exists():
        return "not there"
    kind = kind_of(path)
    if kind is not None:
        return f"a {kind} ({MADE_BY[kind]})"
    if is_hdf5(path):
        return "an HDF5 file vprom did not write (none of its kinds' layouts)"
    return "not an HDF5 file"


def check_kind(path: str | Path, wanted: str | tuple[str, ...], role: str = "") -> None:
    """Refuse a file of another known kind than `wanted` (`role` names the argument)."""
    wanted = (wanted,) if isinstance(wanted, str) else wanted
    kind = kind_of(path)
    if kind is None or kind in wanted:
        return
    takes = " or ".join(f"a {k} ({MADE_BY[k]})" for k in wanted)
    raise VpromError(f"{path}: this is {describe(path)}; {role or 'this command'} takes {takes}")


def vg_not_folder(path: str | Path) -> str:
    """The line that refuses `path` where a Visual Genome folder is wanted (`--vg`)."""
    if not Path(path).exists():
        return (f"{path}: no such folder; --vg takes the folder holding Visual Genome's JSON "
                f"files (fetch it with `vprom download --out {path}`)")
    return (f"{path}: this is {describe(path)}; --vg takes the folder holding Visual Genome's "
            "JSON files (from `vprom download` or `vprom synth`)")
