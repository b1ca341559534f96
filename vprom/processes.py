"""Worker processes that a Ctrl-C, a SIGTERM or a dead worker never leaves hanging.

Each worker has its own pipe and shares nothing else (a `multiprocessing.Pool` worker killed
holding a queue lock hangs `Pool.terminate()`), so a dead worker is an end-of-file on its pipe.
Workers ignore SIGINT; the parent stops them on every way out (SIGTERM, a wait, SIGKILL), and
one killed outright takes them along (PR_SET_PDEATHSIG; forked children close the parent ends).
Workers start with `__main__` hidden, so a script without a `__main__` guard runs once.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
import threading
import time
import types
from collections.abc import Callable, Iterable, Iterator
from itertools import islice
from multiprocessing import resource_tracker

from vprom.errors import VpromError

GRACE_S = 3.0  # seconds a worker has to exit after SIGTERM before SIGKILL
DEPTH = 2  # chunks a worker holds at once
HELD = {signal.SIGINT, signal.SIGTERM}  # held while a worker starts and while workers stop
PR_SET_PDEATHSIG = 1  # linux/prctl.h
_PARENT_ENDS: set = set()  # the parent ends of live workers' pipes
_WHY = "was it killed, or out of memory? Run again, or with --workers 1 to see the failure here"


def _close_parent_ends() -> None:
    for conn in list(_PARENT_ENDS):
        with contextlib.suppress(OSError):
            conn.close()
    _PARENT_ENDS.clear()


os.register_at_fork(after_in_child=_close_parent_ends)


class _MainHiddenStart:
    def start(self) -> None:
        """Start with a bare `__main__`, so multiprocessing imports no script again."""
        main, sys.modules["__main__"] = sys.modules["__main__"], types.ModuleType("__main__")
        try:
            super().start()
        finally:
            sys.modules["__main__"] = main


class SpawnProcess(_MainHiddenStart, multiprocessing.context.SpawnProcess):
    pass


class SpawnContext(multiprocessing.context.SpawnContext):
    Process = SpawnProcess


class ForkServerProcess(_MainHiddenStart, multiprocessing.context.ForkServerProcess):
    pass


class ForkServerContext(multiprocessing.context.ForkServerContext):
    Process = ForkServerProcess


_MAIN_HIDDEN = {"spawn": SpawnContext(), "forkserver": ForkServerContext()}


def context(method: str | None = "spawn"):
    """A multiprocessing context: spawn, fork (no threads or open HDF5 files) or None (default)."""
    if method is None:
        method = (multiprocessing.get_start_method(allow_none=True)
                  or multiprocessing.get_all_start_methods()[0])  # the first is the default
    return _MAIN_HIDDEN.get(method) or multiprocessing.get_context(method)


def refuse_rerun(what: str) -> None:
    """Exit in one line (SystemExit, no traceback) where a worker re-imports the user's script."""
    if getattr(multiprocessing.current_process(), "_inheriting", False):
        script = getattr(sys.modules.get("__mp_main__"), "__file__", None) or "the script"
        raise SystemExit(f"vprom: {what} was called again while a worker process re-imported "
                         f'{script}; put the script\'s calls under `if __name__ == "__main__":`')


def usable_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """The cyclic garbage collector off for a block that builds millions of acyclic objects."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """Hold SIGINT and SIGTERM for the block; one that arrived is raised at its end."""
    pending: list[int] = []
    swapped = {}
    if threading.current_thread() is threading.main_thread():
        swapped = {sig: signal.signal(sig, lambda signum, frame: pending.append(signum))
                   for sig in HELD}
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, HELD)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        for sig, handler in swapped.items():
            signal.signal(sig, handler)
        for sig in dict.fromkeys(pending):
            signal.raise_signal(sig)


def quiet_when_parent_gone() -> None:
    """In a worker: print no broken connection of a side thread (a DataLoader worker's pipe)."""
    broken = (ConnectionResetError, BrokenPipeError)

    def thread_hook(args) -> None:
        if not issubclass(args.exc_type, broken):
            threading.__excepthook__(args)

    def hook(exc_type, exc, tb) -> None:
        if not (issubclass(exc_type, broken)
                and threading.current_thread() is not threading.main_thread()):
            sys.__excepthook__(exc_type, exc, tb)

    threading.excepthook = thread_hook
    sys.excepthook = hook


def start(procs: list, target: Callable, args: tuple, name: str, method: str = "spawn"):
    """Start `target(*args)` in a daemonic worker, appended to `procs` before any signal."""
    refuse_rerun(f"a worker ({name})")
    # started on first use, the resource tracker would unblock the signals held below
    resource_tracker.ensure_running()
    ctx = context(method)
    # a forkserver's child is the server's: the kernel watches the server, which exits with us
    parent = None if ctx.get_start_method() == "forkserver" else os.getpid()
    proc = ctx.Process(target=in_worker, args=(target, args, parent), name=name, daemon=True)
    with _signals_held():
        try:
            proc.start()
        except ConnectionError:  # it died reading its arguments (not a closed stdout)
            raise VpromError(f"worker {name} ended while it was being started; {_WHY}") from None
        procs.append(proc)
    return proc


def _die_with_parent(parent: int | None) -> None:
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # libc's
    if parent is not None and os.getppid() != parent:
        os._exit(1)  # the parent died before the kernel was told to watch it


def in_worker(target: Callable, args: tuple, parent: int | None) -> None:
    """Run `target(*args)` as a worker: SIGINT ignored, SIGTERM fatal, dead with `parent`."""
    _die_with_parent(parent)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # a forked worker was born with `_signals_held`'s note-taking handler
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, HELD)  # held since birth (`start`)
    target(*args)


