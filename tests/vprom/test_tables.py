import hashlib
import json

import h5py
import numpy as np
import pytest

from vprom import tables
from vprom.errors import VpromError
from vprom.domain import Crop, Matrix
from vprom.tables import (
    STR,
    CropTable,
    MatrixTable,
    content_hash,
    crop_rows,
    present_rows,
    read_crop_table,
    read_manifest,
    read_matrix_table,
    read_string_codes,
    read_strings,
    set_manifest,
    string_codes,
    utf8,
)


def _crops():
    return [Crop(1, 10, 0, 0, 100, 100, "object", "dog", "", 5, "", ("dog", "brown")),
            Crop(2, 11, 5, 6, 150, 100, "count", "3", "", 6, "three dögs", ("3", "dog")),
            Crop(3, 12, 0, 0, 100, 200, "human_attribute", "young", "age", 7, "", ())]


def _matrices():
    return [Matrix(i, "and", "object", "", [1] * 16, ["dog"] * 16, i % 8,
                   {"neutral": "train" if i % 3 else "test", "extrapolation": "excluded"})
            for i in range(6)]


def test_crops_and_matrices_round_trip_through_hdf5(tmp_path):
    path = tmp_path / "d.h5"
    with h5py.File(path, "w") as h5:
        CropTable.from_crops(_crops()).write(h5.create_group("crops"))
        MatrixTable.from_matrices(_matrices()).write(h5.create_group("matrices"),
                                                     h5.create_group("splits"))
        set_manifest(h5, {"kind": "dataset"})
    crops = read_crop_table(path)
    assert [crops.row(i) for i in range(len(crops))] == _crops()
    table = read_matrix_table(path)
    parts = table.parts_of()
    assert [table.row(i, parts) for i in range(len(table))] == [
        Matrix(**{**m.to_record(), "splits": {"neutral": m.part("neutral"),
                                              "extrapolation": "excluded"}})
        for m in _matrices()]
    assert read_manifest(path) == {"kind": "dataset"}
    # readable without vprom: plain h5py columns
    with h5py.File(path) as h5:
        assert h5["matrices/panels"].shape == (6, 16)
        assert list(h5["splits/neutral/test"][()]) == [0, 3]
        assert h5["crops/phrase"].asstr()[1] == "three dögs"


def test_missing_file_and_column_give_clear_errors(tmp_path):
    with pytest.raises(VpromError, match="no such file"):
        read_crop_table(tmp_path / "nope.h5")
    path = tmp_path / "bad.h5"
    with h5py.File(path, "w") as h5:
        h5.create_group("crops").create_dataset("crop_id", data=np.arange(3))
    with pytest.raises(VpromError, match="no column 'image_id'"):
        read_crop_table(path)
    (tmp_path / "junk.h5").write_text("not hdf5")
    with pytest.raises(VpromError, match="cannot be opened as HDF5"):
        read_crop_table(tmp_path / "junk.h5")


@pytest.mark.parametrize("ids", [
    [0, 1, 2, 3, 4],              # what vprom writes: dense, from 0
    [9, 3, 7, 5, 100],            # unordered, with gaps
    [2 ** 40, 5, 2 ** 41],        # too sparse for a lookup table
    [-3, 4, 8],                   # negative ids
    [4, 2, 4, 9],                 # an id twice: its first row
])
def test_crop_rows_finds_each_id_and_minus_one_for_the_absent(ids):
    crop_ids = np.array(ids, dtype=np.int64)
    wanted = np.array([[ids[-1], 6, ids[0]], [-1, ids[1], 2 ** 42]], dtype=np.int64)
    expected = np.array([[ids.index(w) if w in ids else -1 for w in row] for row in
                         wanted.tolist()])
    assert np.array_equal(crop_rows(crop_ids, wanted), expected)


def test_present_rows_keeps_the_wanted_order_and_drops_the_absent():
    ids = np.array([30, 10, 20, 50], dtype=np.int64)
    assert present_rows(ids, [20, 99, 30, 50, 7]).tolist() == [2, 0, 3]
    assert present_rows(ids, []).tolist() == []


@pytest.mark.parametrize("per_read", [tables.READ_STRINGS, 2])  # one read, or a row a read
def test_read_strings_and_their_codes_give_what_asstr_gives(tmp_path, monkeypatch, per_read):
    monkeypatch.setattr(tables, "READ_STRINGS", per_read)
    values = np.array([["dog", "three dögs", ""], ["dog", "ünïcode", "dog"],
                       ["cat", "dog", "ünïcode"]], dtype=object)
    with h5py.File(tmp_path / "s.h5", "w") as h5:
        h5.create_dataset("utf8", data=values, dtype=STR)
        h5.create_dataset("ascii", data=np.array([b"red", b"blue", b"red"]))
        h5.create_dataset("empty", data=np.zeros(0, dtype=object), dtype=STR)
        h5.create_dataset("scalar", data="one", dtype=STR)
    with h5py.File(tmp_path / "s.h5") as h5:
        for name in ("utf8", "ascii", "empty", "scalar"):
            got, want = read_strings(h5[name]), np.asarray(h5[name].asstr()[()], object)
            assert got.shape == want.shape and got.dtype == object
            assert got.tolist() == want.tolist()
            assert all(type(v) is str for v in got.ravel())
            names, codes = read_string_codes(h5[name])  # what travels between processes
            assert codes.shape == want.shape and codes.dtype == np.int32
            assert len(set(names)) == len(names) and all(type(v) is str for v in names)
            assert np.array(names, dtype=object)[codes.ravel()].tolist() == want.ravel().tolist()


