"""The VLMEvalKit TSV of a VLM export read by VLMEvalKit's own code, in the interpreter named
by VPROM_VLMEVALKIT_PYTHON. VLMEvalKit is not on PyPI (`pip install vlmeval` finds nothing);
install it from its repository (`pip install -e VLMEvalKit`, plus `rouge-score`, which its
data sets import but its requirements do not name). Without it the reading contract is
restated in test_export_vlm.py's `vlmevalkit_rows`."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from vprom.generation.export import export

from tests.generation.synthetic_build import synthetic_build  # noqa: F401 (fixture)
from vprom.tables import read_matrix_table

pytestmark = pytest.mark.slow
PYTHON = os.environ.get("VPROM_VLMEVALKIT_PYTHON")
READ = """
import json, sys
from vlmeval.dataset import build_dataset
out = {}
for name in sys.argv[1:]:
    data = build_dataset(name)
    rows = []
    for k in range(len(data)):
        messages = data.build_prompt(k)
        line = data.data.iloc[k]
        rows.append([int(line["index"]), line["answer"], sum(m["type"] == "image"
                     for m in messages), messages[-1]["value"]])
    out[name] = [type(data).__name__, rows]
print("RESULT" + json.dumps(out))
"""


@pytest.mark.skipif(not PYTHON, reason="set VPROM_VLMEVALKIT_PYTHON to a Python with "
                    "VLMEvalKit installed from its repository (it is not on PyPI)")
def test_vlmevalkit_builds_each_layout(synthetic_build, tmp_path):
    dataset, vg = synthetic_build
    m = read_matrix_table(dataset)
    answer = {int(i): "ABCDEFGH"[int(a)] for i, a in zip(m.id, m.answer)}
    names = {}
    for layout in ("grid", "panels", "text"):
        summary = export(dataset, "vlm", tmp_path / layout, vg_dir=vg, layout=layout, limit=12)
        tsv = tmp_path / layout / summary.counts["tsv"]
        (tmp_path / "lmu").mkdir(exist_ok=True)
        (tmp_path / "lmu" / tsv.name).write_bytes(tsv.read_bytes())
        names[tsv.stem] = layout
    run = subprocess.run([PYTHON, "-c", READ, *names], capture_output=True, text=True,
                         timeout=900, check=False,
                         env={**os.environ, "LMUData": str(tmp_path / "lmu")})
    assert run.returncode == 0, run.stderr[-3000:]
    read = json.loads(run.stdout.split("RESULT", 1)[1])
    for name, layout in names.items():
        kind, rows = read[name]
        assert kind == ("CustomTextMCQDataset" if layout == "text" else "CustomMCQDataset")
        assert len(rows) == 12
        for index, letter, images, prompt in rows:
            assert letter == answer[index]
            assert images == {"grid": 1, "panels": 16, "text": 0}[layout]
            assert all(f"\n{c}. " in prompt for c in "ABCDEFGH")
