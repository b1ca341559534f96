"""Fetch Visual Genome: resumable, verified downloads and safe unpacking, even from a bad mirror.
Annotation zips stay zipped; image zips are unpacked into `VG_100K/` and `VG_100K_2/`. A file
recorded in `download.manifest.json` (or with an unpack marker) is skipped; else it is fetched
through `NAME.part`, its size and SHA-256 checked against `mining/data/vg_files.json` (an
unpinned size is bounded by `CEILINGS`), its zip checked (`archives`), and only then recorded.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

import vprom.mining.download.archives as archives  # noqa: PLR0402
from tqdm import tqdm

from vprom.claim import writes
from vprom.errors import VpromError
from vprom.files import sha256_file, size_text, write_json
from vprom.manifest import make_manifest, manifest_file

ANNOTATION_URL = "https://homes.cs.washington.edu/~ranjay/visualgenome/data/dataset"
IMAGE_URL = "https://cs.stanford.edu/people/rak248/VG_100K_2"
ANNOTATIONS = tuple(f"{stem}.json.zip" for stem in ("image_data", "objects", "attributes",
                                                     "region_descriptions"))
IMAGES = {"images.zip": "VG_100K", "images2.zip": "VG_100K_2"}
MANIFEST = "download"   # -> download.manifest.json
PINNED = Path(__file__).parent.parent / "data" / "vg_files.json"
DEFAULT_DEADLINE = 6 * 3600.0   # images.zip (9.7 GB) needs 450 kB/s to finish in time
# The most bytes a file of unpinned size may have: several times its largest size on record
# (for annotation zips, release 1.0's region_descriptions_v1.json.zip, 99,460,401 bytes).
_GiB, _MiB = 1 << 30, 1 << 20
CEILINGS = {
    "image_data.json.zip": 16 * _MiB,        # 1,780,854 pinned: x9.4
    "objects.json.zip": 1 * _GiB,
    "attributes.json.zip": 1 * _GiB,
    "region_descriptions.json.zip": 1 * _GiB,
    "images.zip": 32 * _GiB,                 # 9,731,705,982 pinned: x3.5
    "images2.zip": 16 * _GiB,                # 5,471,658,058 pinned: x3.1
}
_SHA256 = re.compile(r"[0-9a-f]{64}")
_DURATION = re.compile(r"\s*(\d+(?:\.\d*)?)\s*(s|m|min|h)?\s*")


@dataclass
class DownloadSummary:
    """What a `download` call did."""

    out: Path
    fetched: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    unpacked: list[str] = field(default_factory=list)
    bytes_fetched: int = 0

    def __str__(self) -> str:
        lines = [f"Visual Genome in {self.out}:",
                 f"  fetched {len(self.fetched)} file(s), {size_text(self.bytes_fetched)}"
                 + (f": {', '.join(self.fetched)}" if self.fetched else "")]
        if self.skipped:
            lines.append(f"  skipped {len(self.skipped)} already present: "
                         + ", ".join(self.skipped))
        if self.unpacked:
            lines.append(f"  unpacked {', '.join(self.unpacked)}")
        return "\n".join(lines)


@writes("out", None, folder=True)  # one writer; a VG folder may hold the user's own files
def download(out: Path, base_url: str | None = None, images: bool = True, *,
             expected: Mapping | None = None, deadline: float = DEFAULT_DEADLINE,
             retries: int = 5, retry_wait: float = 2.0, timeout: float = 60.0,
             min_speed: float = 1000.0, speed_window: float = 60.0, max_redirects: int = 5,
             reserve: int = archives.DEFAULT_RESERVE,
             log: Callable[[str], None] | None = None) -> DownloadSummary:
    """Fetch VG's annotation zips (and image zips, unpacked) into `out`. `expected`: file name ->
    `Expected` or {"bytes", "sha256"} (None: the pins); `deadline` (s) bounds each file;
    `min_speed` (B/s over `speed_window` s) retries a trickle; `reserve` bytes stay free."""
    # requests is imported only when a download runs, so `vprom --help` stays quick
    from vprom.mining.download import fetch

    if base_url is not None:
        fetch.check_url(base_url)
    wanted = load_expected() if expected is None else _as_expected(expected, "expected")
    if deadline <= 0:
        raise VpromError(f"deadline must be positive, got {deadline}")
    if reserve < 0:
        raise VpromError(f"reserve must be 0 or more bytes, got {reserve}")
    policy = fetch.Policy(retries=retries, retry_wait=retry_wait, timeout=timeout,
                          deadline=deadline, min_speed=min_speed, speed_window=speed_window,
                          max_redirects=max_redirects, reserve=reserve)
    out = _out_folder(Path(out))
    http = fetch.session()
    log = log or (lambda message: tqdm.write(message, file=sys.stderr))
    summary = DownloadSummary(out)
    records = _read_records(out)
    for name in list(ANNOTATIONS) + (list(IMAGES) if images else []):
        url = (base_url.rstrip("/") if base_url else
               IMAGE_URL if name in IMAGES else ANNOTATION_URL) + "/" + name
        want = replace(wanted.get(name, fetch.Expected()), ceiling=CEILINGS[name])
        dest = out / name
        if name in IMAGES and archives.marker_path(out, name).exists():
            summary.skipped.append(name)
            continue
        was_recorded = name in records
        record = records.pop(name, None)   # recorded again only once it has passed
        try:
            if dest.exists():
                summary.skipped.append(name)
                if record is None or record.get("bytes") != dest.stat().st_size:
                    record = {"url": url, "bytes": dest.stat().st_size,
                              "sha256": _check_present(dest, want)}
                    _check_archive(dest, out, name, reserve)
                elif name in IMAGES:   # kept zip whose unpack marker is gone
                    _check_archive(dest, out, name, reserve)
            else:
                got = fetch.fetch(http, url, dest, want, policy, log)
                summary.fetched.append(name)
                summary.bytes_fetched += got.received
                record = {"url": url, "bytes": dest.stat().st_size, "sha256": got.sha256}
                if got.url != url:
                    record["redirected_to"] = got.url
                _check_archive(dest, out, name, reserve)
        except VpromError:
            if was_recorded:   # a recorded file that failed is no longer recorded
                _write_records(out, base_url, images, records)
            raise
        if name in IMAGES:
            summary.unpacked.append(f"{name} -> {IMAGES[name]}/")
            dest.unlink()
        records[name] = record
        _write_records(out, base_url, images, records)
    return summary


def _check_archive(dest: Path, out: Path, name: str, reserve: int) -> None:
    """Verify an annotation zip, or unpack an image zip; a bad archive goes to NAME.bad."""
    if name in IMAGES:
        archives.unpack(dest, out, archives.Layout(folder=IMAGES[name]), reserve=reserve)
    else:
        archives.verify(dest, archives.Layout(member=name[: -len(".zip")],
                                              limits=archives.JSON_LIMITS))


def _check_present(dest: Path, want) -> str:
    """A file found under its final name must have the expected size and hash; its sha256."""
    size = dest.stat().st_size
    sha = sha256_file(dest) if want.bytes is None or size == want.bytes else ""
    for what, have, must in (("bytes", size, want.bytes), ("sha256", sha, want.sha256)):
        if must is not None and have != must:
            bad = archives.quarantine(dest)
            raise VpromError(f"{dest}: has {what} {have}, but the file must have {must} "
                             f"({want.source}); moved to {bad.name} - rerun `vprom download` "
                             "to fetch it again (or pass --expected FILE for a mirror's files)")
    return sha


def _out_folder(out: Path) -> Path:
    try:
        out.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise VpromError(f"--out {out}: exists and is not a folder (or a part of its path is "
                         "a file); pass a folder") from None
    except OSError as e:
        raise VpromError(f"--out {out}: cannot create it ({e.strerror}); pass a folder you "
                         "can write to") from None
    return out


def load_expected(path: Path | None = None) -> dict:
    """The sizes and SHA-256 the files must have: a user's `--expected` file (replacing the
    pins entirely), or the pins. JSON: {"files": {"images.zip": {"bytes": N, "sha256": "..."}}},
    null for not known."""
    source = Path(path) if path is not None else PINNED
    try:
        data = json.loads(source.read_text(encoding="utf-8"))
        files = data["files"]
    except FileNotFoundError:
        raise VpromError(f"--expected {source}: no such file") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as e:
        raise VpromError(f"--expected {source}: not a JSON object with a \"files\" mapping "
                         f"({type(e).__name__}: {e}); see mining/data/vg_files.json") from None
    label = "pinned in mining/data/vg_files.json" if path is None else f"from {source}"
    return _as_expected(files, str(source), label)


def _as_expected(files, where: str, label: str = "as passed") -> dict:
    from vprom.mining.download.fetch import Expected

    if not isinstance(files, Mapping):
        raise VpromError(f"{where}: \"files\" must map file names to sizes and hashes")
    known = set(ANNOTATIONS) | set(IMAGES)
    result = {}
    for name, entry in files.items():
        if name not in known:
            raise VpromError(f"{where}: unknown file {name!r}; the files are "
                             + ", ".join(sorted(known)))
        if isinstance(entry, Expected):
            result[name] = entry
            continue
        size = entry.get("bytes") if isinstance(entry, Mapping) else 0
        sha = entry.get("sha256") if isinstance(entry, Mapping) else 0
        size_ok = size is None or (type(size) is int and size > 0)
        sha_ok = sha is None or (isinstance(sha, str) and _SHA256.fullmatch(sha) is not None)
        if not (size_ok and sha_ok):
            raise VpromError(f"{where}: {name!r} must be {{\"bytes\": a positive integer or "
                             f"null, \"sha256\": 64 lowercase hex digits or null}}, got {entry!r}")
        result[name] = Expected(size, sha, label)
    return result


def parse_duration(text: str) -> float:
    """Seconds from "90", "90s", "30m" or "8h"; refuses zero, negatives and other text."""
    match = _DURATION.fullmatch(text)
    if not match or float(match.group(1)) <= 0:
        raise ValueError(f"not a positive duration: {text!r} (e.g. 3600, 90m, 8h)")
    scale = {"h": 3600.0, "m": 60.0, "min": 60.0}.get(match.group(2) or "s", 1.0)
    return float(match.group(1)) * scale


def _read_records(out: Path) -> dict:
    try:
        manifest = json.loads(manifest_file(out / MANIFEST).read_text(encoding="utf-8"))
        return {k: v for k, v in manifest["config"]["files"].items() if isinstance(v, dict)}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}   # none yet, or unreadable: the record is rebuilt from the files on disk


def _write_records(out: Path, base_url, images: bool, records: dict) -> None:
    manifest = make_manifest(
        "download",
        config={"base_url": base_url, "images": images, "files": records},
        outputs={name: r["sha256"] for name, r in sorted(records.items())},
        counts={"files": len(records), "bytes": sum(r["bytes"] for r in records.values())},
    )
    write_json(manifest_file(out / MANIFEST), manifest)
