"""A misbehaving Visual Genome mirror on 127.0.0.1, and the broken zips it serves.

`server` (a pytest fixture; import it into a test module) runs `http.server` in a thread on
an ephemeral port and yields (base_url, handler class). The handler serves `files` and
misbehaves as set on it per test: drop the connection half-way, ignore Range, lie about the
size, send no Content-Length, trickle bytes, redirect, stream an endless body, send its
headers one byte at a time forever. Every server shuts itself down after `SERVER_LIFETIME`
seconds even if a test hangs, and each test stops it on the way out.

The zip builders write real archives with zipfile and then patch their headers the way a
hostile or broken mirror would (zipfile itself refuses to write such archives).

`small_disk` makes `os.statvfs` report a small disk whose used space is what lies under one
folder (each file in whole blocks), so the free-space rules can be tested on any machine;
`tmpfs` mounts a real small one where the tests run as root.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import io
import json
import os
import ssl
import stat
import struct
import subprocess
import threading
import time
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from vprom.mining.download import ANNOTATIONS

SERVER_LIFETIME = 60.0   # seconds; a safety net, tests take well under a second each
NOTHING_KNOWN = {}       # `expected=` for the test files: no pinned size or hash applies


def no_pins(folder) -> str:
    """A pins file that knows nothing, to stand in for mining/data/vg_files.json."""
    path = folder / "no-pins.json"
    path.write_text('{"files": {}}')
    return path


# ----------------------------------------------------------------------------- the zips
def make_zip(entries: dict[str, bytes], symlinks: dict[str, str] | None = None,
             method: int = zipfile.ZIP_DEFLATED) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", method) as zf:
        for name, data in entries.items():
            zf.writestr(name, data)
        for name, target in (symlinks or {}).items():
            info = zipfile.ZipInfo(name)
            info.external_attr = (stat.S_IFLNK | 0o777) << 16
            zf.writestr(info, target)
    return buffer.getvalue()


def zeros_zip(name: str, size: int, method: int = zipfile.ZIP_DEFLATED) -> bytes:
    """One member of `size` zero bytes, written in pieces (memory stays flat)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", method) as zf:
        info = zipfile.ZipInfo(name)
        info.compress_type = method
        with zf.open(info, "w", force_zip64=size > 2**31) as member:
            block = bytes(1 << 20)
            for start in range(0, size, len(block)):
                member.write(block[: size - start])
    return buffer.getvalue()


