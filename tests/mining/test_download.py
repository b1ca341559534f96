"""The downloader end to end against a local (mis)behaving mirror: resume, verification,
pinned sizes and hashes, what a broken or hostile archive leaves behind, the command line.

The HTTP edge cases (deadlines, redirects, addresses, a full disk) are in test_fetch.py and
the zip edge cases in test_archives.py; the server and the zip builders in hostile.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import zipfile

import pytest

from vprom.mining.download import (ANNOTATIONS, IMAGES, PINNED, DownloadSummary, download,
                             load_expected)
from tests.mining import hostile
from tests.mining.hostile import NOTHING_KNOWN, make_zip, no_pins, patch, small_disk
from vprom.errors import VpromError

server = hostile.server   # the misbehaving mirror, a fixture


def _get(out, base, **kw) -> DownloadSummary:
    kw.setdefault("expected", NOTHING_KNOWN)
    return download(out, base_url=base, retry_wait=0, timeout=5, **kw)


def _recorded(out) -> set[str]:
    path = out / "download.manifest.json"
    return set(json.loads(path.read_text())["outputs"]) if path.exists() else set()


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# ------------------------------------------------------------------- downloads and resume
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
    assert manifest["outputs"] == {n: _sha(handler.files[n]) for n in ANNOTATIONS}
    assert "fetched 4 file(s)" in str(summary)


def test_full_download_unpacks_images_and_a_rerun_skips_everything(tmp_path, server):
    base, handler = server
    summary = _get(tmp_path, base)
    assert (tmp_path / "VG_100K" / "1.jpg").read_bytes() == b"\xff\xd8jpeg-one"
    assert (tmp_path / "VG_100K_2" / "3.jpg").read_bytes() == b"\xff\xd8three"
    assert len(summary.unpacked) == 2
    assert not (tmp_path / "images.zip").exists()   # deleted after a complete unpack
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".unpack")]
    assert _recorded(tmp_path) == {*ANNOTATIONS, *IMAGES}
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


def test_a_missing_file_names_the_url(tmp_path, server):
    base, handler = server
    del handler.files["attributes.json.zip"]
    with pytest.raises(VpromError, match="attributes.json.zip: HTTP 404"):
        _get(tmp_path, base, images=False)


# ------------------------------------------------------------ pinned and expected values
def test_the_official_sizes_and_hashes_are_pinned_where_known():
    pins = load_expected()
    assert set(pins) == {*ANNOTATIONS, *IMAGES}
    assert pins["images.zip"].bytes == 9_731_705_982
    assert pins["images2.zip"].bytes == 5_471_658_058
    assert pins["image_data.json.zip"].bytes == 1_780_854
    assert all(len(pins[n].sha256) == 64 for n in ("images.zip", "images2.zip"))
    assert pins["objects.json.zip"].bytes is None   # unknown: not invented
    raw = json.loads(PINNED.read_text())["files"]
    assert all(entry["source"] for entry in raw.values())


def test_by_default_the_pins_apply_to_a_mirror_too(tmp_path, server):
    base, handler = server   # the test files are not the official ones: refused at once
    with pytest.raises(VpromError, match=r"image_data.json.zip: the server announces \d+ bytes "
                                         r"but the file must have 1780854 .*pinned"):
        download(tmp_path, base_url=base, retry_wait=0, timeout=5, images=False)
    assert list(tmp_path.iterdir()) == []   # refused before a byte was written


def test_a_wrong_hash_goes_to_bad_and_is_never_recorded(tmp_path, server):
    base, handler = server
    name = ANNOTATIONS[1]
    data = handler.files[name]
    wrong = {name: {"bytes": len(data), "sha256": _sha(b"another file")}}
    with pytest.raises(VpromError, match=f"{name}: sha256 {_sha(data)} differs .*{name}.bad"):
        _get(tmp_path, base, images=False, expected=wrong)
    assert (tmp_path / f"{name}.bad").read_bytes() == data
    assert not (tmp_path / name).exists() and not (tmp_path / f"{name}.part").exists()
    assert name not in _recorded(tmp_path)
    right = {name: {"bytes": len(data), "sha256": _sha(data)}}
    _get(tmp_path, base, images=False, expected=right)   # a rerun fetches it anew
    assert (tmp_path / name).read_bytes() == data and name in _recorded(tmp_path)


def test_an_expected_file_replaces_the_pins(tmp_path, server, capsys):
    from vprom.app.cli import main

    base, handler = server
    mine = {"files": {n: {"bytes": len(d), "sha256": _sha(d)} for n, d in handler.files.items()}}
    (tmp_path / "mirror.json").write_text(json.dumps(mine))
    out = tmp_path / "vg"
    assert main(["download", "--out", str(out), "--base-url", base, "--expected",
                 str(tmp_path / "mirror.json")]) == 0
    assert (out / "VG_100K_2" / "3.jpg").exists()


@pytest.mark.parametrize("content,message", [
    ("not json", "not a JSON object"),
    ('{"files": {"images3.zip": {"bytes": 1}}}', "unknown file 'images3.zip'"),
    ('{"files": {"images.zip": {"bytes": -5}}}', "must be"),
    ('{"files": {"images.zip": {"sha256": "abc"}}}', "64 lowercase hex"),
])
def test_a_bad_expected_file_is_one_line(tmp_path, capsys, content, message):
    from vprom.app.cli import main

    (tmp_path / "mirror.json").write_text(content)
    assert main(["download", "--out", str(tmp_path / "vg"), "--expected",
                 str(tmp_path / "mirror.json")]) == 1
    err = capsys.readouterr().err
    assert message in err and "mirror.json" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "vg").exists()   # refused before anything was done


# --------------------------------------------------- broken archives: .bad, never recorded
def _truncated(data: bytes) -> bytes:
    return data[: len(data) * 2 // 3]


def _random(data: bytes) -> bytes:
    return hashlib.shake_256(b"noise").digest(len(data))


def _bad_crc(data: bytes) -> bytes:
    return patch(data, "VG_100K_2/3.jpg", crc=0xDEADBEEF)


def _encrypted(data: bytes) -> bytes:
    return patch(data, "VG_100K_2/3.jpg", flags=0x1)


def _deflate64(data: bytes) -> bytes:
    return patch(data, "VG_100K_2/3.jpg", method=9)


@pytest.mark.parametrize("breaks,no_length", [
    (_truncated, False),   # truncated, with a matching Content-Length
    (_truncated, True),    # truncated, with no Content-Length at all
    (_random, False),      # random bytes of the right size
    (_bad_crc, False),
    (_encrypted, False),
    (_deflate64, False),
])
def test_a_broken_image_zip_goes_to_bad_and_a_rerun_fetches_it_again(tmp_path, server, breaks,
                                                                     no_length):
    base, handler = server
    good = handler.files["images2.zip"]
    handler.files["images2.zip"] = breaks(good)
    handler.no_length = no_length
    with pytest.raises(VpromError, match=r"images2.zip: corrupt archive \(.*\); moved to "
                                         r"images2.zip.bad .* rerun `vprom download`"):
        _get(tmp_path, base)
    assert not (tmp_path / "images2.zip").exists()
    assert (tmp_path / "images2.zip.bad").read_bytes() == breaks(good)
    assert not (tmp_path / "VG_100K_2").exists()
    assert not (tmp_path / ".images2.zip.unpacked").exists()
    assert "images2.zip" not in _recorded(tmp_path)
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".unpack")]
    handler.files["images2.zip"] = good
    handler.requests.clear()
    _get(tmp_path, base)
    assert [r[0] for r in handler.requests] == ["images2.zip"]
    assert (tmp_path / "VG_100K_2" / "3.jpg").read_bytes() == b"\xff\xd8three"
    assert "images2.zip" in _recorded(tmp_path)


@pytest.mark.parametrize("breaks", [_truncated, _random])
def test_a_broken_annotation_zip_goes_to_bad(tmp_path, server, breaks):
    base, handler = server
    handler.files["objects.json.zip"] = breaks(handler.files["objects.json.zip"])
    with pytest.raises(VpromError, match="objects.json.zip: corrupt archive"):
        _get(tmp_path, base, images=False)
    assert (tmp_path / "objects.json.zip.bad").exists()
    assert not (tmp_path / "objects.json.zip").exists()
    assert "objects.json.zip" not in _recorded(tmp_path)


def test_an_annotation_zip_must_hold_its_one_json(tmp_path, server):
    base, handler = server
    handler.files["objects.json.zip"] = make_zip({"objects.json": b"[]", "extra.json": b"[]"})
    with pytest.raises(VpromError, match="must hold exactly one file, objects.json, found "
                                         "objects.json, extra.json"):
        _get(tmp_path, base, images=False)


def test_a_file_found_under_its_final_name_is_checked_before_it_is_trusted(tmp_path, server):
    # An unreadable file under its final name must not be skipped and recorded as good.
    base, handler = server
    (tmp_path / "images.zip").write_bytes(patch(make_zip({"VG_100K/1.jpg": b"x"}),
                                                "VG_100K/1.jpg", flags=0x1))
    with pytest.raises(VpromError, match="images.zip: corrupt archive .* is encrypted"):
        _get(tmp_path, base)
    assert "images.zip" not in _recorded(tmp_path)
    assert (tmp_path / "images.zip.bad").exists()
    _get(tmp_path, base)
    assert (tmp_path / "VG_100K" / "1.jpg").read_bytes() == b"\xff\xd8jpeg-one"


def test_a_recorded_file_that_changed_is_checked_again_and_unrecorded(tmp_path, server):
    base, handler = server
    _get(tmp_path, base, images=False)
    (tmp_path / "objects.json.zip").write_bytes(b"overwritten by something else")
    with pytest.raises(VpromError, match="objects.json.zip: corrupt archive"):
        _get(tmp_path, base, images=False)
    assert _recorded(tmp_path) == set(ANNOTATIONS) - {"objects.json.zip"}
    _get(tmp_path, base, images=False)
    assert (tmp_path / "objects.json.zip").read_bytes() == handler.files["objects.json.zip"]


def test_a_placed_file_with_the_wrong_pinned_size_goes_to_bad(tmp_path, server):
    base, handler = server
    name = ANNOTATIONS[0]
    (tmp_path / name).write_bytes(handler.files[name])
    pins = {name: {"bytes": len(handler.files[name]) + 1, "sha256": None}}
    with pytest.raises(VpromError, match=f"{name}: has bytes .* moved to {name}.bad"):
        _get(tmp_path, base, images=False, expected=pins)
    assert (tmp_path / f"{name}.bad").exists() and name not in _recorded(tmp_path)


# --------------------------------------------------------------------- hostile archives
def test_an_archive_cannot_clobber_or_forge_anything_in_out(tmp_path, server):
    """The hostile pass's zip: it replaced the annotation zip and forged the markers."""
    base, handler = server
    _get(tmp_path, base, images=False)
    (tmp_path / ".ssh").mkdir()
    (tmp_path / ".ssh" / "authorized_keys").write_text("mine")
    (tmp_path / ".bashrc").write_text("mine")
    before = {p: p.read_bytes() for p in tmp_path.rglob("*")
              if p.is_file() and p.name != "download.manifest.json"}
    handler.files["images2.zip"] = make_zip({
        "objects.json.zip": b"forged", "download.manifest.json": b"{}",
        ".images2.zip.unpacked": b'{"placed": []}', ".images.zip.unpacked": b"{}",
        ".ssh/authorized_keys": b"attacker", ".bashrc": b"attacker",
        "VG_100K_2/3.jpg": b"\xff\xd8three"})
    with pytest.raises(VpromError, match="lies outside VG_100K_2/"):
        _get(tmp_path, base)
    for path, data in before.items():
        assert path.read_bytes() == data, path
    assert not (tmp_path / ".images2.zip.unpacked").exists()
    assert not (tmp_path / "VG_100K_2").exists()
    manifest = json.loads((tmp_path / "download.manifest.json").read_text())
    assert manifest["outputs"] == {n: _sha(handler.files[n]) for n in [*ANNOTATIONS, "images.zip"]}
    assert (tmp_path / "images2.zip.bad").exists()
    assert (tmp_path / "VG_100K" / "1.jpg").exists()   # the good zip before it is done


