"""Worker processes that a Ctrl-C, a SIGTERM or a dead worker never leaves hanging.

`vprom mine` runs one process per pass and `vprom synth` renders images in several; both
start them here. Each worker has its own pipe to the parent and shares nothing else with
it — no queue, no lock. That is why there is no `multiprocessing.Pool`: its workers take
turns on two shared, locked queues, so a worker killed while it holds a lock (a SIGTERM to
the process group, an out-of-memory kill) leaves `Pool.terminate()` waiting for that lock
for ever, and a Ctrl-C, which the terminal sends to every process of the group, reaches
the workers in the middle of their pipe traffic. With one pipe per worker, a worker that
dies shows up as end-of-file on its pipe, and the parent can always stop the others.

Signals:

* Workers ignore SIGINT: one Ctrl-C is the parent's to handle. SIGINT and SIGTERM are
  blocked in the parent while a worker starts, so the worker is born with them blocked and
  cannot see a Ctrl-C before it ignores it, and the parent is never interrupted half-way
  through sending the worker its arguments; it receives a signal that came meanwhile as
  soon as the worker is registered.
* Workers keep SIGTERM's default action: it is how the parent stops them.
* The parent stops its workers on every way out — done, failed, Ctrl-C, SIGTERM (the
  command line raises on it): SIGTERM, a short wait, then SIGKILL for any that remain.
* Workers are daemonic, so if the parent leaves some other way, multiprocessing's exit
  handler still ends them; a worker of `ordered_map` whose parent was killed outright
  (SIGKILL) exits when it finds the pipe closed, at its next chunk.

`ordered_map` spreads the jobs over the workers in chunks, at most two chunks in flight per
worker and a bounded window of finished chunks waiting for an earlier one, and yields the
results in job order, so its output equals a one-process run's.
"""

from __future__ import annotations

import contextlib
import gc
import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
import threading
import time
from itertools import islice
from multiprocessing import resource_tracker
from typing import Callable, Iterable, Iterator

from vprom.errors import VpromError

#: Seconds a worker is given to exit after SIGTERM before it is killed.
GRACE_S = 3.0
#: Chunks sent to one worker before its first result comes back.
DEPTH = 2
#: Signals held while a worker starts and while workers are stopped.
HELD = {signal.SIGINT, signal.SIGTERM}
BLOCKS = hasattr(signal, "pthread_sigmask")  # POSIX


def context(method: str = "spawn"):
    """Spawned by default: safe with h5py and threads, and the same on every OS.

    `"fork"` lets workers share what the parent built before they start (copy-on-write):
    only for a parent without threads of its own and with no HDF5 file open that a worker
    will use, and only on POSIX.
    """
    if method == "fork" and "fork" not in multiprocessing.get_all_start_methods():
        method = "spawn"
    return multiprocessing.get_context(method)


