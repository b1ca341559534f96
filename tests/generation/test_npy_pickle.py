"""The release's label files load under numpy 1.x as well as 2.x.

Slot-Abstractor's README pins numpy 1.23.1; under it a pickle naming `numpy._core` fails
with `ModuleNotFoundError`. The fast tests read the pickle's opcodes; the slow one loads the
files of a real export in a fresh venv with numpy 1.24 from PyPI, the way both clients do
(`np.load(path, allow_pickle=True)`, then `.item()` or `.tolist()`).
"""

from __future__ import annotations

import json
import pickletools
import subprocess
import sys
import venv
from pathlib import Path

import numpy as np
import pytest

from vprom.generation.export import export
from vprom.generation.export.crops import npy_bytes, numpy1_pickle
from tests.generation.synthetic_build import synthetic_build  # noqa: F401 (fixture)

LABELS = ("obj_gt_labels.npy", "attr_gt_labels.npy", "counting_gt_labels.npy")
#: `_codecs encode` is how protocol 2 (Python 2.7's highest) pickles a bytes object
NUMPY1_GLOBALS = {"numpy.core.multiarray _reconstruct", "numpy ndarray", "numpy dtype",
                  "_codecs encode"}


@pytest.fixture(scope="module")
def label_files(synthetic_build, tmp_path_factory):
    dataset, vg = synthetic_build
    root = tmp_path_factory.mktemp("release") / "export"
    export(dataset, "original", root, vg_dir=vg)
    return [root / "V-PROM" / "datasets" / name for name in LABELS]


def pickle_of(npy: Path) -> bytes:
    with open(npy, "rb") as f:
        np.lib.format.read_magic(f)
        np.lib.format.read_array_header_1_0(f)
        return f.read()


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


def test_label_files_name_only_numpy1_globals(label_files):
    for path in label_files:
        data = pickle_of(path)
        names = set(pickle_globals(data))
        assert names <= NUMPY1_GLOBALS, (path.name, names)
        assert not any("_core" in n for n in names)
        assert b"numpy._core" not in data
        assert max(op.proto for op, _, _ in pickletools.genops(data)) <= 2  # Python 2.7


def test_label_files_still_load_under_numpy2(label_files):
    for path in label_files:
        value = np.load(path, allow_pickle=True)
        assert value.shape == () and value.dtype == object
        table = value.item()
        assert table == value.tolist() and isinstance(table, dict) and table


def test_plain_values_only(tmp_path):
    with pytest.raises(TypeError, match="str_"):
        numpy1_pickle({"a": np.str_("x")})
    with pytest.raises(TypeError, match="int64"):
        numpy1_pickle({"a": [1, np.int64(2)]})


def test_a_string_holding_the_name_is_not_rewritten(tmp_path):
    value = {"text": "numpy._core.multiarray\n_reconstruct\n", "n": [1, 2.5, None, True]}
    (tmp_path / "x.npy").write_bytes(npy_bytes(value))
    assert np.load(tmp_path / "x.npy", allow_pickle=True).item() == value


LOADER = """
import json, sys
import numpy as np
out = {"numpy": np.__version__}
for path in sys.argv[1:]:
    item = np.load(path, allow_pickle=True).item()        # Slot-Abstractor
    listed = np.load(path, allow_pickle=True).tolist()    # SAViR-T
    assert item == listed
    out[path] = json.dumps(item, sort_keys=True)
print(json.dumps(out))
"""


@pytest.mark.slow
def test_numpy_1_24_loads_the_label_files(label_files, tmp_path):
    env = tmp_path / "np1"
    venv.create(env, with_pip=True)
    python = env / "bin" / "python"
    pip = subprocess.run([str(python), "-m", "pip", "install", "-q", "numpy==1.24.*"],
                         check=False, capture_output=True, text=True, timeout=600)
    if pip.returncode != 0:
        pytest.skip("numpy 1.24 cannot be installed here (no wheel for Python "
                    f"{sys.version_info.major}.{sys.version_info.minor} or no index): "
                    + pip.stderr.strip().splitlines()[-1])
    run = subprocess.run([str(python), "-c", LOADER, *map(str, label_files)],
                         check=False, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    loaded = json.loads(run.stdout)
    assert loaded["numpy"].startswith("1.24.")
    for path in label_files:
        expected = np.load(path, allow_pickle=True).item()
        assert json.loads(loaded[str(path)]) == json.loads(json.dumps(expected, sort_keys=True))