def test_an_image_zip_cannot_fill_the_other_zips_folder(tmp_path, server):
    base, handler = server
    handler.files["images.zip"] = make_zip({"VG_100K/1.jpg": b"x", "VG_100K_2/9.jpg": b"y"})
    with pytest.raises(VpromError, match="'VG_100K_2/9.jpg' lies outside VG_100K/"):
        _get(tmp_path, base)
    assert not (tmp_path / "VG_100K").exists() and not (tmp_path / "VG_100K_2").exists()


def test_an_unsafe_image_zip_from_the_server_stops_the_download(tmp_path, server):
    base, handler = server
    handler.files["images2.zip"] = make_zip({"../evil.txt": b"pwned"})
    with pytest.raises(VpromError, match="'../evil.txt'"):
        _get(tmp_path / "vg", base)
    assert not (tmp_path / "evil.txt").exists()
    assert (tmp_path / "vg" / "VG_100K" / "1.jpg").exists()   # the safe zip before it is done


def test_a_bzip2_bomb_writes_nothing(tmp_path, server):
    from tests.mining.hostile import zeros_zip

    base, handler = server
    bomb = zeros_zip("VG_100K/1.jpg", 100 << 20, zipfile.ZIP_BZIP2)
    assert len(bomb) < 4000   # 100 MB of "jpg" from a few hundred bytes
    handler.files["images.zip"] = bomb
    with pytest.raises(VpromError, match="images.zip: corrupt archive .*bzip2"):
        _get(tmp_path, base)
    written = sum(p.stat().st_size for p in tmp_path.rglob("*")
                  if p.is_file() and not p.name.endswith(".bad"))
    assert written < 2_000_000   # the annotation zips and the manifest, no 100 MB "jpg"


