"""The HTTP side of `vprom download` against a misbehaving local mirror (mining.fetch).

Deadlines and speed floors, redirects, bad addresses, sizes a server lies about, a full
disk. Every failure must be one line naming the file and what to do, never a traceback from
requests, and a partial download that can be resumed must be kept.
"""

from __future__ import annotations

import hashlib
import os

import pytest

from vprom.mining import fetch
from vprom.mining.download import ANNOTATIONS, download
from tests.mining import hostile
from tests.mining.hostile import NOTHING_KNOWN, no_pins
from vprom.errors import VpromError

server = hostile.server   # the misbehaving mirror, a fixture

NAME = ANNOTATIONS[0]


def _get(out, base, **kw):
    kw.setdefault("expected", NOTHING_KNOWN)
    kw.setdefault("log", lambda message: None)
    return download(out, base_url=base, images=False, retry_wait=0, timeout=5, **kw)


def _cli(capsys, *args) -> tuple[int, str]:
    from vprom.app.cli import main

    code = main(["download", *args])
    return code, capsys.readouterr().err.strip()


# --------------------------------------------------------------------------------- time
def test_a_trickling_server_is_given_up_at_the_deadline_and_the_part_resumes(tmp_path, server):
    base, handler = server
    handler.trickle = 0.01   # ~100 bytes/s
    with pytest.raises(VpromError, match=rf"{NAME}: gave up after 1.5 s, the deadline for one "
                                         rf"file .*{NAME}.part keeps \d+ bytes; a rerun resumes"):
        _get(tmp_path, base, deadline=1.5, min_speed=0)
    kept = (tmp_path / f"{NAME}.part").stat().st_size
    assert kept > 0 and not (tmp_path / NAME).exists()
    handler.trickle = 0
    handler.requests.clear()
    _get(tmp_path, base)
    assert (tmp_path / NAME).read_bytes() == handler.files[NAME]
    assert handler.requests[0] == (NAME, f"bytes={kept}-")


def test_a_transfer_under_the_speed_floor_is_retried_then_given_up(tmp_path, server):
    base, handler = server
    handler.trickle = 0.01
    with pytest.raises(VpromError, match=rf"{NAME}: failed after 2 attempts \(too slow: \d+ B/s "
                                         r"over [\d.]+ s, under the floor of 100000 B/s\)"):
        _get(tmp_path, base, retries=1, min_speed=100_000, speed_window=0.3)
    assert len([r for r in handler.requests if r[0] == NAME]) == 2
    assert (tmp_path / f"{NAME}.part").stat().st_size > 0   # kept: a rerun resumes