def stop(procs: Iterable) -> None:
    """End every worker: SIGTERM, then SIGKILL after `GRACE_S`; signals wait until it returns."""
    procs = list(procs)
    with _signals_held():
        for proc in procs:
            if proc.is_alive():
                proc.terminate()
        deadline = time.monotonic() + GRACE_S
        for proc in procs:
            proc.join(max(0.0, deadline - time.monotonic()))
            if proc.is_alive():
                proc.kill()
                proc.join()


def receive(conn, proc):
    """The next message from worker `proc`; a worker that exited without one is reported."""
    try:
        return conn.recv()
    except (EOFError, ConnectionError):  # closed, or reset with our last chunk unread
        raise _died(proc) from None


def _died(proc) -> VpromError:
    proc.join()
    return VpromError(f"worker {proc.name} died (exit code {proc.exitcode}) without a result; "
                      f"{_WHY}")


@contextlib.contextmanager
def ordered_map(fn: Callable, jobs: Iterable, workers: int, command: str, chunksize: int = 1,
                method: str = "spawn"):
    """Yield an iterator over `fn(job)` (a module-level function) in job order, from `workers`
    processes named `vprom-<command>-<k>` (here when `workers` < 2), stopped on leaving."""
    if workers < 2:
        yield map(fn, jobs)
        return
    procs: list = []
    conns: list = []
    try:
        for k in range(workers):
            parent, child = context(method).Pipe()
            conns.append(parent)
            _PARENT_ENDS.add(parent)
            start(procs, _serve, (child, fn), f"vprom-{command}-{k + 1}", method)
            child.close()
        yield _drive(jobs, chunksize, procs, conns)
    finally:
        stop(procs)
        for conn in conns:
            _PARENT_ENDS.discard(conn)
            conn.close()


def _drive(jobs: Iterable, chunksize: int, procs: list, conns: list) -> Iterator:
    remaining = iter(jobs)
    chunks = iter(lambda: list(islice(remaining, chunksize)), [])  # ends at an empty chunk
    window = DEPTH * len(conns) * 2
    busy = [0] * len(conns)
    done: dict[int, list] = {}
    sent = emitted = 0

    def feed() -> None:
        nonlocal sent
        for k, conn in enumerate(conns):
            while busy[k] < DEPTH and sent < emitted + window:
                chunk = next(chunks, None)
                if chunk is None:
                    return
                try:
                    conn.send((sent, chunk))
                except ConnectionError:  # the worker is gone (not a closed stdout: no exit 141)
                    raise _died(procs[k]) from None
                busy[k] += 1
                sent += 1

    feed()
    while emitted < sent:
        for conn in multiprocessing.connection.wait([c for k, c in enumerate(conns)
                                                     if busy[k]]):
            k = conns.index(conn)
            status, key, value = receive(conn, procs[k])
            if status == "error":
                raise value
            busy[k] -= 1
            done[key] = value
        while emitted in done:
            yield from done.pop(emitted)
            emitted += 1
        feed()


def _serve(conn, fn: Callable) -> None:
    while True:
        try:
            key, chunk = conn.recv()
        except (EOFError, ConnectionError):
            return  # the parent is gone, or done with us
        try:
            message = ("ok", key, [fn(job) for job in chunk])
        except BaseException as e:  # noqa: BLE001 - every failure goes back to the parent
            # anything but a VpromError goes back as a RuntimeError, which always pickles
            error = e if isinstance(e, VpromError) else RuntimeError(f"{type(e).__name__}: {e}")
            message = ("error", key, error)
        try:
            conn.send(message)
        except ConnectionError:
            return  # the parent is gone
