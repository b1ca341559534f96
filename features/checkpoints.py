"""Reading weights files without running code from them.

A torch file goes to `torch.load(weights_only=True)` with numpy's array names allowed, any
other pickle (a Detectron `.pkl`) to `SafeUnpickler`, which resolves only the names in
`ALLOWED`. The result is a flat {name: tensor} without a `model`/`state_dict` wrapper.
"""

from __future__ import annotations

import collections
import pickle
import re
import zipfile
from pathlib import Path

import numpy as np
import torch

from vprom.errors import VpromError


def latin1_bytes(text, encoding="latin1"):
    """What `_codecs.encode` may do inside a weights file: turn latin1 text back into bytes."""
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
        raise pickle.UnpicklingError("_codecs.encode is only allowed as encode(str, 'latin1') "
                                     "in a weights file")
    return text.encode("latin1")


def _numpy_names() -> dict[tuple[str, str], object]:
    from numpy._core import multiarray, numeric

    names = {}
    for package in ("numpy.core", "numpy._core"):
        names[(f"{package}.multiarray", "_reconstruct")] = multiarray._reconstruct
        names[(f"{package}.multiarray", "scalar")] = multiarray.scalar
        names[(f"{package}.numeric", "_frombuffer")] = numeric._frombuffer  # protocol 5
    names[("numpy", "ndarray")] = np.ndarray
    names[("numpy", "dtype")] = np.dtype
    for name in dir(np.dtypes):  # the dtype classes numpy 2 pickles name (Float32DType, ...)
        if name.endswith("DType") and isinstance(getattr(np.dtypes, name), type):
            names[("numpy.dtypes", name)] = getattr(np.dtypes, name)
    return names


#: (module, name) -> the object a weights pickle may refer to; nothing else resolves.
ALLOWED: dict[tuple[str, str], object] = {
    **_numpy_names(),
    ("collections", "OrderedDict"): collections.OrderedDict,
    ("_codecs", "encode"): latin1_bytes,
}


class SafeUnpickler(pickle.Unpickler):
    """Unpickles dicts of numpy arrays (and nothing that could run code)."""

    def find_class(self, module, name):
        try:
            return ALLOWED[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError(f"{module}.{name} is not allowed in a weights file "
                                         "(only dicts of arrays are read)") from None

    def persistent_load(self, pid):
        raise pickle.UnpicklingError("persistent ids are not allowed in a weights pickle")


def _torch_load(path: Path):
    # torch's weights-only unpickler, plus the numpy names; aliases cover numpy 1.x files.
    safe = [(obj, f"{module}.{name}") for (module, name), obj in ALLOWED.items()
            if module.startswith("numpy")]
    with torch.serialization.safe_globals(safe):
        return torch.load(path, map_location="cpu", weights_only=True)


def _load(path: Path):
    if zipfile.is_zipfile(path):
        return _torch_load(path)
    with open(path, "rb") as f:
        obj = SafeUnpickler(f, encoding="latin1").load()
    if isinstance(obj, int) and obj == torch.serialization.MAGIC_NUMBER:
        return _torch_load(path)  # torch's legacy format: magic number first
    return obj


def _why(error: Exception) -> str:
    """One line on why a file did not load (for torch's weights-only refusal, the name)."""
    text = str(error)
    found = re.search(r"GLOBAL ([\w.]+)", text)
    if found:
        return f"it refers to {found.group(1)}, which a weights file may not"
    return f"{type(error).__name__}: {text.splitlines()[0] if text else ''}"


def read_checkpoint_file(path: Path):
    """What a weights file holds, as it was saved (see the module doc)."""
    path = Path(path)
    if not path.is_file():
        raise VpromError(f"{path}: no such weights file; pass imagenet, none or a state dict")
    try:
        return _load(path)
    except Exception as e:  # any unreadable file is the user's to replace
        raise VpromError(f"{path}: cannot read the weights file ({_why(e)}); pass a torch "
                         "state dict (.pth) or a Detectron .pkl") from None


def read_checkpoint(path: Path) -> dict:
    """A flat {name: tensor} from a weights file (see the module doc)."""
    obj = read_checkpoint_file(path)
    for wrapper in ("model", "state_dict"):
        if isinstance(obj, dict) and isinstance(obj.get(wrapper), dict):
            obj = obj[wrapper]
    if not isinstance(obj, dict):
        raise VpromError(f"{path}: holds a {type(obj).__name__}, not a state dict")
    state = {}
    for key, value in obj.items():
        if isinstance(value, np.ndarray):
            value = torch.from_numpy(np.array(value, order="C"))  # a copy: writable, 0-d kept
        if isinstance(value, torch.Tensor):
            state[str(key).removeprefix("module.")] = value
    return state
