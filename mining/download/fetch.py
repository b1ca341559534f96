"""HTTP fetching for `vprom download`: resumable, bounded in time and size, http(s) only.

`fetch` writes to `NAME.part` and gives the file its final name only when complete. A rerun,
or a retry after a dropped connection, asks for `Range: bytes=N-` (N: the part's size): a 206
whose Content-Range starts at N is appended, a 200 restarts the part, a 416 means the part is
complete. The body is read one socket read at a time, undecoded, so the clocks are checked
even when a server sends a byte a second. Bounds, each a one-line `VpromError` saying what
to do:
- size: the expected size, else the server's; a server announcing another is refused before
  a byte is written, a body running past it is cut off and the part deleted, a short one is
  retried. A file whose size is not pinned is bounded by `Expected.ceiling` instead, and a
  body without a length is stopped (and deleted) the moment it passes it;
- reserve: the free space must hold what is still to come plus `Policy.reserve` bytes, and
  each chunk is written only if the reserve stays free; a part of known size is then kept
  for a rerun, one of unknown size deleted (it cannot be told from an endless body);
- identity: a part whose SHA-256 is not the expected one goes to `NAME.bad`;
- time: a per-file `deadline` over every attempt, header and pause (enforced by
  `mining.download.watchdog`), after which the part is kept for a rerun; and a `min_speed`
  floor over `speed_window` seconds, under which the transfer is retried (bounded, with a
  growing pause). Each socket read waits at most `timeout` seconds;
- redirects: followed by hand, at most `max_redirects`, only to http(s), each logged once;
- disk: no space left or over quota while writing says so and keeps the part.
"""

from __future__ import annotations

import errno
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable
from urllib.parse import urljoin, urlsplit

import requests
from tqdm import tqdm

from vprom.errors import VpromError
from vprom.files import sha256_file
import vprom.mining.download.space as space
import vprom.mining.download.watchdog as watchdog

_CHUNK = 1 << 16   # the most one read returns; small enough that a drop loses little
_CONTENT_RANGE = re.compile(r"bytes\s+(\d+)-(\d+)/(\d+|\*)")
_SCHEMES = ("http", "https")
_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)
# What reading `response.raw` raises on a dropped or timed-out connection: urllib3's base
# error (ProtocolError, ReadTimeoutError, IncompleteRead), under the name requests gives it.
_TRANSPORT = requests.exceptions.BaseHTTPError


@dataclass(frozen=True)
class Expected:
    """What a file must be: its size in bytes and SHA-256 (hex), each None when not known.

    `ceiling` bounds a file whose size is not known (None: no bound, for library callers
    that bring their own; `download` always sets one).
    """

    bytes: int | None = None
    sha256: str | None = None
    source: str = ""   # where the values come from, named in a refusal
    ceiling: int | None = None


@dataclass(frozen=True)
class Policy:
    """How hard to try and when to give up (the defaults are those of `download`)."""

    retries: int
    retry_wait: float
    timeout: float
    deadline: float
    min_speed: float
    speed_window: float
    max_redirects: int
    reserve: int = space.DEFAULT_RESERVE   # bytes that must stay free on the disk


@dataclass(frozen=True)
class Fetched:
    received: int   # body bytes received now, failed attempts included
    sha256: str
    url: str        # where the bytes came from at last (after redirects)


class _Retry(Exception):
    """A failure worth another attempt (dropped, stalled, too slow, a 5xx)."""


class _Deadline(Exception):
    """The file's deadline passed."""


class _Junk(Exception):
    """The body passed its bound: the part was deleted; the message says which bound."""


def session() -> requests.Session:
    from vprom import __version__

    s = requests.Session()
    s.headers["User-Agent"] = f"vprom/{__version__} (V-PROM benchmark builder)"
    s.headers["Accept-Encoding"] = "identity"   # Range offsets count the bytes on disk
    watchdog.watch(s)
    return s


def check_url(url: str, what: str = "--base-url") -> None:
    """A one-line error unless url is an absolute http(s) address requests can use."""
    hint = "give an http(s) address such as https://mirror.example.org/vg"
    try:
        parts = urlsplit(url)
        parts.port   # noqa: B018 - raises ValueError on a bad port
        if parts.scheme not in _SCHEMES or not parts.hostname:
            raise ValueError("not an absolute http(s) address")
        requests.Request("GET", url).prepare()
    except (ValueError, requests.RequestException) as e:
        raise VpromError(f"{what} {url!r}: {e}; {hint}") from None


