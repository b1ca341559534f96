"""Fetch Visual Genome: resumable, size-checked downloads and safe unpacking.

Files (Visual Genome v1.2/v1.4 as published; `--base-url` fetches every file from one mirror
folder instead, as `base_url + "/" + name`):

- annotations, from VG's dataset folder: `image_data.json.zip`, `objects.json.zip`,
  `attributes.json.zip`, `region_descriptions.json.zip`. They stay zipped (~1 GB instead of
  ~2 GB): the miner streams the single JSON member out of the zip. Each is checked once, after
  download, to be a readable zip whose members' CRCs match.
- images (unless `images=False`): `images.zip` -> `VG_100K/`, `images2.zip` -> `VG_100K_2/`.

Download algorithm, per file: a complete file only ever appears under its final name (an
existing one is skipped). Bytes go to `NAME.part`; a rerun or a retry after a dropped
connection asks for `Range: bytes=N-` where N is the size of the part. If the server answers
206 with a Content-Range starting at N the bytes are appended; if it answers 200 (it ignores
Range) the part is truncated and written from 0; 416 means the part already holds the whole
file. The expected size comes from Content-Range's total or Content-Length; a part that ends
short is retried (bounded, with a growing pause), a part that overshoots the size is deleted
and refused. The sha256 of each finished file is recorded (one extra read of the file).

Unpacking, per image zip: every entry is checked before anything is written - entries that
are absolute, carry a drive letter, climb out with `..`, or are symlinks (S_IFLNK in the
external attributes) make the whole archive refused. Entries are extracted into a temporary
folder beside the target, and its top-level folders are renamed into place when all is done;
a marker file `.NAME.unpacked` records completion so a rerun skips both the download and the
unpack. The image zip is deleted after a successful unpack unless `keep_zips=True`.

`download.manifest.json` in the output folder records, for every file obtained so far, its
URL, size and sha256.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import stat
import tempfile
import time
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Mapping

import requests
from tqdm import tqdm

from vprom.errors import VpromError
from vprom.io import make_manifest, manifest_path, write_json

ANNOTATION_URL = "https://homes.cs.washington.edu/~ranjay/visualgenome/data/dataset"
IMAGE_URL = "https://cs.stanford.edu/people/rak248/VG_100K_2"
ANNOTATIONS = (
    "image_data.json.zip",
    "objects.json.zip",
    "attributes.json.zip",
    "region_descriptions.json.zip",
)
IMAGES = {"images.zip": "VG_100K", "images2.zip": "VG_100K_2"}
MANIFEST = "download"   # -> download.manifest.json

_CHUNK = 1 << 16   # small enough that a dropped connection loses little of the part
_RETRYABLE = (requests.ConnectionError, requests.Timeout, requests.exceptions.ChunkedEncodingError)
_CONTENT_RANGE = re.compile(r"bytes\s+(\d+)-(\d+)/(\d+|\*)")
_DRIVE = re.compile(r"^[A-Za-z]:")


@dataclass
class DownloadSummary:
    """What a `download` call did."""

    out: Path
    fetched: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    unpacked: list[str] = field(default_factory=list)
    bytes_fetched: int = 0

    def __str__(self) -> str:
        lines = [f"Visual Genome in {self.out}:"]
        lines.append(f"  fetched {len(self.fetched)} file(s), {_human(self.bytes_fetched)}"
                     + (f": {', '.join(self.fetched)}" if self.fetched else ""))
        if self.skipped:
            lines.append(f"  skipped {len(self.skipped)} already present: "
                         + ", ".join(self.skipped))
        if self.unpacked:
            lines.append(f"  unpacked {', '.join(self.unpacked)}")
        return "\n".join(lines)


def _human(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n} B"


def download(
    out: Path,
    base_url: str | None = None,
    images: bool = True,
    *,
    retries: int = 5,
    retry_wait: float = 2.0,
    timeout: float = 60.0,
    keep_zips: bool = False,
    expected_sizes: Mapping[str, int] | None = None,
    session: requests.Session | None = None,
) -> DownloadSummary:
    """Fetch VG's annotation zips (and image zips, unpacked) into `out`; see the module doc."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    session = session or _session()
    summary = DownloadSummary(out)
    records = _read_records(out)
    names = list(ANNOTATIONS) + (list(IMAGES) if images else [])
    for name in names:
        url = _url(name, base_url)
        if name in IMAGES and _marker(out, name).exists():
            summary.skipped.append(name)
            continue
        dest = out / name
        if dest.exists():
            summary.skipped.append(name)
            if name not in records:   # placed by hand: record it once
                records[name] = {"url": url, "bytes": dest.stat().st_size,
                                 "sha256": _sha256(dest)}
        else:
            fetched, sha = _fetch(session, url, dest, retries=retries, retry_wait=retry_wait,
                                  timeout=timeout, expected=(expected_sizes or {}).get(name))
            _verify_zip(dest)
            summary.fetched.append(name)
            summary.bytes_fetched += fetched
            records[name] = {"url": url, "bytes": dest.stat().st_size, "sha256": sha}
        if name in IMAGES:
            unpack(dest, out, IMAGES[name])
            summary.unpacked.append(f"{name} -> {IMAGES[name]}/")
            if not keep_zips:
                dest.unlink()
        _write_records(out, base_url, images, records)
    return summary


