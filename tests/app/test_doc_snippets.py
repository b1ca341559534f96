"""Every Python snippet of docs/ runs, as written, against real files.

The snippets name the files of a build (`build/dataset.h5`, `build/feats/resnet101.h5`,
`runs/rn-neutral-aux/`, ...). `docs/python-api.md` makes exactly those: its pipeline builds a
small synthetic data set, extracts features and maps with a randomly initialised ResNet-101
and trains one run, so it runs first, in a fresh folder, as a script pasted by a user (a fresh
interpreter, no `if __name__ == "__main__":`), and every other snippet then runs in that
folder. The few names a snippet leaves to its reader (`panels`: a batch of features;
`matrices`: the matrices table) are given to it, built from the same files. A snippet that
needs what cannot be had here (Visual Genome's own servers, say) is listed in `NOT_RUN` with
the reason; none is now.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.own_model_fixture import own_build  # noqa: F401 (fixture)

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
FIRST = DOCS / "python-api.md"
#: (page, first line of the snippet) that need what cannot be had here, and why
NOT_RUN: dict[tuple[str, str], str] = {}


def snippets(page: Path) -> list[tuple[int, str]]:
    """(line, code) of every ```python block of `page`."""
    text = page.read_text(encoding="utf-8")
    out = []
    for match in re.finditer(r"^```python\n(.*?)^```", text, flags=re.DOTALL | re.MULTILINE):
        out.append((text[:match.start()].count("\n") + 2, match.group(1)))
    return out


def _skipped(page: Path, code: str) -> bool:
    return (page.name, code.splitlines()[0]) in NOT_RUN


ALL = [(page, line, code) for page in sorted(DOCS.glob("*.md")) for line, code in snippets(page)]


def test_the_snippets_are_found_and_only_those_listed_are_left_out():
    assert len(ALL) >= 12 and sum(p == FIRST for p, _, _ in ALL) == 2
    left_out = [(p.name, code.splitlines()[0]) for p, _, code in ALL if _skipped(p, code)]
    assert left_out == list(NOT_RUN)


def test_adding_a_model_works_as_the_baselines_page_shows(monkeypatch):
    import torch

    from vprom.baselines import registry
    from vprom.baselines.parts import ModelConfig

    # register into a copy, so the example's model does not join the other tests' registry
    registry.MODELS.names()
    monkeypatch.setattr(registry.MODELS, "_items", dict(registry.MODELS._items))
    monkeypatch.setattr(registry.MODELS, "_origin", dict(registry.MODELS._origin))
    [(_, code)] = [s for s in snippets(DOCS / "baselines.md") if "my-model" in s[1]]
    exec(compile(code, "docs/baselines.md", "exec"), {"__name__": "my_model"})
    model = registry.get_model("my-model", ModelConfig(feature_dim=8, hidden=16, aux=True))
    out = model(torch.randn(3, 16, 8))
    assert out.scores.shape == (3, 8) and out.relation_logits.shape == (3, 4)


@pytest.mark.slow
def test_every_docs_snippet_runs(tmp_path, monkeypatch):
    import torch

    from vprom.tables import read_matrix_table

    monkeypatch.chdir(tmp_path)
    ordered = sorted(ALL, key=lambda s: (s[0] != FIRST, str(s[0]), s[1]))
    names = {}
    failed = []
    for page, line, code in ordered:
        if _skipped(page, code) or "my-model" in code:  # the model: the test above
            continue
        if not names and Path("build/dataset.h5").is_file():
            matrices = read_matrix_table("build/dataset.h5")
            names = {"matrices": matrices, "matrix_panels": matrices.panels,
                     "panels": torch.randn(2, 16, 2048)}
        if page == FIRST and code == snippets(FIRST)[0][1]:
            # the pipeline, pasted into a script and run as a user runs it: its workers must
            # not run the script again
            Path("a.py").write_text(code, encoding="utf-8")
            done = subprocess.run([sys.executable, "a.py"], capture_output=True, text=True,
                                  check=False)
            if done.returncode != 0 or "Traceback" in done.stderr:
                failed.append(f"docs/{page.name}:{line} as a script: {done.stderr}")
            continue
        try:
            exec(compile(code, f"docs/{page.name}:{line}", "exec"), {"__name__": "snippet",
                                                                    **names})
        except Exception as e:  # every failing snippet is reported, not only the first
            failed.append(f"docs/{page.name}:{line}: {type(e).__name__}: {e}")
    assert not failed, "\n".join(failed)


def test_the_readme_snippet_gives_a_split_parts_ids(own_build, tmp_path, monkeypatch):
    import shutil

    import numpy as np

    from vprom.tables import read_matrix_table

    [(_, code)] = snippets(ROOT / "README.md")
    (tmp_path / "build" / "demo").mkdir(parents=True)
    shutil.copy(own_build.dataset, tmp_path / "build" / "demo" / "dataset.h5")
    monkeypatch.chdir(tmp_path)
    names = {}
    exec(compile(code, "README.md", "exec"), names)
    want = read_matrix_table(own_build.dataset).splits["neutral"]["test"]
    assert len(code.strip().splitlines()) == 3 and np.array_equal(names["ids"], want)
