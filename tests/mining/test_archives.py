"""Safe unpacking and checking of the zips a mirror serves (mining.download.archives), without a server.

Each hostile or broken archive must end in a one-line `VpromError`: "corrupt archive" with
the archive moved to `NAME.bad` when the archive is at fault, the archive kept when the disk
is. Nothing outside the archive's own folder may change.
"""

from __future__ import annotations

import errno
import hashlib
import io
import os
import zipfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vprom.mining.download import archives
from vprom.mining.download.archives import IMAGE_LIMITS, JSON_LIMITS, Layout, unpack, verify
from tests.mining.hostile import (duplicate_zip, make_zip, patch, small_disk, tiny_members_zip,
                                  tmpfs, used_bytes, zeros_zip)
from vprom.errors import VpromError

IMAGES = Layout(folder="VG_100K")
OBJECTS_JSON = Layout(member="objects.json", limits=JSON_LIMITS)


@pytest.fixture
def out(tmp_path) -> Path:
    folder = tmp_path / "vg"
    folder.mkdir()
    return folder


def _noise(n: int) -> bytes:
    """Incompressible bytes, the same on every run."""
    return hashlib.shake_256(str(n).encode()).digest(n)


def _archive(tmp_path, data: bytes, name: str = "images.zip") -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def _refused(archive: Path, out: Path, match: str, layout=IMAGES) -> str:
    """Unpack must fail as a corrupt archive, move it to .bad and leave out as it was."""
    before = sorted(p.relative_to(out) for p in out.rglob("*"))
    with pytest.raises(VpromError, match="corrupt archive") as error:
        unpack(archive, out, layout)
    message = str(error.value)
    assert match in message, message
    assert f"moved to {archive.name}.bad" in message and "\n" not in message
    assert not archive.exists() and archive.with_name(archive.name + ".bad").exists()
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == before
    return message


# --------------------------------------------------------------------- entries and layout
@pytest.mark.parametrize("entries,symlinks,entry", [
    ({"VG_100K/ok.jpg": b"x", "../evil.txt": b"pwned"}, None, "../evil.txt"),
    ({"VG_100K/../../evil.txt": b"pwned"}, None, "VG_100K/../../evil.txt"),
    ({"/tmp/abs_evil.txt": b"pwned"}, None, "/tmp/abs_evil.txt"),
    ({"C:/evil.txt": b"pwned"}, None, "C:/evil.txt"),
    ({"VG_100K\\..\\..\\evil.txt": b"pwned"}, None, "VG_100K\\..\\..\\evil.txt"),
    ({"VG_100K/ok.jpg": b"x"}, {"VG_100K/link": "/etc/passwd"}, "VG_100K/link"),
])
def test_unsafe_archives_are_refused_before_anything_is_written(tmp_path, out, entries,
                                                                 symlinks, entry):
    message = _refused(_archive(tmp_path, make_zip(entries, symlinks)), out, repr(entry))
    assert "images.zip" in message
    assert sorted(p.name for p in tmp_path.iterdir()) == ["images.zip.bad", "vg"]


@pytest.mark.parametrize("entries,match", [
    ({"VG_100K/1.jpg": b"x", "VG_100K_2/2.jpg": b"y"}, "'VG_100K_2/2.jpg' lies outside VG_100K/"),
    ({"VG_100K/1.jpg": b"x", ".bashrc": b"y"}, "'.bashrc' lies outside VG_100K/"),
    ({"VG_100K/1.jpg": b"x", "objects.json.zip": b"y"}, "'objects.json.zip' lies outside"),
    ({"VG_100K": b"a file"}, "is a file where VG_100K/ must be a folder"),
    ({"VG_100K/a": b"x", "VG_100K/a/b.jpg": b"y"}, "'VG_100K/a' is both a file and a folder"),
    ({}, "holds no file"),
])
def test_an_archive_creates_only_its_own_folder(tmp_path, out, entries, match):
    _refused(_archive(tmp_path, make_zip(entries)), out, match)


def test_duplicate_names_are_refused_not_last_one_wins(tmp_path, out):
    data = duplicate_zip("VG_100K/1.jpg", b"first", b"second")
    _refused(_archive(tmp_path, data), out, "'VG_100K/1.jpg' appears twice")


def test_names_equal_after_folding_are_duplicates(tmp_path, out):
    data = make_zip({"VG_100K/1.jpg": b"a", "VG_100K//1.jpg": b"b"})
    _refused(_archive(tmp_path, data), out, "appears twice")


