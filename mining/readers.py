"""Visual Genome's annotation files: finding them, streaming them, and the fields mining takes.
`records` streams a file's top-level array (plain or zipped) with ijson, then hashes the file;
`Source` counts the bytes and refuses nesting deeper than `MAX_DEPTH` (ijson's time grows with
the square of the depth). `image_of` makes a record an `ImageItems` of msgspec structs, absorbing
the drift between VG releases (`id`, `name`/`object_names`, one string for a list, float boxes).
"""

from __future__ import annotations

import zipfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import ijson
import msgspec
import numpy as np

from vprom.errors import VpromError
from vprom.file_kinds import vg_not_folder
from vprom.files import sha256_file

IMAGE_DATA, OBJECTS, ATTRIBUTES, REGIONS = ("image_data", "objects", "attributes",
                                            "region_descriptions")
FILES = (IMAGE_DATA, OBJECTS, ATTRIBUTES, REGIONS)
WHAT = {"objects": "objects.json", "attributes": "attributes.json",
        "regions": "region_descriptions.json", "images": "image_data.json"}
MAX_SIDE = 65_535  # the largest side a JPEG can have (its header stores 16 bits)
MAX_DEPTH = 64  # the deepest nesting of arrays and objects a file may have


class TooDeep(VpromError):
    """Nesting deeper than MAX_DEPTH, found at byte `args[0]` of the file."""


class ImageItems(NamedTuple):
    """One image record: its objects (`Object`s) or regions (`Region`s)."""

    index: int  # position of the record in its file
    image_id: int
    items: list
    path: Path


def locate(vg_dir: str | Path, stem: str) -> Path:
    """`<stem>.json`, else `<stem>.json.zip`, else the newest `<stem>_vX_Y.json[.zip]`."""
    vg_dir = Path(vg_dir)
    if not vg_dir.is_dir():
        raise VpromError(vg_not_folder(vg_dir))
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


class Source:
    """An annotation file as a counted binary stream; `sha256` (a zip's own) set by `records`."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.offset = 0
        self.sha256 = ""
        self._depth, self._in_string, self._escaped = 0, False, False
        self._zip = self._raw = None

    def __enter__(self):
        try:
            self._raw = self._open_member() if self.path.suffix == ".zip" else open(self.path, "rb")
        except OSError as e:
            raise VpromError(f"{self.path}: cannot be read ({e})") from None
        return self

    def _open_member(self):
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
        return self._zip.open(members[0])

    def read(self, size: int = -1) -> bytes:
        data = self._raw.read(size)
        self._check_depth(data)
        self.offset += len(data)
        return data

    def _check_depth(self, data: bytes) -> None:
        if self._escaped:
            data = data[1:]  # the character a backslash at the end of the last block escapes
        data = data.replace(b"\\\\", b"").replace(b'\\"', b"")
        self._escaped = data.endswith(b"\\")
        codes = np.frombuffer(data, dtype=np.uint8)
        quotes = codes == ord('"')
        outside = (np.cumsum(quotes) + self._in_string) % 2 == 0  # a closing quote: inside
        step = (((codes == ord("[")) | (codes == ord("{"))) & outside).astype(np.int32) - (
            ((codes == ord("]")) | (codes == ord("}"))) & outside)
        depth = self._depth + np.cumsum(step)
        if len(depth) and depth.max() > MAX_DEPTH:
            raise TooDeep(self.offset + int(np.argmax(depth > MAX_DEPTH)))
        self._depth = int(depth[-1]) if len(depth) else self._depth
        self._in_string = bool((quotes.sum() + self._in_string) % 2)

    def __exit__(self, *exc) -> None:
        for handle in (self._raw, self._zip):
            if handle is not None:
                handle.close()


def records(source: Source, what: str) -> Iterator[tuple[int, object]]:
    """(index, record) for each element of the file's top-level array, with clear errors."""
    index, last_id = -1, None
    try:
        for index, record in enumerate(ijson.items(source, "item", use_float=True)):
            if isinstance(record, dict):
                last_id = record.get("image_id", record.get("id"))
            yield index, record
    except TooDeep as e:
        raise VpromError(f"{source.path}: arrays or objects nest more than {MAX_DEPTH} deep "
                         f"in image record #{index + 1}, near byte {e.args[0]:,} (Visual Genome's "
                         "records nest 5 deep); the file is damaged or not Visual Genome's "
                         "— download it again") from None
    except (ijson.JSONError, zipfile.BadZipFile, zlib.error, EOFError, UnicodeDecodeError) as e:
        where = ("before the first image record" if index < 0 else
                 f"after image record #{index} (image id {last_id})")
        lines = str(e).strip().splitlines()  # yajl draws a multi-line arrow: keep one line
        raise VpromError(f"{source.path}: invalid or truncated JSON {where}, near byte "
                         f"{source.offset:,} ({lines[0][:120] if lines else type(e).__name__});"
                         " the file is incomplete or corrupt — download it again") from None
    if index < 0:
        raise VpromError(f"{source.path}: holds no image records (expected a JSON array of "
                         f"per-image records); is this Visual Genome's {what}?")
    source.sha256 = sha256_file(source.path)