@functools.cache   # 30,000 members take seconds to write; two tests share them
def tiny_members_zip(count: int, folder: str = "VG_100K") -> bytes:
    """`count` one-byte members: a few MB of zip that takes count blocks and inodes on disk."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as zf:
        for k in range(count):
            zf.writestr(f"{folder}/{k}.jpg", b"x")
    return buffer.getvalue()


def duplicate_zip(name: str, first: bytes, second: bytes) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        zf.writestr(name, first)
        with pytest.warns(UserWarning, match="Duplicate name"):
            zf.writestr(name, second)
    return buffer.getvalue()


# Offsets inside a local file header (PK\3\4) and a central directory header (PK\1\2).
_LOCAL = {"flags": 6, "method": 8, "crc": 14, "file_size": 22, "name_len": 26, "name": 30}
_CENTRAL = {"flags": 8, "method": 10, "crc": 16, "file_size": 24, "name_len": 28, "name": 46}
_WIDTH = {"flags": "<H", "method": "<H", "crc": "<I", "file_size": "<I"}


def patch(data: bytes, name: str, **fields: int) -> bytes:
    """Set header fields (flags, method, crc, file_size) of entry `name`, in both headers."""
    out = bytearray(data)
    encoded = name.encode()
    for signature, at in ((b"PK\x03\x04", _LOCAL), (b"PK\x01\x02", _CENTRAL)):
        start = out.find(signature)
        while start != -1:
            (length,) = struct.unpack_from("<H", out, start + at["name_len"])
            if out[start + at["name"]: start + at["name"] + length] == encoded:
                for field, value in fields.items():
                    struct.pack_into(_WIDTH[field], out, start + at[field], value)
            start = out.find(signature, start + 4)
    return bytes(out)


def good_files() -> dict[str, bytes]:
    """A small VG: the four annotation zips (one JSON member each) and the two image zips."""
    files = {}
    for k, name in enumerate(ANNOTATIONS):
        member = name[: -len(".zip")]
        # incompressible padding (~300 KB) so that a drop half-way leaves whole chunks behind
        pad = hashlib.shake_256(name.encode()).hexdigest(150_000 + k)
        files[name] = make_zip({member: json.dumps([{"image_id": 1, "pad": pad}]).encode()})
    files["images.zip"] = make_zip({"VG_100K/1.jpg": b"\xff\xd8jpeg-one",
                                    "VG_100K/2.jpg": b"\xff\xd8two"})
    files["images2.zip"] = make_zip({"VG_100K_2/3.jpg": b"\xff\xd8three"})
    return files


# --------------------------------------------------------------------------- the server
class Handler(BaseHTTPRequestHandler):
    files: dict[str, bytes] = {}
    drop_first: bool = False     # send half the body of the first request, then hang up
    ignore_range: bool = False   # answer 200 with the whole file even when asked for a range
    claim_extra: int = 0         # announce this many bytes more than the file holds
    no_length: bool = False      # no Content-Length: the body ends when the connection closes
    trickle: float = 0.0         # seconds between single bytes (0: send at once)
    redirects: dict[str, str] = {}   # name -> Location answered with 302
    endless: set[str] = set()    # names answered 200 with zeros forever, no Content-Length
    slow_headers: float = 0.0    # seconds between single header bytes, forever (0: off)
    requests: list = []

    def log_message(self, *args):   # keep pytest's output clean
        pass

    def do_GET(self):
        name = self.path.rsplit("/", 1)[-1]
        self.requests.append((name, self.headers.get("Range")))
        try:
            if self.slow_headers:
                return self._slow_headers()
            if name in self.endless:
                return self._endless()
        except OSError:   # the client gave up (a broken pipe, a reset, a TLS EOF): fine
            return
        if name in self.redirects:
            self.send_response(302)
            self.send_header("Location", self.redirects[name])
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        data = self.files.get(name)
        if data is None:
            self.send_error(404)
            return
        start = 0
        range_header = self.headers.get("Range")
        if range_header and not self.ignore_range:
            start = int(range_header.split("=")[1].rstrip("-"))
            if start >= len(data):
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{len(data)}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(206)
            self.send_header("Content-Range",
                             f"bytes {start}-{len(data) - 1}/{len(data) + self.claim_extra}")
        else:
            self.send_response(200)
        body = data[start:]
        if not self.no_length:
            self.send_header("Content-Length", str(len(body) + self.claim_extra))
        self.end_headers()
        try:
            self._send(name, body)
        except (BrokenPipeError, ConnectionResetError):   # the client gave up: fine
            pass

    def _slow_headers(self) -> None:
        """A status line, then a header that never ends, one byte at a time."""
        self.wfile.write(b"HTTP/1.1 200 OK\r\nX-Padding: ")
        self.wfile.flush()
        while True:
            time.sleep(self.slow_headers)
            self.wfile.write(b"a")
            self.wfile.flush()

    def _endless(self) -> None:
        self.send_response(200)
        self.end_headers()   # no Content-Length: the body would end when the connection does
        block = bytes(1 << 16)
        while True:
            self.wfile.write(block)

    def _send(self, name: str, body: bytes) -> None:
        if self.drop_first and len([r for r in self.requests if r[0] == name]) == 1:
            self.wfile.write(body[: len(body) // 2])
            self.wfile.flush()
            self.close_connection = True
            return
        if self.trickle:
            for k in range(len(body)):
                self.wfile.write(body[k:k + 1])
                self.wfile.flush()
                time.sleep(self.trickle)
            return
        self.wfile.write(body)


@pytest.fixture
def server():
    """Start a server; yield (base_url, handler class); stop it (or let it stop itself)."""
    yield from _serve("http")


@pytest.fixture
def tls_server(tmp_path):
    """The same over HTTPS with a fresh self-signed certificate; yields (base_url, handler,
    certificate path). Skipped where no `openssl` command can make the certificate."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    try:
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                        "-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1",
                        "-addext", "subjectAltName=IP:127.0.0.1"],
                       check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError) as e:
        pytest.skip(f"cannot make a test certificate with openssl ({e})")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    for base, handler in _serve("https", context):
        yield base, handler, cert


def _serve(scheme: str, context=None):
    handler = type("TestHandler", (Handler,), {"files": good_files(), "requests": [],
                                               "redirects": {}, "endless": set()})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    if context is not None:
        httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    stopper = threading.Timer(SERVER_LIFETIME, httpd.shutdown)
    stopper.daemon = True
    stopper.start()
    try:
        yield f"{scheme}://127.0.0.1:{httpd.server_address[1]}/vg", handler
    finally:
        stopper.cancel()
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


# ------------------------------------------------------------------------------ the disk
def used_bytes(root, block: int = 4096) -> int:
    """What the files and folders under root take, each in whole blocks (as `footprint`)."""
    used = 0
    for path in root.rglob("*"):
        with contextlib.suppress(FileNotFoundError):   # a part deleted while we look
            used += block * (max(-(-path.stat().st_size // block), 1) if path.is_file() else 1)
    return used


def small_disk(monkeypatch, root, size: int, block: int = 4096, inodes: int = 1_000_000,
               filled_by_others=lambda: 0) -> None:
    """Make os.statvfs report a `size`-byte disk holding what lies under root (and
    `filled_by_others()` bytes written by someone else)."""

    def statvfs(path):
        used = used_bytes(root, block) + filled_by_others()
        free = max(size - used, 0) // block
        files = sum(1 for _ in root.rglob("*"))
        return os.statvfs_result((block, block, size // block, free, free, inodes,
                                  inodes - files, inodes - files, 0, 255))

    monkeypatch.setattr(os, "statvfs", statvfs)


@contextlib.contextmanager
def tmpfs(folder, size: str):
    """Mount a tmpfs of `size` (e.g. "20m") on folder; skip the test where that is not allowed."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root; the patched-statvfs variant runs instead")
    folder.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs",
                              str(folder)], capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({mounted.stderr.strip()}); the "
                    "patched-statvfs variant runs instead")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)
