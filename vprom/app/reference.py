"""The command-line reference, `docs/cli.md`, rendered from the `vprom` parser itself.

    python -m vprom.app.reference > docs/cli.md

`render()` walks `cli.build_parser()`: for every command of `cli.COMMANDS`, in the order the
parser registers them, it writes the summary, a synopsis, the example and a Markdown table of
the arguments (flags, default, help) built from the parser's actions. It does not paste
`format_help()`: argparse wraps that text to the terminal's width and words it differently
from one Python version to the next, and the reference must come out byte-identical wherever
it is rendered, so that `tests/app/test_docs.py` can require the checked-in file to equal it.

argparse keeps a parser's actions and mutually exclusive groups in attributes without a
public accessor (`_actions`, `_mutually_exclusive_groups`); they have been stable since
Python 3.2 and are what `format_help()` itself reads.
"""

from __future__ import annotations

import argparse
import sys

from vprom.app.cli import COMMANDS, build_parser

REGENERATE = "python -m vprom.app.reference > docs/cli.md"
WIDTH = 90  # synopsis lines are folded here
INDENT = "    "
HEADER = f"""# Command-line reference

<!-- Generated from the argument parser of vprom/app/cli.py; do not edit by hand.
     Regenerate with: {REGENERATE} -->

One entry point, `vprom` (also `python -m vprom`, and `torchrun ... -m vprom train|extract`
for several processes). Every command prints its own help with `vprom COMMAND --help`, shows
a progress bar on long work, and on failure exits non-zero with one line saying why (the
exit statuses: [errors and resuming](errors-and-resuming.md)). `vprom --version` prints the
version.

This page is generated from the parser, so it always matches the installed command. What the
options mean in depth, and how to choose them, is on each stage's page ([index](README.md)).
"""


def _safe(text: str) -> str:
    """Text safe in a Markdown table cell."""
    return text.replace("|", "\\|").replace("\n", " ")


def _text(value: str) -> str:
    """A summary as the user reads it (argparse's %-escapes undone), safe in a table."""
    return _safe(value.replace("%%", "%"))


def _expanded(action: argparse.Action) -> str:
    """An argument's help as `--help` prints it: `%(default)s` and the like filled in from
    the action, the way argparse's HelpFormatter does, `%%` as `%`."""
    return action.help % {**vars(action), "prog": "vprom"}


def _metavar(action: argparse.Action) -> str:
    if action.metavar is not None:
        return str(action.metavar)
    return action.dest.upper()


def _takes_value(action: argparse.Action) -> bool:
    return action.nargs != 0


def _positional(action: argparse.Action) -> str:
    name = _metavar(action)
    if action.nargs == "+":
        return f"{name}..."
    if action.nargs == "?":
        return f"[{name}]"
    return name


def _option(action: argparse.Action) -> str:
    """The option as typed: its longest flag, and its value's name when it takes one."""
    flag = max(action.option_strings, key=len)
    return f"{flag} {_metavar(action)}" if _takes_value(action) else flag


def _arguments(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """The arguments a user is shown: not --help, not those kept hidden (help SUPPRESS, such
    as a flag still accepted for older scripts)."""
    return [a for a in parser._actions if not isinstance(a, argparse._HelpAction)
            and a.help != argparse.SUPPRESS]


def synopsis(name: str, parser: argparse.ArgumentParser) -> str:
    """`vprom NAME` followed by every argument: required ones bare, optional ones in [ ],
    the alternatives of a mutually exclusive group in ( | ) when one of them is required."""
    group_of = {}
    for group in parser._mutually_exclusive_groups:
        for action in group._group_actions:
            group_of[action] = group
    words, done = [], set()
    for action in _arguments(parser):
        if not action.option_strings:
            words.append(_positional(action))
            continue
        group = group_of.get(action)
        if group is None:
            words.append(_option(action) if action.required else f"[{_option(action)}]")
        elif id(group) not in done:
            done.add(id(group))
            choice = " | ".join(_option(a) for a in group._group_actions)
            words.append(f"({choice})" if group.required else f"[{choice}]")
    return _wrap(f"vprom {name}", words)


def _wrap(head: str, words: list[str]) -> str:
    """`head words...` folded at WIDTH columns, continuation lines indented: a fixed width,
    so the page does not depend on the terminal it was rendered in."""
    lines, line = [], head
    for word in words:
        if len(line) + 1 + len(word) > WIDTH:
            lines.append(line)
            line = INDENT + word
        else:
            line += " " + word
    return "\n".join([*lines, line])


def _default(action: argparse.Action) -> str:
    if action.required:
        return "required"
    if not _takes_value(action):  # a flag: store_true / store_false
        return "off"
    if action.default is None:
        return "—"
    return f"`{action.default}`"


def _cell(action: argparse.Action) -> str:
    names = ", ".join(action.option_strings) if action.option_strings else _positional(action)
    if action.option_strings and _takes_value(action):
        names += f" {_metavar(action)}"
    return f"`{names}`"


def _help(action: argparse.Action) -> str:
    parts = [_safe(_expanded(action))] if action.help else []
    if action.choices is not None:
        parts.append("one of " + ", ".join(f"`{c}`" for c in action.choices))
    return "; ".join(parts) or "—"


def _required_group_note(parser: argparse.ArgumentParser) -> list[str]:
    notes = []
    for group in parser._mutually_exclusive_groups:
        if group.required:
            names = " or ".join(f"`{max(a.option_strings, key=len)}`"
                                for a in group._group_actions)
            notes.append(f"Exactly one of {names} is required.")
    return notes


def command_section(name: str, parser: argparse.ArgumentParser) -> str:
    summary, example = COMMANDS[name].summary, COMMANDS[name].example
    rows = [f"| {_cell(a)} | {_default(a)} | {_help(a)} |" for a in _arguments(parser)]
    lines = [
        f"## `vprom {name}`",
        "",
        f"{summary[0].upper()}{summary[1:]}.",
        "",
        "```",
        synopsis(name, parser),
        "```",
        "",
        "Example:",
        "",
        "```",
        example,
        "```",
        "",
        "| argument | default | meaning |",
        "|---|---|---|",
        *rows,
    ]
    notes = _required_group_note(parser)
    if notes:
        lines += ["", *notes]
    return "\n".join(lines) + "\n"


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    raise RuntimeError("the vprom parser has no subcommands")


def render() -> str:
    """docs/cli.md: the whole reference, a pure function of the parser."""
    commands = _subparsers(build_parser())
    index = ["| command | does |", "|---|---|"]
    index += [f"| [`vprom {name}`](#vprom-{name}) | {_text(COMMANDS[name].summary)} |"
              for name in commands]
    sections = [command_section(name, p) for name, p in commands.items()]
    return "\n".join([HEADER, *index, "", *sections])


if __name__ == "__main__":
    sys.stdout.write(render())
