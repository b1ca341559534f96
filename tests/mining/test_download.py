"""The downloader against a local HTTP server: resume, restart, size checks, safe unpacking.

The server (http.server in a thread, 127.0.0.1, ephemeral port) serves zips built here. Its
behaviour per test is set on the handler: drop the connection half-way on the first request,
ignore Range, lie about the size. Every server shuts itself down after `SERVER_LIFETIME`
seconds even if a test hangs, and each test stops it on the way out.
"""

from __future__ import annotations

import hashlib
import io
import json
import stat
import threading
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from mining.download import ANNOTATIONS, IMAGES, DownloadSummary, download, unpack
from vprom.errors import VpromError

SERVER_LIFETIME = 30.0   # seconds; a safety net, tests take well under a second each


def _zip(entries: dict[str, bytes], symlinks: dict[str, str] | None = None) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in entries.items():
            zf.writestr(name, data)
        for name, target in (symlinks or {}).items():
            info = zipfile.ZipInfo(name)
            info.external_attr = (stat.S_IFLNK | 0o777) << 16
            zf.writestr(info, target)
    return buffer.getvalue()


def _files() -> dict[str, bytes]:
    """A small VG: the four annotation zips (one JSON member each) and the two image zips."""
    files = {}
    for k, name in enumerate(ANNOTATIONS):
        member = name[: -len(".zip")]
        # incompressible padding (~300 KB) so that a drop half-way leaves whole chunks behind
        pad = hashlib.shake_256(name.encode()).hexdigest(150_000 + k)
        files[name] = _zip({member: json.dumps([{"image_id": 1, "pad": pad}]).encode()})
    files["images.zip"] = _zip({"VG_100K/1.jpg": b"\xff\xd8jpeg-one",
                                "VG_100K/2.jpg": b"\xff\xd8two"})
    files["images2.zip"] = _zip({"VG_100K_2/3.jpg": b"\xff\xd8three"})
    return files


class Handler(BaseHTTPRequestHandler):
    files: dict[str, bytes] = {}
    drop_first: bool = False     # send half the body of the first request, then hang up
    ignore_range: bool = False   # answer 200 with the whole file even when asked for a range
    claim_extra: int = 0         # announce this many bytes more than the file holds
    requests: list = []

    def log_message(self, *args):   # keep pytest's output clean
        pass

    def do_GET(self):
        name = self.path.rsplit("/", 1)[-1]
        self.requests.append((name, self.headers.get("Range")))
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
        self.send_header("Content-Length", str(len(body) + self.claim_extra))
        self.end_headers()
        if self.drop_first and len([r for r in self.requests if r[0] == name]) == 1:
            self.wfile.write(body[: len(body) // 2])
            self.wfile.flush()
            self.close_connection = True
            return
        self.wfile.write(body)


@pytest.fixture
def server():
    """Start a server; yield (base_url, handler class); stop it (or let it stop itself)."""
    handler = type("TestHandler", (Handler,), {"files": _files(), "requests": []})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    stopper = threading.Timer(SERVER_LIFETIME, httpd.shutdown)
    stopper.daemon = True
    stopper.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/vg", handler
    finally:
        stopper.cancel()
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


def _get(out, base, **kw) -> DownloadSummary:
    return download(out, base_url=base, retry_wait=0, timeout=5, **kw)


def test_no_images_fetches_only_annotations(tmp_path, server):
    base, handler = server
    summary = _get(tmp_path, base, images=False)
    assert summary.fetched == list(ANNOTATIONS)
    assert {r[0] for r in handler.requests} == set(ANNOTATIONS)
    for name in ANNOTATIONS:
        assert (tmp_path / name).read_bytes() == handler.files[name]
    assert not list(tmp_path.glob("*.part"))
    assert summary.bytes_fetched == sum(len(handler.files[n]) for n in ANNOTATIONS)
    manifest = json.loads((tmp_path / "download.manifest.json").read_text())
    assert set(manifest["outputs"]) == set(ANNOTATIONS)
    assert "fetched 4 file(s)" in str(summary)


def test_full_download_unpacks_images_and_a_rerun_skips_everything(tmp_path, server):
    base, handler = server
    summary = _get(tmp_path, base)
    assert (tmp_path / "VG_100K" / "1.jpg").read_bytes() == b"\xff\xd8jpeg-one"
    assert (tmp_path / "VG_100K_2" / "3.jpg").read_bytes() == b"\xff\xd8three"
    assert len(summary.unpacked) == 2
    assert not (tmp_path / "images.zip").exists()   # deleted after a complete unpack
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".unpack")]
    handler.requests.clear()
    again = _get(tmp_path, base)
    assert handler.requests == []
    assert again.fetched == [] and sorted(again.skipped) == sorted([*ANNOTATIONS, *IMAGES])


def test_a_dropped_connection_resumes_with_range(tmp_path, server):
    base, handler = server
    handler.drop_first = True
    _get(tmp_path, base, images=False)
    for name in ANNOTATIONS:
        assert (tmp_path / name).read_bytes() == handler.files[name]
        asked = [r for n, r in handler.requests if n == name]
        assert len(asked) == 2 and asked[0] is None
        start = int(asked[1].removeprefix("bytes=").rstrip("-"))
        assert 0 < start <= len(handler.files[name]) // 2   # whole chunks kept, then resumed


def test_a_server_ignoring_range_restarts_from_zero(tmp_path, server):
    base, handler = server
    handler.drop_first = True
    handler.ignore_range = True
    _get(tmp_path, base, images=False)
    for name in ANNOTATIONS:
        assert (tmp_path / name).read_bytes() == handler.files[name]
        asked = [r for n, r in handler.requests if n == name]
        assert len(asked) == 2 and asked[1] is not None   # asked to resume, got 200 instead


