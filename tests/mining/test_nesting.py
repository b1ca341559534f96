"""Annotation files that nest arrays or objects absurdly deep are refused at once, in one line;
brackets inside strings are text, not nesting."""

from __future__ import annotations

import subprocess
import sys

from vprom.mining.pools import mine
from vprom.mining.readers import MAX_DEPTH

from tests.mining.conftest import corpus, write_vg
from vprom.tables import read_crop_table


def test_100k_nested_brackets_fail_fast_naming_the_file_and_record(vg_dir, tmp_path):
    (vg_dir / "objects.json").write_text("[" * 100_000)
    done = subprocess.run([sys.executable, "-m", "vprom", "mine", "--vg", str(vg_dir), "--out",
                           str(tmp_path / "pools.h5")], capture_output=True, text=True, check=False,
                          timeout=120)  # ijson alone took past 200 s
    assert done.returncode == 1, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert f"objects.json: arrays or objects nest more than {MAX_DEPTH} deep in image " \
           "record #0" in lines[0]


def test_brackets_and_escaped_quotes_inside_strings_are_not_nesting(tmp_path):
    files = corpus()
    phrase = 'two dogs \\"[' + "[{" * (2 * MAX_DEPTH) + '\\\\'
    files["region_descriptions"][0]["regions"][0]["phrase"] = phrase
    vg = write_vg(tmp_path / "vg", files, zipped=("region_descriptions",))  # streamed
    mine(vg, tmp_path / "pools.h5", workers=1)
    assert len(read_crop_table(tmp_path / "pools.h5", "POOLS.h5")) > 0
