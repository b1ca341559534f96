"""The byte-range splitter finds exactly the element boundaries of a top-level JSON array."""

from __future__ import annotations

import json

import numpy as np
import pytest

from vprom.mining import byte_ranges
from vprom.mining.byte_ranges import ArrayScan, load, plan

TRICKY = [
    {"image_id": 1, "phrase": "a [bracket] and {brace}, a comma"},
    {"image_id": 2, "phrase": 'escaped "quote" then } and ]', "objects": [{"x": [1, 2]}]},
    {"image_id": 3, "phrase": "ends with a backslash \\", "names": ["\\\\", "\\\"}"]},
    {"image_id": 4, "phrase": "unicode: caf\u00e9 \u2019 \U0001F600 \u00ab}\u00bb", "n": []},
    {"image_id": 5, "phrase": "\\\\\\\"]}, {\"image_id\": 99}", "nested": {"a": {"b": [[{}]]}}},
    [{"a list": "as an element"}],
    {},
]


def _write(tmp_path, elements, **dump) -> tuple:
    text = json.dumps(elements, **dump)
    path = tmp_path / "a.json"
    path.write_bytes(text.encode("utf-8"))
    return path, text.encode("utf-8")


def _true_ends(data: bytes, elements: list, dump: dict) -> list[int]:
    """Where each element ends, found by re-serialising (only for inputs written by json.dumps)."""
    ends, offset = [], data.index(b"[") + 1
    sep = dump.get("separators", (", ", ": "))[0].encode()
    for i, element in enumerate(elements):
        if i:
            offset += len(sep)
        offset += len(json.dumps(element, **dump).encode("utf-8"))
        ends.append(offset)
    return ends


@pytest.mark.parametrize("block", [1, 2, 3, 7, 64, 1 << 22])
@pytest.mark.parametrize("dump", [{}, {"ensure_ascii": False}, {"separators": (",", ":")}])
def test_scan_finds_every_element_end(tmp_path, monkeypatch, block, dump):
    monkeypatch.setattr(byte_ranges, "BLOCK", block)
    path, data = _write(tmp_path, TRICKY, **dump)
    scan = ArrayScan(path)
    while not scan.done:
        scan.more()
    scan.finish()
    assert scan.ends == _true_ends(data, TRICKY, dump)
    assert scan.start == 1
    import hashlib

    assert scan.sha256 == hashlib.sha256(data).hexdigest()


@pytest.mark.parametrize("target", [1, 40, 150, 10_000])
@pytest.mark.parametrize("block", [5, 1 << 22])
def test_chunks_hold_whole_elements_in_order(tmp_path, monkeypatch, target, block):
    monkeypatch.setattr(byte_ranges, "BLOCK", block)
    elements = TRICKY * 5
    path, _ = _write(tmp_path, elements)
    chunks = [c for (c,) in plan([ArrayScan(path)], target)]
    got = [e for c in chunks for e in load(c)]
    assert got == elements
    assert [c.first for c in chunks] == [sum(c.count for c in chunks[:k]) for k in range(len(chunks))]
    assert chunks[-1].last and not any(c.last for c in chunks[:-1])
    if target == 1:
        assert len(chunks) == len(elements)  # one element each; the last one with the "]"


def test_two_files_are_cut_at_the_same_elements(tmp_path):
    a = [{"image_id": i, "objects": [{"n": "x" * (i % 7)}] * i} for i in range(30)]
    b = [{"image_id": i, "attributes": []} for i in range(30)]
    (tmp_path / "a.json").write_text(json.dumps(a))
    (tmp_path / "b.json").write_text(json.dumps(b))
    scans = [ArrayScan(tmp_path / "a.json"), ArrayScan(tmp_path / "b.json")]
    pairs = list(plan(scans, 300))
    assert len(pairs) > 3
    for ca, cb in pairs:
        assert (ca.first, ca.count) == (cb.first, cb.count)
        assert [r["image_id"] for r in load(ca)] == [r["image_id"] for r in load(cb)]
    assert all(s.sha256 for s in scans)


def _records(n: int) -> list:
    """VG-like records, one key order for all, with joins and brackets inside their strings."""
    return [{"image_id": i, "objects": [{"names": ["a }, {\"image_id\": 7"] * (i % 3),
                                         "x": i, "phrase": "} , {" + "\\" * (i % 4)}]}
            for i in range(n)]


def _scanned(path, marks: bool) -> ArrayScan:
    scan = ArrayScan(path, marks=marks)
    while not scan.done:
        scan.more()
    scan.finish()
    return scan


@pytest.mark.parametrize("block", [97, 256, 4096])
@pytest.mark.parametrize("dump", [{}, {"separators": (",", ":")}, {"indent": 2},
                                  {"ensure_ascii": False}])
def test_marks_find_the_exact_ends_of_records_joined_alike(tmp_path, monkeypatch, block, dump):
    monkeypatch.setattr(byte_ranges, "BLOCK", block)
    monkeypatch.setattr(byte_ranges, "LEARN", 4)
    path, data = _write(tmp_path, _records(60), **dump)
    path.write_bytes(data + b"\n")
    exact, marked = _scanned(path, False), _scanned(path, True)
    assert marked.join.endswith(b'"image_id"') and not exact.join
    assert marked.ends == exact.ends
    assert marked.sha256 == exact.sha256
    chunks = [c for (c,) in plan([ArrayScan(path, marks=True)], 300)]
    assert len(chunks) > 5
    assert [e for c in chunks for e in load(c)] == _records(60)


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
def test_marks_that_miss_an_end_or_find_a_false_one_never_load(tmp_path, monkeypatch, kind,
                                                               target):
    monkeypatch.setattr(byte_ranges, "BLOCK", 256)
    monkeypatch.setattr(byte_ranges, "LEARN", 4)
    path, _ = _write(tmp_path, _odd_one_out(kind))
    scan = _scanned(path, True)
    assert scan.join and scan.ends != _scanned(path, False).ends  # the marks are wrong
    with pytest.raises(ValueError):  # and a chunk says so: the caller streams the file
        for (chunk,) in plan([ArrayScan(path, marks=True)], target):
            load(chunk)


