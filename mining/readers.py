"""Streaming readers for Visual Genome's annotation files.

Visual Genome ships each annotation file as one JSON array of per-image records (up to
~700 MB each, ~2 GB in all). `json.load` would hold a whole file as Python objects (several
GB); these readers instead parse the array with ijson's C backend one image record at a time
and yield small typed records, so memory stays flat whatever the file size.

Each reader accepts the plain file (`objects.json`) or the `.json.zip` VG distributes, whose
single JSON member is decompressed as a stream (`locate` finds whichever is present). Bytes
flow through a `_CountingReader` that counts them (for the progress bar and for saying
*where* a file is broken) and, for plain files, hashes them on the way, so the sha256 of a
2 GB input costs no extra pass.

The schema drifted between VG releases; the readers absorb the known variants:

- image ids: `image_id` (v1.2+) or `id` (v1.0, and region_descriptions.json in every release);
- object ids: `object_id` or `id`; names: `names` (list), `name` (str) or `object_names`;
- `attributes` missing or null; `synsets` missing (not needed here); v1.4 `merged_object_ids`;
- boxes: objects use `x, y, w, h`, regions use `x, y, width, height`.

Broken input becomes a `VpromError` naming the file and the record: invalid or truncated JSON
(index of the last image record read, its id, and the byte offset), records missing a key
the pipeline needs (file, image id, object/region id, key), an image listed twice in
image_data.json (both records), and an image size no JPEG can have (a side of 0 or above
65,535 px). Boxes are not refused here: the pools pass clips them, and drops (with a count
in the pools report) those empty, outside their image or with an object id repeated.
"""

from __future__ import annotations

import hashlib
import zipfile
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO, NamedTuple

import ijson

from vprom.errors import VpromError

#: The annotation files `vprom mine` reads, by stem.
IMAGE_DATA = "image_data"
OBJECTS = "objects"
ATTRIBUTES = "attributes"
REGIONS = "region_descriptions"
FILES = (IMAGE_DATA, OBJECTS, ATTRIBUTES, REGIONS)

_CHUNK = 1 << 16  # ijson's read size; big enough that the Python wrapper costs nothing


class ImageInfo(NamedTuple):
    image_id: int
    width: int
    height: int


class VGObject(NamedTuple):
    """One object of objects.json or attributes.json (labels as written in the file)."""

    object_id: int
    names: tuple[str, ...]
    x: int
    y: int
    w: int
    h: int
    attributes: tuple[str, ...]
    merged_ids: tuple[int, ...]  # v1.4: ids of objects merged into this one


class ImageObjects(NamedTuple):
    index: int  # position of the image record in the file
    image_id: int
    objects: list[VGObject]


class Region(NamedTuple):
    region_id: int
    phrase: str
    x: int
    y: int
    w: int
    h: int


class ImageRegions(NamedTuple):
    index: int
    image_id: int
    regions: list[Region]


# ---------------------------------------------------------------- finding and opening files
def locate(vg_dir: str | Path, stem: str) -> Path:
    """`<stem>.json`, else `<stem>.json.zip`, else the newest `<stem>_vX_Y.json[.zip]`."""
    vg_dir = Path(vg_dir)
    if not vg_dir.is_dir():
        raise VpromError(f"{vg_dir}: no such folder; pass --vg the folder holding Visual "
                         "Genome's JSON files (e.g. objects.json or objects.json.zip)")
    for name in (f"{stem}.json", f"{stem}.json.zip"):
        if (vg_dir / name).is_file():
            return vg_dir / name
    versioned = sorted(vg_dir.glob(f"{stem}_v*.json")) + sorted(vg_dir.glob(f"{stem}_v*.json.zip"))
    if versioned:
        return max(versioned, key=lambda p: _version_key(p.name, stem))
    raise VpromError(f"{vg_dir}: neither {stem}.json nor {stem}.json.zip is there; run "
                     f"`vprom download --out {vg_dir} --no-images` or point --vg at the "
                     "folder holding Visual Genome's JSON")


def _version_key(name: str, stem: str) -> tuple[int, ...]:
    digits = name[len(stem) + 2:].split(".json")[0]
    return tuple(int(d) for d in digits.split("_") if d.isdigit())