def fetch(http: requests.Session, url: str, dest: Path, expected: Expected, policy: Policy,
          log: Callable[[str], None]) -> Fetched:
    """Download url to dest through dest.part within the policy's bounds (see the module doc)."""
    part = dest.with_name(dest.name + ".part")
    clock = _Clock(policy.deadline)
    received = [0]
    redirects: set[tuple[str, str]] = set()
    announced: dict[str, int] = {}   # the size the server gave first, held to on every attempt
    with watchdog.watch(http).until(clock.end):
        return _fetch(http, url, dest, part, expected, policy, clock, received, redirects,
                      announced, log)


def _fetch(http, url: str, dest: Path, part: Path, expected: Expected, policy: Policy,
           clock: _Clock, received: list[int], redirects: set, announced: dict,
           log) -> Fetched:
    for attempt in range(policy.retries + 1):
        try:
            if clock.left() <= 0:
                raise _Deadline
            total, final = _attempt(http, url, part, expected, policy, clock, received,
                                    redirects, announced, log)
            size = part.stat().st_size
            if total is not None and size < total:   # closed early without an error
                raise _Retry(f"got {size} of {total} bytes")
        except _Deadline:
            raise _deadline_error(url, part, policy) from None
        except _Junk as e:
            raise VpromError(f"{url}: {e}") from None
        except (_Retry, requests.ConnectionError, requests.Timeout,
                requests.exceptions.ChunkedEncodingError, _TRANSPORT) as e:
            if clock.left() <= 0:   # the watchdog cut the connection: the deadline, not a drop
                raise _deadline_error(url, part, policy) from None
            if attempt == policy.retries:
                raise VpromError(f"{url}: failed after {policy.retries + 1} attempts ({e})"
                                 + _resume_note(part) + "; check the network and rerun "
                                 "`vprom download`") from None
            pause = policy.retry_wait * (attempt + 1)
            if pause >= clock.left():
                raise VpromError(f"{url}: gave up, the deadline for one file "
                                 f"({_duration(policy.deadline)}) would pass before the next "
                                 f"attempt ({e})" + _resume_note(part) + "; rerun `vprom "
                                 "download` to resume, or raise --deadline") from None
            time.sleep(pause)
            continue
        except requests.RequestException as e:   # InvalidURL, InvalidSchema, ...: no retry
            raise VpromError(f"{url}: {type(e).__name__}: {e}; check --base-url") from None
        except OSError as e:
            raise _disk_error(e, part) from None
        _check_size(url, part, size, total, expected)
        return Fetched(received[0], _check_hash(url, part, dest, expected), final)
    raise AssertionError("unreachable: the loop returns or raises")


def _deadline_error(url: str, part: Path, policy: Policy) -> VpromError:
    return VpromError(f"{url}: gave up after {_duration(policy.deadline)}, the deadline for one "
                      "file (--deadline), which bounds the whole exchange, headers included"
                      + _resume_note(part) + "; rerun `vprom download` to resume, or raise "
                      "--deadline for a slow link")


class _Clock:
    def __init__(self, seconds: float):
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        return self.end - time.monotonic()


