"""The HTTP side of `vprom download` against a misbehaving local mirror (mining.download.fetch).

Deadlines (headers included) and speed floors, redirects, bad addresses, sizes a server lies
about, endless bodies and their ceilings, the free-space reserve, a full disk. Every failure
must be one line naming the file and what to do, never a traceback from requests; a partial
download that can be resumed must be kept, and junk that passed a bound must be deleted.
"""

from __future__ import annotations

import hashlib
import json
import os
import time

import pytest
import requests

from vprom.mining import download as download_module
from vprom.mining.download import fetch
from vprom.mining.download import ANNOTATIONS, download
from tests.mining import hostile
from tests.mining.hostile import NOTHING_KNOWN, no_pins, small_disk, tmpfs, used_bytes
from vprom.errors import VpromError

server = hostile.server   # the misbehaving mirror, a fixture

NAME = ANNOTATIONS[0]
UNPINNED = "objects.json.zip"   # its ceiling (1 GiB) is larger than the small disks below


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


def test_a_server_sending_its_headers_byte_by_byte_is_cut_at_the_deadline(tmp_path, server):
    # Before: the per-read timeout (5 s here) restarted with every byte and this hung.
    base, handler = server
    handler.slow_headers = 0.2
    start = time.monotonic()
    with pytest.raises(VpromError, match=rf"{NAME}: gave up after 1.5 s, the deadline for one "
                                         r"file \(--deadline\), which bounds the whole exchange, "
                                         "headers included"):
        _get(tmp_path, base, deadline=1.5)
    assert time.monotonic() - start < 1.5 + 4.0   # not the 60 s the server would go on for
    assert not (tmp_path / NAME).exists() and not (tmp_path / f"{NAME}.part").exists()


tls_server = hostile.tls_server


def test_the_deadline_cuts_slow_headers_under_tls_and_on_a_plain_session(tmp_path, tls_server):
    # A caller's own requests.Session gets the watched adapters mounted by fetch itself.
    base, handler, cert = tls_server
    handler.slow_headers = 0.2
    http = requests.Session()
    http.trust_env = False   # else REQUESTS_CA_BUNDLE in the environment overrides verify
    http.verify = str(cert)
    policy = fetch.Policy(retries=2, retry_wait=0, timeout=5, deadline=1.5, min_speed=0,
                          speed_window=60, max_redirects=5, reserve=0)
    start = time.monotonic()
    with pytest.raises(VpromError, match="gave up after 1.5 s.*headers included"):
        fetch.fetch(http, f"{base}/{NAME}", tmp_path / NAME, fetch.Expected(), policy,
                    lambda message: None)
    assert time.monotonic() - start < 1.5 + 4.0
    handler.slow_headers = 0   # the same session, TLS and all, still fetches a good file
    got = fetch.fetch(http, f"{base}/{NAME}", tmp_path / NAME, fetch.Expected(), policy,
                      lambda message: None)
    assert (tmp_path / NAME).read_bytes() == handler.files[NAME] and got.url.startswith("https")


def test_the_command_line_deadline_bounds_the_headers(tmp_path, server, capsys, monkeypatch):
    base, handler = server
    monkeypatch.setattr("vprom.mining.download.PINNED", no_pins(tmp_path))
    handler.slow_headers = 0.5
    start = time.monotonic()
    code, err = _cli(capsys, "--out", str(tmp_path / "vg"), "--base-url", base, "--no-images",
                     "--deadline", "2s")
    assert code == 1 and len(err.splitlines()) == 1 and "gave up after 2 s" in err
    assert time.monotonic() - start < 2 + 6.0   # the deadline, plus the CLI's start on a busy machine


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


@pytest.mark.parametrize("base, host", [("http://127.0.0.1:9/vg", "127.0.0.1"),  # no listener
                                        ("http://vg.invalid/vg", "vg.invalid")])  # RFC 2606
@pytest.mark.parametrize("bound", [{"retries": 1},  # the attempts run out
                                   {"retries": 9, "deadline": 1.0, "retry_wait": 5.0}])
def test_an_unreachable_mirror_says_so_and_not_to_wait_longer(tmp_path, base, host, bound):
    with pytest.raises(VpromError) as refused:
        download(tmp_path, base_url=base, images=False, timeout=5, expected=NOTHING_KNOWN,
                 log=lambda message: None, **{"retry_wait": 0, **bound})
    message = str(refused.value)
    assert message.startswith(f"{base}/{NAME}: cannot reach {host} (")
    assert "check the network connection" in message and "--deadline" not in message


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


# ---------------------------------------------------------------------- endless bodies
def _small_ceilings(monkeypatch, ceiling: int) -> None:
    monkeypatch.setattr(download_module, "CEILINGS",
                        dict.fromkeys(download_module.CEILINGS, ceiling))