@pytest.mark.parametrize("values", [
    np.array([["b", "a", "b"], ["ä", "", "a"]], dtype=object),  # a table's Python strings
    np.array(["10", "9", "1", "10"]),  # numpy unicode: sorted as text, not as numbers
    np.array([b"red", b"blue", b"red"]),  # bytes, decoded as astype(str) decodes them
    np.array([3, 12, 3, -1]),  # numbers, as their text
    np.zeros((0, 8), dtype=object),
])
def test_string_codes_are_np_unique_of_the_text(values):
    names, codes = string_codes(values)
    want_names, want_codes = np.unique(values.astype(str), return_inverse=True)
    assert names == want_names.tolist()
    assert codes.shape == values.shape and codes.dtype == np.int64
    assert codes.tolist() == want_codes.reshape(values.shape).tolist()


def test_string_codes_key_codes_the_replaced_text():
    # zero-padded counts: codes in count order, as np.char.zfill before np.unique gives
    values = np.array([["10", "2", "9"], ["1", "02", "10"]], dtype=object)
    names, codes = string_codes(values, key=lambda e: e.zfill(2))
    want_names, want_codes = np.unique(np.char.zfill(values.astype(str), 2),
                                       return_inverse=True)
    assert names == want_names.tolist() == ["01", "02", "09", "10"]
    assert codes.tolist() == want_codes.reshape(values.shape).tolist()  # "2", "02" alike


def test_utf8_columns_are_stored_as_h5py_stores_python_strings(tmp_path):
    values = np.array([["dog", "dög", ""], ["\u2028", "dog", "three dögs"]], dtype=object)
    with h5py.File(tmp_path / "s.h5", "w") as h5:
        h5.create_dataset("text", data=values, dtype=STR)
        h5.create_dataset("bytes", data=utf8(values), dtype=STR)
    with h5py.File(tmp_path / "s.h5") as h5:
        assert h5["text"].dtype == h5["bytes"].dtype and h5["bytes"].shape == values.shape
        assert h5["text"][()].tolist() == h5["bytes"][()].tolist()  # the same stored bytes
        assert read_strings(h5["bytes"]).tolist() == values.tolist()


def test_content_hash_encodes_strings_as_json_dumps_of_the_list(tmp_path):
    # the hash is fixed by its format: the UTF-8 of json.dumps(list, ensure_ascii=False)
    values = np.array(["dog", 'say "hi"', "back\\slash", "tab\tnew\nline\x01", "dög", "",
                       "dog", "\u2028"], dtype=object)
    with h5py.File(tmp_path / "s.h5", "w") as h5:
        h5.create_dataset("crops/phrase", data=values, dtype=STR)
    body = json.dumps(values.tolist(), ensure_ascii=False).encode()
    head = json.dumps(["crops/phrase", "str", [len(values)], len(body)]).encode()
    assert content_hash(tmp_path / "s.h5") == \
        "sha256:" + hashlib.sha256(head + b"\n" + body).hexdigest()


def test_content_hash_of_a_file_just_written_needs_no_read_back(tmp_path):
    path = tmp_path / "d.h5"
    crops, matrices = CropTable.from_crops(_crops()), MatrixTable.from_matrices(_matrices())
    with h5py.File(path, "w") as h5:
        crops.write(h5.create_group("crops"))
        matrices.write(h5.create_group("matrices"), h5.create_group("splits"))
    written = {"crops/phrase": crops.phrase, "crops/x": crops.x,
               "matrices/elements": matrices.elements, "matrices/panels": matrices.panels}
    assert content_hash(path, written) == content_hash(path)
    # arrays that are not what the file holds are read back instead of trusted
    other = {"crops/x": crops.x.astype(np.int64) + 1,  # another dtype (the file's is int32)
             "matrices/elements": np.zeros_like(matrices.elements, dtype=np.int64),
             "matrices/panels": matrices.panels[:1]}  # another shape
    assert content_hash(path, other) == content_hash(path)
    # the values stand in for the file's: a caller must pass what it wrote
    changed = {"matrices/panels": matrices.panels + 1}
    assert content_hash(path, changed) != content_hash(path)
