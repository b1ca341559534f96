"""Weights files as people have them, built from the facts file's key lists (not from our
own `state_dict()`): the two public ports' checkpoints, in each pickle flavour.

- `port_state(port)`: a checkpoint with every trunk key of that port (from the Caffe layer
  table and the port's prefixes and norm keys) and its detector heads, random values;
- `py2_pickle`: a pickle as Python 2 wrote it (bytes as protocol-2 `str` opcodes);
- `numpy1_pth`: a torch zip file whose pickle names numpy 1.x's `numpy.core.multiarray`.
"""

from __future__ import annotations

import io
import pickle
import struct
import zipfile
from pathlib import Path

import numpy as np

from vprom.features.bottomup import facts


def conv_rows() -> list[dict]:
    table = facts()["caffe"]["convolutions"]
    return [dict(zip(table["columns"], row)) for row in table["rows"]]


def trunk_key(port: str, name: str) -> str:
    """A Detectron2 module name (`res5.0.conv1`) as `port` stores it."""
    prefixes = facts()["checkpoints"][port]["trunk_prefix"]
    return (prefixes["res5"] if name.startswith("res5.") else
            prefixes["stem, res2, res3, res4"]) + name


def port_state(port: str, rng: np.random.Generator, affine_only: bool = False,
               heads: bool = True) -> dict[str, np.ndarray]:
    spec = facts()["checkpoints"][port]
    state = {}
    for row in conv_rows():
        name, cin, out, k = row["detectron2"], row["in"], row["out"], row["kernel"]
        # a random value per tensor (cheap for 44M weights) and a ramp: tensors differ
        ramp = np.linspace(-1, 1, out * cin * k * k, dtype=np.float32).reshape(out, cin, k, k)
        state[trunk_key(port, name) + ".weight"] = ramp * np.float32(rng.uniform(0.01, 0.1))
        for key in spec["norm"]["keys"]:
            if affine_only and key.startswith("running"):
                continue
            value = rng.standard_normal(out, dtype=np.float32)
            state[f"{trunk_key(port, name)}.norm.{key}"] = (
                np.abs(value) + 0.5 if key == "running_var" else value)
        if name.startswith(("res4.", "res5.")):
            for key in spec["norm"].get("extra_keys_res4_res5", []):
                state[f"{trunk_key(port, name)}.norm.{key}"] = np.array(0, dtype=np.int64)
    if heads:
        for key, shape in spec["heads"].items():
            state[key] = np.zeros(shape, dtype=np.float32)
    return state


class _Py2Pickler(pickle._Pickler):
    """Writes bytes and str as Python 2's `str` opcodes (SHORT_BINSTRING / BINSTRING)."""

    dispatch = dict(pickle._Pickler.dispatch)

    def save_py2_str(self, obj, save_persistent_id=True):
        data = obj if isinstance(obj, bytes) else obj.encode("latin1")
        if len(data) < 256:
            self.write(pickle.SHORT_BINSTRING + bytes([len(data)]) + data)
        else:
            self.write(pickle.BINSTRING + struct.pack("<i", len(data)) + data)
        self.memoize(obj)

    dispatch[bytes] = save_py2_str
    dispatch[str] = save_py2_str


def py2_pickle(obj) -> bytes:
    buffer = io.BytesIO()
    _Py2Pickler(buffer, protocol=2).dump(obj)
    return buffer.getvalue()


def numpy1_pth(source: Path, target: Path) -> None:
    """Copy a torch zip file, renaming numpy 2's module in its pickle to numpy 1.x's."""
    with zipfile.ZipFile(source) as zin, zipfile.ZipFile(target, "w", zipfile.ZIP_STORED) as zout:
        for info in zin.infolist():
            data = zin.read(info)
            if info.filename.endswith("data.pkl"):
                assert b"numpy._core.multiarray" in data
                data = data.replace(b"numpy._core.multiarray", b"numpy.core.multiarray")
            zout.writestr(info, data)
