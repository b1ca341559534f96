"""The command line: every command is its API function's signature, with the same defaults,
has help with an example and its defaults, and is documented in the README."""

import argparse
import inspect
import re
import subprocess
import sys
from pathlib import Path

import pytest

from vprom.app import cli
from vprom.app.options import options_of

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()


def subparser(name: str) -> argparse.ArgumentParser:
    return next(a for a in cli.build_parser()._actions
                if isinstance(a, argparse._SubParsersAction)).choices[name]


def accepts(action: argparse.Action, text: str) -> bool:
    try:
        (action.type or str)(text)
        return True
    except (argparse.ArgumentTypeError, ValueError):
        return False


def required_only(name: str, tmp_path: Path) -> list[str]:
    """`vprom NAME` with a value for each required argument only."""
    parser, argv = subparser(name), [name]
    groups = [g for g in parser._mutually_exclusive_groups if g.required]
    chosen = [g._group_actions[0] for g in groups]
    for action in parser._actions:
        if not (action.required or not action.option_strings or action in chosen):
            continue
        if action.nargs == "*":
            continue
        value = action.choices[0] if action.choices else next(
            text for text in (str(tmp_path / action.dest), "1") if accepts(action, text))
        argv += [max(action.option_strings, key=len)] if action.option_strings else []
        argv += [] if action.nargs == 0 else [str(value)]
    return argv


@pytest.mark.parametrize("name", sorted(cli.COMMANDS))
def test_the_command_line_defaults_are_the_api_defaults(name, tmp_path):
    argv = required_only(name, tmp_path)
    options = options_of(cli.build_parser().parse_args(argv))
    function = cli.COMMANDS[name].function
    parameters = inspect.signature(function).parameters
    assert set(options) == set(parameters)
    for option, parameter in parameters.items():
        if parameter.default is not parameter.empty and f"--{option.replace('_', '-')}" \
                not in argv and parameter.name not in argv:
            assert options[option] == parameter.default, (
                f"vprom {name}: --{option} defaults to {options[option]!r}, "
                f"{function.__name__}() to {parameter.default!r}")


@pytest.mark.parametrize("name", sorted(cli.COMMANDS))
def test_every_command_has_help_with_an_example_and_the_defaults(name, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main([name, "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert "example:" in out and f"vprom {name}" in out
    parser = subparser(name)
    for action in parser._actions:
        if action.option_strings and action.nargs != 0 and action.default is not None:
            assert "default" in parser._get_formatter()._expand_help(action), (
                f"vprom {name} --help: {action.option_strings[0]} does not give its default")


@pytest.mark.parametrize("name", sorted(cli.COMMANDS))
def test_required_arguments_are_shown_as_required(name):
    parser = subparser(name)
    usage = " ".join(parser.format_usage().split())
    actions = {a.dest: a for a in parser._actions}
    command = cli.COMMANDS[name]
    for parameter in inspect.signature(command.function).parameters.values():
        action = actions.get(parameter.name)
        # a command may say one is optional on the command line (extract's --vg: labels)
        optional = command.arguments.get(parameter.name, {}).get("required") is False
        if parameter.default is parameter.empty and action and action.option_strings \
                and not optional:
            flag = action.option_strings[0]
            assert action.required and f"[{flag} " not in usage, usage


def test_top_level_help_lists_each_command_once_with_an_example(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    out = capsys.readouterr().out
    for name in cli.COMMANDS:
        assert len(re.findall(rf"^  {name} ", out, flags=re.MULTILINE)) == 1, name
    assert "e.g. vprom build --synthetic" in out


def test_extract_list_needs_no_other_argument(capsys):
    assert cli.main(["extract", "--list"]) == 0
    assert "resnet101" in capsys.readouterr().out


@pytest.mark.parametrize("name", sorted(cli.COMMANDS))
def test_every_command_is_documented_in_the_readme(name):
    assert f"vprom {name}" in README, f"README does not document `vprom {name}`"


def test_errors_are_one_line_and_nonzero(tmp_path, capsys):
    assert cli.main(["stats", str(tmp_path / "missing.h5")]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("vprom stats: error:") and "\n" not in err


def test_python_dash_m_vprom_is_the_command():
    # `torchrun -m vprom train ...` runs exactly this.
    done = subprocess.run([sys.executable, "-m", "vprom", "--version"], capture_output=True,
                          text=True, timeout=60, cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0 and done.stdout.startswith("vprom "), done.stderr
