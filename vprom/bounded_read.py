"""Bounded reads of an HDF5 file, so that a damaged file is refused and never hangs.

libhdf5 can loop for good inside one C call on a damaged global heap, where no signal reaches
it, so a forked child with a deadline does the reading: `read_bounded` pickles back what its
reader returns; `check_readable` reads the structure, attributes and variable-length datasets,
and a file that passed is not read again while its stat is the same.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import select
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import h5py

from vprom.errors import VpromError
from vprom.processes import in_worker

# the child's deadline: a fixed part plus the time to read the file at a slow disk's rate
READ_DEADLINE_S, READ_RATE = 5.0, 4e6
_readable: set[tuple] = set()  # (path, size, mtime_ns, inode) of files that passed
T = TypeVar("T")


def _child_reads(path: Path, read: Callable, report: int) -> None:
    """In the child: a status byte, then the pickled result of `read(h5)` or an error text."""
    try:
        try:
            h5 = h5py.File(path, "r")
        except OSError as e:
            out = b"?" + str(e).encode()[:2000]
        else:
            with h5:
                out = b"+" + pickle.dumps(read(h5), pickle.HIGHEST_PROTOCOL)
    except VpromError as e:
        out = b"=" + str(e).encode()
    except BaseException as e:  # noqa: BLE001 - every failure goes back as its message
        out = b"!" + str(e).encode()[:2000]
    with contextlib.suppress(OSError), os.fdopen(report, "wb") as pipe:
        pipe.write(out)


def _received(read_end: int, deadline: float) -> bytes | None:
    """All the child wrote, or None if it did not finish by `deadline` (monotonic)."""
    chunks = []
    while (left := deadline - time.monotonic()) > 0 and select.select([read_end], [], [], left)[0]:
        chunk = os.read(read_end, 1 << 20)
        if not chunk:
            return b"".join(chunks) or None
        chunks.append(chunk)
    return None


def read_bounded(path: Path, read: Callable[[h5py.File], T],
                 meanwhile: Callable[[], object] | None = None) -> T:
    """`read(h5)`'s picklable result, computed on `path` by a forked child within the deadline,
    while this process runs `meanwhile` (work that does not touch the file); a VpromError
    raised by `read` keeps its message, any other failure names the file damaged."""
    deadline_s = READ_DEADLINE_S + path.stat().st_size / READ_RATE
    read_end, write_end = os.pipe()
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:  # a worker that ignores Ctrl-C and dies with this process
        os.close(read_end)
        try:
            in_worker(_child_reads, (path, read, write_end), parent)
        finally:
            os._exit(0)
    os.close(write_end)
    got = None
    try:  # Ctrl-C here, an error or a missed deadline kills the child
        if meanwhile is not None:
            meanwhile()
        got = _received(read_end, time.monotonic() + deadline_s)
    finally:
        if got is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(read_end)
    status, body = (got[:1], got[1:]) if got else (b"", b"")
    if status == b"+":
        return pickle.loads(body)
    why = body.decode(errors="replace")
    if status == b"=":
        raise VpromError(why)
    if status == b"?":
        raise VpromError(f"{path}: cannot be opened as HDF5 ({why}); is it complete and the "
                         "right file?")
    why = why if status else f"reading its structure did not end within {deadline_s:.0f} s"
    raise VpromError(f"{path}: cannot be read ({why}); the file is damaged or incomplete: "
                     "make it again or fetch it again")


def _read_heap(h5: h5py.File) -> None:
    """Read what touches the file's global heap: every attribute and variable-length dataset."""

    def visit(_name, obj):
        for key in obj.attrs:
            obj.attrs[key]
        if isinstance(obj, h5py.Dataset) and h5py.check_vlen_dtype(obj.dtype) is not None:
            obj[()]

    visit("/", h5)
    h5.visititems(visit)


def check_readable(path: Path) -> None:
    """Refuse `path` in one line unless a forked child read it within the deadline."""
    stat = path.stat()
    key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns, stat.st_ino)
    if key not in _readable:
        read_bounded(path, _read_heap)
        _readable.add(key)