def images(source: Source, key: str) -> Iterator[ImageItems]:
    """The `ImageItems`s of a whole file: `key` "objects", "attributes" or "regions"."""
    for index, record in records(source, WHAT[key]):
        yield image_of(index, record, source.path, key)


def image_sizes(path: str | Path) -> tuple[dict[int, tuple[int, int]], str]:
    """image id -> (width, height) of image_data.json, and its sha256; no image twice."""
    sizes: dict[int, tuple[int, int]] = {}
    first: dict[int, int] = {}
    with Source(path) as source:
        for index, record in records(source, WHAT["images"]):
            image_id = _image_id(record, source.path, index, "images")
            try:
                size = (int(record["width"]), int(record["height"]))
            except (KeyError, TypeError, ValueError, OverflowError):
                raise VpromError(f"{path}: image {image_id} (record #{index}) lacks a numeric "
                                 "'width'/'height'; re-download image_data.json") from None
            if not (0 < size[0] <= MAX_SIDE and 0 < size[1] <= MAX_SIDE):
                raise VpromError(f"{path}: image {image_id} (record #{index}) is {size[0]}x"
                                 f"{size[1]} px, which no JPEG can be (each side 1..{MAX_SIDE:,}"
                                 "); fix or remove that record, or re-download image_data.json")
            if image_id in sizes:
                (w, h) = sizes[image_id]
                raise VpromError(f"{path}: image id {image_id} is listed twice, in record "
                                 f"#{first[image_id]} ({w}x{h}) and record #{index} "
                                 f"({size[0]}x{size[1]}); each image must appear once — "
                                 "re-download image_data.json, or remove the wrong record")
            sizes[image_id], first[image_id] = size, index
    return sizes, source.sha256


# gc=False: parsed JSON holds no reference cycles for the collector to find.
class Object(msgspec.Struct, gc=False):
    """An object of objects.json or attributes.json."""

    object_id: int
    x: int
    y: int
    w: int
    h: int
    names: list
    attributes: list | None = None
    merged_object_ids: list | None = None


class Region(msgspec.Struct, gc=False):
    """A region of region_descriptions.json."""

    region_id: int
    phrase: str
    x: int
    y: int
    width: int
    height: int


class ObjectsRecord(msgspec.Struct, gc=False):
    """An image record of objects.json or attributes.json (list "attributes" or "objects")."""

    objects: list[Object] | None = None
    attributes: list[Object] | None = None
    image_id: int | msgspec.UnsetType = msgspec.UNSET
    id: int | msgspec.UnsetType = msgspec.UNSET


class RegionsRecord(msgspec.Struct, gc=False):
    """An image record of region_descriptions.json."""

    regions: list[Region] | None = None
    image_id: int | msgspec.UnsetType = msgspec.UNSET
    id: int | msgspec.UnsetType = msgspec.UNSET


RECORD = {"objects": ObjectsRecord, "attributes": ObjectsRecord, "regions": RegionsRecord}


