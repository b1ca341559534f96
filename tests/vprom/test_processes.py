"""Worker processes: ordered results, failures carried back, and no worker ever left running."""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import threading
import time

import pytest
import vprom_test_jobs as spawned

from vprom import processes
from vprom.errors import VpromError

#: (job, what `spawned.fail_at` makes of it, what the caller is told)
FAILURES = [
    (37, VpromError, "record 37 is broken"),
    (38, RuntimeError, "ValueError: not a VpromError"),
    (39, VpromError, r"^worker vprom-test-\d died \(exit code 3\) without a result"),
]


def _no_children_left() -> bool:
    return not multiprocessing.active_children()


@pytest.mark.parametrize("workers, chunksize", [(1, 1), (2, 1), (3, 4)])
def test_ordered_map_gives_the_results_in_job_order(workers, chunksize):
    with processes.ordered_map(spawned.square, range(203), workers, "test", chunksize) as results:
        assert list(results) == [x * x for x in range(203)]
    assert _no_children_left()


@pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(), reason="no fork")
def test_forked_workers_share_what_the_parent_built_before_they_started():
    table = {x: x * 3 for x in range(500)}  # built once, read by every worker unpickled
    with processes.ordered_map(table.__getitem__, range(500), 2, "test", 7, "fork") as results:
        assert list(results) == [x * 3 for x in range(500)]
    assert _no_children_left()


def test_no_jobs_no_results():
    with processes.ordered_map(spawned.square, [], 2, "test") as results:
        assert list(results) == []
    assert _no_children_left()


@pytest.mark.parametrize("job, error, says", FAILURES)
def test_a_failing_job_or_dying_worker_is_reported_and_the_rest_stopped(job, error, says):
    jobs = list(range(30)) + [job] + list(range(30))
    with pytest.raises(error, match=says):
        with processes.ordered_map(spawned.fail_at, jobs, 2, "test", chunksize=2) as results:
            list(results)
    assert _no_children_left()


def test_leaving_early_stops_the_workers():
    with pytest.raises(KeyboardInterrupt):
        with processes.ordered_map(spawned.square, range(10_000), 2, "test") as results:
            next(iter(results))
            raise KeyboardInterrupt  # as a Ctrl-C in the parent would
    assert _no_children_left()


@pytest.mark.parametrize("method", ["spawn", "fork"])
def test_a_worker_ignores_ctrl_c_and_stop_ends_it(method):
    """At once, by SIGTERM: a forked worker too (it is born with the parent's handlers), not
    after the grace period."""
    receive, send = processes.context(method).Pipe()
    procs: list = []
    processes.start(procs, spawned.wait_for_parent, (send,), "vprom-test", method)
    assert receive.recv() == "ready"
    os.kill(procs[0].pid, signal.SIGINT)
    time.sleep(0.2)
    assert procs[0].is_alive() and procs[0].daemon
    started = time.monotonic()
    processes.stop(procs)
    assert not procs[0].is_alive() and procs[0].exitcode == -signal.SIGTERM
    assert time.monotonic() - started < processes.GRACE_S


def test_a_worker_that_dies_while_starting_is_an_error_not_a_closed_stdout(monkeypatch):
    def broken_pipe(self):
        raise BrokenPipeError(32, "Broken pipe")  # what writing its arguments then raises

    monkeypatch.setattr(type(processes.context().Process()), "start", broken_pipe)
    procs: list = []
    with pytest.raises(VpromError, match="worker vprom-test ended while it was being started"):
        processes.start(procs, spawned.square, (2,), "vprom-test")
    assert procs == []


@pytest.mark.parametrize("sig, raised", [(signal.SIGINT, KeyboardInterrupt)])
def test_a_signal_during_a_start_is_acted_on_after_it(sig, raised):
    done = []
    with pytest.raises(raised), processes._signals_held():
        os.kill(os.getpid(), sig)
        time.sleep(0.05)  # a handler would have run by now
        done.append("the block finished")
    assert done == ["the block finished"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def _in_thread(target) -> None:
    thread = threading.Thread(target=target)
    thread.start()
    thread.join()


def _raise_in_thread(error: BaseException) -> None:
    def target():
        raise error
    _in_thread(target)


def _handed_to_excepthook(error: BaseException) -> None:
    """As multiprocessing's resource sharer reports an error of its thread: caught, then
    given to `sys.excepthook` (not raised out of the thread); called outside a thread, as
    the main thread would."""
    try:
        raise error
    except BaseException:
        sys.excepthook(*sys.exc_info())


def test_a_workers_broken_handover_is_quiet_other_thread_errors_are_not(monkeypatch, capsys):
    """Ctrl-C mid-handover resets the socket of a DataLoader worker's sharing thread, or
    breaks its pipe: that traceback must not land under the parent's one-line message (CI
    saw both, the second through the sharer's own call of `sys.excepthook`)."""
    monkeypatch.setattr(threading, "excepthook", threading.excepthook)
    monkeypatch.setattr(sys, "excepthook", sys.excepthook)
    processes.quiet_when_parent_gone()
    _raise_in_thread(ConnectionResetError(104, "Connection reset by peer"))
    _raise_in_thread(BrokenPipeError(32, "Broken pipe"))
    _in_thread(lambda: _handed_to_excepthook(BrokenPipeError(32, "Broken pipe")))
    _in_thread(lambda: _handed_to_excepthook(ConnectionResetError(104, "Connection reset")))
    assert capsys.readouterr().err == ""
    _raise_in_thread(ValueError("a real bug"))
    _in_thread(lambda: _handed_to_excepthook(ValueError("another real bug")))
    _handed_to_excepthook(BrokenPipeError(32, "the main thread's own pipe"))
    err = capsys.readouterr().err
    assert "ValueError: a real bug" in err and "ValueError: another real bug" in err
    assert "BrokenPipeError: [Errno 32] the main thread's own pipe" in err