def test_an_existing_folder_is_merged_into_never_deleted(tmp_path, out):
    (out / "VG_100K").mkdir()
    (out / "VG_100K" / "mine.jpg").write_bytes(b"the user's")
    (out / "VG_100K" / "1.jpg").write_bytes(b"half")   # an interrupted unpack's file
    (out / ".images.zip.abc123.unpack" / "VG_100K").mkdir(parents=True)   # its temp folder
    archive = _archive(tmp_path, make_zip({"VG_100K/1.jpg": b"one", "VG_100K/2.jpg": b"two"}))
    assert unpack(archive, out, IMAGES) == ["VG_100K"]
    assert {p.name: p.read_bytes() for p in (out / "VG_100K").iterdir()} == {
        "mine.jpg": b"the user's", "1.jpg": b"one", "2.jpg": b"two"}
    assert sorted(p.name for p in out.iterdir()) == [".images.zip.unpacked", "VG_100K"]


def test_a_file_where_the_folder_goes_is_left_alone(tmp_path, out):
    (out / "VG_100K").write_text("not a folder")
    archive = _archive(tmp_path, make_zip({"VG_100K/1.jpg": b"one"}))
    with pytest.raises(VpromError, match="exists and is not a folder"):
        unpack(archive, out, IMAGES)
    assert (out / "VG_100K").read_text() == "not a folder" and archive.exists()


def test_unpack_skips_when_the_marker_is_there(tmp_path, out):
    archive = _archive(tmp_path, make_zip({"VG_100K/1.jpg": b"one"}))
    assert unpack(archive, out, IMAGES) == ["VG_100K"]
    (out / "VG_100K" / "1.jpg").write_bytes(b"edited")
    assert unpack(archive, out, IMAGES) == ["VG_100K"]
    assert (out / "VG_100K" / "1.jpg").read_bytes() == b"edited"


# ------------------------------------------------------------------- unreadable members
@pytest.mark.parametrize("fields,match", [
    ({"flags": 0x1}, "is encrypted"),
    ({"method": 9}, "deflate64"),
    ({"method": 6}, "implode"),
    ({"crc": 0xDEADBEEF}, "Bad CRC-32"),
])
def test_unreadable_members_are_corrupt_archives(tmp_path, out, fields, match):
    data = patch(make_zip({"VG_100K/1.jpg": b"\xff\xd8" * 100}), "VG_100K/1.jpg", **fields)
    _refused(_archive(tmp_path, data), out, match)


@pytest.mark.parametrize("data", [b"", b"PK", b"this is not a zip", _noise(4096)])
def test_bytes_that_are_no_zip_are_corrupt_archives(tmp_path, out, data):
    _refused(_archive(tmp_path, data), out, "not a readable zip")


@settings(max_examples=150, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cut=st.integers(min_value=0, max_value=10_000), flip=st.integers(0, 10_000),
       value=st.integers(0, 255))
def test_any_damage_is_a_clean_error_or_an_intact_unpack(tmp_path_factory, cut, flip, value):
    """Truncations and single-byte changes anywhere never escape as a raw exception."""
    good = make_zip({"VG_100K/1.jpg": _noise(3000), "VG_100K/2.jpg": b"\xff\xd8" * 500})
    data = bytearray(good[: len(good) - cut % len(good)] if cut % 2 else good)
    if data:
        data[flip % len(data)] = value
    tmp = tmp_path_factory.mktemp("fuzz")
    (tmp / "vg").mkdir()
    archive = _archive(tmp, bytes(data))
    try:
        unpack(archive, tmp / "vg", IMAGES)
    except VpromError as e:
        assert "corrupt archive" in str(e) and not archive.exists()
        assert [p.name for p in (tmp / "vg").iterdir()] == []
    else:   # the damage missed everything that matters: the content is exact
        with zipfile.ZipFile(io.BytesIO(good)) as zf:
            for name in zf.namelist():
                assert (tmp / "vg" / name).read_bytes() == zf.read(name)


# ----------------------------------------------------------------- sizes, ratios, bombs
def test_a_bzip2_bomb_is_refused_unread(tmp_path, out):
    data = zeros_zip("VG_100K/1.jpg", 20 << 20, zipfile.ZIP_BZIP2)
    assert len(data) < 1000
    _refused(_archive(tmp_path, data), out, "bzip2")


def test_a_compression_ratio_no_jpeg_has_is_refused(tmp_path, out):
    data = zeros_zip("VG_100K/1.jpg", 8 << 20)   # deflate, ratio ~1000
    _refused(_archive(tmp_path, data), out, "a ratio over 20")


