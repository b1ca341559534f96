"""Pickled `.npy` files that numpy 1.x and 2.x, and Python 2.7, load: the release's label
files and RAVEN's embedding.npy (`np.load(path, allow_pickle=True).item()`, a 0-d object
array holding a dict). numpy 2 pickles by reference to `numpy._core`, which numpy < 1.26
lacks, so the plain-Python value is pickled at protocol 2 and each GLOBAL opcode naming
`numpy._core.<module>` (found with `pickletools`) is rewritten to `numpy.core.<module>`.
"""

from __future__ import annotations

import io
import pickle
import pickletools

import numpy as np

PROTOCOL = 2
PLAIN = (str, int, float, bool, type(None))


def check_plain(value, where: str = "value") -> None:
    """Refuse anything but plain Python values (numpy types pickle as numpy._core globals)."""
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
    """The protocol-2 pickle of a 0-d object array holding `value`, naming numpy.core."""
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


def npy_bytes(value) -> bytes:
    """A whole `.npy` file: the 1.0 header of a 0-d object array, then its pickle."""
    buffer = io.BytesIO()
    header = np.lib.format.header_data_from_array_1_0(np.empty((), dtype=object))
    np.lib.format.write_array_header_1_0(buffer, header)
    buffer.write(numpy1_pickle(value))
    return buffer.getvalue()
