"""msgspec's typed records give the passes exactly what json.loads and the dict readers give,
and nothing where they might not."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vprom.errors import VpromError
from vprom.mining import count_pass, pool_passes, readers, synth, typed_records

SOURCE = readers.FileRef(Path("chunk.json"))
FIRST = 7  # the chunk's first record is record #7 of its file

#: values of every JSON type, and the edges where parsers differ
VALUES = st.one_of(
    st.integers(-5, 3000), st.integers(-(1 << 70), 1 << 70), st.booleans(), st.none(),
    st.floats(allow_nan=False, allow_infinity=False), st.sampled_from([1.0, -0.0, 1e300]),
    st.text(max_size=6), st.sampled_from(["\ud800", "caf\u00e9", "a\u0000b", "\U0001f600"]),
    st.lists(st.integers(0, 9), max_size=2), st.dictionaries(st.text(max_size=2),
                                                             st.integers(), max_size=1))
NAMES = st.one_of(st.lists(st.one_of(st.text(max_size=5), st.integers()), max_size=3),
                  VALUES)


STRINGS = st.lists(st.text(max_size=5), max_size=3)
BOX = st.integers(-10, 900)
REGION = st.fixed_dictionaries(
    {"region_id": st.integers(0, 10**9), "phrase": st.text(max_size=12), "x": BOX, "y": BOX,
     "width": BOX, "height": BOX}, optional={"image_id": BOX, "id": BOX})
OBJECT = st.fixed_dictionaries(
    {"object_id": st.integers(0, 10**9), "x": BOX, "y": BOX, "w": BOX, "h": BOX,
     "names": STRINGS},
    optional={"attributes": STRINGS, "merged_object_ids": st.lists(BOX, max_size=2),
              "synsets": NAMES, "id": BOX, "name": NAMES})


@st.composite
def _records(draw, key: str, item):
    """Records of the fast path's layout, clean in a third of the draws; else one or two
    values anywhere made anything, or keys dropped: so both ways of reading are compared,
    and the typed read's refusals are too."""
    record = st.fixed_dictionaries({key: st.lists(item, max_size=4),
                                    "image_id": st.integers(0, 10**6)},
                                   optional={"id": st.integers(0, 10**6)})
    records = draw(st.lists(record, min_size=1, max_size=4))
    for _ in range(draw(st.integers(0, 2))):
        container, at = draw(st.sampled_from(list(_spots(records))))
        if isinstance(container, dict) and draw(st.booleans()):
            del container[at]
        else:
            container[at] = draw(VALUES)
    return records


def _spots(value):
    """(container, key or index) for every value inside `value`."""
    pairs = enumerate(value) if isinstance(value, list) else \
        value.items() if isinstance(value, dict) else ()
    for at, inner in list(pairs):
        yield value, at
        yield from _spots(inner)


def _encode(records, ascii_only: bool) -> bytes:
    return json.dumps(records, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")


def _dict_images(buf: bytes, key: str) -> list:
    """What the dict readers make of the records; each image's items as the fast path."""
    pairs = enumerate(json.loads(buf), FIRST)
    if key == "regions":
        found = list(count_pass.images(pairs, SOURCE))
        assert all(image.items is None or count_pass._typed(image.regions) is not None
                   for image in found)  # the typed read took only the fast path's records
        return [(i.index, i.image_id, i.regions) for i in found]
    found = list(pool_passes.images(pairs, SOURCE, key))
    return [(i.index, i.image_id, i.objects, i.annotations) for i in found]


def _typed_images(records: list, key: str) -> list:
    if key == "regions":
        return [(i.index, i.image_id, list(map(count_pass._REGION_ATTRIBUTES, i.regions)))
                for i in count_pass.typed_images(records, FIRST, SOURCE)]
    return [(i.index, i.image_id, i.objects, i.annotations)
            for i in pool_passes.typed_images(records, FIRST, SOURCE, key)]


def _same_or_refused(buf: bytes, key: str) -> bool:
    """Where the typed read reads `buf`, json.loads does too and the images are the same.
    True when the typed read took it."""
    records = typed_records.read(buf, "regions" if key == "regions" else "objects")
    if records is None:
        return False
    assert typed_records.typed(records)
    assert _typed_images(records, key) == _dict_images(buf, key)
    return True


@settings(max_examples=300, deadline=None, derandomize=True)
@given(records=_records("regions", REGION), ascii_only=st.booleans())
def test_typed_regions_are_what_the_dict_reader_gives(records, ascii_only):
    _same_or_refused(_encode(records, ascii_only), "regions")


@settings(max_examples=300, deadline=None, derandomize=True)
@given(key=st.sampled_from(["objects", "attributes"]), data=st.data(),
       ascii_only=st.booleans())
def test_typed_objects_are_what_the_dict_reader_gives(key, data, ascii_only):
    extra = st.sampled_from(["objects", "attributes"])  # attributes.json may say "objects"
    records = data.draw(_records(key if key == "objects" else data.draw(extra), OBJECT))
    _same_or_refused(_encode(records, ascii_only), key)


MUTATIONS = [b"\xff", b"\xc3", b"\x00", b"\x01", b'"', b"\\", b"\\u", b"\\ud800", b"NaN",
             b"-Infinity", b"1e999", b"0", b"-", b".", b"e", b",", b":", b"}", b"]", b"[",
             b"{", b" ", b"\xef\xbb\xbf", b"99999999999999999999", b"true", b"\xe2\x80"]


@settings(max_examples=400, deadline=None, derandomize=True)
@given(key=st.sampled_from(["regions", "objects", "attributes"]), data=st.data())
def test_damaged_bytes_are_refused_or_read_as_json_reads_them(key, data):
    """A byte changed, inserted or cut anywhere: either the typed read refuses the chunk, or
    json.loads reads it and the images are the same. Never the typed read alone."""
    buf = bytearray(_vg_chunk(key))
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(0, len(buf)))
        what = data.draw(st.sampled_from(MUTATIONS))
        cut = data.draw(st.integers(0, 2))
        buf[at:at + cut] = what
    try:
        json.loads(bytes(buf))
    except (ValueError, RecursionError):
        assert typed_records.read(bytes(buf), "regions" if key == "regions" else "objects") \
            is None
        return
    try:
        _same_or_refused(bytes(buf), key)
    except VpromError:  # the dict reader refuses it: so must the typed read
        assert typed_records.read(bytes(buf), "regions" if key == "regions" else "objects") \
            is None


