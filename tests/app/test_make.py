"""`make demo` installs vprom with no extra, so nothing only the tests use; `make test`
installs the test extra, also in a .venv that `make demo` made. A second `make demo` leaves the
human study, which holds its participants' responses, as it is."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")


def installs(target: str, venv: Path) -> list[str]:
    """The `pip install` arguments that `make TARGET` would run with this .venv."""
    done = subprocess.run(["make", "-n", target, f"VENV={venv}"], cwd=ROOT, text=True,
                          capture_output=True, check=True)
    return [arg for line in done.stdout.splitlines() if " -m pip install " in line
            for arg in shlex.split(line.split(" -m pip install ", 1)[1])]


def extras(args: list[str]) -> set[str]:
    """The extras named by pip install arguments such as `-e .[test,hf]`."""
    return {extra for arg in args for group in re.findall(r"\[([^\]]*)\]", arg)
            for extra in group.split(",")}


def test_the_demo_installs_no_package_that_only_the_tests_use(tmp_path):
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    name = re.compile(r"[A-Za-z0-9_.-]+")
    runtime = {name.match(d).group().lower() for d in project["dependencies"]}
    extras_ = project["optional-dependencies"]
    others = {name.match(d).group().lower() for extra, deps in extras_.items() if extra != "test"
              for d in deps}
    test_only = {name.match(d).group().lower() for d in extras_["test"]} - runtime - others
    args = installs("demo", tmp_path / "venv")
    assert args and args[-1].startswith(".")
    demo = {name.match(d).group().lower() for extra in extras(args)
            for d in project["optional-dependencies"][extra]}
    assert not demo & test_only and "test" not in extras(args)


def test_make_test_installs_the_test_extra_after_make_demo(tmp_path):
    venv = tmp_path / "venv"
    assert "test" in extras(installs("test", venv))
    (venv / "bin").mkdir(parents=True)
    stamp = venv / ".installed-stamp"  # what `make demo`'s install leaves
    stamp.touch()
    later = (ROOT / "pyproject.toml").stat().st_mtime + 10
    os.utime(stamp, (later, later))
    assert installs("demo", venv) == []
    assert "test" in extras(installs("test", venv))


def test_a_second_make_demo_keeps_the_human_study(tmp_path):
    def planned(out: Path) -> str:
        return subprocess.run(["make", "-n", "demo", f"DEMO_OUT={out}", f"VENV={tmp_path / 'v'}"],
                              cwd=ROOT, text=True, capture_output=True, check=True).stdout

    first = planned(tmp_path / "first")
    assert "vprom human-study " in first and " train " in first and " report " in first
    (tmp_path / "again" / "study").mkdir(parents=True)
    again = planned(tmp_path / "again")
    assert "vprom human-study " not in again
    assert again.count(" train ") == first.count(" train ") == 6
