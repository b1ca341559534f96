"""HTTP fetching for `vprom download`: resumable, bounded in time and size, http(s) only.
`fetch` writes `NAME.part`, renamed when complete; a retry asks for `Range: bytes=N-`. Bounds:
the size (expected, announced or ceiling), the reserve, the SHA-256 (a mismatch goes to
`NAME.bad`), `min_speed`, redirects, and a per-file `deadline` over all attempts, headers too:
as requests' timeouts bound each read, a `Watch` shuts the session's sockets at the deadline.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import socket
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import requests
from requests.adapters import HTTPAdapter
from tqdm import tqdm
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.exceptions import NewConnectionError
from vprom.mining.download.archives import DEFAULT_RESERVE, free_space

from vprom.errors import VpromError
from vprom.files import sha256_file, size_text

_CHUNK = 1 << 16   # the most one read returns; small enough that a drop loses little
_CONTENT_RANGE = re.compile(r"bytes\s+(\d+)-(\d+)/(\d+|\*)")
_SCHEMES = ("http", "https")
# What a dropped or timed-out connection raises (BaseHTTPError: urllib3's, from response.raw)
_RETRIED = (requests.ConnectionError, requests.Timeout,
            requests.exceptions.ChunkedEncodingError, requests.exceptions.BaseHTTPError)


@dataclass(frozen=True)
class Expected:
    """A file's size and SHA-256 (None: not known); `ceiling` bounds an unknown size."""

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
    reserve: int = DEFAULT_RESERVE   # bytes that must stay free on the disk


@dataclass(frozen=True)
class Fetched:
    received: int   # body bytes received now, failed attempts included
    sha256: str
    url: str        # where the bytes came from at last (after redirects)


class _Retry(Exception):
    """A failure worth another attempt (dropped, stalled, too slow, a 5xx)."""


def session() -> requests.Session:
    from vprom import __version__

    s = requests.Session()
    s.headers["User-Agent"] = f"vprom/{__version__} (V-PROM benchmark builder)"
    s.headers["Accept-Encoding"] = "identity"   # Range offsets count the bytes on disk
    watch(s)
    return s


def check_url(url: str, what: str = "--base-url") -> None:
    """A one-line error unless url is an absolute http(s) address requests can use."""
    try:
        parts = urlsplit(url)
        parts.port   # noqa: B018 - raises ValueError on a bad port
        if parts.scheme not in _SCHEMES or not parts.hostname:
            raise ValueError("not an absolute http(s) address")
        requests.Request("GET", url).prepare()
    except (ValueError, requests.RequestException) as e:
        raise VpromError(f"{what} {url!r}: {e}; give an http(s) address such as "
                         "https://mirror.example.org/vg") from None


def _unreachable(error: Exception, url: str) -> str | None:
    """"cannot reach HOST (why)" for a connection never made: more time does not help."""
    reason = getattr(error.args[0], "reason", None) if error.args else None
    if not isinstance(reason, NewConnectionError):
        return None
    return f"cannot reach {urlsplit(url).hostname} ({str(reason).split('): ', 1)[-1]})"


def fetch(http: requests.Session, url: str, dest: Path, expected: Expected, policy: Policy,
          log: Callable[[str], None]) -> Fetched:
    """Download url to dest through dest.part within the policy's bounds."""
    transfer = _Transfer(http, url, dest, expected, policy, log)
    with watch(http).until(transfer.end):
        return transfer.run()


