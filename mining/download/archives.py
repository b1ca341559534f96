"""Safe reading and unpacking of the untrusted zips a Visual Genome mirror serves. `_checked`
refuses an entry that could escape its `Layout`, repeats, is encrypted or exotic, or exceeds
the `Limits` of a real archive; streaming recounts bytes and checks CRCs; a bad archive moves
to `NAME.bad`. `unpack` works in a temporary folder in `out`, then merges and marks it done.
Every write of `vprom download` keeps a reserve free (`footprint`: whole blocks per file).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import shutil
import stat
import tempfile
import zipfile
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from tqdm import tqdm

from vprom.errors import VpromError
from vprom.files import size_text

_CHUNK = 1 << 16
_GiB, _MiB = 1 << 30, 1 << 20
_READABLE = (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED)
_METHODS = {zipfile.ZIP_BZIP2: "bzip2", zipfile.ZIP_LZMA: "lzma", 9: "deflate64",
            6: "implode", 93: "zstandard", 95: "xz", 98: "ppmd", 99: "AES encryption"}
# What zipfile raises on a broken archive (EOFError: a truncated member; RuntimeError and
# NotImplementedError: encryption and methods that slipped past the checks).
_ZIP_FAULTS = (zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error, EOFError, ValueError,
               RuntimeError, NotImplementedError, OverflowError)
_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)
DEFAULT_RESERVE = 1 << 30   # 1 GiB: what a shell, an editor and a log need to keep going
_SIZE = re.compile(r"\s*(\d+(?:\.\d*)?)\s*([kmgt]?)(i?b?)\s*", re.IGNORECASE)
_UNIT = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


@dataclass(frozen=True)
class Limits:
    """The most bytes, entries and compression ratio an archive's members may have."""

    member_bytes: int
    total_bytes: int
    ratio: float
    members: int              # entries (files and folders) in all
    ratio_floor: int = _MiB   # smaller members are never refused for their ratio


# VG's 108,077 JPEGs (two image zips) are well under 64 MiB each, ~15 GB in all, and barely
# compress; its annotation JSON files are at most a few GB and compress 5 to 15 times.
IMAGE_LIMITS = Limits(member_bytes=64 * _MiB, total_bytes=32 * _GiB, ratio=20.0,
                      members=120_000)
JSON_LIMITS = Limits(member_bytes=16 * _GiB, total_bytes=16 * _GiB, ratio=100.0, members=8)


@dataclass(frozen=True)
class Layout:
    """What one archive may hold: files under one top-level `folder`, or exactly one `member`."""

    folder: str | None = None
    member: str | None = None
    limits: Limits = IMAGE_LIMITS

    def describe(self) -> str:
        return f"only {self.folder}/..." if self.folder else f"exactly one file, {self.member}"


class _Bad(Exception):
    """A fault of the archive itself; becomes "corrupt archive" with the reason."""


@dataclass(frozen=True)
class _Entry:
    info: zipfile.ZipInfo
    parts: tuple[str, ...]


def verify(archive: Path, layout: Layout) -> int:
    """Check a zip that stays zipped: layout, limits, every CRC; the bytes it expands to."""
    archive = Path(archive)
    with _guarded(archive), _open(archive, layout.limits) as zf:
        entries = _checked(zf, archive, layout)
        with _bar(archive, entries, "check") as bar:
            return sum(_stream(zf, e.info, None, bar) for e in entries if not e.info.is_dir())


