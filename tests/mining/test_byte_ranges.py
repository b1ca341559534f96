"""Byte ranges of a JSON array hold exactly its records, as the streaming reader reads them,
or refuse to load."""

from __future__ import annotations

import hashlib
import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vprom.errors import VpromError
from vprom.mining import byte_ranges, readers, synth
from vprom.mining.byte_ranges import JoinScan, load, plan
from vprom.mining.readers import RegionsRecord


def _records(n: int) -> list:
    """VG-like records, one key order for all, with joins and brackets inside their strings."""
    return [{"image_id": i, "objects": [{"names": ["a }, {\"image_id\": 7"] * (i % 3),
                                         "x": i, "phrase": "} , {[" + "\\" * (i % 4)}],
             "note": "caf\u00e9 \U0001F600 \u00ab}\u00bb" if i % 5 == 0 else ""}
            for i in range(n)]


def _write(tmp_path, elements, name="a.json", **dump):
    path = tmp_path / name
    path.write_bytes(json.dumps(elements, **dump).encode("utf-8") + b"\n")
    return path


def _chunks(path, target):
    return [c for (c,) in plan([JoinScan.open(path)], target)]


def _never_loads(path, target: int) -> None:
    """The file is not cut (the caller streams it), or a chunk of it refuses to load."""
    scan = JoinScan.open(path)
    if scan is not None:
        with pytest.raises(ValueError):
            for (chunk,) in plan([scan], target):
                load(chunk, RegionsRecord)


@pytest.mark.parametrize("block", [300, 4096, 1 << 22])  # the first record fits in one
@pytest.mark.parametrize("target", [1, 300, 1 << 20])
@pytest.mark.parametrize("dump", [{}, {"separators": (",", ":")}, {"indent": 2},
                                  {"ensure_ascii": False}])
def test_chunks_hold_every_record_once_in_order(tmp_path, monkeypatch, block, target, dump):
    monkeypatch.setattr(byte_ranges, "BLOCK", block)
    records = _records(60)
    path = _write(tmp_path, records, **dump)
    scan = JoinScan.open(path)
    chunks = [c for (c,) in plan([scan], target)]
    assert [r for c in chunks for r in load(c, dict)] == records
    assert [c.first for c in chunks] == [sum(c.count for c in chunks[:k])
                                         for k in range(len(chunks))]
    assert chunks[-1].last and not any(c.last for c in chunks[:-1])
    assert scan.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    if target == 1:
        assert len(chunks) == len(records)


def test_two_files_are_cut_at_the_same_records(tmp_path):
    a = _write(tmp_path, [{"image_id": i, "objects": [{"n": "x" * (i % 7)}] * i}
                          for i in range(30)], "a.json")
    b = _write(tmp_path, [{"image_id": i, "attributes": []} for i in range(30)], "b.json")
    scans = [JoinScan.open(a), JoinScan.open(b)]
    pairs = list(plan(scans, 300))
    assert len(pairs) > 3
    for ca, cb in pairs:
        assert (ca.first, ca.count) == (cb.first, cb.count)
        assert [r["image_id"] for r in load(ca, dict)] == [r["image_id"] for r in load(cb, dict)]
    assert all(scan.sha256 for scan in scans)


def test_records_are_parsed_typed_where_they_fit_and_as_dicts_where_not(tmp_path):
    regions = [{"regions": [{"region_id": i, "phrase": "a", "x": 0, "y": 0, "width": 1,
                             "height": 1, "image_id": i}], "id": i} for i in range(5)]
    (chunk,) = _chunks(_write(tmp_path, regions), 1 << 20)
    typed = load(chunk, RegionsRecord)
    assert [type(r) for r in typed] == [RegionsRecord] * 5 and typed[3].regions[0].region_id == 3
    regions[3]["regions"][0]["x"] = 0.5  # a float box: not the struct's type
    (chunk,) = _chunks(_write(tmp_path, regions), 1 << 20)
    assert load(chunk, RegionsRecord) == regions


def _odd_one_out(kind: str) -> list:
    records = _records(60)
    if kind == "key order":  # a record with another first key: no join before it
        records[40] = {"objects": [], "image_id": 40}
    elif kind == "nested join":  # the join between two nested values
        records[40]["objects"] = [{"image_id": 1}, {"image_id": 2}]
    elif kind == "a list":
        records[40] = [{"image_id": 40}]
    return records


@pytest.mark.parametrize("kind", ["key order", "nested join", "a list"])
@pytest.mark.parametrize("target", [1, 300, 1 << 20])
def test_a_record_joined_otherwise_never_loads(tmp_path, kind, target):
    path = _write(tmp_path, _odd_one_out(kind))
    assert JoinScan.open(path) is not None
    _never_loads(path, target)


