"""Cut a JSON array of records into byte ranges of whole records, for workers to parse apart.
One program joins every two records with the same bytes (`}, {"image_id"`): `JoinScan` learns
the join from the first record and finds every record end by searching for it; `plan` cuts
there into `Chunk`s of about `TARGET` bytes. A join may occur inside a record, so `load`
refuses a chunk that is not exactly its records (the caller then streams the file).
"""

from __future__ import annotations

import bisect
import hashlib
import re
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import msgspec

BLOCK = 1 << 22   # bytes read at a time; also how far into a file its first record may end
TARGET = 1 << 21  # bytes per chunk: ~20 MB of Python objects while a worker parses it
_JOIN = re.compile(rb'\}[ \t\r\n]*,[ \t\r\n]*\{[ \t\r\n]*("[^"\\]*")')  # }, {"key"
_FIRST_KEY = re.compile(rb'[ \t\r\n]*\[[ \t\r\n]*\{[ \t\r\n]*("[^"\\]*")')
_TRIES = 64  # joins tried as the end of the first record before giving up on the file


class Chunk(NamedTuple):
    """Records `first` .. `first + count - 1` of the array: bytes `start` .. `stop`."""

    path: Path
    start: int
    stop: int
    first: int
    count: int
    last: bool  # runs to the end of the file: holds the array's "]"


class JoinScan:
    """The ends of a file's records, found block by block (`more`); `sha256` once all read."""

    def __init__(self, path: Path, join: bytes, start: int):
        self.path, self.join, self.start = path, join, start  # start: just after the "["
        self.size = path.stat().st_size
        self.ends: list[int] = []  # just after each record's "}" that a join follows
        self.offset = 0  # bytes read so far
        self._hasher = hashlib.sha256()
        self._carry = b""  # the last bytes read, where a join may begin

    @classmethod
    def open(cls, path: str | Path) -> JoinScan | None:
        """The file's scan; None unless its first `BLOCK` bytes start an array of joined objects."""
        with open(path, "rb") as f:
            head = f.read(BLOCK)
        first = _FIRST_KEY.match(head)
        if first is None:
            return None
        start = head.index(b"[") + 1
        tries = (m for m in _JOIN.finditer(head, first.end()) if m.group(1) == first.group(1))
        for _, match in zip(range(_TRIES), tries):
            try:
                one = len(msgspec.json.decode(b"[" + head[start:match.start() + 1] + b"]"))
            except ValueError:
                continue
            return cls(Path(path), match.group(), start) if one == 1 else None
        return None

    @property
    def done(self) -> bool:
        return self.offset >= self.size

    @property
    def sha256(self) -> str:
        return self._hasher.hexdigest() if self.done else ""

    def more(self) -> None:
        """Read the next block and find the ends in it."""
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            block = f.read(BLOCK)
        if not block:  # the file shrank: what is missing fails to load
            self.offset = self.size
            return
        self._hasher.update(block)
        data = self._carry + block
        base = self.offset - len(self._carry)  # the file offset of data[0]
        at = data.find(self.join)
        while at >= 0:
            self.ends.append(base + at + 1)
            at = data.find(self.join, at + len(self.join))
        self._carry = data[len(data) - len(self.join) + 1:]
        self.offset += len(block)


def plan(scans: list[JoinScan], target: int | None = None) -> Iterator[tuple[Chunk, ...]]:
    """Chunks of the same records in every file of `scans`; the last runs to each file's end."""
    target = target or TARGET
    starts = [scan.start for scan in scans]
    first = 0
    while True:
        cut = _next_cut(scans[0], first, starts[0] + target)
        if cut is None or not all(_reach(scan, cut) for scan in scans[1:]):
            break
        yield tuple(Chunk(s.path, starts[i], s.ends[cut], first, cut - first + 1, False)
                    for i, s in enumerate(scans))
        starts = [scan.ends[cut] for scan in scans]
        first = cut + 1
    for scan in scans:
        while not scan.done:
            scan.more()
    yield tuple(Chunk(s.path, starts[i], s.size, first, len(s.ends) + 1 - first, True)
                for i, s in enumerate(scans))


def _next_cut(scan: JoinScan, first: int, reach: int) -> int | None:
    """The first record from `first` on that ends at or past `reach`; None at the file's end."""
    while True:
        k = bisect.bisect_left(scan.ends, reach, lo=first)
        if k < len(scan.ends):
            return k
        if scan.done:
            return None
        scan.more()


def _reach(scan: JoinScan, index: int) -> bool:
    """Read until record `index` has an end; False when the file ends first."""
    while len(scan.ends) <= index and not scan.done:
        scan.more()
    return len(scan.ends) > index


def load(chunk: Chunk, record: type) -> list:
    """The chunk's records (`record` structs if all fit, else plain JSON); ValueError unless
    its bytes are exactly `chunk.count` whole records."""
    with open(chunk.path, "rb") as f:
        f.seek(chunk.start)
        data = f.read(chunk.stop - chunk.start)
    if len(data) != chunk.stop - chunk.start:
        raise ValueError(f"{chunk.path}: shorter than when it was scanned")
    if chunk.first > 0:  # the comma after the record before the chunk
        data = data.lstrip(b" \t\r\n")
        if not data.startswith(b","):
            raise ValueError(f"{chunk.path}: no comma before record #{chunk.first}")
        data = data[1:]
    if not data.isascii():
        data.decode("utf-8")  # all of it: a typed parse checks only the strings it keeps
    text = b"[" + data + (b"" if chunk.last else b"]")  # the last chunk holds the array's "]"
    try:
        records = msgspec.json.decode(text, type=list[record])
    except msgspec.ValidationError:  # another layout: the caller reads the dicts
        records = msgspec.json.decode(text)
    if not isinstance(records, list) or len(records) != chunk.count:
        raise ValueError(f"{chunk.path}: not the {chunk.count} records the scan found there")
    return records
