"""Claiming an output: a path that cannot be written, or an existing output that is not a
vprom output of the command's kind, is refused before any work, naming the path."""

import os
import re

import pytest

from vprom.claim import check_output, claim, output_kind
from vprom.errors import VpromError
from vprom.manifest import make_manifest, write_manifest


@pytest.mark.parametrize("make, folder, message", [
    (lambda p: p.mkdir(), False, "is a folder, but this output is a file"),
    (lambda p: p.write_text("x"), True, "is a file, but this output is a folder"),
])
def test_an_output_of_the_wrong_kind_is_refused(tmp_path, make, folder, message):
    make(tmp_path / "out")
    with pytest.raises(VpromError, match=message):
        check_output(tmp_path / "out", folder=folder)


def test_a_file_in_the_parent_path_is_refused(tmp_path):
    (tmp_path / "a").write_text("a file")
    with pytest.raises(VpromError, match="a is a file, so no file can be made below it"):
        check_output(tmp_path / "a" / "b" / "out.h5")
    assert check_output(tmp_path / "new" / "out.h5") == tmp_path / "new" / "out.h5"


@pytest.mark.parametrize("manifest", [None, '{"kind": "pools"}', "not json"])
def test_a_folder_vprom_did_not_write_is_never_claimed(tmp_path, manifest):
    """`export --out vg` must never delete the Visual Genome folder."""
    target = tmp_path / "vg"
    target.mkdir()
    (target / "objects.json").write_text("[]")
    if manifest is not None:
        (target / "manifest.json").write_text(manifest)
    with pytest.raises(VpromError, match=r"vg: already exists and is .*move it away"):
        with claim(target, ("export-npz",)):
            pass
    assert sorted(p.name for p in target.iterdir()) == sorted(
        ["objects.json"] + (["manifest.json"] if manifest else []))


def test_an_empty_folder_and_an_output_of_the_kind_are_claimed(tmp_path):
    (tmp_path / "empty").mkdir()
    with claim(tmp_path / "empty", ("export-npz",), folder=True):
        pass
    write_manifest(tmp_path / "empty", make_manifest("export-npz", {}))
    assert output_kind(tmp_path / "empty") == "export-npz"
    with claim(tmp_path / "empty", ("export-npz",), folder=True):
        pass


@pytest.mark.parametrize("plant", ["symlink", "hard link", "folder"])
def test_a_lock_path_that_is_not_our_own_file_is_refused_and_never_written(tmp_path, plant):
    """`ln -s ../victim.txt out/.stats.json.lock` never makes a writer put its PID in victim.txt."""
    from vprom.claim import lock_path, output_lock

    victim = tmp_path / "victim.txt"
    victim.write_text("the user's thesis")
    out = tmp_path / "out" / "stats.json"
    out.parent.mkdir()
    lock = lock_path(out)
    {"symlink": lambda: lock.symlink_to(victim), "hard link": lambda: os.link(victim, lock),
     "folder": lock.mkdir}[plant]()
    with pytest.raises(VpromError, match=re.escape(f"{lock}: ")) as refused:
        with output_lock(out):
            pass
    assert "\n" not in str(refused.value)
    assert victim.read_text() == "the user's thesis" and lock.exists()


def test_a_folder_holding_only_temporaries_counts_as_empty(tmp_path):
    folder = tmp_path / "report"
    folder.mkdir()
    (folder / ".report.md.lock").write_text("")
    (folder / ".report.md.4194305.0a1b2c3d.part").write_text("half")
    with claim(folder, ("report",), folder=True):
        pass


@pytest.fixture
def unwritable(tmp_path):
    """A folder that refuses new files: read-only for a user, a read-only tmpfs for root
    (whom permissions do not stop)."""
    import subprocess

    folder = tmp_path / "locked"
    folder.mkdir()
    if os.geteuid() != 0:
        folder.chmod(0o555)
        yield folder
        folder.chmod(0o755)
        return
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(folder)],
                             capture_output=True, text=True, check=False)
    if mounted.returncode != 0:
        pytest.skip(f"root cannot mount a read-only tmpfs here ({mounted.stderr.strip()})")
    yield folder
    subprocess.run(["umount", "-l", str(folder)], check=False)


def test_an_unwritable_folder_names_the_output_not_its_lock(unwritable):
    out = unwritable / "stats.json"
    with pytest.raises(VpromError) as refused, claim(out, ("stats",)):
        pass
    message = str(refused.value)
    assert message.startswith(f"{out}: cannot be written: {unwritable} refuses new files (")
    assert ".lock" not in message
