"""The `vprom` command line: parses arguments and calls library functions, nothing more.

The subcommands live in `vprom.app.commands`, one module per group of stages, each command a
`Command` (name, summary, example, `add_<name>`, `run_<name>`); this module lists them
explicitly and builds the parser. A `VpromError` becomes one line on stderr and exit status 1.

Option defaults are read from the function or config dataclass that owns them (`default`),
never written twice; the config modules they read import no torch.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading


def _interrupted_while_starting(signum, frame):
    """Ctrl-C or SIGTERM while the stages below are imported: nothing has been done yet, so
    say so and leave at once, instead of a traceback from deep inside an import."""
    by = "Ctrl-C" if signum == signal.SIGINT else "SIGTERM"
    os.write(2, f"vprom: interrupted ({by}) while starting; nothing was done\n".encode())
    os._exit(128 + signum)


_STARTING = {sig: signal.signal(sig, _interrupted_while_starting)
             for sig in (signal.SIGINT, signal.SIGTERM)
             if threading.current_thread() is threading.main_thread()}

from vprom import __version__  # noqa: E402 - after the guard above
from vprom.app.commands import corpus, dataset, human, learning, own_model  # noqa: E402
from vprom.app.exit_status import run_command  # noqa: E402

for _sig, _handler in _STARTING.items():
    signal.signal(_sig, _handler)

#: every subcommand, in the order `vprom --help` lists them
COMMANDS = {c.name: c for c in (*corpus.COMMANDS, *dataset.COMMANDS, *learning.COMMANDS,
                                 *own_model.COMMANDS, *human.COMMANDS)}


# ---------------------------------------------------------------- entry point
def build_parser() -> argparse.ArgumentParser:
    lines = [f"  {c.name:10s} {c.summary}\n             e.g. {c.example}"
             for c in COMMANDS.values()]
    parser = argparse.ArgumentParser(
        prog="vprom",
        description="Build the V-PROM benchmark from Visual Genome and run its baselines.",
        epilog="commands:\n" + "\n".join(lines) + "\n\nQuick start: vprom build --synthetic "
               "--out build/demo",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"vprom {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for c in COMMANDS.values():
        p = sub.add_parser(c.name, help=c.summary.replace("%", "%%"),
                           description=f"{c.summary}.", epilog=f"example:\n  {c.example}",
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        c.add_arguments(p)
        if any(o in p._option_string_actions for o in ("--out", "--json")):
            p.add_argument("--wait", action="store_true",
                           help="if another vprom run is writing the same output, wait for it "
                                "to finish instead of refusing at once")
        p.set_defaults(run=c.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one `vprom` command (see `vprom.app.exit_status.run_command` for errors and signals)."""
    return run_command(build_parser, argv)


if __name__ == "__main__":
    sys.exit(main())