class _Transfer:
    """One file's download; its attempts share the deadline, redirects and announced size."""

    def __init__(self, http, url: str, dest: Path, expected: Expected, policy: Policy, log):
        self.http, self.url, self.dest, self.expected = http, url, dest, expected
        self.policy, self.log = policy, log
        self.part = dest.with_name(dest.name + ".part")
        self.end = time.monotonic() + policy.deadline
        self.received = 0
        self.redirects: set[tuple[str, str]] = set()
        self.target = url   # where the last redirect pointed
        self.announced: int | None = None

    def left(self) -> float:
        return self.end - time.monotonic()

    def run(self) -> Fetched:
        url, part, policy = self.url, self.part, self.policy
        for attempt in range(policy.retries + 1):
            try:
                if self.left() <= 0:
                    raise self._deadline_error()
                total, final = self._attempt()
                size = part.stat().st_size
                if total is not None and size < total:   # closed early without an error
                    raise _Retry(f"got {size} of {total} bytes")
            except (_Retry, *_RETRIED) as e:
                if self.left() <= 0:   # the watchdog cut the connection: not a drop
                    raise self._deadline_error() from None
                unreachable, pause = _unreachable(e, url), policy.retry_wait * (attempt + 1)
                if unreachable and (attempt == policy.retries or pause >= self.left()):
                    raise self._give_up(unreachable, "check the network connection, or pass "
                                        "--base-url a mirror this machine reaches, then rerun "
                                        "`vprom download`") from None
                if attempt == policy.retries:
                    raise self._give_up(f"failed after {policy.retries + 1} attempts ({e})",
                                        "check the network and rerun `vprom download`") from None
                if pause >= self.left():
                    raise self._give_up(f"gave up, the deadline for one file ("
                                        f"{_duration(policy.deadline)}) would pass before the "
                                        f"next attempt ({e})", "rerun `vprom download` to "
                                        "resume, or raise --deadline") from None
                time.sleep(pause)
                continue
            except requests.RequestException as e:   # InvalidURL, InvalidSchema, ...: no retry
                raise VpromError(f"{url}: {type(e).__name__}: {e}; check --base-url") from None
            except OSError as e:
                raise _disk_error(e, part) from None
            for what, want in (("the server announced", total),
                               ("the file must have", self.expected.bytes)):
                if want is not None and size != want:
                    part.unlink()
                    raise VpromError(f"{url}: received {size} bytes but {what} {want}; the "
                                     "partial file was deleted - rerun `vprom download`, or "
                                     "try another --base-url")
            return Fetched(self.received, self._check_hash(), final)
        raise AssertionError("unreachable: the loop returns or raises")

    def _give_up(self, what: str, advice: str) -> VpromError:
        return VpromError(f"{self.url}: {what}" + _resume_note(self.part) + f"; {advice}")

    def _deadline_error(self) -> VpromError:
        return self._give_up(f"gave up after {_duration(self.policy.deadline)}, the deadline "
                             "for one file (--deadline), which bounds the whole exchange, "
                             "headers included", "rerun `vprom download` to resume, or raise "
                             "--deadline for a slow link")

    def _attempt(self) -> tuple[int | None, str]:
        """One request, appending to (or restarting) the part; (the size if known, final url)."""
        url, part, expected = self.url, self.part, self.expected
        offset = part.stat().st_size if part.exists() else 0
        response, final = self._open({"Range": f"bytes={offset}-"} if offset else {})
        if self.left() <= 0:   # headers cut short by the watchdog can still parse
            response.close()
            raise self._deadline_error()
        with response:
            if response.status_code == 416:   # the part already holds every byte
                match = re.match(r"bytes\s+\*/(\d+)", response.headers.get("Content-Range", ""))
                total = int(match.group(1)) if match else None
                self._hold_to(total)
                if total is not None and total == offset:
                    return total, final
                part.unlink()   # an unrelated or over-long part: start again
                raise _Retry(f"HTTP 416 for a {offset}-byte part; restarting")
            if response.status_code >= 500:
                raise _Retry(f"HTTP {response.status_code}")
            if response.status_code not in (200, 206):
                raise VpromError(f"{url}: HTTP {response.status_code} {response.reason}; check "
                                 "the address (a mirror passed with --base-url must hold every "
                                 "file)")
            offset, total = _resume_point(response, offset)
            self._hold_to(total)
            if expected.bytes is not None:
                if total is not None and total != expected.bytes:
                    raise VpromError(f"{url}: the server announces {total} bytes but the file "
                                     f"must have {expected.bytes} ({expected.source}); refused "
                                     "before downloading - use another --base-url, or if this "
                                     "mirror serves other files on purpose, pass --expected FILE")
                total = expected.bytes
            elif total is not None and expected.ceiling is not None and total > expected.ceiling:
                raise VpromError(f"{url}: the server announces {total} bytes, more than the "
                                 f"{expected.ceiling} bytes this file may have (its ceiling, "
                                 "several times its largest known size); refused before "
                                 "downloading - use another --base-url, or pass --expected "
                                 "FILE with its size")
            need, free = 0 if total is None else total - offset, free_space(part.parent).free
            if need + self.policy.reserve > free:
                raise VpromError(f"{url}: {size_text(need)} still to download and "
                                 f"{size_text(self.policy.reserve)} to keep free (--reserve), "
                                 f"but {part.parent} has {size_text(free)} free; free space "
                                 "(or lower --reserve) and rerun `vprom download`"
                                 + _resume_note(part))
            self._receive(response, offset, total)
            if self.left() <= 0 and (total is None or part.stat().st_size < total):
                raise self._deadline_error()   # the watchdog cut the body (or may have)
            return total, final

    def _open(self, headers: dict):
        """GET, requests following at most max_redirects redirects; (response, final url)."""
        self.http.max_redirects = self.policy.max_redirects
        wait = max(min(self.policy.timeout, self.left()), 0.001)
        try:
            response = self.http.get(self.url, headers=headers, stream=True, timeout=wait,
                                     hooks={"response": self._redirected})
        except ValueError as e:   # requests parses every Location, even one it does not follow
            raise VpromError(f"{self.url}: the server's answer cannot be used ({e}); it may "
                             "redirect to an invalid address - use another --base-url") from None
        except requests.TooManyRedirects:
            raise VpromError(f"{self.url}: more than {self.policy.max_redirects} redirects (the "
                             f"last to {self.target}); the server is misconfigured - use "
                             "another --base-url") from None
        return response, response.url if response.history else self.url

    def _redirected(self, response, **kwargs) -> None:
        """Refuse a redirect out of http(s) before requests follows it; show each one once."""
        if not response.is_redirect:
            return
        self.target = urljoin(response.url, response.headers["Location"])   # ValueError: _open
        if urlsplit(self.target).scheme not in _SCHEMES or not urlsplit(self.target).hostname:
            response.close()
            raise VpromError(f"{self.url}: the server redirects to {self.target!r}; only http(s) "
                             "redirects are followed - use another --base-url")
        if (response.url, self.target) not in self.redirects:
            self.redirects.add((response.url, self.target))
            self.log(f"{self.url.rsplit('/', 1)[-1]}: redirected to {self.target}")

    def _receive(self, response, offset: int, total: int | None) -> None:
        part, policy, ceiling = self.part, self.policy, self.expected.ceiling
        size = offset
        window_start, window_size = time.monotonic(), size
        bar = tqdm(total=total, initial=offset, unit="B", unit_scale=True,
                   desc=self.dest.name, disable=None, leave=False)
        with open(part, "ab" if offset else "wb") as f, bar:
            while chunk := response.raw.read1(_CHUNK, decode_content=False):
                size += len(chunk)
                over = ""
                if total is not None and size > total:
                    over = f"the server sent more than the {total} bytes the file has"
                elif total is None and ceiling is not None and size > ceiling:
                    over = (f"the server sent more than {ceiling} bytes without saying how "
                            "many, more than this file may have (its ceiling, several times "
                            "its largest known size)")
                if over:
                    f.close()
                    part.unlink()
                    raise VpromError(f"{self.url}: {over}; the partial file was deleted (it "
                                     "is not resumed) - try another --base-url")
                _keep_reserve(f, part, len(chunk), total is not None, policy.reserve)
                f.write(chunk)
                self.received += len(chunk)
                bar.update(len(chunk))
                now = time.monotonic()
                if now >= self.end:
                    break   # _attempt then refuses what is not complete
                if now - window_start >= policy.speed_window:
                    speed = (size - window_size) / (now - window_start)
                    if speed < policy.min_speed:
                        raise _Retry(f"too slow: {speed:.0f} B/s over {now - window_start:.1f} "
                                     f"s, under the floor of {policy.min_speed:.0f} B/s")
                    window_start, window_size = now, size

    def _hold_to(self, total: int | None) -> None:
        """A server that changes the file's size between attempts is not trusted."""
        if self.announced is None:
            self.announced = total
        if total is not None and total != self.announced:
            self.part.unlink(missing_ok=True)
            raise VpromError(f"{self.url}: the server announced {self.announced} bytes, then "
                             f"{total}; the partial file was deleted - rerun `vprom download`, "
                             "or try another --base-url")

    def _check_hash(self) -> str:
        url, part, expected = self.url, self.part, self.expected
        sha = sha256_file(part)
        if expected.sha256 is not None and sha != expected.sha256:
            bad = self.dest.with_name(self.dest.name + ".bad")
            os.replace(part, bad)
            raise VpromError(f"{url}: sha256 {sha} differs from the expected {expected.sha256} "
                             f"({expected.source}); moved to {bad.name} - use another "
                             "--base-url, or if this mirror serves other files on purpose, "
                             "pass --expected FILE")
        os.replace(part, self.dest)
        return sha


