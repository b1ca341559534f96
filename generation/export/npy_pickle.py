"""Pickled `.npy` files that numpy 1.x and 2.x both load: the release's label files.

The original release's clients load `*_gt_labels.npy` with `np.load(path,
allow_pickle=True)` and call `.item()` or `.tolist()` on the result, so the file must hold a
0-d object *array* whose one element is the label dict. `np.save` under numpy 2 pickles that
array by reference to `numpy._core.multiarray._reconstruct`, a module numpy < 1.26 does not
have (`ModuleNotFoundError: No module named 'numpy._core'` under the numpy 1.23 that
Slot-Abstractor pins).

`save_object_npy` writes the same file numpy 1 would:

1. the value is checked to be plain Python (dict, list, tuple, str, int, float, bool, None):
   a numpy scalar in it would be pickled as `numpy._core.multiarray.scalar`;
2. the 0-d object array is pickled at protocol 3 (what numpy 1's `np.save` uses; globals
   are written as text by the GLOBAL opcode, never STACK_GLOBAL);
3. each GLOBAL opcode naming `numpy._core.<module>` is rewritten to `numpy.core.<module>`,
   walking the opcodes with `pickletools.genops` so only opcodes are touched, never a
   string that happens to contain the name. numpy 2 keeps `numpy.core.multiarray.
   _reconstruct` importable, without a warning, precisely so old pickles load;
4. the bytes follow a version 1.0 `.npy` header (`descr '|O'`, shape `()`), as `np.save`
   writes it.

The result names only `numpy.core.multiarray._reconstruct`, `numpy.ndarray` and
`numpy.dtype` (`pickle_globals` lists them; the tests check it), so numpy 1.20 and later
load it, and so does numpy 2.
"""

from __future__ import annotations

import io
import pickle
import pickletools
from pathlib import Path

import numpy as np

from vprom.files import atomic_path

PROTOCOL = 3
PLAIN = (str, int, float, bool, type(None))


def check_plain(value, where: str = "value") -> None:
    """Refuse anything but plain Python containers and scalars (numpy types would pickle
    as numpy._core globals)."""
    if isinstance(value, dict):
        for k, v in value.items():
            check_plain(k, f"{where} key")
            check_plain(v, f"{where}[{k!r}]")
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            check_plain(v, f"{where}[{i}]")
    elif type(value) not in PLAIN:  # exact types: np.str_ subclasses str
        raise TypeError(f"{where}: {type(value).__name__} is not a plain Python value")


def numpy1_pickle(value) -> bytes:
    """The protocol-3 pickle of a 0-d object array holding `value`, naming numpy.core."""
    check_plain(value)
    array = np.empty((), dtype=object)
    array[()] = value
    data = pickle.dumps(array, protocol=PROTOCOL)
    out, last = [], 0
    for op, arg, pos in pickletools.genops(data):
        if op.name != "GLOBAL" or not arg.startswith("numpy._core"):
            continue
        module, name = arg.split(" ")
        end = pos + 1 + len(module) + 1 + len(name) + 1  # 'c' module '\n' name '\n'
        module = "numpy.core" + module[len("numpy._core"):]
        out += [data[last:pos], b"c", module.encode(), b"\n", name.encode(), b"\n"]
        last = end
    out.append(data[last:])
    return b"".join(out)


def pickle_globals(data: bytes) -> list[str]:
    """'module name' of every global a pickle references (GLOBAL or STACK_GLOBAL)."""
    found, strings = [], []
    for op, arg, _ in pickletools.genops(data):
        if op.name == "GLOBAL":
            found.append(arg)
        elif op.name == "STACK_GLOBAL":
            found.append(" ".join(strings[-2:]))
        if isinstance(arg, str):
            strings.append(arg)
    return found


def npy_bytes(value) -> bytes:
    """A whole `.npy` file: the 1.0 header of a 0-d object array, then its pickle."""
    buffer = io.BytesIO()
    header = np.lib.format.header_data_from_array_1_0(np.empty((), dtype=object))
    np.lib.format.write_array_header_1_0(buffer, header)
    buffer.write(numpy1_pickle(value))
    return buffer.getvalue()


def save_object_npy(path: str | Path, value) -> None:
    """Write `value` (plain Python) as a pickled `.npy` numpy 1.20+ and 2.x load."""
    with atomic_path(Path(path)) as tmp:
        Path(tmp).write_bytes(npy_bytes(value))