class _CountingReader:
    """A binary stream that counts (and optionally hashes) the bytes read through it."""

    def __init__(self, raw: BinaryIO, hasher=None, progress: Callable[[int], None] | None = None):
        self.raw = raw
        self.hasher = hasher
        self.progress = progress
        self.offset = 0

    def read(self, size: int = -1) -> bytes:
        data = self.raw.read(size)
        self.offset += len(data)
        if self.hasher is not None:
            self.hasher.update(data)
        if self.progress is not None and data:
            self.progress(len(data))
        return data

    def drain(self) -> None:
        """Read to the end, so the hash covers the whole file."""
        while self.read(1 << 20):
            pass


class Source:
    """One annotation file opened as a stream; `sha256` is set once its records are all read.

    Use as a context manager; `stream` is what ijson reads. For a zip, the hash is that of the
    zip file on disk (taken in one extra pass over the compressed bytes).
    """

    def __init__(self, path: str | Path, progress: Callable[[int], None] | None = None):
        self.path = Path(path)
        self.progress = progress
        self.sha256 = ""
        self.size = 0  # bytes of JSON text (uncompressed)
        self._zip = None
        self._raw = None
        self._hasher = None

    def __enter__(self) -> Source:
        try:
            if self.path.suffix == ".zip":
                self._raw = self._open_member()
            else:
                self._raw = open(self.path, "rb")
                self.size = self.path.stat().st_size
                self._hasher = hashlib.sha256()
        except OSError as e:
            raise VpromError(f"{self.path}: cannot be read ({e})") from None
        self.stream = _CountingReader(self._raw, self._hasher, self.progress)
        return self

    def _open_member(self) -> BinaryIO:
        try:
            self._zip = zipfile.ZipFile(self.path)
        except zipfile.BadZipFile as e:
            raise VpromError(f"{self.path}: not a valid zip file ({e}); delete it and "
                             "download it again") from None
        members = [i for i in self._zip.infolist()
                   if i.filename.endswith(".json") and not i.filename.startswith("__MACOSX")]
        if len(members) != 1:
            names = ", ".join(i.filename for i in members) or "none"
            raise VpromError(f"{self.path}: expected exactly one .json member, found {names}; "
                             "unzip it by hand and pass the folder holding the .json file")
        self.size = members[0].file_size
        return self._zip.open(members[0])

    def finish(self) -> None:
        """Consume the rest of the stream and compute the file's sha256."""
        if self._hasher is not None:
            self.stream.drain()
            self.sha256 = self._hasher.hexdigest()
        else:
            h = hashlib.sha256()
            with open(self.path, "rb") as f:
                while block := f.read(1 << 20):
                    h.update(block)
            self.sha256 = h.hexdigest()

    def __exit__(self, *exc) -> None:
        if self._raw is not None:
            self._raw.close()
        if self._zip is not None:
            self._zip.close()


def records(source: Source, what: str) -> Iterator[tuple[int, dict]]:
    """(index, dict) for each element of the file's top-level array, with clear errors."""
    index, last_id = -1, None
    try:
        for index, record in enumerate(ijson.items(source.stream, "item", use_float=True)):
            check_record(record, source, index, what)
            last_id = record.get("image_id", record.get("id"))
            yield index, record
    except (ijson.JSONError, zipfile.BadZipFile, zlib.error, EOFError, UnicodeDecodeError) as e:
        where = ("before the first image record" if index < 0 else
                 f"after image record #{index} (image id {last_id})")
        raise VpromError(f"{source.path}: invalid or truncated JSON {where}, near byte "
                         f"{source.stream.offset:,} ({_first_line(e)}); the file is "
                         "incomplete or corrupt — download it again") from None
    if index < 0:
        raise VpromError(f"{source.path}: holds no image records (expected a JSON array of "
                         f"per-image records); is this Visual Genome's {what}?")
    source.finish()


# ---------------------------------------------------------------- field access
# `source` below is anything with a `path`: a `Source`, or a `FileRef` for a file read in
# byte ranges (mining.byte_ranges), so both ways of reading say the same thing.
class FileRef(NamedTuple):
    path: Path


def check_record(record, source, index: int, what: str) -> None:
    if not isinstance(record, dict):
        raise VpromError(f"{source.path}: record #{index} is a {type(record).__name__}, "
                         f"not an object; is this Visual Genome's {what}?")