def _keep_reserve(f, part: Path, more: int, known: bool, reserve: int) -> None:
    """Refuse to write `more` bytes that would leave less than the reserve free."""
    free = free_space(part.parent).free
    if free - more >= reserve:
        return
    f.close()
    what = (f"{part.parent} would be left with less than the {size_text(reserve)} kept free "
            f"(--reserve); {size_text(free)} free")
    if known:
        raise VpromError(f"{part}: {what}" + _resume_note(part) + "; free space and rerun "
                         "`vprom download`")
    size = part.stat().st_size
    part.unlink()
    raise VpromError(f"{part}: {what}; the server did not say how large the file is, so its "
                     f"{size} bytes were deleted rather than kept - free space and rerun "
                     "`vprom download`, or pass --expected FILE with its size")


def _resume_point(response, offset: int) -> tuple[int, int | None]:
    """Where to write the body (offset or 0), and the file's size if the server says."""
    if response.status_code == 206:
        match = _CONTENT_RANGE.match(response.headers.get("Content-Range", ""))
        if match and int(match.group(1)) == offset:
            return offset, None if match.group(3) == "*" else int(match.group(3))
        raise _Retry("206 with an unexpected Content-Range; restarting")
    length = response.headers.get("Content-Length")
    return 0, int(length) if length and length.isdigit() else None   # 200: write from 0