@pytest.mark.parametrize("text", [
    '[{"a": 1}, {"a": 2}, {"a": 3',          # truncated
    '[{"a": 1}, {"a": 2}, 7, {"a": 4}]',     # a scalar record the cut does not count
    '[{"a": 1}, {"a": 2}] trailing',         # something after the array
    '[{"a": 1},, {"a": 2}, {"a": 3}]',       # a doubled comma
    '[{"a": NaN}, {"a": 2}, {"a": 3}]',      # not JSON
    '[{"a": 1}, {"a": "\xff"}, {"a": 3}]',   # not UTF-8
])
def test_broken_input_never_loads(tmp_path, text):
    path = tmp_path / "a.json"
    path.write_bytes(text.encode("latin-1"))
    _never_loads(path, 1)


def test_a_skipped_string_that_is_not_utf8_is_refused(tmp_path):
    path = tmp_path / "a.json"
    path.write_bytes(b'[{"id": 1, "regions": []}, {"id": 2, "url": "\xff", "regions": []}]')
    (chunk,) = _chunks(path, 1 << 20)
    with pytest.raises(ValueError):
        load(chunk, RegionsRecord)


@pytest.mark.parametrize("text", [
    '{"objects": [{"a": 1}, {"a": 2}]}',  # not an array
    '[{"a": 1}]',                          # one record: no join to learn
    '[[1], [2]]',                          # not objects
    '[7, {"a": 1}, {"a": 2}]',             # the first record is not an object
])
def test_what_has_no_join_to_learn_is_not_cut(tmp_path, text):
    path = tmp_path / "a.json"
    path.write_text(text)
    assert JoinScan.open(path) is None


def test_a_first_record_longer_than_a_block_is_not_cut(tmp_path, monkeypatch):
    path = _write(tmp_path, _records(60))
    monkeypatch.setattr(byte_ranges, "BLOCK", 40)
    assert JoinScan.open(path) is None


# ---------------------------------------------------------------- the fast path agrees
# Not among them: an integer beyond 64 bits, which msgspec reads and the streaming reader's
# parser (yajl) refuses as an overflow.
MUTATIONS = [b"\xff", b"\xc3", b"\x00", b'"', b"\\", b"\\ud800", b"NaN", b"1e999", b"0", b"-",
             b".", b",", b":", b"}", b"]", b"[", b"{", b" ", b"true", b"null", b"1.5", b'"id"',
             b'"x"', b"\xe2\x80", b"-7"]


def _streamed(path, key):
    """What the streaming reader makes of the file: its records, or the error it names."""
    try:
        with readers.Source(path) as source:
            return [tuple(i[:3]) for i in readers.images(source, key)]
    except VpromError as e:
        return str(e)


def _chunked(path, key, target):
    """What a worker makes of the file's chunks, as `_streamed`; None where a chunk does not
    load (the pass is then streamed)."""
    scan = JoinScan.open(path)
    if scan is None:
        return None
    found = []
    try:
        for (chunk,) in plan([scan], target):
            records = load(chunk, readers.RECORD[key])
            found += [tuple(readers.image_of(i, r, path, key)[:3])
                      for i, r in enumerate(records, chunk.first)]
    except ValueError:
        return None
    except VpromError as e:
        return str(e)
    return found


_CHUNKS: dict = {}


def _vg_file(stem: str) -> bytes:
    """The records of a small synthetic corpus's file, kept short."""
    if stem not in _CHUNKS:
        with tempfile.TemporaryDirectory() as folder:
            synth.write_corpus(Path(folder), images=4, seed=1)
            records = json.loads((Path(folder) / f"{stem}.json").read_text())
        for record in records:
            record[next(k for k in record if isinstance(record[k], list))][3:] = []
        _CHUNKS[stem] = json.dumps(records).encode()
    return _CHUNKS[stem]


@settings(max_examples=300, deadline=None, derandomize=True)
@given(stem=st.sampled_from(["objects", "attributes", "region_descriptions"]), data=st.data())
def test_what_a_chunk_loads_is_what_the_streaming_reader_reads(tmp_path_factory, stem, data):
    """A byte changed, inserted or cut anywhere in a VG file: its chunks either refuse to
    load (the pass is streamed), or give the records, or name the error, the streaming
    reader gives."""
    key = {"region_descriptions": "regions"}.get(stem, stem)
    buf = bytearray(_vg_file(stem))
    for _ in range(data.draw(st.integers(0, 2))):
        at = data.draw(st.integers(0, len(buf)))
        buf[at:at + data.draw(st.integers(0, 2))] = data.draw(st.sampled_from(MUTATIONS))
    path = tmp_path_factory.mktemp("vg") / f"{stem}.json"
    path.write_bytes(bytes(buf))
    chunked = _chunked(path, key, data.draw(st.sampled_from([1, 200, 1 << 20])))
    if chunked is not None:
        assert chunked == _streamed(path, key)
