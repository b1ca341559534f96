"""A bounded first read of an HDF5 file, so that a damaged file is refused and never hangs.

libhdf5 can loop for good inside one C call on a damaged global heap, where no signal reaches
it, so a forked child with a deadline first reads the file's structure, attributes and
variable-length datasets; a file that passed is not read again while its stat is the same.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
from pathlib import Path

import h5py

from vprom.errors import VpromError
from vprom.processes import in_worker

# the child's deadline: a fixed part plus the time to read the file at a slow disk's rate
READ_DEADLINE_S, READ_RATE = 5.0, 4e6
_readable: set[tuple] = set()  # (path, size, mtime_ns, inode) of files that passed


def _child_reads(path: Path, report: int) -> None:
    """In the child: read what touches `path`'s global heap; write a status byte (and error)."""
    def visit(_name, obj):
        for key in obj.attrs:
            obj.attrs[key]
        if isinstance(obj, h5py.Dataset) and h5py.check_vlen_dtype(obj.dtype) is not None:
            obj[()]

    status = b"+"
    try:
        try:
            h5 = h5py.File(path, "r")
        except OSError as e:
            status = b"?" + str(e).encode()
        else:
            with h5:
                visit("/", h5)
                h5.visititems(visit)
    except BaseException as e:  # noqa: BLE001 - every failure goes back as its message
        status = b"!" + str(e).encode()
    with contextlib.suppress(OSError):
        os.write(report, status[:2000])


def check_readable(path: Path) -> None:
    """Refuse `path` in one line unless a forked child read it within the deadline."""
    stat = path.stat()
    key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns, stat.st_ino)
    if key in _readable:
        return
    deadline = READ_DEADLINE_S + stat.st_size / READ_RATE
    read_end, write_end = os.pipe()
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:  # a worker that ignores Ctrl-C and dies with this process
        os.close(read_end)
        try:
            in_worker(_child_reads, (path, write_end), parent)
        finally:
            os._exit(0)
    os.close(write_end)
    status = None
    try:
        if select.select([read_end], [], [], deadline)[0]:
            status = os.read(read_end, 2000).decode(errors="replace")
    finally:
        if status is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(read_end)
    if status == "+":
        _readable.add(key)
        return
    if status and status[0] == "?":
        raise VpromError(f"{path}: cannot be opened as HDF5 ({status[1:]}); is it complete and "
                         "the right file?")
    why = status[1:] if status else (f"reading its structure did not end within "
                                     f"{deadline:.0f} s")
    raise VpromError(f"{path}: cannot be read ({why}); the file is damaged or incomplete: "
                     "make it again or fetch it again")