def _attempt(http, url: str, part: Path, expected: Expected, policy: Policy, clock: _Clock,
             received: list[int], redirects: set, announced: dict,
             log) -> tuple[int | None, str]:
    """One request: append to (or restart) the part; return (the file's size if known, url)."""
    offset = part.stat().st_size if part.exists() else 0
    headers = {"Range": f"bytes={offset}-"} if offset else {}
    response, final = _open(http, url, headers, policy, clock, redirects, log)
    if clock.left() <= 0:   # headers cut short by the watchdog can still parse as a response
        response.close()
        raise _Deadline
    with response:
        if response.status_code == 416:   # the part already holds every byte
            total = _range_total(response.headers.get("Content-Range", ""))
            _hold_to(url, part, announced, total)
            if total is not None and total == offset:
                return total, final
            part.unlink()   # an unrelated or over-long part: start again
            raise _Retry(f"HTTP 416 for a {offset}-byte part; restarting")
        if response.status_code >= 500:
            raise _Retry(f"HTTP {response.status_code}")
        if response.status_code not in (200, 206):
            raise VpromError(f"{url}: HTTP {response.status_code} {response.reason}; check the "
                             "address (a mirror passed with --base-url must hold every file)")
        offset, total = _resume_point(response, offset)
        _hold_to(url, part, announced, total)
        if expected.bytes is not None:
            if total is not None and total != expected.bytes:
                raise VpromError(f"{url}: the server announces {total} bytes but the file "
                                 f"must have {expected.bytes} ({expected.source}); refused "
                                 "before downloading - use another --base-url, or if this "
                                 "mirror serves other files on purpose, pass --expected FILE")
            total = expected.bytes
        elif total is not None and expected.ceiling is not None and total > expected.ceiling:
            raise VpromError(f"{url}: the server announces {total} bytes, more than the "
                             f"{expected.ceiling} bytes this file may have (its ceiling, several "
                             "times its largest known size); refused before downloading - use "
                             "another --base-url, or pass --expected FILE with its size")
        _check_free_space(url, part, 0 if total is None else total - offset, policy.reserve)
        _receive(response, part, offset, total, expected.ceiling, policy, clock, received)
        if clock.left() <= 0 and (total is None or part.stat().st_size < total):
            raise _Deadline   # the body ended because the watchdog cut it (or may have)
        return total, final


def _open(http, url: str, headers: dict, policy: Policy, clock: _Clock, redirects: set, log):
    """GET url, following at most max_redirects http(s) redirects by hand; (response, url)."""
    current = url
    for _ in range(policy.max_redirects + 1):
        wait = max(min(policy.timeout, clock.left()), 0.001)
        try:
            response = http.get(current, headers=headers, stream=True, timeout=wait,
                                allow_redirects=False)
        except ValueError as e:   # requests parses a Location even when not following it
            raise VpromError(f"{url}: the server's answer cannot be used ({e}); it may redirect "
                             "to an invalid address - use another --base-url") from None
        if not response.is_redirect:
            return response, current
        location = response.headers["Location"]
        response.close()
        try:
            target = urljoin(current, location)
            scheme, host = urlsplit(target).scheme, urlsplit(target).hostname
        except ValueError:
            raise VpromError(f"{url}: the server redirects to {location!r}, not a valid "
                             "address - use another --base-url") from None
        if scheme not in _SCHEMES or not host:
            raise VpromError(f"{url}: the server redirects to {target!r}; only http(s) "
                             "redirects are followed - use another --base-url")
        if (current, target) not in redirects:
            redirects.add((current, target))
            log(f"{url.rsplit('/', 1)[-1]}: redirected to {target}")
        current = target
    raise VpromError(f"{url}: more than {policy.max_redirects} redirects (the last to "
                     f"{current}); the server is misconfigured - use another --base-url")


def _receive(response, part: Path, offset: int, total: int | None, ceiling: int | None,
             policy: Policy, clock: _Clock, received: list[int]) -> None:
    """Write the body to the part as it arrives, within the size (or ceiling), the reserve,
    the deadline and the speed floor."""
    size = offset
    window_start, window_size = time.monotonic(), size
    with open(part, "ab" if offset else "wb") as f, _progress(part, total, offset) as bar:
        while chunk := response.raw.read1(_CHUNK, decode_content=False):
            size += len(chunk)
            over = _over_bound(size, total, ceiling)
            if over:
                f.close()
                part.unlink()
                raise _Junk(over + "; the partial file was deleted (it is not resumed) - "
                            "try another --base-url")
            _keep_reserve(f, part, len(chunk), total is not None, policy.reserve)
            f.write(chunk)
            received[0] += len(chunk)
            bar.update(len(chunk))
            now = time.monotonic()
            if now >= clock.end:
                raise _Deadline
            if now - window_start >= policy.speed_window:
                speed = (size - window_size) / (now - window_start)
                if speed < policy.min_speed:
                    raise _Retry(f"too slow: {speed:.0f} B/s over {now - window_start:.1f} s, "
                                 f"under the floor of {policy.min_speed:.0f} B/s")
                window_start, window_size = now, size


def _over_bound(size: int, total: int | None, ceiling: int | None) -> str:
    """Why a body of `size` bytes is junk, or "" while it is within its bound."""
    if total is not None and size > total:
        return f"the server sent more than the {total} bytes the file has"
    if total is None and ceiling is not None and size > ceiling:
        return (f"the server sent more than {ceiling} bytes without saying how many, more than "
                "this file may have (its ceiling, several times its largest known size)")
    return ""


