"""Claiming an output before any work: never an input, never another's, one writer at a time.

`claim` (or `writes` on a function) refuses an output that is, lies in or holds an input, or an
existing one that its manifest or content mark (`output_kind`) does not show as this command's
kind; then holds an advisory `flock` on `.NAME.lock` beside it, which the OS drops when its
holder dies (re-entrant; rank 0's under torchrun; a second writer is refused with the holder's
PID, or waits with `--wait`). The lock file is opened with O_NOFOLLOW and used only when it is
a regular file of this user's, so a link planted in a shared folder cannot redirect the write.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import fnmatch
import functools
import inspect
import os
import shutil
import stat
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from vprom.errors import VpromError
from vprom.files import is_temporary
from vprom.manifest import json_object, manifest_of
from vprom.processes import refuse_rerun

_HELD: dict[str, list] = {}  # lock path -> [fd, depth]
_WAIT = [False]


def _forget_locks() -> None:  # in a forked child: the parent still holds the locks
    for fd, _depth in _HELD.values():
        with contextlib.suppress(OSError):
            os.close(fd)
    _HELD.clear()


os.register_at_fork(after_in_child=_forget_locks)


@contextlib.contextmanager
def waiting(wait: bool) -> Iterator[None]:
    """Within the block, a writer that finds its output locked waits instead of refusing."""
    before, _WAIT[0] = _WAIT[0], bool(wait)
    try:
        yield
    finally:
        _WAIT[0] = before


def lock_path(out: str | os.PathLike) -> Path:
    out = Path(out)
    return out.parent / f".{out.name}.lock"


def _holder(fd: int) -> str:
    with contextlib.suppress(OSError, ValueError):
        return f"pid {int(os.pread(fd, 32, 0).decode().strip() or 'x')}"
    return "another process"


def _open_lock(path: Path) -> int:
    refuse = (f"{path}: is not a lock file vprom made for this user, so it is left as it is; "
              "remove it (it may be a link planted to make vprom overwrite its target) and "
              "run again")
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.EISDIR, errno.ENXIO):
            raise VpromError(refuse) from None
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_nlink > 1:
        os.close(fd)
        raise VpromError(refuse)
    return fd


def _acquire(path: Path, out: Path, wait: bool) -> int:
    told = False
    while True:
        try:
            fd = _open_lock(path)
        except OSError as e:  # the lock is the first file written: name the output instead
            if e.errno not in (errno.EACCES, errno.EPERM, errno.EROFS):
                raise
            raise VpromError(f"{out}: cannot be written: {out.parent} refuses new files "
                             f"({e.strerror}); choose another path") from None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if not wait:
                    raise VpromError(f"{out}: another vprom run ({_holder(fd)}) is writing "
                                     "it; wait for it to finish, pass --wait, or choose "
                                     "another output") from None
                if not told:
                    print(f"{out}: waiting for the vprom run ({_holder(fd)}) writing it",
                          file=sys.stderr, flush=True)
                    told = True
                fcntl.flock(fd, fcntl.LOCK_EX)
            with contextlib.suppress(FileNotFoundError):
                if os.stat(path, follow_symlinks=False).st_ino == os.fstat(fd).st_ino:
                    os.ftruncate(fd, 0)
                    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
                    return fd
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)  # the holder removed this file as we waited: lock the new one


@contextlib.contextmanager
def output_lock(out: str | os.PathLike, wait: bool | None = None) -> Iterator[None]:
    out = Path(out)
    if os.environ.get("RANK", "0") != "0":  # torchrun: rank 0 holds it for the job
        yield
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    path = lock_path(out)
    key = str(path.resolve())
    if key in _HELD:
        _HELD[key][1] += 1
        try:
            yield
        finally:
            _HELD[key][1] -= 1
        return
    _HELD[key] = [_acquire(path, out, _WAIT[0] if wait is None else wait), 1]
    try:
        yield
    finally:
        fd = _HELD.pop(key)[0]
        with contextlib.suppress(OSError):
            path.unlink()  # while still locked: a waiter then sees the inode change
        os.close(fd)


def output_kind(path: str | os.PathLike) -> str | None:
    """The kind of vprom output at `path` (manifest, PNG `vprom` text, JSON `kind`), or None."""
    path = Path(path)
    kind = (manifest_of(path) or {}).get("kind")
    if kind is None and path.is_file():
        with open(path, "rb") as f:
            png = f.read(8) == b"\x89PNG\r\n\x1a\n"
        if png:
            from PIL import Image

            with contextlib.suppress(OSError, ValueError), Image.open(path) as im:
                kind = im.info.get("vprom")
        else:
            kind = (json_object(path) or {}).get("kind")
    return kind if isinstance(kind, str) else None


def _holds_nothing(folder: Path) -> bool:
    return folder.is_dir() and not folder.is_symlink() and all(
        is_temporary(p.name) or (p.name.startswith(".") and p.name.endswith(".lock"))
        for p in folder.iterdir())


def remove_work_folder(folder: Path, kind: str, names: Iterable[str]) -> None:
    """Remove a work folder of `kind` holding only `names` and temporaries; refuse any other."""
    names = tuple(names)
    ours = _holds_nothing(folder) or (
        output_kind(folder) == kind and not folder.is_symlink() and all(
            is_temporary(p.name) or any(fnmatch.fnmatchcase(p.name, n) for n in names)
            for p in folder.iterdir()))
    if not ours:
        raise VpromError(f"{folder}: is where this command keeps its partial work, but holds "
                         "what vprom did not write there, so it is left as it is; move it "
                         "away and run again")
    shutil.rmtree(folder)


def check_owned(out: Path, kinds: Iterable[str] | None) -> None:
    """Refuse an existing `out` that is not a vprom output of `kinds` (None: unchecked)."""
    if kinds is None or not (out.exists() or out.is_symlink()) or _holds_nothing(out):
        return
    kinds = tuple(kinds)
    found = output_kind(out)
    if found in kinds:
        return
    said = f"a vprom {found} output" if found else "not written by vprom"
    wanted = f"a {' or '.join(kinds)} output" if kinds else "an empty folder"
    raise VpromError(f"{out}: already exists and is {said}, not {wanted} this command may "
                     "replace; move it away or choose another path")


def check_output(path: str | os.PathLike, folder: bool = False, option: str = "") -> Path:
    """Refuse a file output that is a folder (or the reverse), or one below a file; the
    refusal names `option` (e.g. --out) before the path."""
    path = Path(path)
    what, named = "folder" if folder else "file", f"{option} {path}".lstrip()
    if path.exists() and path.is_dir() != folder:
        other = "a folder" if path.is_dir() else "a file"
        raise VpromError(f"{named}: is {other}, but this output is a {what}; choose another "
                         "path")
    parent = next((p for p in path.parents if p.exists()), None)
    if parent is not None and not parent.is_dir():
        raise VpromError(f"{named}: {parent} is a file, so no {what} can be made below it; "
                         "choose another path")
    return path


def check_not_input(out: Path, inputs: Iterable[str | os.PathLike | None],
                    inside_ok: bool = False) -> None:
    """Refuse `out` when it is, lies inside (unless `inside_ok`) or holds one of `inputs`."""
    target = out.resolve()
    for given in filter(None, inputs):
        given = Path(given)
        source = given.resolve()
        same = target == source
        if not same and out.exists() and given.exists():
            with contextlib.suppress(OSError):
                same = os.path.samefile(out, given)
        if same:
            raise VpromError(f"{out}: is also an input of this command ({given}); writing "
                             "there would destroy it; choose another output path")
        if not inside_ok and target.is_relative_to(source) and source.is_dir():
            raise VpromError(f"{out}: lies inside the input folder {given}; choose an output "
                             "path outside it")
        if source.is_relative_to(target):
            raise VpromError(f"{out}: holds the input {given}; writing there could destroy "
                             "it; choose another output path")


@contextlib.contextmanager
def claim(out: str | os.PathLike, kinds: Iterable[str] | None, inputs: Iterable = (),
          folder: bool | None = None, inside_ok: bool = False) -> Iterator[Path]:
    """Check `out` (`folder`: True, False or None) against `inputs` and its owner; lock it."""
    refuse_rerun(f"the writing of {out}")
    out = Path(out)
    if folder is not None:
        check_output(out, folder=folder)
    check_not_input(out, list(inputs), inside_ok)
    with output_lock(out):
        check_owned(out, kinds)  # under the lock: the holder may have made it
        yield out


def writes(out: str | Callable, kinds: Iterable[str] | Callable | None,
           inputs: Callable = lambda a: (), folder: bool | None = None,
           inside_ok: bool = False) -> Callable:
    """`claim` the output of the decorated function for each call: `out` and `kinds` are a
    parameter name and kinds, or functions of the bound arguments (a dict), as `inputs` is."""

    def decorate(function):
        signature = inspect.signature(function)

        @functools.wraps(function)
        def wrapper(*args, **kwargs):
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            a = bound.arguments
            with claim(out(a) if callable(out) else a[out],
                       kinds(a) if callable(kinds) else kinds, inputs(a), folder, inside_ok):
                return function(*args, **kwargs)

        return wrapper

    return decorate