# --------------------------------------------------------------------------- command line
def test_the_command_line_downloads_and_prints_the_summary(tmp_path, server, capsys,
                                                            monkeypatch):
    from vprom.app.cli import main

    base, handler = server
    monkeypatch.setattr("vprom.mining.download.PINNED", no_pins(tmp_path))
    assert main(["download", "--out", str(tmp_path), "--base-url", base, "--no-images"]) == 0
    assert "fetched 4 file(s)" in capsys.readouterr().out
    del handler.files["images.zip"]
    assert main(["download", "--out", str(tmp_path), "--base-url", base]) == 1
    assert "images.zip: HTTP 404" in capsys.readouterr().err


def test_the_command_line_reports_a_corrupt_archive_in_one_line(tmp_path, server, capsys,
                                                                monkeypatch):
    from vprom.app.cli import main

    base, handler = server
    monkeypatch.setattr("vprom.mining.download.PINNED", no_pins(tmp_path))
    handler.files["images.zip"] = patch(make_zip({"VG_100K/3.jpg": b"x"}), "VG_100K/3.jpg",
                                        method=9)
    assert main(["download", "--out", str(tmp_path / "vg"), "--base-url", base]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "corrupt archive" in err and "images.zip.bad" in err


def test_the_reserve_is_a_command_line_option(tmp_path, server, capsys, monkeypatch):
    from vprom.app.cli import main

    base, _ = server
    monkeypatch.setattr("vprom.mining.download.PINNED", no_pins(tmp_path))
    with pytest.raises(SystemExit) as stop:
        main(["download", "--out", str(tmp_path / "vg"), "--reserve", "lots"])
    assert stop.value.code == 2 and "not a size: 'lots'" in capsys.readouterr().err
    free = os.statvfs(tmp_path).f_bavail * os.statvfs(tmp_path).f_frsize
    too_much = f"{free // (1 << 20) + 1024}M"   # more than the disk has: refused at once
    assert main(["download", "--out", str(tmp_path / "vg"), "--base-url", base, "--no-images",
                 "--reserve", too_much]) == 1
    assert "to keep free (--reserve)" in capsys.readouterr().err
    assert main(["download", "--out", str(tmp_path / "vg"), "--base-url", base,
                 "--reserve", "0"]) == 0
    from vprom.mining.download.archives import parse_size

    assert [parse_size(t) for t in ("0", "512", "500M", "2G", "1.5GiB", "4kb")] == \
        [0, 512, 500 << 20, 2 << 30, 3 << 29, 4096]


def test_the_unpack_keeps_the_reserve_and_the_zip(tmp_path, server, monkeypatch):
    base, handler = server
    handler.files["images.zip"] = hostile.tiny_members_zip(2000)
    small_disk(monkeypatch, tmp_path, size=8 << 20)   # the zip fits, its 2000 files do not
    with pytest.raises(VpromError, match=r"images.zip: unpacking 2000 files and 1 folders takes "
                                         r"7.8 MB on disk .*the archive is kept"):
        _get(tmp_path, base, reserve=1 << 20)
    assert (tmp_path / "images.zip").exists() and not (tmp_path / "VG_100K").exists()
    assert "images.zip" not in _recorded(tmp_path)


def test_out_that_is_a_file_is_one_line(tmp_path, capsys):
    from vprom.app.cli import main

    (tmp_path / "file").write_text("x")
    with pytest.raises(SystemExit) as stop:   # refused while parsing, before any work
        main(["download", "--out", str(tmp_path / "file"), "--no-images"])
    assert stop.value.code == 2 and "is a file, but this output is a folder" in \
        capsys.readouterr().err
    with pytest.raises(VpromError, match="is a file, but this output is a folder"):   # from Python
        download(tmp_path / "file", images=False)
    assert os.path.isfile(tmp_path / "file")