def test_an_endless_body_for_an_unpinned_file_stops_at_its_ceiling_and_is_deleted(
        tmp_path, server, capsys, monkeypatch):
    # Before: objects.json.zip has no pinned size, so this filled the disk and kept the junk.
    base, handler = server
    monkeypatch.setattr("vprom.mining.download.PINNED", no_pins(tmp_path))
    _small_ceilings(monkeypatch, 1 << 20)
    handler.endless.add("objects.json.zip")
    out = tmp_path / "vg"
    code, err = _cli(capsys, "--out", str(out), "--base-url", base, "--no-images")
    assert code == 1 and len(err.splitlines()) == 1
    assert "objects.json.zip: the server sent more than 1048576 bytes without saying how " \
           "many" in err and "deleted (it is not resumed)" in err and "resumes" not in err
    assert not (out / "objects.json.zip.part").exists() and not (out / "objects.json.zip").exists()


def test_an_endless_body_under_expected_with_nulls_stops_at_its_ceiling(tmp_path, server,
                                                                      capsys, monkeypatch):
    base, handler = server
    _small_ceilings(monkeypatch, 1 << 20)
    handler.endless.add("attributes.json.zip")
    mine = {"files": {n: {"bytes": None, "sha256": None} for n in ANNOTATIONS}}
    (tmp_path / "mirror.json").write_text(json.dumps(mine))
    out = tmp_path / "vg"
    code, err = _cli(capsys, "--out", str(out), "--base-url", base, "--no-images",
                     "--expected", str(tmp_path / "mirror.json"))
    assert code == 1 and "attributes.json.zip: the server sent more than 1048576 bytes" in err
    assert not (out / "attributes.json.zip.part").exists()
    assert (out / "objects.json.zip").exists()   # the files before it are kept, recorded


def test_an_announced_size_over_the_ceiling_is_refused_before_downloading(tmp_path, server,
                                                                         monkeypatch):
    base, _ = server
    _small_ceilings(monkeypatch, 1000)
    with pytest.raises(VpromError, match=rf"{NAME}: the server announces \d+ bytes, more than "
                                         r"the 1000 bytes this file may have \(its ceiling"):
        _get(tmp_path, base)
    assert list(tmp_path.iterdir()) == []


def test_the_ceilings_are_several_times_the_known_sizes():
    pins = download_module.load_expected()
    for name, ceiling in download_module.CEILINGS.items():
        if pins[name].bytes is not None:
            assert 3 * pins[name].bytes <= ceiling <= 10 * pins[name].bytes, name
        else:   # ~10x the largest annotation zip on record (region_descriptions_v1, 99.5 MB)
            assert ceiling >= 10 * 99_460_401, name


# --------------------------------------------------------------------------------- disk
def test_too_little_free_space_is_refused_before_downloading(tmp_path, server, monkeypatch):
    base, _ = server
    small_disk(monkeypatch, tmp_path, size=1 << 20)   # 1 MiB, the first file is ~0.3 MB
    with pytest.raises(VpromError, match=rf"{NAME}: \d+.\d KB still to download and "
                                         r"1.0 MB to keep free \(--reserve\), but .* has 1.0 MB "
                                         r"free; free space \(or lower --reserve\) and rerun"):
        _get(tmp_path, base, reserve=1 << 20)
    assert list(tmp_path.iterdir()) == []


def test_an_endless_body_stops_at_the_reserve_and_its_part_is_deleted(tmp_path, server,
                                                                     monkeypatch):
    # A 20 MB disk and an endless body under the default 1 GiB ceiling: before, the disk filled.
    base, handler = server
    handler.endless.add(UNPINNED)
    size, reserve = 20 << 20, 4 << 20
    small_disk(monkeypatch, tmp_path, size=size)
    with pytest.raises(VpromError, match=rf"{UNPINNED}.part: .* would be left with less than the "
                                         r"4.0 MB kept free \(--reserve\).*did not say how large "
                                         r"the file is, so its \d+ bytes were deleted"):
        _get(tmp_path, base, reserve=reserve)
    assert not (tmp_path / f"{UNPINNED}.part").exists()
    assert used_bytes(tmp_path) < size - reserve


def test_a_known_size_part_is_kept_when_others_fill_the_disk(tmp_path, server, monkeypatch):
    base, _ = server
    calls = []

    def others():   # another program writes 7 MB once the download is under way
        calls.append(1)
        return 7 << 20 if len(calls) > 3 else 0

    small_disk(monkeypatch, tmp_path, size=8 << 20, filled_by_others=others)
    with pytest.raises(VpromError, match=rf"{NAME}.part: .* would be left with less than the "
                                         rf"1.0 MB kept free .*{NAME}.part keeps \d+ bytes; a "
                                         r"rerun resumes from there"):
        _get(tmp_path, base, reserve=1 << 20, min_speed=0)
    assert (tmp_path / f"{NAME}.part").stat().st_size > 0


def test_an_endless_body_never_fills_a_real_small_disk(tmp_path, server):
    base, handler = server
    handler.endless.add(UNPINNED)
    with tmpfs(tmp_path / "disk", "20m") as disk:
        with pytest.raises(VpromError, match="did not say how large the file is"):
            _get(disk, base, reserve=4 << 20)
        assert os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize >= 4 << 20
        assert not (disk / f"{UNPINNED}.part").exists()


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