def image_of(index: int, record, path: Path, key: str) -> ImageItems:
    """The `ImageItems` of record #`index` (a struct or a dict) of the file of `key`."""
    if type(record) is not RECORD[key]:
        record = _record_of(record, path, index, key)
    image_id = record.id if record.image_id is msgspec.UNSET else record.image_id
    if image_id is msgspec.UNSET:
        raise _no_image_id(path, index)
    if key == "regions":
        return ImageItems(index, image_id, record.regions or [], path)
    items = record.objects if key == "objects" or record.attributes is None else \
        record.attributes
    return ImageItems(index, image_id, items or [], path)


def _record_of(record, path: Path, index: int, key: str):
    """A record struct of a dict not in VG's layout, item by item."""
    try:
        return msgspec.convert(record, RECORD[key])
    except msgspec.ValidationError:
        pass
    image_id = _image_id(record, path, index, key)
    if key == "regions":
        return RegionsRecord([_region(item, path, image_id, position) for position, item
                              in enumerate(record.get("regions") or ())], image_id)
    items = record.get(key)
    if items is None and key == "attributes":
        items = record.get("objects")  # some re-packagings name the list "objects"
    if items is not None and not isinstance(items, list):
        raise VpromError(f"{path}: image {image_id}: '{key}' is not a list; is this Visual "
                         f"Genome's {WHAT[key]}?")
    objects = [_object(item, path, image_id, position)
               for position, item in enumerate(items or ())]
    return ObjectsRecord(objects, objects, image_id)


def _image_id(record, path: Path, index: int, key: str) -> int:
    if not isinstance(record, dict):
        raise VpromError(f"{path}: record #{index} is a {type(record).__name__}, not an "
                         f"object; is this Visual Genome's {WHAT[key]}?")
    image_id = record.get("image_id", record.get("id"))
    if not isinstance(image_id, int):
        raise _no_image_id(path, index)
    return image_id


def _no_image_id(path: Path, index: int) -> VpromError:
    return VpromError(f"{path}: image record #{index} has no integer 'image_id' (or 'id'); "
                      "the file does not follow Visual Genome's schema")


def _object(item, path: Path, image_id: int, position: int) -> Object:
    """An object in VG's layout or another ("id", "name", a float box, ...)."""
    if not isinstance(item, dict):
        raise VpromError(f"{path}: image {image_id}, object #{position} is not a JSON object; "
                         "the file does not follow Visual Genome's schema")
    object_id = item.get("object_id", item.get("id"))
    if not isinstance(object_id, int):
        raise VpromError(f"{path}: image {image_id}, object #{position} has no integer "
                         "'object_id' (or 'id'); the file does not follow Visual Genome's schema")
    names = item.get("names")
    if names is None:
        names = item.get("name", item.get("object_names"))
    box = _box(item, ("x", "y", "w", "h"), path, image_id, "object", object_id)
    merged = item.get("merged_object_ids") or ()
    return Object(object_id, *box, _strings(names), _strings(item.get("attributes")),
                  [int(m) for m in merged])


def _region(item, path: Path, image_id: int, position: int) -> Region:
    region_id = item.get("region_id", item.get("id")) if isinstance(item, dict) else None
    if not isinstance(region_id, int):
        raise VpromError(f"{path}: image {image_id}, region #{position} has no integer "
                         "'region_id'; the file does not follow Visual Genome's schema")
    box = _box(item, ("x", "y", "width", "height"), path, image_id, "region", region_id)
    phrase = item.get("phrase")
    return Region(region_id, phrase if isinstance(phrase, str) else "", *box)


def _box(item: dict, keys: tuple[str, ...], path: Path, image_id: int, kind: str,
         item_id) -> tuple[int, ...]:
    try:
        return tuple(int(item[k]) for k in keys)
    except KeyError as e:
        raise VpromError(f"{path}: image {image_id}, {kind} {item_id} has no '{e.args[0]}' "
                         f"key (a box needs {', '.join(keys)}); the file does not follow "
                         "Visual Genome's schema — re-download it") from None
    except (TypeError, ValueError, OverflowError):
        values = {k: item.get(k) for k in keys}
        raise VpromError(f"{path}: image {image_id}, {kind} {item_id} has a non-numeric box "
                         f"{values}; fix or re-download the file") from None


def _strings(value) -> list[str]:
    """The strings of a label field: a list (others dropped), one string, or null."""
    if value is None or isinstance(value, str):
        return [] if value is None else [value]
    return [v for v in value if isinstance(v, str)]