def test_marks_are_not_learned_past_the_first_bytes(tmp_path, monkeypatch):
    monkeypatch.setattr(byte_ranges, "BLOCK", 256)
    monkeypatch.setattr(byte_ranges, "LEARN", 4)
    path, _ = _write(tmp_path, _records(60))
    assert _scanned(path, True).join
    monkeypatch.setattr(byte_ranges, "LEARN_BYTES", 300)  # 40 records take more bytes
    monkeypatch.setattr(byte_ranges, "LEARN", 40)
    scan = _scanned(path, True)
    assert not scan.join and scan.ends == _scanned(path, False).ends


def test_marks_are_not_learned_from_records_joined_differently(tmp_path, monkeypatch):
    monkeypatch.setattr(byte_ranges, "BLOCK", 256)
    monkeypatch.setattr(byte_ranges, "LEARN", 4)
    records = [{"image_id": i} if i % 2 else {"id": i} for i in range(200)]
    path, _ = _write(tmp_path, records)
    scan = _scanned(path, True)
    assert not scan.join and scan.ends == _scanned(path, False).ends


@pytest.mark.parametrize("text", [
    '[{"a": 1}, {"a": 2}, {"a": 3',          # truncated
    '[{"a": 1}, {"a": 2}, 7, {"a": 4}]',     # a scalar element the scan does not count
    '[{"a": 1}, {"a": 2}] trailing',         # something after the array
    '[{"a": 1},, {"a": 2}, {"a": 3}]',       # a doubled comma
    '[{"a": NaN}, {"a": 2}, {"a": 3}]',      # not JSON
])
def test_broken_input_never_loads_silently(tmp_path, text):
    path = tmp_path / "a.json"
    path.write_text(text)
    with pytest.raises(ValueError):
        for (chunk,) in plan([ArrayScan(path)], 1):
            load(chunk)


def test_not_an_array_gives_one_chunk_that_does_not_load(tmp_path):
    path = tmp_path / "a.json"
    path.write_text('{"objects": [{"a": 1}, {"a": 2}]}')
    (chunk,), = plan([ArrayScan(path)], 1)
    with pytest.raises(ValueError):
        load(chunk)


NUMBERS = [0, -0, 1, -1, 10 ** 17, 10 ** 18 - 1, -(10 ** 18) + 1, 2 ** 63 - 1, 2 ** 63,
           -(2 ** 63), -(2 ** 63) - 1, -(10 ** 19) + 7, 2 ** 64 - 1, 2 ** 64, 10 ** 30]
DECODED = [
    ("[" + ", ".join(map(str, NUMBERS)) + "]").encode(),
    b'[1.0, -0.0, 1e5, 1E-400, 0.1e1, 123456789012345678.5, 1.2345678901234567890123]',
    b'["\\ud800 lone", "\\ud83d\\ude00 pair", "caf\\u00e9", "\\u0000", "tab\\t"]',
    b'[{"a": 1, "a": 2, "x": [1e400, -1e400]}]',
    json.dumps(TRICKY).encode(),
]


def _typed(value):
    """`value` with each number's type beside it (1 and 1.0 compare equal)."""
    if isinstance(value, dict):
        return [(k, _typed(v)) for k, v in value.items()]
    if isinstance(value, list):
        return [_typed(v) for v in value]
    return type(value).__name__, repr(value)


@pytest.mark.parametrize("with_orjson", [True, False])
@pytest.mark.parametrize("text", DECODED)
def test_decode_gives_what_json_gives(monkeypatch, text, with_orjson):
    if not with_orjson:
        monkeypatch.setattr(byte_ranges, "orjson", None)
    assert _typed(byte_ranges.decode(bytearray(text))) == _typed(json.loads(text))


def test_decode_gives_json_floats_to_the_bit():
    rng = np.random.default_rng(0)
    values = np.concatenate([rng.standard_normal(2000) * 10.0 ** rng.integers(-30, 30, 2000),
                             rng.integers(-2 ** 62, 2 ** 62, 500) / 7])
    texts = [repr(float(v)) for v in values]
    texts += [f"{float(v):.{d}e}" for v, d in zip(values, rng.integers(1, 18, len(values)))]
    text = ("[" + ", ".join(texts) + "]").encode()
    assert byte_ranges.orjson is not None  # the project installs it: the fast path is tested
    got, want = byte_ranges.decode(text), json.loads(text)
    assert np.array_equal(np.array(got).view(np.int64), np.array(want).view(np.int64))


@pytest.mark.parametrize("with_orjson", [True, False])
@pytest.mark.parametrize("text", [b"[NaN]", b"[1, Infinity]", b"[1, ]", b"[01]"])
def test_decode_refuses_what_is_not_json(monkeypatch, text, with_orjson):
    if not with_orjson:
        monkeypatch.setattr(byte_ranges, "orjson", None)
    with pytest.raises(ValueError):
        byte_ranges.decode(text)