def _disk_error(e: OSError, part: Path) -> VpromError:
    where = e.filename or part
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
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


class Watch:
    """Shuts down the sockets registered with it when its deadline passes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sockets: weakref.WeakSet = weakref.WeakSet()
        self._armed = self.fired = False

    @contextlib.contextmanager
    def until(self, end: float) -> Iterator[Watch]:
        """Arm the watch until the monotonic time `end`; disarm it on the way out."""
        with self._lock:
            self._armed, self.fired = True, False
        timer = threading.Timer(max(end - time.monotonic(), 0.0), self._fire)
        timer.daemon = True
        timer.start()
        try:
            yield self
        finally:
            timer.cancel()
            with self._lock:
                self._armed = False
                self._sockets.clear()

    def add(self, sock) -> None:
        with self._lock:
            if sock is None or not self._armed:
                return
            if self.fired:
                _shut(sock)
            else:
                self._sockets.add(sock)

    def _fire(self) -> None:
        with self._lock:
            if self._armed:
                self.fired = True
                for sock in list(self._sockets):
                    _shut(sock)


def _shut(sock) -> None:
    try:   # the plain socket's shutdown: an SSLSocket's own would drop its TLS state first
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
    except OSError:   # already closed or never connected: nothing to wake
        pass


class _Registering:
    """A urllib3 connection that registers its socket with `watch` (set per session)."""

    watch: Watch

    def _new_conn(self):
        sock = super()._new_conn()
        self.watch.add(sock)
        return sock

    def getresponse(self, *args, **kwargs):
        self.watch.add(self.sock)   # a kept-alive connection opened under an earlier watch
        return super().getresponse(*args, **kwargs)


def _watched_pool(pool: type, connection: type, watch: Watch) -> type:
    watched = type(f"Watched{connection.__name__}", (_Registering, connection), {"watch": watch})
    return type(f"Watched{pool.__name__}", (pool,), {"ConnectionCls": watched})


class _WatchedAdapter(HTTPAdapter):
    """requests' adapter, with connection classes that register their sockets with a Watch."""

    def __init__(self, watch: Watch, **kwargs) -> None:
        self.watch = watch
        self._pools = {"http": _watched_pool(HTTPConnectionPool, HTTPConnection, watch),
                       "https": _watched_pool(HTTPSConnectionPool, HTTPSConnection, watch)}
        super().__init__(**kwargs)

    def init_poolmanager(self, *args, **kwargs) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = self._pools

    def proxy_manager_for(self, proxy, **kwargs):
        manager = super().proxy_manager_for(proxy, **kwargs)
        if not proxy.lower().startswith("socks"):   # SOCKS managers bring their own pools
            manager.pool_classes_by_scheme = self._pools
        return manager


def watch(http: requests.Session) -> Watch:
    """The session's Watch, mounting the watched adapters on it the first time."""
    adapter = http.get_adapter("https://")   # both prefixes are mounted together
    if isinstance(adapter, _WatchedAdapter):
        return adapter.watch
    shared = Watch()
    for prefix in ("https://", "http://"):
        http.mount(prefix, _WatchedAdapter(shared))
    return shared
