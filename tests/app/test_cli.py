"""Every command has help with an example and is documented in the README (sqlite-utils style)."""
import subprocess
import sys
from pathlib import Path

import pytest

from vprom.app import cli

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()


@pytest.mark.parametrize("name", sorted(cli.COMMANDS))
def test_every_command_has_help_with_an_example(name, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main([name, "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert "example:" in out and f"vprom {name}" in out


@pytest.mark.parametrize("name", sorted(cli.COMMANDS))
def test_every_command_is_documented_in_the_readme(name):
    assert f"vprom {name}" in README, f"README does not document `vprom {name}`"


def test_top_level_help_lists_commands_with_examples(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    out = capsys.readouterr().out
    assert "e.g. vprom build --synthetic" in out


def test_errors_are_one_line_and_nonzero(tmp_path, capsys):
    assert cli.main(["stats", str(tmp_path / "missing.h5")]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("vprom stats: error:") and "\n" not in err


def test_python_dash_m_vprom_is_the_command():
    # `torchrun -m vprom train ...` runs exactly this.
    done = subprocess.run([sys.executable, "-m", "vprom", "--version"], capture_output=True,
                          text=True, timeout=60, cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0 and done.stdout.startswith("vprom "), done.stderr
