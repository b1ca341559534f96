"""How one `vprom` command runs: every failure reaches the user as one line and an exit status.

A `VpromError` or `OSError` (with its path and the fix) exits 1; a closed stdout exits 141
quietly; Ctrl-C 130 and SIGTERM 143, with how to resume. `VPROM_DEBUG=1` shows tracebacks.
Python swallows what a finalizer raises, and a signal can land there, so interrupts are also
recorded (SIGTERM handler, `sys.unraisablehook`): a command that goes on still exits 143/130.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import signal
import sys

from vprom.app.options import Done, options_of
from vprom.errors import VpromError
from vprom.claim import waiting

#: how to resume an interrupted command (the others start over)
RESUME_HINT = {
    "build": "run the same command again: finished stages are kept",
    "download": "run the same command again: downloads resume where they stopped",
    "extract": "run the same command again: finished chunks are kept",
    "train": "run the same command again: it resumes after the last finished epoch",
    "reproduce": "run the same command again: finished steps and runs are kept",
}
START_OVER = "run the same command again (it starts over)"


class Terminated(BaseException):
    """SIGTERM, handled like Ctrl-C: stop, clean up, exit with 143."""


#: interrupts received during the running command, kept in case a finalizer swallowed them
_received: list[BaseException] = []


def _terminate(signum, frame):
    _received.append(Terminated())
    raise _received[-1]


def _keep_swallowed_interrupts(previous_hook, unraisable) -> None:
    """sys.unraisablehook: an interrupt swallowed by a finalizer is kept, not printed."""
    if isinstance(unraisable.exc_value, (KeyboardInterrupt, Terminated)):
        _received.append(unraisable.exc_value)
    else:
        previous_hook(unraisable)


def interruption(error: BaseException) -> BaseException | None:
    """The Ctrl-C or SIGTERM that `error` is or was raised while handling: a cleanup that
    fails during an interrupt (a worker killed by the same SIGTERM) is still the interrupt."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, (KeyboardInterrupt, Terminated)):
            return error
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None


def os_error_message(e: OSError, near: object = None) -> str:
    """One line for a file-system error: what, which path, what to do; one that names no
    file (HDF5's) is told as met while working on `near`, the command's output or input."""
    path = e.filename if e.filename is not None else f"{near or 'vprom'} (while working on it)"
    fixes = {
        errno.EACCES: "no permission; choose another path or fix its permissions",
        errno.EPERM: "not permitted; choose another path or fix its permissions",
        errno.EROFS: "the file system is read-only; choose another path",
        errno.ENOSPC: "no space left on the device; free some space or choose another path",
        errno.EDQUOT: "the disk quota is used up; free some space or choose another path",
        errno.EISDIR: "is a folder where a file is needed; choose another path",
        errno.ENOTDIR: "a file stands where a folder is needed; choose another path",
        errno.EEXIST: "already exists in the way; move it or choose another path",
        errno.ENOENT: "no such file or folder; check the path",
        errno.EMFILE: "too many open files; raise the limit (ulimit -n 4096) and run it again",
        errno.ENFILE: "the system's open-file table is full; close other programs and run it "
                      "again",
    }
    fix = fixes.get(e.errno, "check the path and try again")
    return f"{path}: {e.strerror or type(e).__name__} ({fix})"


def run_command(build_parser, argv: list[str] | None = None) -> int:
    """Parse `argv`, call the command's function and show its result (see the module doc)."""
    _received.clear()
    previous, previous_hook = signal.signal(signal.SIGTERM, _terminate), sys.unraisablehook
    sys.unraisablehook = functools.partial(_keep_swallowed_interrupts, previous_hook)
    try:
        return _run(build_parser, argv)
    finally:
        signal.signal(signal.SIGTERM, previous)
        sys.unraisablehook = previous_hook


def _run(build_parser, argv: list[str] | None) -> int:
    debug = os.environ.get("VPROM_DEBUG", "") not in ("", "0")
    args = options = None
    try:
        parser = build_parser()
        args = parser.parse_args(argv)  # `--help`, `--list` and bad arguments exit here
        if args.command is None:
            parser.print_help()
            return 2
        command, options = args._command, options_of(args)
        with waiting(getattr(args, "wait", False)):
            result = command.function(**options)
        if _received:  # an interrupt that a finalizer swallowed: the command did not stop
            raise _received[0]
        if command.show is not None:
            command.show(result, options)
    except Done:
        return 0
    except BaseException as e:
        if isinstance(e, SystemExit):
            raise
        interrupt = interruption(e) or (_received[0] if _received else None)
        if interrupt is None and isinstance(e, BrokenPipeError):
            # `vprom evaluate RUN | head -1`: keep Python's final flush off the closed pipe
            with contextlib.suppress(OSError, ValueError):  # stdout may not be a real file
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 141
        if debug or (interrupt is None and not isinstance(e, (VpromError, OSError))):
            raise
        if interrupt is None:
            near = next((options[k] for k in ("out", "json", "dataset", "run")
                         if (options or {}).get(k) is not None), None)
            text = os_error_message(e, near) if isinstance(e, OSError) else str(e)
            print(f"vprom {args.command}: error: {text}", file=sys.stderr)
            return 1
        by = "SIGTERM" if isinstance(interrupt, Terminated) else "Ctrl-C"
        if options is None:
            print(f"vprom: interrupted ({by}) while starting; nothing was done", file=sys.stderr)
        else:
            how = RESUME_HINT.get(args.command, START_OVER)
            print(f"vprom {args.command}: interrupted ({by}); no partial output was left "
                  f"looking finished; {how}", file=sys.stderr)
        return 143 if isinstance(interrupt, Terminated) else 130
    return 0