def usable_cores() -> int:
    """The CPU cores this process may run on (its affinity where the OS tells it): the
    default number of workers of `generate`, `verify` and `build`."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off for the block, then as it was.

    For stretches that build millions of long-lived objects and almost no reference cycles
    (an index over the pools, a loaded data set, a parsed chunk of JSON): each collection
    there walks every object made so far, and the collections took three times as long as
    the work itself. Objects are still freed by reference counting; the few cycles wait for
    the next collection after the block."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """Hold SIGINT and SIGTERM for the block's duration: one that arrives meanwhile is acted
    on (by the handler it would have met) when the block ends, and a worker started inside
    is born with both blocked.

    Blocking them in this thread is not enough on its own: another thread of the process
    (numpy's BLAS threads, tqdm's monitor) may take the signal, and Python then runs the
    handler in the main thread all the same. So the main thread's handlers are swapped for
    one that only takes note, too.
    """
    pending: list[int] = []
    swapped = {}
    if threading.current_thread() is threading.main_thread():
        swapped = {sig: signal.signal(sig, lambda signum, frame: pending.append(signum))
                   for sig in HELD}
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, HELD) if BLOCKS else None
    try:
        yield
    finally:
        if mask is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        for sig, handler in swapped.items():
            signal.signal(sig, handler)
        for sig in dict.fromkeys(pending):
            signal.raise_signal(sig)


def quiet_when_parent_gone() -> None:
    """In a worker process: a helper thread's broken connection is not reported.

    torch's DataLoader workers hand each batch's shared memory to the parent through a thread
    (multiprocessing's resource sharer). When the parent stops mid-handover (Ctrl-C), that
    thread's socket is reset or its pipe broken, and Python would print its traceback under
    the parent's clean one-line message. The sharer's thread catches the error itself and
    hands it to `sys.excepthook`; a thread that does not reaches `threading.excepthook`:
    both are hooked, for threads other than the main one. Any other exception is reported
    as usual."""
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
    """Start `target(*args)` in a spawned daemonic worker that ignores SIGINT; append it to
    `procs` before a signal can interrupt, so the caller's cleanup always sees it.

    SIGINT and SIGTERM are held while the worker starts: an interrupt in the middle would
    cut the pipe that carries the worker its arguments (it would print an EOFError).
    """
    if os.name == "posix":
        # Started on first use, the resource tracker unblocks SIGINT and SIGTERM after
        # starting itself, which would end the hold below; start it before.
        resource_tracker.ensure_running()
    proc = context(method).Process(target=_ignoring_sigint, args=(target, args), name=name,
                             daemon=True)
    with _signals_held():
        try:
            proc.start()
        except ConnectionError:  # it died reading its arguments (not a closed stdout)
            raise VpromError(f"worker {name} ended while it was being started; was it "
                             "killed, or out of memory? Run again, or with --workers 1 to "
                             "see the failure here") from None
        procs.append(proc)
    return proc


def _ignoring_sigint(target: Callable, args: tuple) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # a forked worker was born with the parent's note-taking handler (`_signals_held`): SIGTERM
    # would only be noted, and `stop` would wait out GRACE_S and kill it
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if BLOCKS:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, HELD)  # held since birth (`start`)
    target(*args)


def stop(procs: Iterable) -> None:
    """End every worker: SIGTERM, then SIGKILL whatever is left after `GRACE_S` seconds.

    Called on success too, when the workers have nothing left to do. A second Ctrl-C or a
    SIGTERM is held back until this returns, so no worker is left running.
    """
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


def failure(e: BaseException) -> BaseException:
    """What a worker sends back for an exception: a `VpromError` as it is (its message is
    meant for the user), anything else as a RuntimeError naming its type (always picklable)."""
    return e if isinstance(e, VpromError) else RuntimeError(f"{type(e).__name__}: {e}")


def receive(conn, proc):
    """The next message from worker `proc`; a worker that exited without one is reported."""
    try:
        return conn.recv()
    except (EOFError, ConnectionError):  # closed, or reset with our last chunk unread
        raise _died(proc) from None


def _send(conn, proc, message) -> None:
    try:
        conn.send(message)
    except ConnectionError:  # the worker is gone (not a closed stdout: no quiet exit 141)
        raise _died(proc) from None


def _died(proc) -> VpromError:
    proc.join()
    return VpromError(f"worker {proc.name} died (exit code {proc.exitcode}) without a result; "
                      "was it killed, or out of memory? Run again, or with --workers 1 to see "
                      "the failure here")


# ---------------------------------------------------------------- ordered map
@contextlib.contextmanager
def ordered_map(fn: Callable, jobs: Iterable, workers: int, command: str, chunksize: int = 1,
                method: str = "spawn", affinity: Callable | None = None):
    """Yield an iterator over `fn(job)` for every job, in job order, computed by `workers`
    processes started by `method` (see `context`); here, in this process, when `workers` < 2.

    `fn` must be a module-level function and each job small (it travels over a pipe that
    is not drained while the worker works). The workers are named `vprom-<command>-<k>`.
    Leaving the block stops the workers, whether the iterator was used up or not.

    `affinity(job)` (chunksize 1): a key naming what a job's worker computes once and keeps
    (None: nothing). A free worker takes the first job of a key it holds, else of a key no
    worker holds, else of none, else the first job left (`pick`); so workers do not all
    compute what one could, and still share the last jobs. Its results are held until their
    turn, however far ahead a job was taken.
    """
    if affinity is not None and chunksize != 1:
        raise ValueError("ordered_map: affinity hands out single jobs (chunksize 1)")
    if workers < 2:
        yield map(fn, jobs)
        return
    procs: list = []
    conns: list = []
    try:
        for k in range(workers):
            parent, child = context(method).Pipe()
            conns.append(parent)
            start(procs, _serve, (child, fn), f"vprom-{command}-{k + 1}", method)
            child.close()
        next_for = (_in_order(jobs, chunksize, workers) if affinity is None else
                    _by_affinity(list(jobs), affinity))
        yield _drive(next_for, procs, conns)
    finally:
        stop(procs)
        for conn in conns:
            conn.close()


def _in_order(jobs, chunksize: int, workers: int) -> Callable:
    """`_drive`'s source of chunks in job order, at most `window` ahead of the results."""
    remaining = iter(jobs)
    chunks = iter(lambda: list(islice(remaining, chunksize)), [])  # ends at an empty chunk
    window = DEPTH * workers * 2  # chunks sent but not yet yielded, at most
    sent = 0

    def next_for(worker: int, held: set, others: set, emitted: int):
        nonlocal sent
        chunk = next(chunks, None) if sent < emitted + window else None
        if chunk is None:
            return None
        sent += 1
        return sent - 1, chunk, None

    return next_for


def pick(keys: list, held: set, others: set) -> int:
    """The position in `keys` (the affinities of the jobs left, in job order) of the job a
    free worker holding `held` takes, the other workers holding `others` (see
    `ordered_map`)."""
    def rank(key) -> int:
        if key is None:
            return 2
        return 0 if key in held else 1 if key not in others else 3
    return min(range(len(keys)), key=lambda i: (rank(keys[i]), i))


def _by_affinity(jobs: list, affinity: Callable) -> Callable:
    """`_drive`'s source of single jobs, chosen by `pick`."""
    keys = [affinity(job) for job in jobs]
    left = list(range(len(jobs)))  # not sent yet, in job order

    def next_for(worker: int, held: set, others: set, emitted: int):
        if not left:
            return None
        i = left.pop(pick([keys[j] for j in left], held, others))
        return i, [jobs[i]], keys[i]

    return next_for


def _drive(next_for: Callable, procs: list, conns: list) -> Iterator:
    """Keep every worker `DEPTH` chunks busy with what `next_for(worker, its affinities, the
    others', results yielded)` gives ((key, chunk, affinity) or None: nothing now), and
    yield the results in key order (keys 0, 1, 2, ...)."""
    busy = [0] * len(conns)
    held: list[set] = [set() for _ in conns]
    done: dict[int, list] = {}
    sent = emitted = 0

    def feed() -> None:
        nonlocal sent
        for k, conn in enumerate(conns):
            while busy[k] < DEPTH:
                others = set().union(*(h for j, h in enumerate(held) if j != k))
                got = next_for(k, held[k], others, emitted)
                if got is None:
                    break
                key, chunk, affinity = got
                held[k].add(affinity)
                _send(conn, procs[k], (key, chunk))
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
    """Worker body: compute each chunk that arrives, until the parent stops it."""
    while True:
        try:
            key, chunk = conn.recv()
        except (EOFError, ConnectionError):
            return  # the parent is gone, or done with us
        try:
            message = ("ok", key, [fn(job) for job in chunk])
        except BaseException as e:  # noqa: BLE001 - every failure goes back to the parent
            message = ("error", key, failure(e))
        try:
            conn.send(message)
        except ConnectionError:
            return  # the parent is gone