def _session() -> requests.Session:
    from vprom import __version__

    session = requests.Session()
    session.headers["User-Agent"] = f"vprom/{__version__} (V-PROM benchmark builder)"
    return session


def _url(name: str, base_url: str | None) -> str:
    if base_url:
        return base_url.rstrip("/") + "/" + name
    return (IMAGE_URL if name in IMAGES else ANNOTATION_URL) + "/" + name


# ---------------------------------------------------------------------------- downloading
def _fetch(session, url: str, dest: Path, *, retries: int, retry_wait: float, timeout: float,
           expected: int | None) -> tuple[int, str]:
    """Download url to dest through dest.part; return (bytes received now, sha256)."""
    part = dest.with_name(dest.name + ".part")
    received = [0]   # body bytes of every attempt, failed ones included
    for attempt in range(retries + 1):
        try:
            total = _fetch_once(session, url, part, timeout, expected, received)
        except _RETRYABLE as e:
            if attempt == retries:
                raise VpromError(f"{url}: download failed after {retries + 1} attempts ({e}); "
                                 f"check the network and rerun `vprom download`"
                                 + _resume_note(part)) from None
            time.sleep(retry_wait * (attempt + 1))
            continue
        size = part.stat().st_size
        if total is not None and size < total:   # the server closed early without an error
            if attempt == retries:
                raise VpromError(f"{url}: got {size} of {total} bytes after {retries + 1} "
                                 "attempts; rerun `vprom download`" + _resume_note(part))
            time.sleep(retry_wait * (attempt + 1))
            continue
        _check_size(url, part, size, total, expected)
        sha = _sha256(part)
        os.replace(part, dest)
        return received[0], sha
    raise AssertionError("unreachable: the loop returns or raises")


def _resume_note(part: Path) -> str:
    if part.exists() and part.stat().st_size:
        return f" (it resumes from {part.name}, {part.stat().st_size} bytes kept)"
    return ""


def _fetch_once(session, url: str, part: Path, timeout: float, expected: int | None,
                received: list[int]) -> int | None:
    """One request: append to (or restart) the part; return the file's total size if known."""
    offset = part.stat().st_size if part.exists() else 0
    headers = {"Range": f"bytes={offset}-"} if offset else {}
    with session.get(url, headers=headers, stream=True, timeout=timeout) as response:
        if response.status_code == 416:   # the part already holds every byte
            total = _range_total(response.headers.get("Content-Range", ""))
            if total is not None and total == offset:
                return total
            part.unlink()   # an unrelated or over-long part: start again
            raise requests.ConnectionError(f"HTTP 416 for a {offset}-byte part; restarting")
        if response.status_code >= 500:
            raise requests.ConnectionError(f"HTTP {response.status_code}")
        if response.status_code not in (200, 206):
            raise VpromError(f"{url}: HTTP {response.status_code} {response.reason}; check the "
                             "address (a mirror passed with --base-url must hold every file)")
        offset, total = _resume_point(response, offset, expected)
        mode = "ab" if offset else "wb"
        with open(part, mode) as f, _progress(part, total, offset) as bar:
            for chunk in response.iter_content(_CHUNK):
                f.write(chunk)
                received[0] += len(chunk)
                bar.update(len(chunk))
        return total


def _resume_point(response, offset: int, expected: int | None) -> tuple[int, int | None]:
    """Where to write the body (offset or 0) and the file's total size if known."""
    if response.status_code == 206:
        match = _CONTENT_RANGE.match(response.headers.get("Content-Range", ""))
        if match and int(match.group(1)) == offset:
            total = None if match.group(3) == "*" else int(match.group(3))
            return offset, total if total is not None else expected
        raise requests.ConnectionError("206 with an unexpected Content-Range; restarting")
    length = response.headers.get("Content-Length")
    total = int(length) if length and length.isdigit() else expected
    return 0, total   # 200: the server ignored Range (or there was none): write from 0


def _range_total(content_range: str) -> int | None:
    match = re.match(r"bytes\s+\*/(\d+)", content_range)
    return int(match.group(1)) if match else None


def _check_size(url: str, part: Path, size: int, total: int | None, expected: int | None) -> None:
    for what, want in (("the server announced", total), ("the known size is", expected)):
        if want is not None and size != want:
            part.unlink()
            raise VpromError(f"{url}: received {size} bytes but {what} {want}; the partial file "
                             "was deleted - rerun `vprom download`, or try another --base-url")


def _progress(part: Path, total: int | None, offset: int):
    name = part.name[: -len(".part")]
    return tqdm(total=total, initial=offset, unit="B", unit_scale=True, desc=name,
                disable=None, leave=False)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(_CHUNK):
            h.update(block)
    return h.hexdigest()


