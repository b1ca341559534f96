import hashlib
import json

import h5py
import numpy as np
import pytest

from tests.dataset_fixture import crop_table, matrix_table
from vprom.domain import Crop, Matrix
from vprom.errors import VpromError
from vprom.tables import (
    STR,
    content_hash,
    crop_rows,
    present_rows,
    read_crop_table,
    read_manifest,
    read_matrix_table,
    set_manifest,
    string_codes,
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
        crop_table(_crops()).write(h5.create_group("crops"))
        matrix_table(_matrices()).write(h5.create_group("matrices"),
                                                     h5.create_group("splits"))
        set_manifest(h5, {"kind": "dataset"})
    crops = read_crop_table(path)
    assert [crops.row(i) for i in range(len(crops))] == _crops()
    table = read_matrix_table(path)
    parts = table.parts_of()
    assert [table.row(i, parts) for i in range(len(table))] == _matrices()
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