def test_the_deadline_is_a_command_line_option(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        _cli(capsys, "--out", str(tmp_path), "--deadline", "soon")
    assert stop.value.code == 2 and "not a positive duration: 'soon'" in capsys.readouterr().err
    from vprom.mining.download import parse_duration

    assert [parse_duration(t) for t in ("90", "90s", "30m", "8h", "1.5h")] == \
        [90, 90, 1800, 28800, 5400]
    for text in ("0", "-5", "", "5d"):
        with pytest.raises(ValueError):
            parse_duration(text)


# ---------------------------------------------------------------------------- redirects
def test_redirects_are_followed_and_reported(tmp_path, server):
    base, handler = server
    handler.files["moved.zip"] = handler.files[NAME]
    handler.redirects[NAME] = "moved.zip"   # relative, as servers often send
    notices = []
    _get(tmp_path, base, log=notices.append)
    assert (tmp_path / NAME).read_bytes() == handler.files[NAME]
    assert notices == [f"{NAME}: redirected to {base}/moved.zip"]
    import json

    record = json.loads((tmp_path / "download.manifest.json").read_text())["config"]["files"]
    assert record[NAME]["redirected_to"] == f"{base}/moved.zip"


@pytest.mark.parametrize("location", ["file:///etc/passwd", "ftp://example.org/x.zip",
                                      "gopher://example.org/"])
def test_a_redirect_out_of_http_is_refused_in_one_line(tmp_path, server, capsys, monkeypatch,
                                                       location):
    base, handler = server
    monkeypatch.setattr("vprom.mining.download.PINNED", no_pins(tmp_path))
    handler.redirects[NAME] = location
    code, err = _cli(capsys, "--out", str(tmp_path / "vg"), "--base-url", base, "--no-images")
    assert code == 1 and len(err.splitlines()) == 1
    assert f"the server redirects to '{location}'; only http(s) redirects" in err


def test_a_redirect_to_no_valid_address_is_one_line(tmp_path, server):
    base, handler = server
    handler.redirects[NAME] = "http://[::1"
    with pytest.raises(VpromError, match=r"Invalid IPv6 URL.*invalid address"):
        _get(tmp_path, base)


def test_a_redirect_loop_is_one_line(tmp_path, server, capsys, monkeypatch):
    base, handler = server
    monkeypatch.setattr("vprom.mining.download.PINNED", no_pins(tmp_path))
    handler.redirects[NAME] = NAME
    code, err = _cli(capsys, "--out", str(tmp_path / "vg"), "--base-url", base, "--no-images")
    notice, error = err.splitlines()   # the redirect is shown once, then the one-line error
    assert code == 1 and notice == f"{NAME}: redirected to {base}/{NAME}"
    assert "more than 5 redirects" in error


# ---------------------------------------------------------------------------- addresses
@pytest.mark.parametrize("url", ["mirror.example.org/vg", "http://", "ftp://example.org/vg",
                                 "file:///srv/vg", "http://[::1", "http://example.org:port/vg",
                                 "https://exa mple.org/vg", ""])
def test_a_bad_base_url_is_one_line_before_anything_happens(tmp_path, capsys, url):
    code, err = _cli(capsys, "--out", str(tmp_path / "vg"), "--base-url", url)
    assert code == 1 and len(err.splitlines()) == 1
    assert f"--base-url {url!r}" in err and "http(s) address" in err
    assert not (tmp_path / "vg").exists()


def test_an_unreachable_mirror_is_retried_then_one_line(tmp_path):
    with pytest.raises(VpromError, match=f"{NAME}: failed after 2 attempts"):
        _get(tmp_path, "http://127.0.0.1:9/vg", retries=1)   # port 9: nothing listens


# -------------------------------------------------------------------------------- sizes
def test_a_body_longer_than_the_expected_size_is_cut_off(tmp_path, server):
    base, handler = server
    handler.no_length = True
    data = handler.files[NAME]
    with pytest.raises(VpromError, match="sent more than the 1000 bytes"):
        _get(tmp_path, base, expected={NAME: {"bytes": 1000, "sha256": None}})
    assert not (tmp_path / f"{NAME}.part").exists() and not (tmp_path / NAME).exists()
    assert len(data) > 1000


def test_a_server_changing_the_size_between_attempts_is_refused(tmp_path, server):
    base, handler = server
    handler.claim_extra = 10   # 200/206 announce 10 bytes more than the 416 answer
    with pytest.raises(VpromError, match=r"announced \d+ bytes, then \d+"):
        _get(tmp_path, base, retries=2)
    assert not (tmp_path / NAME).exists() and not (tmp_path / f"{NAME}.part").exists()


def test_a_known_size_that_differs_is_refused_before_downloading(tmp_path, server):
    base, handler = server
    size = len(handler.files[NAME]) + 1
    with pytest.raises(VpromError, match=f"announces {size - 1} bytes but the file must have "
                                         f"{size}"):
        _get(tmp_path, base, expected={NAME: {"bytes": size}})
    assert not (tmp_path / NAME).exists() and not (tmp_path / f"{NAME}.part").exists()


def test_a_matching_size_and_hash_pass(tmp_path, server):
    base, handler = server
    pins = {n: {"bytes": len(d), "sha256": hashlib.sha256(d).hexdigest()}
            for n, d in handler.files.items() if n in ANNOTATIONS}
    assert _get(tmp_path, base, expected=pins).fetched == list(ANNOTATIONS)


# --------------------------------------------------------------------------------- disk
def test_too_little_free_space_is_refused_before_downloading(tmp_path, server, monkeypatch):
    base, handler = server
    usage = fetch.shutil.disk_usage(tmp_path)
    monkeypatch.setattr(fetch.shutil, "disk_usage", lambda p: usage._replace(free=1000))
    with pytest.raises(VpromError, match=f"{NAME}: 0.00 GB still to download but .* has 0.00 "
                                         "GB free; free space and rerun"):
        _get(tmp_path, base)
    assert not (tmp_path / NAME).exists()


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs Linux's /dev/full")
def test_a_full_disk_while_downloading_is_one_line(tmp_path, server, capsys, monkeypatch):
    base, handler = server
    monkeypatch.setattr("vprom.mining.download.PINNED", no_pins(tmp_path))
    out = tmp_path / "vg"
    out.mkdir()
    (out / f"{NAME}.part").symlink_to("/dev/full")   # every write: ENOSPC from the kernel
    code, err = _cli(capsys, "--out", str(out), "--base-url", base, "--no-images")
    assert code == 1 and len(err.splitlines()) == 1
    assert "out of space while downloading" in err and "free space and rerun" in err