def unpack(archive: Path, out: Path, layout: Layout,
           reserve: int = DEFAULT_RESERVE) -> list[str]:
    """Extract an images zip into `out`, keeping `reserve` bytes free; the names placed."""
    archive, out = Path(archive), Path(out)
    marker = marker_path(out, archive.name)
    if marker.exists():
        return json.loads(marker.read_text(encoding="utf-8"))["placed"]
    for stale in sorted(out.glob(f".{archive.name}.*.unpack")):   # a killed run's temp folder
        shutil.rmtree(stale, ignore_errors=True)
    with _guarded(archive), _open(archive, layout.limits) as zf:
        entries = _checked(zf, archive, layout)
        need = sum(e.info.file_size for e in entries if not e.info.is_dir())
        _check_room(archive, out, entries, reserve)
        tmp = Path(tempfile.mkdtemp(prefix=f".{archive.name}.", suffix=".unpack", dir=out))
        try:
            with _bar(archive, entries, "unpack") as bar:
                for entry in entries:
                    target = tmp.joinpath(*entry.parts)
                    if entry.info.is_dir():
                        target.mkdir(parents=True, exist_ok=True)
                        continue
                    disk = free_space(out)
                    if disk.free - footprint([entry.info.file_size], 0, disk.block) < reserve:
                        _refuse(archive, f"unpacking stopped at {entry.info.filename!r}: {out} "
                                f"would be left with less than the {size_text(reserve)} "
                                f"kept free (--reserve), {size_text(disk.free)} free")
                    target.parent.mkdir(parents=True, exist_ok=True)
                    with _create(target) as sink:
                        _stream(zf, entry.info, sink, bar)
            placed = sorted(p.name for p in tmp.iterdir())
            for name in placed:   # the checks allow exactly one name: layout.folder
                _place(tmp / name, out / name)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    marker.write_text(json.dumps({"archive": archive.name, "entries": len(entries),
                                  "bytes": need, "placed": placed}) + "\n", encoding="utf-8")
    return placed


def marker_path(out: Path, name: str) -> Path:
    return Path(out) / f".{name}.unpacked"


def quarantine(path: Path) -> Path:
    """Move a refused file to `NAME.bad` (replacing an older one) and return that path."""
    bad = path.with_name(path.name + ".bad")
    os.replace(path, bad)
    return bad


@contextlib.contextmanager
def _guarded(archive: Path) -> Iterator[None]:
    """Turn an archive fault into "corrupt archive" (moved to .bad), a disk fault into advice."""
    try:
        yield
    except (_Bad, *_ZIP_FAULTS) as e:
        reason = str(e) if isinstance(e, _Bad) else f"{type(e).__name__}: {e}"
        bad = quarantine(archive)
        raise VpromError(f"{archive}: corrupt archive ({reason}); moved to {bad.name} (delete "
                         "it when you like) - rerun `vprom download` to fetch it again") from None
    except OSError as e:
        if e.errno in _NO_SPACE:
            raise VpromError(f"{archive}: out of space while unpacking ({e.strerror}, "
                             f"{e.filename or archive.parent}); the archive is kept - free "
                             "space and rerun `vprom download`") from None
        raise VpromError(f"{archive}: {e.strerror or e} ({e.filename or archive}); the archive "
                         "is kept - fix that and rerun `vprom download`") from None


def _open(archive: Path, limits: Limits) -> zipfile.ZipFile:
    """The zip, refused before parsing when its end record declares too many entries."""
    with open(archive, "rb") as f:
        try:   # zipfile's reader of the end record (zip64 too); private, so guarded
            end = zipfile._EndRecData(f)
            count = None if end is None else end[zipfile._ECD_ENTRIES_TOTAL]
        except (AttributeError, IndexError, TypeError):
            count = None   # a future zipfile without them: _checked still counts the entries
    if count is not None and count > limits.members:
        raise _Bad(f"it declares {count} entries, more than the {limits.members} a real "
                   f"{archive.name} has")
    try:
        return zipfile.ZipFile(archive)
    except (zipfile.BadZipFile, OSError) as e:
        if getattr(e, "errno", errno.EINVAL) != errno.EINVAL:   # EINVAL: seeks before its start
            raise
        raise _Bad(f"not a readable zip: {e}") from None