def _keep_reserve(f, part: Path, more: int, known: bool, reserve: int) -> None:
    """Refuse to write `more` bytes when the disk would be left with less than the reserve."""
    free = space.disk(part.parent).free
    if free - more >= reserve:
        return
    f.close()
    what = (f"{part.parent} would be left with less than the {space.human(reserve)} kept free "
            f"(--reserve); {space.human(free)} free")
    if known:
        raise VpromError(f"{part}: {what}" + _resume_note(part) + "; free space and rerun "
                         "`vprom download`")
    size = part.stat().st_size
    part.unlink()
    raise VpromError(f"{part}: {what}; the server did not say how large the file is, so its "
                     f"{size} bytes were deleted rather than kept - free space and rerun "
                     "`vprom download`, or pass --expected FILE with its size")


def _hold_to(url: str, part: Path, announced: dict, total: int | None) -> None:
    """A server that changes the file's size between attempts is not trusted with the part."""
    if total is None:
        return
    first = announced.setdefault("total", total)
    if total != first:
        part.unlink(missing_ok=True)
        raise VpromError(f"{url}: the server announced {first} bytes, then {total}; the partial "
                         "file was deleted - rerun `vprom download`, or try another --base-url")


def _resume_point(response, offset: int) -> tuple[int, int | None]:
    """Where to write the body (offset or 0) and the file's total size if the server says."""
    if response.status_code == 206:
        match = _CONTENT_RANGE.match(response.headers.get("Content-Range", ""))
        if match and int(match.group(1)) == offset:
            return offset, None if match.group(3) == "*" else int(match.group(3))
        raise _Retry("206 with an unexpected Content-Range; restarting")
    length = response.headers.get("Content-Length")
    return 0, int(length) if length and length.isdigit() else None   # 200: write from 0


def _range_total(content_range: str) -> int | None:
    match = re.match(r"bytes\s+\*/(\d+)", content_range)
    return int(match.group(1)) if match else None


def _check_size(url: str, part: Path, size: int, total: int | None, expected: Expected) -> None:
    for what, want in (("the server announced", total), ("the file must have", expected.bytes)):
        if want is not None and size != want:
            part.unlink()
            raise VpromError(f"{url}: received {size} bytes but {what} {want}; the partial file "
                             "was deleted - rerun `vprom download`, or try another --base-url")


def _check_hash(url: str, part: Path, dest: Path, expected: Expected) -> str:
    sha = sha256_file(part)
    if expected.sha256 is not None and sha != expected.sha256:
        bad = dest.with_name(dest.name + ".bad")
        os.replace(part, bad)
        raise VpromError(f"{url}: sha256 {sha} differs from the expected {expected.sha256} "
                         f"({expected.source}); moved to {bad.name} - use another --base-url, "
                         "or if this mirror serves other files on purpose, pass --expected FILE")
    os.replace(part, dest)
    return sha


def _check_free_space(url: str, part: Path, need: int, reserve: int) -> None:
    free = space.disk(part.parent).free
    if need + reserve > free:
        raise VpromError(f"{url}: {space.human(need)} still to download and "
                         f"{space.human(reserve)} to keep free (--reserve), but {part.parent} "
                         f"has {space.human(free)} free; free space (or lower --reserve) and "
                         "rerun `vprom download`" + _resume_note(part))


def _disk_error(e: OSError, part: Path) -> VpromError:
    where = e.filename or part
    if e.errno in _NO_SPACE:
        return VpromError(f"{where}: out of space while downloading ({e.strerror})"
                          + _resume_note(part) + "; free space and rerun `vprom download`")
    return VpromError(f"{where}: {e.strerror or e}" + _resume_note(part)
                      + "; fix that and rerun `vprom download`")


def _resume_note(part: Path) -> str:
    try:
        size = part.stat().st_size
    except OSError:
        return ""
    return f" ({part.name} keeps {size} bytes; a rerun resumes from there)" if size else ""


def _duration(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:g} h"
    return f"{seconds / 60:g} min" if seconds >= 60 else f"{seconds:g} s"


def _progress(part: Path, total: int | None, offset: int):
    return tqdm(total=total, initial=offset, unit="B", unit_scale=True,
                desc=part.name[: -len(".part")], disable=None, leave=False)
