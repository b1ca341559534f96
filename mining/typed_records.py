"""A chunk's image records read by msgspec into typed structs: only the fields a pass uses.

`byte_ranges.decode` builds every dict and value of a chunk (orjson), and the passes then
pick their fields and check their types in Python. For the records the passes' fast paths
take - VG's own layout: int ids and boxes, a str phrase, lists of names - msgspec does both
in C, skips the fields no pass reads (synsets, urls, each region's image id) without
building them, and gives structs that are cheaper to make and to free: reading a chunk of
region_descriptions.json, objects.json or attributes.json and taking its rows costs about
half as much.

`read` gives the records only where they are exactly what `json.loads` and the fast path
would have made of them; otherwise None, and the caller reads the chunk as before
(`byte_ranges.decode` and the dict readers, which name whatever is wrong):
- a record or item of another shape (a float box, "id" for "object_id", a missing key,
  "attributes" as one string, an int that is a bool) fails msgspec's types;
- msgspec refuses NaN, Infinity and lone surrogates, and numbers beyond a double in the
  fields it keeps, all of which `json.loads` reads - the caller's reader then decides;
- msgspec checks UTF-8 only in the strings it keeps, so a chunk that is not all ASCII is
  read only if it is valid UTF-8, as `json.loads` requires of every byte;
- a record with neither an int "image_id" nor an int "id".
Where both read a value they read the same one (duplicate keys: the last; integers of any
size; floats correctly rounded), which tests/mining/test_typed_records.py holds them to.
"""

from __future__ import annotations

try:
    import msgspec
except ImportError:  # optional: without it every chunk goes through byte_ranges.decode
    msgspec = None

if msgspec is not None:
    _UNSET = msgspec.UNSET

    # gc=False: decoded JSON holds no reference cycles, and the collector need not track it
    class Region(msgspec.Struct, gc=False):
        region_id: int
        phrase: str
        x: int
        y: int
        width: int
        height: int

    class Object(msgspec.Struct, gc=False):
        object_id: int
        x: int
        y: int
        w: int
        h: int
        names: list
        attributes: list | None = None
        merged_object_ids: list | None = None

    class Regions(msgspec.Struct, gc=False):
        """A record of region_descriptions.json."""

        regions: list[Region] | None = None
        image_id: int | msgspec.UnsetType = _UNSET
        id: int | msgspec.UnsetType = _UNSET

    class Objects(msgspec.Struct, gc=False):
        """A record of objects.json; of attributes.json, its list is "attributes" (or, in
        some re-packagings, "objects")."""

        objects: list[Object] | None = None
        attributes: list[Object] | None = None
        image_id: int | msgspec.UnsetType = _UNSET
        id: int | msgspec.UnsetType = _UNSET

    _DECODERS = {"regions": msgspec.json.Decoder(list[Regions]),
                 "objects": msgspec.json.Decoder(list[Objects])}
    _REFUSED: tuple = (msgspec.DecodeError, ValueError, RecursionError)


def read(buf: bytes | bytearray, kind: str) -> list | None:
    """The records of `buf` (one JSON array) as structs - `kind` "regions" for
    region_descriptions.json, "objects" for objects.json and attributes.json - or None
    where they are not all what the fast path takes (see the module docstring)."""
    if msgspec is None:
        return None
    if not buf.isascii():
        try:
            buf.decode("utf-8")
        except UnicodeDecodeError:
            return None
    try:
        records = _DECODERS[kind].decode(buf)
    except _REFUSED:
        return None
    if any(record.image_id is _UNSET and record.id is _UNSET for record in records):
        return None  # the dict reader names the record
    return records


def typed(records: list) -> bool:
    """Whether `records` came from `read`."""
    return msgspec is not None and bool(records) and isinstance(records[0], msgspec.Struct)


def image_id(record) -> int:
    """The record's image id, as `readers.image_id_of` takes it: "image_id", else "id"."""
    return record.id if record.image_id is _UNSET else record.image_id