def _checked(zf: zipfile.ZipFile, archive: Path, layout: Layout) -> list[_Entry]:
    """Every entry, checked against safety, the layout and the limits."""
    limits = layout.limits
    entries, seen, members = [], set(), []
    for info in zf.infolist():
        parts = _safe_parts(info)
        if layout.member is not None and parts[0] == "__MACOSX":
            continue   # resource forks a Mac adds when zipping; never read
        if parts in seen:
            raise _Bad(f"entry {info.filename!r} appears twice")
        seen.add(parts)
        if layout.folder is not None and parts[0] != layout.folder:
            raise _Bad(f"entry {info.filename!r} lies outside {layout.folder}/; an archive "
                       f"{archive.name} may create {layout.describe()}")
        if not info.is_dir():
            if layout.folder is not None and len(parts) < 2:
                raise _Bad(f"entry {info.filename!r} is a file where {layout.folder}/ "
                           "must be a folder")
            members.append(parts)
            _check_member(info, limits)
        entries.append(_Entry(info, parts))
    if layout.member is not None and members != [(layout.member,)]:
        found = ", ".join("/".join(p) for p in members) or "no file"
        raise _Bad(f"{archive.name} must hold {layout.describe()}, found {found}")
    if not members:
        raise _Bad(f"{archive.name} holds no file")
    if len(entries) > limits.members:
        raise _Bad(f"it has {len(entries)} entries, more than the {limits.members} a real "
                   f"{archive.name} has")
    folders = {e.parts for e in entries if e.info.is_dir()}
    folders |= {parts[:k] for parts in members for k in range(1, len(parts))}
    for parts in members:
        if parts in folders:
            raise _Bad(f"entry {'/'.join(parts)!r} is both a file and a folder")
    declared = sum(e.info.file_size for e in entries if not e.info.is_dir())
    size = archive.stat().st_size
    if declared > limits.total_bytes:
        raise _Bad(f"its entries declare {declared} bytes in all, more than the "
                   f"{limits.total_bytes} a real {archive.name} can hold")
    if declared > limits.ratio_floor and declared > limits.ratio * size:
        raise _Bad(f"its entries declare {declared} bytes from a {size}-byte archive, a "
                   f"compression ratio over {limits.ratio:g} that no real file of this kind has")
    return entries


def _safe_parts(info: zipfile.ZipInfo) -> tuple[str, ...]:
    """The entry's path components; `_Bad` when it could write outside its folder."""
    name = info.filename
    posix = name.replace("\\", "/")
    parts = tuple(p for p in posix.split("/") if p not in ("", "."))
    found = {"is a symbolic link": stat.S_ISLNK(info.external_attr >> 16),
             "has an absolute path": posix.startswith("/"),
             "has a drive letter": len(posix) > 1 and posix[1] == ":" and posix[0].isalpha(),
             "climbs out of the target folder with '..'": ".." in parts,
             "has an empty name": not parts}
    problem = next((what for what, there in found.items() if there), None)
    if problem:
        raise _Bad(f"entry {name!r} {problem}; the archive is unsafe")
    return parts


def _check_member(info: zipfile.ZipInfo, limits: Limits) -> None:
    name = info.filename
    if info.flag_bits & 0x1:
        raise _Bad(f"entry {name!r} is encrypted")
    if info.compress_type not in _READABLE:
        method = _METHODS.get(info.compress_type, f"method {info.compress_type}")
        raise _Bad(f"entry {name!r} is compressed with {method}; Visual Genome's zips use only "
                   "stored and deflate, the two read here with bounded memory")
    if info.file_size > limits.member_bytes:
        raise _Bad(f"entry {name!r} declares {info.file_size} bytes, more than the "
                   f"{limits.member_bytes} any real file of this kind has")
    if info.file_size > limits.ratio_floor and \
            info.file_size > limits.ratio * max(info.compress_size, 1):
        raise _Bad(f"entry {name!r} declares {info.file_size} bytes from {info.compress_size} "
                   f"compressed, a ratio over {limits.ratio:g} that no real file of this kind has")


def _stream(zf: zipfile.ZipFile, info: zipfile.ZipInfo, sink: BinaryIO | None, bar) -> int:
    try:
        src = zf.open(info)
    except OSError as e:   # a header pointing outside the file: the archive's fault
        raise _Bad(f"entry {info.filename!r} cannot be read ({e})") from None
    with src:
        return copy_counted(src, sink, info.file_size, info.filename, bar)


def copy_counted(src: BinaryIO, sink: BinaryIO | None, declared: int, name: str,
                 bar=None) -> int:
    """Copy src to sink, refusing (`_Bad`) the moment it yields more than `declared` bytes."""
    written = 0
    while True:
        try:
            chunk = src.read(_CHUNK)
        except OSError as e:   # reading is the archive's side; writing (below) the disk's
            raise _Bad(f"entry {name!r} cannot be read ({e})") from None
        if not chunk:
            break
        written += len(chunk)
        if written > declared:
            raise _Bad(f"entry {name!r} expands beyond the {declared} bytes it declares")
        if sink is not None:
            sink.write(chunk)
        if bar is not None:
            bar.update(len(chunk))
    if written != declared:
        raise _Bad(f"entry {name!r} holds {written} bytes but declares {declared}")
    return written


