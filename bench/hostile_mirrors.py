"""Hostile mirrors end to end, on a real small disk.

Three cases, each against the misbehaving 127.0.0.1 mirror of tests/mining/hostile.py:
- endless: `objects.json.zip` (no pinned size) answered with zeros forever and no
  Content-Length, downloaded into a fresh 20 MB tmpfs;
- tiny: a zip of 30,000 one-byte members (3.3 MB) unpacked into a fresh 20 MB tmpfs;
- headers: a mirror sending its headers one byte every 2 s, with `deadline` 5 s.
Prints, per case, the error (or "no error"), the free space left on the tmpfs and the parts
left behind, and the seconds taken. Mounting a tmpfs needs root; `timeout` guards the
headers case.

    sudo .venv/bin/python bench/hostile_mirrors.py --reserve 2M
    timeout 40 .venv/bin/python bench/hostile_mirrors.py --cases headers
"""

from __future__ import annotations

import argparse
import inspect
import os
import subprocess
import tempfile
import threading
import time
from http.server import ThreadingHTTPServer
from pathlib import Path

from suite_builders import load
from vprom.errors import VpromError
from vprom.mining.download import archives
from vprom.mining.download import download

hostile = load("tests/mining/hostile.py")


def _serve():
    handler = type("Mirror", (hostile.Handler,), {"files": hostile.good_files(), "requests": [],
                                                  "redirects": {}, "endless": set()})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{httpd.server_address[1]}/vg", handler


def _free(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def _with_reserve(function, reserve: int | None) -> dict:
    """`reserve=` where this checkout's function takes it (an older one does not)."""
    if reserve is None or "reserve" not in inspect.signature(function).parameters:
        return {}
    return {"reserve": reserve}


def _endless(disk: Path, reserve: int | None) -> str:
    base, handler = _serve()
    handler.endless.add("objects.json.zip")
    download(disk, base_url=base, images=False, expected={}, retry_wait=0, timeout=5,
             log=lambda m: None, **_with_reserve(download, reserve))
    return "no error"


def _tiny(disk: Path, reserve: int | None) -> str:
    archive = disk.parent / "tiny.zip"
    archive.write_bytes(hostile.tiny_members_zip(30_000))
    archives.unpack(archive, disk, archives.Layout(folder="VG_100K"),
                    **_with_reserve(archives.unpack, reserve))
    return "no error"


def _headers(disk: Path, reserve: int | None) -> str:
    base, handler = _serve()
    handler.slow_headers = 2.0
    download(disk, base_url=base, images=False, expected={}, deadline=5, retry_wait=0,
             log=lambda m: None, **_with_reserve(download, reserve))
    return "no error"


CASES = {"endless": _endless, "tiny": _tiny, "headers": _headers}


def run(case: str, reserve: int | None) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        disk = Path(tmp) / "disk"
        disk.mkdir()
        mounted = case != "headers"   # the deadline case writes nothing
        if mounted:
            subprocess.run(["mount", "-t", "tmpfs", "-o", "size=20m", "tmpfs", str(disk)],
                           check=True)
        start = time.monotonic()
        try:
            outcome = CASES[case](disk, reserve)
        except VpromError as e:
            outcome = f"error: {e}"
        seconds = time.monotonic() - start
        parts = [(p.name, p.stat().st_size) for p in disk.glob("*.part")]
        room = f"{_free(disk)} bytes free of 20 MB; " if mounted else ""
        print(f"{case}: {seconds:.1f} s; {room}parts left {parts}")
        print(f"  {outcome}")
        if mounted:
            subprocess.run(["umount", "-l", str(disk)], check=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument("--reserve", default=None,
                        help="bytes to keep free, e.g. 2M (default: the library's default)")
    args = parser.parse_args()
    reserve = None
    if args.reserve is not None:   # an older checkout has no mining.download.space and no reserve
        from vprom.mining.download.archives import parse_size

        reserve = parse_size(args.reserve)
    for case in args.cases:
        run(case, reserve)


if __name__ == "__main__":
    main()