def test_a_member_larger_than_any_real_one_is_refused(tmp_path, out):
    data = patch(make_zip({"VG_100K/1.jpg": b"x"}, method=zipfile.ZIP_STORED), "VG_100K/1.jpg",
                 file_size=IMAGE_LIMITS.member_bytes + 1)
    _refused(_archive(tmp_path, data), out, f"declares {IMAGE_LIMITS.member_bytes + 1} bytes")


def test_a_total_larger_than_any_real_archive_is_refused(tmp_path, out, monkeypatch):
    small = archives.Limits(member_bytes=1000, total_bytes=1500, ratio=20.0, members=10)
    data = make_zip({"VG_100K/1.jpg": _noise(1000), "VG_100K/2.jpg": _noise(1000)})
    _refused(_archive(tmp_path, data), out, "declare 2000 bytes in all",
             layout=archives.Layout(folder="VG_100K", limits=small))


def test_a_header_that_understates_the_size_writes_no_more_than_it_declares(tmp_path, out):
    data = zeros_zip("VG_100K/1.jpg", 1 << 20)   # 1 MiB of zeros claiming to be 100 bytes
    lying = patch(data, "VG_100K/1.jpg", file_size=100)
    _refused(_archive(tmp_path, lying), out, "VG_100K/1.jpg")


def test_counting_stops_a_stream_that_yields_more_than_declared():
    sink = io.BytesIO()
    with pytest.raises(archives._Bad, match="expands beyond the 10 bytes it declares"):
        archives.copy_counted(io.BytesIO(bytes(1 << 20)), sink, 10, "VG_100K/1.jpg")
    assert len(sink.getvalue()) == 0   # the over-long chunk never reached the disk
    with pytest.raises(archives._Bad, match="holds 5 bytes but declares 10"):
        archives.copy_counted(io.BytesIO(bytes(5)), None, 10, "VG_100K/1.jpg")
    assert archives.copy_counted(io.BytesIO(bytes(10)), None, 10, "x") == 10


def test_more_entries_than_a_real_archive_has_are_refused_unparsed(tmp_path, out,
                                                                    monkeypatch):
    few = archives.Layout(folder="VG_100K", limits=archives.Limits(
        member_bytes=1000, total_bytes=10_000, ratio=20.0, members=100))
    parsed = []
    monkeypatch.setattr(archives, "_checked", lambda *a: parsed.append(a))
    _refused(_archive(tmp_path, tiny_members_zip(101)), out, "declares 101 entries, more than "
             "the 100", layout=few)
    assert parsed == []   # refused from the end record, before zipfile built its entries
    assert IMAGE_LIMITS.members >= 108_077   # all of VG's images would fit in one zip


# ----------------------------------------------------------------------------- the disk
def test_too_little_free_space_keeps_the_archive(tmp_path, out, monkeypatch):
    archive = _archive(tmp_path, make_zip({"VG_100K/1.jpg": _noise(5000)}))
    small_disk(monkeypatch, out, size=1 << 20)
    with pytest.raises(VpromError, match=r"unpacking 1 files and 1 folders takes 12.0 KB on "
                                         r"disk \(5000 bytes declared, each file in whole "
                                         r"4096-byte blocks\) and 1.0 MB stay free \(--reserve\), "
                                         r"but .* has 1.0 MB free; the archive is kept"):
        unpack(archive, out, IMAGES, reserve=1 << 20)
    assert archive.exists() and list(out.iterdir()) == []


def test_many_tiny_members_cannot_fill_a_small_disk(tmp_path, out, monkeypatch):
    # Before: 30,000 one-byte members declare 30 kB, passed the free-space check and took
    # 120 MB of blocks (and 30,000 inodes) on a 20 MB disk.
    data = tiny_members_zip(30_000)
    assert len(data) < 4_000_000
    archive = _archive(tmp_path, data)
    small_disk(monkeypatch, out, size=20 << 20)
    with pytest.raises(VpromError, match=r"unpacking 30000 files and 1 folders takes 117.2 MB "
                                         r"on disk \(30000 bytes declared.*the archive is kept"):
        unpack(archive, out, IMAGES, reserve=0)
    assert archive.exists() and list(out.iterdir()) == []


