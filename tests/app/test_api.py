"""The Python API: `import vprom` gives every command as a function, lazily, the very one the
command calls, with the command's defaults, each with an example that runs (in pipeline
order, on a small synthetic build, exactly as the docstrings show them)."""

from __future__ import annotations

import dataclasses
import doctest
import inspect
import subprocess
import sys

import pytest
from vprom.baselines.config import TrainConfig
from vprom.features.config import ExtractConfig
from vprom.features.perceive import PerceiveConfig

import vprom
from vprom.app import api
from vprom.app.cli import COMMANDS
from vprom.app.reproduce import ReproduceConfig


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
    code = "import sys; from vprom.app import cli; cli.build_parser(); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "False", "`vprom --help` must not wait for torch"


def test_every_command_is_an_api_function():
    assert {c.function.__name__ for c in COMMANDS.values()} <= set(api.__all__)


@pytest.mark.parametrize("name", api.__all__)
def test_every_function_has_keyword_arguments_documented_and_an_example(name):
    function = getattr(api, name)
    parameters = inspect.signature(function).parameters.values()
    assert not any(p.kind is p.VAR_KEYWORD for p in parameters), f"{name} takes **options"
    doc = function.__doc__
    assert doc and f"vprom.{name}(" in doc, f"{name}: no example calling vprom.{name}"
    if len(parameters) > 1:
        listed = {p.name for p in parameters if f"\n        {p.name}: " in doc}
        assert listed == {p.name for p in parameters}, f"{name}: undocumented arguments"


@pytest.mark.parametrize("function, config", [(api.extract, ExtractConfig),
                                              (api.train, TrainConfig),
                                              (api.reproduce, ReproduceConfig),
                                              (api.perceive, PerceiveConfig)])
def test_a_job_function_takes_its_configs_fields_and_defaults(function, config):
    fields = {f.name: f.default for f in dataclasses.fields(config)}
    parameters = {p.name: p.default for p in inspect.signature(function).parameters.values()}
    assert set(parameters) == set(fields)
    for name, default in fields.items():
        if default is not dataclasses.MISSING:
            assert parameters[name] == default, name


def test_reproduce_shares_train_and_extract_defaults():
    for name in ("epochs", "seed", "device", "center_features"):
        assert getattr(ReproduceConfig, name) == getattr(TrainConfig, name)
    assert ReproduceConfig.input_size == ExtractConfig.input_size


@pytest.mark.slow
def test_the_docstring_examples_run_in_pipeline_order(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    finder, runner = doctest.DocTestFinder(), doctest.DocTestRunner(
        optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    globs = {"vprom": vprom}
    for name in api.__all__:
        for test in finder.find(getattr(api, name), name, globs=globs):
            runner.run(test, clear_globs=False)
    assert runner.summarize(verbose=False).failed == 0