def _verify_zip(path: Path) -> None:
    """A downloaded zip must open and its members' CRCs must match (images: done at unpack)."""
    if path.name in IMAGES:
        return
    try:
        with zipfile.ZipFile(path) as zf:
            bad = zf.testzip()
    except (zipfile.BadZipFile, OSError) as e:
        path.unlink()
        raise VpromError(f"{path}: not a readable zip ({e}); deleted - "
                         "rerun `vprom download`") from None
    if bad is not None:
        path.unlink()
        raise VpromError(f"{path}: entry {bad!r} fails its CRC check; deleted - "
                         "rerun `vprom download`")


# ------------------------------------------------------------------------------ unpacking
def _marker(out: Path, name: str) -> Path:
    return out / f".{name}.unpacked"


def unpack(archive: Path, out: Path, folder: str | None = None) -> list[str]:
    """Extract archive's entries under out, safely; return the top-level names placed.

    Skipped when the marker of a previous complete unpack is there. `folder` names the
    top-level folder the archive is expected to create (it is only reported, not enforced).
    """
    archive, out = Path(archive), Path(out)
    marker = _marker(out, archive.name)
    if marker.exists():
        return json.loads(marker.read_text(encoding="utf-8"))["placed"]
    try:
        zf = zipfile.ZipFile(archive)
    except (zipfile.BadZipFile, OSError) as e:
        raise VpromError(f"{archive}: not a readable zip ({e}); delete it and rerun "
                         "`vprom download`") from None
    with zf:
        infos = zf.infolist()
        for info in infos:
            _check_entry(archive, info)
        placed = _extract(zf, archive, infos, out)
    marker.write_text(json.dumps({"archive": archive.name, "entries": len(infos),
                                  "placed": placed, "folder": folder}) + "\n", encoding="utf-8")
    return placed


def _check_entry(archive: Path, info: zipfile.ZipInfo) -> None:
    """Refuse entries that could write outside the target folder."""
    name = info.filename
    posix = name.replace("\\", "/")
    mode = info.external_attr >> 16
    problem = None
    if stat.S_ISLNK(mode):
        problem = "is a symbolic link"
    elif posix.startswith("/"):
        problem = "has an absolute path"
    elif _DRIVE.match(posix):
        problem = "has a drive letter"
    elif ".." in PurePosixPath(posix).parts:
        problem = "climbs out of the target folder with '..'"
    elif not posix.strip("/"):
        problem = "has an empty name"
    if problem:
        raise VpromError(f"{archive}: entry {name!r} {problem}; the archive is unsafe - delete "
                         "it and download it again from a trusted source")


def _extract(zf: zipfile.ZipFile, archive: Path, infos, out: Path) -> list[str]:
    """Extract into a temporary folder beside out, then rename each top-level entry in."""
    for stale in sorted(out.glob(f".{archive.name}.*.unpack")):   # left by a killed run
        shutil.rmtree(stale, ignore_errors=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{archive.name}.", suffix=".unpack", dir=out))
    try:
        total = sum(i.file_size for i in infos)
        with tqdm(total=total, unit="B", unit_scale=True, desc=f"unpack {archive.name}",
                  disable=None, leave=False) as bar:
            for info in infos:
                target = tmp.joinpath(*PurePosixPath(info.filename.replace("\\", "/")).parts)
                if info.is_dir():
                    target.mkdir(parents=True, exist_ok=True)
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                try:
                    with zf.open(info) as src, open(target, "wb") as dst:
                        shutil.copyfileobj(src, dst, _CHUNK)
                except (zipfile.BadZipFile, zlib.error, OSError) as e:
                    raise VpromError(f"{archive}: entry {info.filename!r} is corrupt ({e}); "
                                     "delete the archive and rerun `vprom download`") from None
                bar.update(info.file_size)
        placed = sorted(p.name for p in tmp.iterdir())
        for name in placed:
            final = out / name
            if final.is_dir() and not final.is_symlink():
                shutil.rmtree(final)   # left by an unpack that never finished (no marker)
            elif final.exists() or final.is_symlink():
                final.unlink()
            os.replace(tmp / name, final)
        return placed
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# ------------------------------------------------------------------------------- manifest
def _manifest_file(out: Path) -> Path:
    return manifest_path(out / MANIFEST)


def _read_records(out: Path) -> dict:
    path = _manifest_file(out)
    if not path.exists():
        return {}
    try:
        return dict(json.loads(path.read_text(encoding="utf-8"))["config"]["files"])
    except (json.JSONDecodeError, KeyError, TypeError):
        return {}   # an unreadable record is rebuilt from the files on disk


def _write_records(out: Path, base_url, images: bool, records: dict) -> None:
    manifest = make_manifest(
        "download",
        config={"base_url": base_url, "images": images, "files": records},
        outputs={name: r["sha256"] for name, r in sorted(records.items())},
        counts={"files": len(records), "bytes": sum(r["bytes"] for r in records.values())},
    )
    write_json(_manifest_file(out), manifest)
