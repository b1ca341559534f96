"""Options derived from the config dataclasses: each default and help text is written once,
in the field, and the command line, the library and `vprom reproduce` all read it there."""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass
from pathlib import Path

import pytest

from vprom.app.cli import build_parser
from vprom.app.options import add_fields
from vprom.app.reproduce import ReproduceConfig
from vprom.baselines.config import TrainConfig
from vprom.features.config import ExtractConfig
from vprom.fields import borrowed, like, option


@dataclass(frozen=True)
class Toy:
    source: Path = option(positional=True, help="the input")
    size: int = option(help="how big")
    rate: float | None = option(None, help="how fast (default: %(default)s)")
    mode: str = option("a", choices=("a", "b"), help="which")
    resume: bool = option(True, flag="--no-resume", help="start over")
    loud: bool = option(False, help="say more")
    hidden: int = 3  # not an option


def parse(config, argv, **kw):
    parser = argparse.ArgumentParser(exit_on_error=False)
    add_fields(parser, config, **kw)
    return vars(parser.parse_args(argv))


def test_a_config_becomes_its_options():
    assert parse(Toy, ["in.txt", "--size", "4"]) == {
        "source": Path("in.txt"), "size": 4, "rate": None, "mode": "a", "resume": True,
        "loud": False}
    got = parse(Toy, ["x", "--size", "1", "--rate", "0.5", "--mode", "b", "--no-resume",
                      "--loud"])
    assert got["rate"] == 0.5 and got["mode"] == "b" and not got["resume"] and got["loud"]
    Toy(**got)  # the options are the config's keyword arguments


def test_required_fields_are_required_unless_the_command_says_otherwise(capsys):
    with pytest.raises(SystemExit):
        parse(Toy, ["x"])
    assert "--size" in capsys.readouterr().err
    assert parse(Toy, [], optional=True)["source"] is None


@pytest.mark.parametrize("config, command", [(TrainConfig, "train"),
                                             (ExtractConfig, "extract"),
                                             (ReproduceConfig, "reproduce")])
def test_each_command_default_is_its_configs(config, command):
    sub = next(a for a in build_parser()._actions
               if isinstance(a, argparse._SubParsersAction)).choices[command]
    actions = {a.dest: a for a in sub._actions}
    for field in dataclasses.fields(config):
        if "help" not in field.metadata:
            continue
        action = actions[field.name]
        assert action.help == field.metadata["help"], field.name
        if field.default is not dataclasses.MISSING:
            assert action.default == field.default, field.name


def test_device_help_is_written_once():
    helps = {c.__dataclass_fields__["device"].metadata["help"]
             for c in (TrainConfig, ExtractConfig, ReproduceConfig)}
    assert len(helps) == 1


def test_reproduce_hands_its_borrowed_settings_on():
    config = ReproduceConfig(vg=None, synthetic=True, out=Path("o"), epochs=3, seed=7,
                             device="cpu", input_size=64, center_features=True)
    assert borrowed(config, TrainConfig) == {"epochs": 3, "seed": 7, "device": "cpu",
                                             "center_features": True}
    assert borrowed(config, ExtractConfig) == {"device": "cpu", "input_size": 64}


def test_like_keeps_the_default_and_help_unless_changed():
    @dataclass
    class Other:
        mode: str = like(Toy, "mode")
        rate: float | None = like(Toy, "rate", default=1.0, help="other")

    fields = {f.name: f for f in dataclasses.fields(Other)}
    assert Other().mode == "a" and fields["mode"].metadata["help"] == "which"
    assert Other().rate == 1.0 and fields["rate"].metadata["help"] == "other"
