"""The Python API: `import vprom` gives the stages as functions, lazily, each the one its
command calls, each with an example that runs (in pipeline order, on a small synthetic build,
exactly as the docstrings show them)."""

from __future__ import annotations

import doctest
import subprocess
import sys

import pytest

import vprom
from vprom.app import api
from vprom.app.cli import COMMANDS

#: commands that are one API call (the others print or render: show, human study, ...)
CALLED = {"build", "synth", "mine", "generate", "merge", "verify", "stats", "export", "extract",
          "train", "evaluate", "report", "reproduce"}


def test_the_package_lists_the_api():
    assert list(vprom.API) == api.__all__
    assert set(vprom.API) <= set(dir(vprom))
    for name in vprom.API:
        assert getattr(vprom, name) is getattr(api, name)


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'trian'"):
        vprom.trian  # noqa: B018


def test_import_vprom_imports_no_stage_and_no_torch():
    code = ("import sys, vprom; print(sorted(m for m in sys.modules if m.startswith('vprom') "
            "or m == 'torch'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "['vprom']"
    code = "import sys, vprom; vprom.train; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "False", "looking a function up must not import its stage"


@pytest.mark.parametrize("name", sorted(CALLED))
def test_each_command_is_an_api_function(name):
    assert name in COMMANDS and name in api.__all__
    # the command's runner calls the API function (read from its source: one call)
    import inspect

    assert f"api.{name}(" in inspect.getsource(COMMANDS[name].run)


def test_every_function_has_an_example():
    for name in api.__all__:
        doc = getattr(api, name).__doc__
        assert doc and f"vprom.{name}(" in doc, f"{name}: no example calling vprom.{name}"


def test_default_split_rules_are_supplied(tmp_path):
    from vprom.splits import load_rules

    assert api._rules(None).design == load_rules().design
    given = object()
    assert api._rules(given) is given


@pytest.mark.slow
def test_the_docstring_examples_run_in_pipeline_order(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    finder, runner = doctest.DocTestFinder(), doctest.DocTestRunner(
        optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    globs = {"vprom": vprom}
    ran = []
    for name in api.__all__:
        for test in finder.find(getattr(api, name), name, globs=globs):
            if test.examples:
                runner.run(test, clear_globs=False)
                ran.append(name)
    result = runner.summarize(verbose=False)
    assert result.failed == 0
    assert set(ran) == set(api.__all__) - {"reproduce"}  # hours on VG; shown, not run