def test_an_unpack_needing_more_inodes_than_are_free_is_refused(tmp_path, out, monkeypatch):
    archive = _archive(tmp_path, tiny_members_zip(50))
    small_disk(monkeypatch, out, size=1 << 30, inodes=40)
    with pytest.raises(VpromError, match=r"takes as many inodes, but the file system of .* has "
                                         r"40 free; the archive is kept"):
        unpack(archive, out, IMAGES, reserve=0)
    assert list(out.iterdir()) == []


def test_an_unpack_stops_before_eating_into_the_reserve(tmp_path, out, monkeypatch):
    # The disk fills from elsewhere while unpacking: the free space is read again per file.
    archive = _archive(tmp_path, make_zip({f"VG_100K/{k}.jpg": _noise(100 + k)
                                           for k in range(20)}))
    calls = []

    def others():   # another program writes 9 MB after the unpack started
        calls.append(1)
        return 9 << 20 if len(calls) > 5 else 0

    small_disk(monkeypatch, out, size=10 << 20, filled_by_others=others)
    with pytest.raises(VpromError, match=r"unpacking stopped at 'VG_100K/\d+.jpg': .* would be "
                                         r"left with less than the 1.0 MB kept free.*kept"):
        unpack(archive, out, IMAGES, reserve=1 << 20)
    assert archive.exists() and list(out.iterdir()) == []   # its temporary folder is gone


def test_many_tiny_members_never_fill_a_real_small_disk(tmp_path):
    archive = _archive(tmp_path, tiny_members_zip(30_000))
    with tmpfs(tmp_path / "disk", "20m") as disk:
        with pytest.raises(VpromError, match="unpacking 30000 files .* the archive is kept"):
            unpack(archive, disk, IMAGES, reserve=0)
        assert list(disk.iterdir()) == [] and used_bytes(disk) == 0


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs Linux's /dev/full")
def test_a_full_disk_while_unpacking_keeps_the_archive(tmp_path, out, monkeypatch):
    archive = _archive(tmp_path, make_zip({"VG_100K/1.jpg": _noise(200_000)}))
    monkeypatch.setattr(archives, "_create", lambda path: open("/dev/full", "wb"))
    with pytest.raises(VpromError) as error:
        unpack(archive, out, IMAGES)
    message = str(error.value)
    assert "out of space" in message and "the archive is kept" in message
    assert "corrupt" not in message and "\n" not in message
    assert archive.exists() and list(out.iterdir()) == []   # temp folder gone, no marker
    monkeypatch.undo()
    assert unpack(archive, out, IMAGES) == ["VG_100K"]   # after freeing space: a rerun works


def test_other_disk_errors_keep_the_archive(tmp_path, out, monkeypatch):
    archive = _archive(tmp_path, make_zip({"VG_100K/1.jpg": b"x"}))

    def denied(path):
        raise PermissionError(errno.EACCES, "Permission denied", str(path))

    monkeypatch.setattr(archives, "_create", denied)
    with pytest.raises(VpromError, match="Permission denied .*the archive is kept"):
        unpack(archive, out, IMAGES)
    assert archive.exists()


# ------------------------------------------------------------------------ annotation zips
def test_an_annotation_zip_is_read_back_whole(tmp_path):
    archive = _archive(tmp_path, make_zip({"objects.json": b"[]" * 1000}), "objects.json.zip")
    assert verify(archive, OBJECTS_JSON) == 2000
    mac = make_zip({"objects.json": b"[]", "__MACOSX/._objects.json": b"fork"})
    assert verify(_archive(tmp_path, mac, "objects.json.zip"), OBJECTS_JSON) == 2


@pytest.mark.parametrize("entries,match", [
    ({"objects.json": b"[]", "objects.json.zip": b"x"}, "found objects.json, objects.json.zip"),
    ({"other.json": b"[]"}, "found other.json"),
    ({"../objects.json": b"[]"}, "climbs out"),
])
def test_an_annotation_zip_holds_exactly_its_json(tmp_path, entries, match):
    archive = _archive(tmp_path, make_zip(entries), "objects.json.zip")
    with pytest.raises(VpromError, match=match):
        verify(archive, OBJECTS_JSON)
    assert (tmp_path / "objects.json.zip.bad").exists()


def test_an_annotation_zip_with_a_bad_crc_is_corrupt(tmp_path):
    data = patch(make_zip({"objects.json": b"[]" * 100}), "objects.json", crc=1)
    archive = _archive(tmp_path, data, "objects.json.zip")
    with pytest.raises(VpromError, match="corrupt archive .*Bad CRC-32"):
        verify(archive, OBJECTS_JSON)