_CHUNKS: dict = {}


def _vg_chunk(key: str) -> bytes:
    """The first records of a small synthetic corpus's file, as one array."""
    if key not in _CHUNKS:
        with tempfile.TemporaryDirectory() as folder:
            synth.write_corpus(Path(folder), images=3, seed=1)
            name = {"regions": "region_descriptions", "objects": "objects",
                    "attributes": "attributes"}[key]
            records = json.loads((Path(folder) / f"{name}.json").read_text())
        for record in records:  # keep the chunk short
            record[next(k for k in record if isinstance(record[k], list))][3:] = []
        _CHUNKS[key] = json.dumps(records).encode()
    return _CHUNKS[key]


@pytest.mark.parametrize("key", ["regions", "objects", "attributes"])
def test_vg_layout_takes_the_typed_read(key):
    """The typed read is what the passes use on VG's own layout (so it is what is tested)."""
    assert _same_or_refused(_vg_chunk(key), key)
    assert typed_records.msgspec is not None  # the project installs it


REFUSED = {
    "a skipped string not UTF-8": b'[{"id": 1, "url": "\xff", "regions": []}]',
    "a lone surrogate": b'[{"id": 1, "regions": [{"region_id": 2, "phrase": "\\ud800", '
                        b'"x": 0, "y": 0, "width": 1, "height": 1}]}]',
    "NaN where nothing reads it": b'[{"id": 1, "url": NaN, "regions": []}]',
    "a float box": b'[{"id": 1, "regions": [{"region_id": 2, "phrase": "a", "x": 0.0, '
                   b'"y": 0, "width": 1, "height": 1}]}]',
    "a bool id": b'[{"id": true, "regions": []}]',
    "no image id": b'[{"regions": []}]',
    "a null image id beside an id": b'[{"image_id": null, "id": 3, "regions": []}]',
    "a region without region_id": b'[{"id": 1, "regions": [{"id": 2, "phrase": "a", '
                                  b'"x": 0, "y": 0, "width": 1, "height": 1}]}]',
    "a record not an object": b'[[1, 2]]',
}


@pytest.mark.parametrize("text", REFUSED.values(), ids=REFUSED.keys())
def test_what_the_fast_path_does_not_take_is_refused(text):
    assert typed_records.read(text, "regions") is None


def test_attributes_as_one_string_go_to_the_dict_reader():
    text = (b'[{"id": 1, "attributes": [{"object_id": 2, "x": 0, "y": 0, "w": 1, "h": 1, '
            b'"names": ["a"], "attributes": "red"}]}]')
    assert typed_records.read(text, "objects") is None


def test_duplicate_keys_keep_the_last_as_json_does():
    text = (b'[{"id": 1, "id": 4, "regions": [{"region_id": 2, "region_id": 3, "phrase": "a",'
            b' "x": 0, "y": 0, "width": 1, "height": 1}]}]')
    assert _same_or_refused(text, "regions")
    assert _typed_images(typed_records.read(text, "regions"), "regions")[0][:2] == (FIRST, 4)


def test_without_msgspec_nothing_is_read_typed(monkeypatch):
    monkeypatch.setattr(typed_records, "msgspec", None)
    assert typed_records.read(_vg_chunk("regions"), "regions") is None
    assert not typed_records.typed([{"regions": []}])
