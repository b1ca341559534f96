import json

import pytest

from vprom.io import atomic_dir, atomic_path, make_manifest, sha256_file, write_json


def test_atomic_path_replaces_only_on_success(tmp_path):
    target = tmp_path / "out.txt"
    target.write_text("old")
    with pytest.raises(RuntimeError):
        with atomic_path(target) as tmp:
            tmp.write_text("half")
            raise RuntimeError("killed")
    assert target.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]
    with atomic_path(target) as tmp:
        tmp.write_text("new")
    assert target.read_text() == "new"


def test_atomic_dir_keeps_old_folder_until_new_one_is_complete(tmp_path):
    target = tmp_path / "export"
    with atomic_dir(target) as tmp:
        (tmp / "a").write_text("1")
    with pytest.raises(KeyError):
        with atomic_dir(target) as tmp:
            (tmp / "b").write_text("2")
            raise KeyError
    assert sorted(p.name for p in target.iterdir()) == ["a"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export"]


def test_manifest_records_versions_config_and_hashes(tmp_path):
    f = tmp_path / "x.bin"
    f.write_bytes(b"abc")
    m = make_manifest("pools", {"min_side": 100}, seed=3, inputs={"x.bin": sha256_file(f)},
                      counts={"crops": 2})
    write_json(tmp_path / "m.json", m)
    back = json.loads((tmp_path / "m.json").read_text())
    assert back["format_version"] == 1 and back["seed"] == 3
    assert back["inputs"]["x.bin"] == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    assert back["vprom_version"]