def _create(path: Path) -> BinaryIO:
    try:
        return open(path, "xb")   # "x": two entries can never write one file
    except FileExistsError:   # names that differ only in case, on a case-blind file system
        raise _Bad(f"two entries unpack to the same file {path.name!r}") from None


def _bar(archive: Path, entries: list[_Entry], what: str):
    return tqdm(total=sum(e.info.file_size for e in entries if not e.info.is_dir()), unit="B",
                unit_scale=True, desc=f"{what} {archive.name}", disable=None, leave=False)


def _check_room(archive: Path, out: Path, entries: list[_Entry], reserve: int) -> None:
    """Refuse an unpack that would take the reserve's space or more inodes than are free."""
    sizes = [e.info.file_size for e in entries if not e.info.is_dir()]
    disk = free_space(out)
    folders = len({e.parts[:k] for e in entries for k in range(1, len(e.parts))}
                  | {e.parts for e in entries if e.info.is_dir()})
    need = footprint(sizes, folders, disk.block)
    if need + reserve > disk.free:
        _refuse(archive, f"unpacking {len(sizes)} files and {folders} folders takes "
                f"{size_text(need)} on disk ({sum(sizes)} bytes declared, each file in whole "
                f"{disk.block}-byte blocks) and {size_text(reserve)} stay free (--reserve), "
                f"but {out} has {size_text(disk.free)} free")
    if disk.inodes is not None and len(sizes) + folders > disk.inodes:
        _refuse(archive, f"unpacking {len(sizes)} files and {folders} folders takes as many "
                f"inodes, but the file system of {out} has {disk.inodes} free")


def _refuse(archive: Path, why: str) -> None:
    raise VpromError(f"{archive}: {why}; the archive is kept - free space (or lower "
                     "--reserve) and rerun `vprom download`")


def _place(src: Path, dst: Path) -> None:
    """Move the unpacked top-level folder src to dst, merging into a folder already there."""
    if not dst.exists() and not dst.is_symlink():
        os.replace(src, dst)
        return
    if not dst.is_dir():
        raise VpromError(f"{dst} exists and is not a folder, so {src.name}/ cannot be unpacked "
                         "there; move it away and rerun `vprom download`")
    for folder, _, names in os.walk(src):
        into = dst / Path(folder).relative_to(src)
        if into.exists() and not into.is_dir():
            raise VpromError(f"{into} is a file where the archive has a folder; move it away "
                             "and rerun `vprom download`")
        into.mkdir(exist_ok=True)
        for name in names:
            target = into / name
            if target.is_dir() and not target.is_symlink():
                raise VpromError(f"{target} is a folder where the archive has a file; move it "
                                 "away and rerun `vprom download`")
            _move(Path(folder) / name, target)


def _move(src: Path, dst: Path) -> None:
    try:
        os.replace(src, dst)
    except OSError as e:
        if e.errno != errno.EXDEV:   # dst folder is a link to another disk: copy instead
            raise
        shutil.move(src, dst)


@dataclass(frozen=True)
class Disk:
    """The free space of one file system as an unprivileged user sees it."""

    free: int            # bytes
    block: int           # the allocation unit, bytes
    inodes: int | None   # free inodes, None where the file system does not count them


def free_space(path: Path) -> Disk:
    st = os.statvfs(path)
    block = st.f_frsize or st.f_bsize or 4096
    # btrfs and some network file systems report no inode table at all (f_files == 0)
    return Disk(free=st.f_bavail * block, block=block,
                inodes=st.f_favail if st.f_files else None)


def footprint(sizes: Iterable[int], folders: int, block: int) -> int:
    """Bytes of free space that files of these sizes, and this many folders, will take."""
    files = sum(max(-(-size // block), 1) for size in sizes)   # ceil, and at least a block
    return (files + folders) * block


def parse_size(text: str) -> int:
    """Bytes from "0", "500M", "2G", "1.5GiB" (powers of 1024); refuses other text."""
    match = _SIZE.fullmatch(text)
    if not match:
        raise ValueError(f"not a size: {text!r} (e.g. 0, 500M, 2G)")
    return int(float(match.group(1)) * _UNIT[match.group(2).lower()])
