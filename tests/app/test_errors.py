"""Every failure reaches the user as one line and a non-zero exit, never a raw traceback."""

from __future__ import annotations

import dataclasses
import errno
import functools
import os
import signal
import subprocess
import sys

import pytest

from vprom.app import cli
from vprom.errors import VpromError


@pytest.fixture
def failing(monkeypatch):
    """Make `vprom stats` raise `error` from inside the library."""

    def install(error: BaseException):
        def boom(dataset):
            raise error

        monkeypatch.setattr("vprom.generation.verify.stats.stats", boom)

    return install


@pytest.mark.parametrize("error, says", [
    (PermissionError(errno.EACCES, "Permission denied", "/data/out/stats.json"),
     "/data/out/stats.json: Permission denied (no permission; choose another path"),
    (OSError(errno.ENOSPC, "No space left on device", "/data/dataset.h5"),
     "/data/dataset.h5: No space left on device (no space left on the device"),
    (IsADirectoryError(errno.EISDIR, "Is a directory", "/data/out"),
     "/data/out: Is a directory (is a folder where a file is needed"),
    (FileExistsError(errno.EEXIST, "File exists", "/data/a"), "/data/a: File exists"),
    (OSError(errno.EROFS, "Read-only file system", "/mnt/ro/x"), "read-only"),
    (OSError(errno.EMFILE, "Too many open files", "/data/img/1.jpg"),
     "/data/img/1.jpg: Too many open files (too many open files; raise the limit (ulimit -n"),
])
def test_file_system_errors_are_one_line_naming_the_path(failing, capsys, error, says):
    failing(error)
    assert cli.main(["stats", "dataset.h5"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("vprom stats: error: ") and says in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_vprom_debug_shows_the_traceback(failing, monkeypatch):
    failing(PermissionError(errno.EACCES, "Permission denied", "/x"))
    monkeypatch.setenv("VPROM_DEBUG", "1")
    with pytest.raises(PermissionError):
        cli.main(["stats", "dataset.h5"])


def test_a_closed_stdout_exits_quietly(failing, capsys):
    failing(BrokenPipeError(errno.EPIPE, "Broken pipe"))
    assert cli.main(["stats", "dataset.h5"]) == 141
    assert capsys.readouterr().err == ""


def test_a_real_pipe_closed_early(tmp_path):
    # `vprom extract --list | head -1`, with the reader gone before the first line
    reader, writer = os.pipe()
    os.close(reader)
    done = subprocess.run([sys.executable, "-m", "vprom", "extract", "--list"], stdout=writer,
                          stderr=subprocess.PIPE, text=True, timeout=120)
    os.close(writer)
    assert done.returncode == 141 and done.stderr == ""


def test_sigterm_stops_like_ctrl_c(monkeypatch, capsys):
    monkeypatch.setattr("vprom.generation.verify.stats.stats",
                        lambda dataset: os.kill(os.getpid(), signal.SIGTERM))
    assert cli.main(["stats", "dataset.h5"]) == 143
    err = capsys.readouterr().err
    assert "interrupted" in err and "run the same command again" in err
    assert signal.getsignal(signal.SIGTERM) is not cli._terminate  # handler restored


SWALLOWED_INTERRUPT = """
import argparse, sys, time, types, weakref
from vprom.app.cli import run_command

def wait():
    print("waiting", flush=True)
    time.sleep(60)  # the signal arrives here

def work():
    if sys.argv[1] == "except":
        try:
            wait()
        except BaseException:  # as a library might
            pass
        return
    class Resource:
        pass
    held = Resource()
    watch = weakref.ref(held, lambda reference: wait())
    del held  # runs the callback, and Python swallows what it raises
    print("finished", watch, flush=True)

def parser():
    vprom = argparse.ArgumentParser(prog="vprom")
    command = vprom.add_subparsers(dest="command").add_parser("work")
    command.set_defaults(_command=types.SimpleNamespace(function=work, show=None))
    return vprom

sys.exit(run_command(parser, ["work"]))
"""


@pytest.mark.parametrize("where, sig, code, by", [
    ("finalizer", signal.SIGTERM, 143, "SIGTERM"),
    ("finalizer", signal.SIGINT, 130, "Ctrl-C"),
    ("except", signal.SIGTERM, 143, "SIGTERM"),
])
def test_an_interrupt_swallowed_by_the_work_still_ends_the_command(tmp_path, where, sig, code,
                                                                   by):
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    run = subprocess.Popen([sys.executable, "-c", SWALLOWED_INTERRUPT, where],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           cwd=tmp_path, env={**os.environ, "PYTHONPATH": root})
    assert run.stdout.readline() == "waiting\n"
    run.send_signal(sig)
    _, err = run.communicate(timeout=60)
    assert run.returncode == code, err
    assert err == (f"vprom work: interrupted ({by}); no partial output was left looking "
                   "finished; run the same command again (it starts over)\n")


def test_ctrl_c_says_how_to_resume(failing, capsys):
    failing(KeyboardInterrupt())
    assert cli.main(["stats", "dataset.h5"]) == 130
    assert "interrupted" in capsys.readouterr().err


@pytest.mark.parametrize("argv, says", [
    (["generate", "pools.h5", "--out", "{tmp}"], "is a folder, but this output is a file"),
    (["generate", "pools.h5", "--out", "{tmp}/a-file/x.h5"], "a-file is a file"),
    (["generate", "pools.h5", "--out", "{tmp}/d.h5", "--scale", "inf"], "finite number"),
    (["generate", "pools.h5", "--out", "{tmp}/d.h5", "--scale", "0"], "above 0"),
    (["build", "--synthetic", "--out", "{tmp}/b", "--images", "0"], "above 0"),
    (["build", "--synthetic", "--out", "{tmp}/a-file"], "is a file, but this output is a folder"),
    (["stats", "d.h5", "--json", "{tmp}"], "is a folder"),
])
def test_options_are_refused_before_any_work(tmp_path, capsys, monkeypatch, argv, says):
    (tmp_path / "a-file").write_text("in the way")
    started = []
    for name in ("build", "generate", "stats"):
        monkeypatch.setitem(cli.COMMANDS, name, dataclasses.replace(
            cli.COMMANDS[name], function=functools.wraps(cli.COMMANDS[name].function)(
                lambda *a, name=name, **k: started.append(name))))
    with pytest.raises(SystemExit) as exit_:
        cli.main([a.format(tmp=tmp_path) for a in argv])
    assert exit_.value.code == 2 and not started
    assert says in capsys.readouterr().err


def test_a_library_error_is_one_line(failing, capsys):
    failing(VpromError("dataset.h5: no such file"))
    assert cli.main(["stats", "dataset.h5"]) == 1
    assert capsys.readouterr().err == "vprom stats: error: dataset.h5: no such file\n"
