"""Weights files are read without running code from them, in every pickle flavour."""

from __future__ import annotations

import collections
import io
import os
import pickle

import numpy as np
import pytest
import torch

from vprom.features.checkpoints import SafeUnpickler, latin1_bytes, read_checkpoint
from tests.features.weights_files import py2_pickle
from vprom.errors import VpromError

ARRAYS = {"a.weight": np.arange(12, dtype=np.float32).reshape(3, 4),
          "b.running_var": np.ones(5, dtype=np.float64),
          "c.num_batches_tracked": np.array(7, dtype=np.int64),
          "d.half": np.linspace(0, 1, 6, dtype=np.float16)}


def check(state: dict) -> None:
    assert set(state) == set(ARRAYS)
    for key, value in ARRAYS.items():
        assert state[key].dtype == torch.from_numpy(value).dtype
        assert np.array_equal(state[key].numpy(), value), key


@pytest.mark.parametrize("protocol", range(0, pickle.HIGHEST_PROTOCOL + 1))
def test_a_dict_of_arrays_loads_in_every_pickle_protocol(tmp_path, protocol):
    path = tmp_path / "w.pkl"
    with open(path, "wb") as f:
        pickle.dump({"model": collections.OrderedDict(ARRAYS), "__author__": "x",
                     "scalar": np.float32(2.5)}, f, protocol=protocol)
    check(read_checkpoint(path))


def test_python_2_pickles_and_data_parallel_prefixes(tmp_path):
    path = tmp_path / "py2.pkl"
    path.write_bytes(py2_pickle({"state_dict": {"module." + k: v for k, v in ARRAYS.items()}}))
    check(read_checkpoint(path))


@pytest.mark.parametrize("legacy", [False, True])
def test_torch_files_of_tensors_and_of_arrays(tmp_path, legacy):
    tensors = tmp_path / "t.pth"
    torch.save({k: torch.from_numpy(v) for k, v in ARRAYS.items()}, tensors,
               _use_new_zipfile_serialization=not legacy)
    check(read_checkpoint(tensors))
    arrays = tmp_path / "a.pth"
    torch.save({"model": ARRAYS}, arrays, _use_new_zipfile_serialization=not legacy)
    check(read_checkpoint(arrays))


class Evil:
    def __reduce__(self):
        return (os.system, ("echo pwned > /dev/null",))


class Sneaky:
    def __reduce__(self):  # _codecs.encode with another codec could turn text into anything
        import codecs

        return (codecs.encode, ("abc", "rot13"))


@pytest.mark.parametrize("payload, named", [(Evil(), "posix.system"),
                                            (Sneaky(), "_codecs.encode is only allowed"),
                                            (print, "builtin__.print")])
@pytest.mark.parametrize("suffix", [".pkl", ".pth"])
def test_a_pickle_that_would_run_code_is_refused(tmp_path, payload, named, suffix):
    path = tmp_path / f"evil{suffix}"
    with open(path, "wb") as f:
        pickle.dump({"model": {"x": payload}}, f, protocol=2)
    with pytest.raises(VpromError, match=f"evil{suffix}: cannot read the weights file .*{named}"):
        read_checkpoint(path)


def test_a_torch_file_that_would_run_code_is_refused(tmp_path):
    path = tmp_path / "evil.pth"
    torch.save({"model": {"x": Evil()}}, path)
    with pytest.raises(VpromError, match="evil.pth: cannot read the weights file .*system"):
        read_checkpoint(path)


def test_latin1_bytes_does_only_what_protocol_2_needs():
    assert latin1_bytes("\xff\x00a", "latin1") == b"\xff\x00a"
    for args in ((b"x", "latin1"), ("x", "rot13"), ("x", "utf-8")):
        with pytest.raises(pickle.UnpicklingError):
            latin1_bytes(*args)
    with pytest.raises(pickle.UnpicklingError, match="persistent ids"):
        SafeUnpickler(io.BytesIO(b"\x80\x02X\x01\x00\x00\x00aQ.")).load()


def test_files_that_hold_no_state_dict_are_named(tmp_path):
    path = tmp_path / "list.pkl"
    with open(path, "wb") as f:
        pickle.dump([1, 2], f)
    with pytest.raises(VpromError, match="list.pkl: holds a list, not a state dict"):
        read_checkpoint(path)
    junk = tmp_path / "junk.pth"
    junk.write_bytes(b"not a checkpoint")
    with pytest.raises(VpromError, match="junk.pth: cannot read the weights file"):
        read_checkpoint(junk)
    with pytest.raises(VpromError, match="no such weights file"):
        read_checkpoint(tmp_path / "absent.pth")