def object_items(record: dict, source, image_id: int, key: str) -> list:
    """The list of objects of an image record (`key`: "objects" or "attributes")."""
    items = record.get(key)
    if items is None and key == "attributes":
        items = record.get("objects")  # some re-packagings name the list "objects"
    if items is None:
        return []
    if not isinstance(items, list):
        what = "objects.json" if key == "objects" else "attributes.json"
        raise VpromError(f"{source.path}: image {image_id}: '{key}' is not a list; "
                         f"is this Visual Genome's {what}?")
    return items


def image_id_of(record: dict, source: Source, index: int) -> int:
    image_id = record.get("image_id", record.get("id"))
    if not isinstance(image_id, int):
        raise VpromError(f"{source.path}: image record #{index} has no integer 'image_id' "
                         "(or 'id'); the file does not follow Visual Genome's schema")
    return image_id


def _box(item: dict, keys: tuple[str, str, str, str], source: Source, image_id: int,
         kind: str, item_id) -> tuple[int, int, int, int]:
    try:
        return tuple(int(item[k]) for k in keys)  # type: ignore[return-value]
    except KeyError as e:
        raise VpromError(f"{source.path}: image {image_id}, {kind} {item_id} has no "
                         f"'{e.args[0]}' key (a box needs {', '.join(keys)}); the file does "
                         "not follow Visual Genome's schema — re-download it") from None
    except (TypeError, ValueError):
        values = {k: item.get(k) for k in keys}
        raise VpromError(f"{source.path}: image {image_id}, {kind} {item_id} has a "
                         f"non-numeric box {values}; fix or re-download the file") from None


def strings(value) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    return tuple(v for v in value if isinstance(v, str))


def _object(item, source: Source, image_id: int, position: int) -> VGObject:
    """One object record. The common case (v1.2+ keys, int box, lists) takes the fast path:
    this runs ~7M times for objects.json + attributes.json."""
    try:
        object_id = item["object_id"]
        x, y, w, h = item["x"], item["y"], item["w"], item["h"]
        names = item["names"]
    except (KeyError, TypeError):
        return object_slow(item, source, image_id, position)
    if (type(object_id) is not int or type(x) is not int or type(y) is not int
            or type(w) is not int or type(h) is not int or type(names) is not list):
        return object_slow(item, source, image_id, position)
    attributes = item.get("attributes")
    merged = item.get("merged_object_ids")
    return VGObject(object_id, tuple(names), x, y, w, h,
                    tuple(attributes) if type(attributes) is list else strings(attributes),
                    tuple(merged) if merged else ())


def object_slow(item, source: Source, image_id: int, position: int) -> VGObject:
    """Older layouts ("id", "name", "object_names"), float boxes, and broken records."""
    if not isinstance(item, dict):
        raise VpromError(f"{source.path}: image {image_id}, object #{position} is not a JSON "
                         "object; the file does not follow Visual Genome's schema")
    object_id = item.get("object_id", item.get("id"))
    if not isinstance(object_id, int):
        raise VpromError(f"{source.path}: image {image_id}, object #{position} has no integer "
                         "'object_id' (or 'id'); the file does not follow Visual Genome's schema")
    names = item.get("names")
    if names is None:
        names = item.get("name", item.get("object_names"))
    x, y, w, h = _box(item, ("x", "y", "w", "h"), source, image_id, "object", object_id)
    merged = item.get("merged_object_ids") or ()
    return VGObject(object_id, strings(names), x, y, w, h, strings(item.get("attributes")),
                    tuple(int(m) for m in merged))


# ---------------------------------------------------------------- readers
def _image_records(path: str | Path, what: str, progress,
                   source_out: list | None) -> Iterator[tuple[Source, int, int, dict]]:
    """(source, index, image id, record) for each image record of the file at `path`.

    The opened `Source` is appended to `source_out`, so callers can read its sha256 once the
    iterator is exhausted.
    """
    with Source(path, progress) as source:
        if source_out is not None:
            source_out.append(source)
        for index, record in records(source, what):
            yield source, index, image_id_of(record, source, index), record


#: the largest side a JPEG can have (its header stores 16 bits): a size beyond it is not real
MAX_SIDE = 65_535