def test_a_part_left_by_an_earlier_run_is_resumed(tmp_path, server):
    base, handler = server
    name = ANNOTATIONS[0]
    data = handler.files[name]
    (tmp_path / f"{name}.part").write_bytes(data[:100])
    summary = _get(tmp_path, base, images=False)
    assert (tmp_path / name).read_bytes() == data
    assert (name, "bytes=100-") in handler.requests
    assert summary.bytes_fetched == sum(len(handler.files[n]) for n in ANNOTATIONS) - 100


def test_a_complete_part_is_finished_after_416(tmp_path, server):
    base, handler = server
    name = ANNOTATIONS[0]
    (tmp_path / f"{name}.part").write_bytes(handler.files[name])
    _get(tmp_path, base, images=False)
    assert (tmp_path / name).read_bytes() == handler.files[name]


def test_a_size_mismatch_is_an_error_and_leaves_no_final_file(tmp_path, server):
    base, handler = server
    handler.claim_extra = 10   # the body always ends short of the announced size
    with pytest.raises(VpromError, match="image_data.json.zip"):
        _get(tmp_path, base, images=False, retries=2)
    assert not (tmp_path / "image_data.json.zip").exists()


def test_a_known_size_that_differs_is_refused(tmp_path, server):
    base, handler = server
    name = ANNOTATIONS[0]
    with pytest.raises(VpromError, match="known size"):
        _get(tmp_path, base, images=False, expected_sizes={name: len(handler.files[name]) + 1})
    assert not (tmp_path / name).exists() and not (tmp_path / f"{name}.part").exists()


def test_a_missing_file_names_the_url(tmp_path, server):
    base, handler = server
    del handler.files["attributes.json.zip"]
    with pytest.raises(VpromError, match="attributes.json.zip: HTTP 404"):
        _get(tmp_path, base, images=False)


def test_a_corrupt_annotation_zip_is_refused_and_deleted(tmp_path, server):
    base, handler = server
    handler.files["objects.json.zip"] = b"this is not a zip"
    with pytest.raises(VpromError, match="objects.json.zip: not a readable zip"):
        _get(tmp_path, base, images=False)
    assert not (tmp_path / "objects.json.zip").exists()


# ------------------------------------------------------------------------------ unpacking
@pytest.mark.parametrize("entries,symlinks,entry", [
    ({"VG_100K/ok.jpg": b"x", "../evil.txt": b"pwned"}, None, "../evil.txt"),
    ({"VG_100K/../../evil.txt": b"pwned"}, None, "VG_100K/../../evil.txt"),
    ({"/tmp/abs_evil.txt": b"pwned"}, None, "/tmp/abs_evil.txt"),
    ({"C:/evil.txt": b"pwned"}, None, "C:/evil.txt"),
    ({"VG_100K/ok.jpg": b"x"}, {"VG_100K/link": "/etc/passwd"}, "VG_100K/link"),
])
def test_unsafe_archives_are_refused_before_anything_is_written(tmp_path, entries, symlinks, entry):
    target = tmp_path / "vg"
    target.mkdir()
    archive = tmp_path / "images.zip"
    archive.write_bytes(_zip(entries, symlinks))
    with pytest.raises(VpromError) as error:
        unpack(archive, target)
    assert "images.zip" in str(error.value) and repr(entry) in str(error.value)
    assert list(target.iterdir()) == []   # nothing inside, no marker, no temp folder
    assert sorted(p.name for p in tmp_path.iterdir()) == ["images.zip", "vg"]


def test_an_unsafe_image_zip_from_the_server_stops_the_download(tmp_path, server):
    base, handler = server
    handler.files["images2.zip"] = _zip({"../evil.txt": b"pwned"})
    with pytest.raises(VpromError, match="'../evil.txt'"):
        _get(tmp_path / "vg", base)
    assert not (tmp_path / "evil.txt").exists()
    assert (tmp_path / "vg" / "VG_100K" / "1.jpg").exists()   # the safe zip before it is done


def test_unpack_skips_when_the_marker_is_there(tmp_path):
    archive = tmp_path / "images.zip"
    archive.write_bytes(_zip({"VG_100K/1.jpg": b"one"}))
    out = tmp_path / "vg"
    out.mkdir()
    assert unpack(archive, out) == ["VG_100K"]
    (out / "VG_100K" / "1.jpg").write_bytes(b"edited")
    assert unpack(archive, out) == ["VG_100K"]
    assert (out / "VG_100K" / "1.jpg").read_bytes() == b"edited"


def test_an_unfinished_unpack_is_replaced(tmp_path):
    archive = tmp_path / "images.zip"
    archive.write_bytes(_zip({"VG_100K/1.jpg": b"one"}))
    out = tmp_path / "vg"
    (out / "VG_100K").mkdir(parents=True)
    (out / "VG_100K" / "stale.jpg").write_bytes(b"half")   # no marker: an interrupted unpack
    (out / ".images.zip.abc123.unpack" / "VG_100K").mkdir(parents=True)   # its temp folder
    unpack(archive, out)
    assert sorted(p.name for p in (out / "VG_100K").iterdir()) == ["1.jpg"]
    assert sorted(p.name for p in out.iterdir()) == [".images.zip.unpacked", "VG_100K"]


def test_the_command_line_downloads_and_prints_the_summary(tmp_path, server, capsys):
    from vprom.app.cli import main

    base, handler = server
    assert main(["download", "--out", str(tmp_path), "--base-url", base, "--no-images"]) == 0
    assert "fetched 4 file(s)" in capsys.readouterr().out
    del handler.files["images.zip"]
    assert main(["download", "--out", str(tmp_path), "--base-url", base]) == 1
    assert "images.zip: HTTP 404" in capsys.readouterr().err
