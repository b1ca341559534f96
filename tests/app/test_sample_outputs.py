"""Every sample output in README.md and docs/ is what the current code prints.

A sample is a fenced block whose first line is `$ vprom ...`; the lines under it are the
command's output (stdout and stderr, as a terminal shows them) on the demo build, `vprom build
--synthetic --out build/demo` (what `make demo` builds). The slow test makes that build and
compares; running this file as a script makes it and writes the outputs into the pages:

    .venv/bin/python tests/app/test_sample_outputs.py
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
DEMO = ["build", "--synthetic", "--out", "build/demo"]
SAMPLE = re.compile(r"^```\n\$ (vprom [^\n]*)\n(.*?)^```", flags=re.DOTALL | re.MULTILINE)


def samples(page: Path) -> list[re.Match]:
    return list(SAMPLE.finditer(page.read_text(encoding="utf-8")))


def printed(command: str, folder: Path) -> str:
    """What `command` (a `vprom ...` line) prints in `folder`; it must succeed."""
    done = subprocess.run([sys.executable, "-m", "vprom", *shlex.split(command)[1:]],
                          cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=1800, check=False)
    assert done.returncode == 0, f"{command}: exit {done.returncode}\n{done.stdout}"
    return done.stdout


def demo_build(folder: Path) -> None:
    printed(shlex.join(["vprom", *DEMO]), folder)


def test_the_samples_are_found():
    commands = [m.group(1) for page in PAGES for m in samples(page)]
    assert "vprom stats build/demo/dataset.h5" in commands
    assert "vprom verify build/demo/dataset.h5" in commands


@pytest.mark.slow
def test_every_sample_output_is_what_the_demo_build_prints(tmp_path):
    demo_build(tmp_path)
    wrong = []
    for page in PAGES:
        for match in samples(page):
            if printed(match.group(1), tmp_path) != match.group(2):
                wrong.append(f"{page.relative_to(ROOT)}: $ {match.group(1)}")
    assert not wrong, ("sample outputs differ from the code's; rewrite them with "
                       "`python tests/app/test_sample_outputs.py`:\n" + "\n".join(wrong))


def rewrite(folder: Path) -> None:
    """Write into every page the outputs of its samples, run on the demo build in `folder`."""
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        new = SAMPLE.sub(lambda m: f"```\n$ {m.group(1)}\n{printed(m.group(1), folder)}```",
                         text)
        if new != text:
            page.write_text(new, encoding="utf-8")
            print(f"rewrote {page.relative_to(ROOT)}")


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as temporary:
        demo_build(Path(temporary))
        rewrite(Path(temporary))