def read_images(path: str | Path, progress=None,
                source_out: list | None = None) -> Iterator[ImageInfo]:
    """image_data.json: one ImageInfo per image (id, width, height)."""
    for source, index, image_id, record in _image_records(path, "image_data.json", progress,
                                                          source_out):
        try:
            info = ImageInfo(image_id, int(record["width"]), int(record["height"]))
        except (KeyError, TypeError, ValueError, OverflowError):
            raise VpromError(f"{source.path}: image {image_id} (record #{index}) lacks a "
                             "numeric 'width'/'height'; re-download image_data.json") from None
        if not (0 < info.width <= MAX_SIDE and 0 < info.height <= MAX_SIDE):
            raise VpromError(f"{source.path}: image {image_id} (record #{index}) is "
                             f"{info.width}x{info.height} px, which no JPEG can be (each side "
                             f"1..{MAX_SIDE:,}); fix or remove that record, or re-download "
                             "image_data.json")
        yield info


def image_sizes(path: str | Path, source_out: list | None = None) -> dict[int, tuple[int, int]]:
    """image id -> (width, height) for every image of image_data.json (~108k entries).

    An image listed twice is refused: which of its sizes the boxes were drawn on cannot be
    told, and keeping either would clip crops to a guess.
    """
    sizes: dict[int, tuple[int, int]] = {}
    for index, info in enumerate(read_images(path, source_out=source_out)):
        size = (info.width, info.height)
        if info.image_id in sizes:
            first = next(i for i, seen in enumerate(read_images(path))
                         if seen.image_id == info.image_id)
            (w, h) = sizes[info.image_id]
            raise VpromError(f"{path}: image id {info.image_id} is listed twice, in record "
                             f"#{first} ({w}x{h}) and record #{index} ({size[0]}x{size[1]}); "
                             "each image must appear once — re-download image_data.json, or "
                             "remove the wrong record")
        sizes[info.image_id] = size
    return sizes


def read_objects(path: str | Path, progress=None, key: str = "objects",
                 source_out: list | None = None) -> Iterator[ImageObjects]:
    """objects.json (v1.0–v1.4): per image, its objects with names, box and merged ids.

    `key` is the list holding the objects: "objects" in objects.json, "attributes" in
    attributes.json (whose objects also carry `attributes`). The opened `Source` is appended
    to `source_out` so callers can read its sha256 once the iterator is exhausted.
    """
    what = "objects.json" if key == "objects" else "attributes.json"
    for source, index, image_id, record in _image_records(path, what, progress, source_out):
        items = object_items(record, source, image_id, key)
        yield ImageObjects(index, image_id,
                           [_object(item, source, image_id, i) for i, item in enumerate(items)])


def read_attributes(path: str | Path, progress=None,
                    source_out: list | None = None) -> Iterator[ImageObjects]:
    """attributes.json: the same per-image objects, with their `attributes` lists."""
    return read_objects(path, progress, key="attributes", source_out=source_out)


def read_regions(path: str | Path, progress=None,
                 source_out: list | None = None) -> Iterator[ImageRegions]:
    """region_descriptions.json: per image, its regions (id, phrase, x, y, width, height)."""
    for source, index, image_id, record in _image_records(path, "region_descriptions.json",
                                                          progress, source_out):
        items = record.get("regions") or ()
        yield ImageRegions(index, image_id, [_region(item, source, image_id, i)
                                             for i, item in enumerate(items)])


def _region(item, source: Source, image_id: int, position: int) -> Region:
    """One region; the common case takes the fast path (5.4M regions in VG)."""
    try:
        region_id, phrase = item["region_id"], item["phrase"]
        x, y, w, h = item["x"], item["y"], item["width"], item["height"]
    except (KeyError, TypeError):
        return region_slow(item, source, image_id, position)
    if (type(region_id) is not int or type(phrase) is not str or type(x) is not int
            or type(y) is not int or type(w) is not int or type(h) is not int):
        return region_slow(item, source, image_id, position)
    return Region(region_id, phrase, x, y, w, h)


def region_slow(item, source: Source, image_id: int, position: int) -> Region:
    region_id = item.get("region_id", item.get("id")) if isinstance(item, dict) else None
    if not isinstance(region_id, int):
        raise VpromError(f"{source.path}: image {image_id}, region #{position} has no "
                         "integer 'region_id'; the file does not follow Visual Genome's schema")
    box = _box(item, ("x", "y", "width", "height"), source, image_id, "region", region_id)
    phrase = item.get("phrase")
    return Region(region_id, phrase if isinstance(phrase, str) else "", *box)


def _first_line(error: Exception) -> str:
    """yajl's messages draw a multi-line arrow; keep the first line for a one-line error."""
    lines = str(error).strip().splitlines()
    return lines[0][:120] if lines else type(error).__name__
