"""The command-line reference, `docs/cli.md`, rendered from the `vprom` parser itself.

Per command: summary, synopsis, example and a table of its arguments, read from the parser's
actions (private fields, stable since Python 3.2), not `format_help()`, whose wrapping depends
on the terminal: the page must be the same wherever it is rendered (tests/app/test_docs.py).
"""

from __future__ import annotations

import argparse
import sys

from vprom.app.cli import COMMANDS, build_parser

REGENERATE = "python -m vprom.app.reference > docs/cli.md"
WIDTH = 90  # synopsis lines are folded here
HEADER = f"""# Command-line reference

<!-- Generated from the argument parser of vprom/app/cli.py; do not edit by hand.
     Regenerate with: {REGENERATE} -->

One entry point, `vprom` (or `python -m vprom`; `torchrun ... -m vprom train|extract` on
several GPUs; `vprom --version`). Each command is a function of the [Python API](python-api.md)
with the same arguments and defaults, prints its help with `--help`, shows a progress bar on
long work, and on failure exits non-zero with one line saying why ([errors and
resuming](errors-and-resuming.md)).
"""


def _safe(text: str) -> str:
    """Text safe in a Markdown table cell."""
    return text.replace("|", "\\|").replace("\n", " ")


def _metavar(action: argparse.Action) -> str:
    return str(action.metavar) if action.metavar is not None else action.dest.upper()


def _positional(action: argparse.Action) -> str:
    name = _metavar(action)
    return {"+": f"{name}...", "*": f"[{name}...]", "?": f"[{name}]"}.get(action.nargs, name)


def _option(action: argparse.Action) -> str:
    """The option as typed: its longest flag, and its value's name when it takes one."""
    flag = max(action.option_strings, key=len)
    return f"{flag} {_metavar(action)}" if action.nargs != 0 else flag


def _arguments(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions if not isinstance(a, argparse._HelpAction)]


def synopsis(name: str, parser: argparse.ArgumentParser) -> str:
    """`vprom NAME` and its arguments: required bare, optional in [ ], a required group's
    alternatives in ( | ); folded at WIDTH columns."""
    group_of = {a: g for g in parser._mutually_exclusive_groups for a in g._group_actions}
    words, done = [], set()
    for action in _arguments(parser):
        group = group_of.get(action)
        if not action.option_strings:
            words.append(_positional(action))
        elif group is None:
            words.append(_option(action) if action.required else f"[{_option(action)}]")
        elif id(group) not in done:
            done.add(id(group))
            choice = " | ".join(_option(a) for a in group._group_actions)
            words.append(f"({choice})" if group.required else f"[{choice}]")
    lines, line = [], f"vprom {name}"
    for word in words:
        if len(line) + 1 + len(word) > WIDTH:
            lines.append(line)
            line = "    " + word
        else:
            line += " " + word
    return "\n".join([*lines, line])


def _row(action: argparse.Action) -> str:
    names = ", ".join(action.option_strings) or _positional(action)
    if action.option_strings and action.nargs != 0:
        names += f" {_metavar(action)}"
    if action.required:
        default = "required"
    elif action.nargs == 0:  # a switch
        default = "off"
    else:
        default = "—" if action.default is None else f"`{action.default}`"
    # the help as `--help` prints it, less the default it appends (the table has a column)
    text = (action.help % {**vars(action), "prog": "vprom"}).removesuffix(
        f" (default: {action.default})")
    if action.choices is not None:
        text += "; one of " + ", ".join(f"`{c}`" for c in action.choices)
    return f"| `{names}` | {default} | {_safe(text)} |"


def command_section(name: str, parser: argparse.ArgumentParser) -> str:
    lines = [f"## `vprom {name}`", "", f"{COMMANDS[name].summary}.", "",
             "```", synopsis(name, parser), "", "# for example:", COMMANDS[name].example, "```",
             "",
             "| argument | default | meaning |", "|---|---|---|",
             *map(_row, _arguments(parser))]
    for group in parser._mutually_exclusive_groups:
        if group.required:
            names = " or ".join(f"`{max(a.option_strings, key=len)}`"
                                for a in group._group_actions)
            lines += ["", f"Exactly one of {names} is required."]
    return "\n".join(lines) + "\n"


def render() -> str:
    """docs/cli.md: the whole reference, a pure function of the parser."""
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    index = ["| command | does |", "|---|---|"]
    index += [f"| [`vprom {name}`](#vprom-{name}) | {_safe(COMMANDS[name].summary)} |"
              for name in sub.choices]
    sections = [command_section(name, p) for name, p in sub.choices.items()]
    return "\n".join([HEADER, *index, "", *sections])


if __name__ == "__main__":
    sys.stdout.write(render())
