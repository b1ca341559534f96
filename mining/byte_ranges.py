"""Cut a JSON file's top-level array into byte ranges of whole elements, without parsing it.

Visual Genome's annotation files are each one JSON array of per-image records. To let
several workers parse one file, `ArrayScan` finds where every element of that array ends,
reading the file once in blocks of `BLOCK` bytes (hashing them on the way, so the file's
sha256 costs no extra pass), and `plan` turns those ends into `Chunk`s of about `TARGET`
bytes that workers parse independently (`load`).

The scan is exact, for any valid JSON. Per block, one `bytes.translate` marks the only bytes
that matter - quotes, brackets and braces, backslashes - and numpy does the rest on those
few positions: a quote preceded by an odd run of backslashes is escaped (runs are counted
across block boundaries); the parity of the real quotes before a bracket (a binary search
among their positions) says whether it lies inside a string ("a [b] c", "x\\"}" ...); a
running sum of +1 per opening and -1 per closing bracket outside strings is the depth; an
element of the top-level array ends where a closing bracket brings the depth back to 1.
Commas, colons and non-ASCII text (UTF-8 bytes are all >= 0x80) never need looking at.

A file written by one program usually joins every two of its records with the same bytes:
"}, {" and the records' first key (`}, {"image_id"`). With `marks=True` the scan learns that
join from the elements it has found exactly (at least `LEARN` of them within the first
`LEARN_BYTES`, each followed by the join, and the join nowhere else), and from there on
finds each end by searching for the join (`bytes.find`): a third of the exact scan's time,
most of it the sha256. Nothing is assumed that the parse does not check: a chunk starts
where the chunk before it ended, so if that was a true boundary, the parser is at depth 1
outside any string there; a chunk that ends inside a string or a nested value does not parse
(the "]" added after it cannot close the array); and a chunk that parses must hold exactly
the number of elements its marks counted, so a join met inside a nested value or a record
that lacks the join is caught too. The first chunk starts at the array's "[", found by the
exact scan. So by induction every chunk that loads holds the elements, and only those, that
the exact scan would have given it.

For broken input the scan simply finds fewer ends; the parse of the chunk that holds the
damage then fails (`load` also checks that a chunk holds exactly the elements the scan
counted), and the caller falls back to the streaming reader, which names the file and the
record. So a chunk that parses is always made of whole elements, whatever the input; a file
whose records are not all joined alike is read correctly, by that fallback, only slower.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import mmap
import re
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import numpy as np

try:
    import orjson
except ImportError:  # optional: json alone reads every chunk, ~1.5x slower
    orjson = None

BLOCK = 1 << 22   # bytes scanned at a time: numpy's temporaries stay small
TARGET = 1 << 21  # bytes per chunk: ~20 MB of Python objects while a worker parses it

_QUOTE, _OPEN, _CLOSE = 1, 2, 3
_CLASSES = bytes(_QUOTE if c == 0x22 else _OPEN if c in b"[{" else _CLOSE if c in b"]}" else 0
                 for c in range(256))
_STEP = np.array([0, 0, 1, -1], dtype=np.int64)  # depth change per class
LEARN = 16  # elements found exactly before the join between them may stand for the scan
LEARN_BYTES = 1 << 23  # ... within this many bytes (`_learn_join` reads them again)
_JOIN = re.compile(rb'\}[ \t\r\n]*,[ \t\r\n]*\{[ \t\r\n]*"[^"\\]*"')  # }, {"key"


class ArrayScan:
    """The ends of the elements of the top-level array in the file at `path`, found block by
    block (`more`); `sha256` is set once the whole file has been read (`finish`). With
    `marks`, ends past the first `LEARN` may be found by the join between records (see the
    module docstring): exact for every chunk that `load` accepts."""

    def __init__(self, path: str | Path, marks: bool = False):
        self.path = Path(path)
        self.size = self.path.stat().st_size
        self.start = -1        # offset just after the array's "[" (-1: not seen yet)
        self.ends: list[int] = []  # offset just after each element's closing bracket
        self.sha256 = ""
        self._hasher = hashlib.sha256()
        self._offset = 0       # bytes scanned so far
        self._depth = 0
        self._in_string = 0
        self._backslashes = 0  # length of the run of backslashes that ended the last block
        self.bad = False       # not an array of objects/arrays: no chunks can be cut
        self.join = b""        # once learned: the bytes that join every two elements
        self._learn = marks
        self._carry = b""      # with a join: the bytes after the last end it may start in

    @property
    def done(self) -> bool:
        return self._offset >= self.size or self.bad

    def more(self) -> None:
        """Scan the next block."""
        with open(self.path, "rb") as f:
            f.seek(self._offset)
            block = f.read(BLOCK)
        if not block:
            self._offset = self.size
            return
        self._hasher.update(block)
        if self.join:
            self._find(block)
        else:
            self._scan(block)
        self._offset += len(block)
        if self._learn and len(self.ends) >= LEARN and not self.done:
            self._learn_join()
        elif self._learn and self._offset > LEARN_BYTES:
            self._learn = False  # records this long: the exact scan costs little per record

    def finish(self) -> None:
        """Read the rest of the file (its sha256 needs every byte)."""
        if self._offset < self.size:
            with open(self.path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
                self._hasher.update(memoryview(m)[self._offset:])
            self._offset = self.size
        self.sha256 = self._hasher.hexdigest()
        if self.join:  # the last element has no join after it: its end is before the "]"
            start = max(self.size - 4096, 0)
            with open(self.path, "rb") as f:
                f.seek(start)
                tail = f.read().rstrip()
            end = start + len(tail[:-1].rstrip())
            if tail.endswith(b"]") and end > self.ends[-1]:
                self.ends.append(end)

    def _learn_join(self) -> None:
        """Find ends by the join from here on, if the bytes between each two elements found so
        far are the same, and occur nowhere else in what was scanned."""
        self._learn = False
        with open(self.path, "rb") as f:
            f.seek(self.start)
            data = f.read(self._offset - self.start)
        ends = [e - 1 - self.start for e in self.ends]  # each element's closing bracket
        match = _JOIN.match(data, ends[0])
        if match is None:
            return
        join = match.group()
        hits, at = [], data.find(join)
        while at >= 0:
            hits.append(at)
            at = data.find(join, at + 1)
        if hits == ends or hits == ends[:-1]:  # the last end's join may run past the data
            self.join, self._carry = join, data[ends[-1] + 1:]

    def _find(self, block: bytes) -> None:
        data = self._carry + block
        base = self._offset - len(self._carry)  # the file offset of data[0]
        step, at = len(self.join), data.find(self.join)
        while at >= 0:
            self.ends.append(base + at + 1)
            at = data.find(self.join, at + step)
        self._carry = data[len(data) - step + 1:]

    def _scan(self, block: bytes) -> None:
        classes = np.frombuffer(block.translate(_CLASSES), dtype=np.uint8)
        quotes = classes == _QUOTE
        if self._backslashes or b"\\" in block:
            self._unescape(block, quotes)
        # the parity of the real quotes before a bracket says "inside a string"; counted by
        # a binary search among the quotes' positions (a cumulative sum over every byte of
        # the block took three times as long)
        at = np.flatnonzero(quotes)
        where = np.flatnonzero(classes >= _OPEN)
        where = where[(np.searchsorted(at, where) + self._in_string) % 2 == 0]
        step = _STEP[classes[where]]
        depth = np.cumsum(step) + self._depth
        if self.start < 0 and len(where):
            if depth[0] != 1 or block[where[0]] != 0x5B:  # "[": the file is not an array
                self.bad = True
                return
            self.start = self._offset + int(where[0]) + 1
        ends = where[(depth == 1) & (step == -1)] + (self._offset + 1)
        self.ends.extend(ends.tolist())
        if len(depth):
            self._depth = int(depth[-1])
        self._in_string = (self._in_string + len(at)) % 2
        self._backslashes = _trailing_backslashes(block, self._backslashes)

    def _unescape(self, block: bytes, quotes: np.ndarray) -> None:
        """Unmark each quote that an odd run of backslashes escapes (rare: a loop will do)."""
        at = block.find(b'\\"')
        while at >= 0:
            run = 1
            while at - run >= 0 and block[at - run] == 0x5C:
                run += 1
            if at - run < 0:  # the run reaches back into the block before
                run += self._backslashes
            if run % 2:
                quotes[at + 1] = False
            at = block.find(b'\\"', at + 2)
        if block[:1] == b'"' and self._backslashes % 2:
            quotes[0] = False


def _trailing_backslashes(block: bytes, carried: int) -> int:
    """Backslashes at the very end of a block (plus the last block's, if it is all of them)."""
    if not block.endswith(b"\\"):
        return 0
    run = len(block) - len(block.rstrip(b"\\"))
    return run + carried if run == len(block) else run


class Chunk(NamedTuple):
    """Elements `first` .. `first + count - 1` of the array, the bytes `start` .. `stop`."""

    path: Path
    start: int
    stop: int
    first: int
    count: int
    last: bool  # runs to the end of the file: holds the array's "]"


def plan(scans: list[ArrayScan], target: int | None = None) -> Iterator[tuple[Chunk, ...]]:
    """Chunks of whole elements, the same element indices in every file scanned by `scans`
    (the first file's bytes decide where to cut), scanned only as far as they are needed.

    The last tuple runs to the end of every file, so elements one file has beyond the others,
    and anything after the array, stay in it; once it is out, every scan has its sha256.
    """
    target = target or TARGET
    lead = scans[0]
    for scan in scans:
        while scan.start < 0 and not scan.done:
            scan.more()
    starts = [s.start for s in scans]
    first = 0
    if min(starts) >= 0:
        while True:
            cut = _next_cut(lead, first, starts[0], target)
            if cut is None or not all(_reach(s, cut) for s in scans[1:]):
                break
            yield tuple(Chunk(s.path, starts[i], s.ends[cut], first, cut - first + 1, False)
                        for i, s in enumerate(scans))
            starts = [s.ends[cut] for s in scans]
            first = cut + 1
    for scan in scans:
        while not scan.done:
            scan.more()
        scan.finish()
    yield tuple(Chunk(s.path, max(starts[i], 0), s.size, first, max(len(s.ends) - first, 0),
                      True) for i, s in enumerate(scans))


def _next_cut(scan: ArrayScan, first: int, start: int, target: int) -> int | None:
    """The index of the first element at or after `first` that ends `target` bytes past
    `start`; None when the file ends first (the rest becomes the last chunk)."""
    while True:
        k = bisect.bisect_left(scan.ends, start + target, lo=first)
        if k < len(scan.ends) - 1:
            return k  # another element follows: the array's last stays with its "]"
        if scan.done:
            return None
        scan.more()


def _reach(scan: ArrayScan, index: int) -> bool:
    """Scan until element `index` has an end and another element follows it."""
    while len(scan.ends) <= index + 1 and not scan.done:
        scan.more()
    return len(scan.ends) > index + 1


def load(chunk: Chunk, typed=None) -> list:
    """The elements of `chunk`, parsed; ValueError when the bytes are not exactly
    `chunk.count` whole elements (broken JSON, or not what the scan found). `typed`: a
    faster reader of the bytes (`typed_records.read`), whose elements are taken where it
    gives them (not None); the others go through `decode`.

    The bytes are read once into a buffer with room for the "[" and "]" that make them one
    array (the comma before the first element becomes a space): no copies of the chunk.
    """
    size = chunk.stop - chunk.start
    buf = bytearray(size + 2)
    with open(chunk.path, "rb") as f:
        f.seek(chunk.start)
        if f.readinto(memoryview(buf)[1:size + 1]) != size:
            raise ValueError(f"{chunk.path}: shorter than when it was scanned")
    buf[0], buf[-1] = 0x5B, 0x20 if chunk.last else 0x5D  # "[", and " " or "]"
    if chunk.first > 0:
        comma = 1
        while comma <= size and buf[comma] in b" \t\r\n":
            comma += 1
        if comma > size or buf[comma] != 0x2C:
            raise ValueError(f"{chunk.path}: no comma before element #{chunk.first}")
        buf[comma] = 0x20
    elements = typed(buf) if typed is not None else None
    if elements is None:
        elements = decode(buf)
    if len(elements) != chunk.count:
        raise ValueError(f"{chunk.path}: {len(elements)} elements where the scan found "
                         f"{chunk.count}")
    return elements


#: digits as "1", every other byte "0": a run of `_LONG` "1"s is a number orjson may not keep
_DIGITS = bytes(0x31 if 0x30 <= c <= 0x39 else 0x30 for c in range(256))
_LONG = b"1" * 19  # orjson keeps every integer of up to 18 digits an int (-2**63 has 19)


def decode(buf: bytes | bytearray):
    """`json.loads(buf)` (NaN and Infinity refused), through orjson where it gives the same
    objects: ~1.5x faster on VG's records. orjson reads a subset of what `json` reads - it
    refuses lone surrogates and numbers beyond a double - but it turns an integer beyond
    64 bits into a float, so text with a run of 19 digits or more goes to `json`."""
    if orjson is not None and _LONG not in buf.translate(_DIGITS):
        try:
            return orjson.loads(buf)
        except orjson.JSONDecodeError:
            pass  # json reads it, or names the fault
    return json.loads(buf, parse_constant=_refuse)


def _refuse(name: str):
    raise ValueError(f"{name} is not JSON")
