"""Whose output is this? Claiming an output path before any work: never another's, never an input.

Every command that writes takes its output through `claim` (or the `writes` decorator on its
library function), which does three things before any work starts:

1. Inputs: the output may not be one of the command's inputs (same resolved path or the same
   file through a link), lie inside an input folder, or hold an input inside it.
2. Ownership: an existing output is replaced only when it is recognisably the same kind of
   vprom output (`recognise`): its manifest (beside it, inside an HDF5 file's attributes, or
   `manifest.json` inside a folder) names that kind, or it is a folder holding nothing but
   names that this command writes (an interrupted build, a run folder). An empty folder is
   free. Anything else is refused, naming the path and what to do.
3. One writer: an advisory lock (`fcntl.flock`) on `.NAME.lock` beside the output is held for
   the whole call. A second writer is refused at once, naming the holder's PID, or waits for
   it when asked (`waiting(True)`, the command line's `--wait`). The OS drops a flock when
   its process ends in any way, kill -9 included, so a dead holder never blocks. The lock
   file is removed on release; a writer that locked a file just unlinked by the previous
   holder sees the inode changed and locks again. Under torchrun only rank 0 takes it (the
   ranks of one job write one output together).

Locks are re-entrant within a process: `build` holds its folder and, inside it, `mine` its
pools file, without either refusing the other.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import fnmatch
import functools
import inspect
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Callable, Iterable, Iterator

from vprom.errors import VpromError

_HELD: dict[str, list] = {}  # lock path -> [fd, depth]
_WAIT = [False]


@contextlib.contextmanager
def waiting(wait: bool) -> Iterator[None]:
    """Within the block, a writer that finds its output locked waits instead of refusing."""
    before = _WAIT[0]
    _WAIT[0] = bool(wait)
    try:
        yield
    finally:
        _WAIT[0] = before


def lock_path(out: str | os.PathLike) -> Path:
    out = Path(out)
    return out.parent / f".{out.name}.lock"


def _holder(path: Path) -> str:
    with contextlib.suppress(OSError, ValueError):
        pid = int(path.read_text().strip() or "x")
        return f"pid {pid}"
    return "another process"


def _acquire(path: Path, out: Path, wait: bool) -> int:
    """Open and flock the lock file; the fd once the lock is ours on the file at `path`."""
    told = False
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if not wait:
                    raise VpromError(
                        f"{out}: another vprom run ({_holder(path)}) is writing it; wait for "
                        f"it to finish, pass --wait, or choose another output") from None
                if not told:
                    print(f"{out}: waiting for the vprom run ({_holder(path)}) writing it",
                          file=sys.stderr, flush=True)
                    told = True
                fcntl.flock(fd, fcntl.LOCK_EX)
            with contextlib.suppress(FileNotFoundError):
                if os.stat(path).st_ino == os.fstat(fd).st_ino:
                    os.ftruncate(fd, 0)
                    os.write(fd, f"{os.getpid()}\n".encode())
                    return fd
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)  # the holder removed this file as we waited: lock the new one


@contextlib.contextmanager
def output_lock(out: str | os.PathLike, wait: bool | None = None) -> Iterator[None]:
    """Hold the advisory lock of `out` for the block (see the module doc)."""
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
    fd = _acquire(path, out, _WAIT[0] if wait is None else wait)
    _HELD[key] = [fd, 1]
    try:
        yield
    finally:
        del _HELD[key]
        with contextlib.suppress(OSError):
            path.unlink()  # while still locked: a waiter then sees the inode change
        os.close(fd)


# ---------------------------------------------------------------- ownership
def _json_kind(path: Path) -> str | None:
    with contextlib.suppress(OSError, ValueError, UnicodeDecodeError):
        value = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(value, dict) and isinstance(value.get("kind"), str):
            return value["kind"]
    return None


def _h5_kind(path: Path) -> str | None:
    with open(path, "rb") as f:
        if f.read(8) != b"\x89HDF\r\n\x1a\n":
            return None
    import h5py

    with contextlib.suppress(OSError, ValueError), h5py.File(path, "r") as h5:
        kind = h5.attrs.get("kind")
        if kind is None and "manifest" in h5.attrs:
            kind = json.loads(h5.attrs["manifest"]).get("kind")
        return kind.decode() if isinstance(kind, bytes) else kind
    return None


def recognise(path: str | os.PathLike) -> str | None:
    """The kind of vprom output at `path` as its manifest says, None when none says so."""
    path = Path(path)
    if path.is_dir():  # a build or export folder has a manifest.json, a run a config.json
        return _json_kind(path / "manifest.json") or _json_kind(path / "config.json")
    if not path.is_file():
        return None
    side = path.with_name(path.name + ".manifest.json")
    if side.is_file():
        return _json_kind(side)
    return _h5_kind(path) or _png_kind(path) or _json_kind(path)


def _png_kind(path: Path) -> str | None:
    """`show` marks its PNGs with a text chunk `vprom: show`."""
    with open(path, "rb") as f:
        if f.read(8) != b"\x89PNG\r\n\x1a\n":
            return None
    from PIL import Image

    with contextlib.suppress(OSError, ValueError), Image.open(path) as im:
        kind = im.info.get("vprom")
        return kind if isinstance(kind, str) else None
    return None


def _ours_only(folder: Path, names: Iterable[str]) -> bool:
    """True when every entry of `folder` is one of `names` or a temporary/lock of ours."""
    patterns = tuple(names)
    return all(any(fnmatch.fnmatchcase(p.name, n) for n in patterns) or (
        p.name.startswith(".") and p.name.endswith((".part", ".lock"))) for p in folder.iterdir())


def remove_work_folder(folder: Path, names: Iterable[str]) -> None:
    """Remove `folder`, a command's own work folder (`<out>.partial`), when it holds only
    `names` (and temporaries of ours); refuse one that holds anything else, or is no folder:
    then it is not ours to delete."""
    if folder.is_symlink() or not folder.is_dir() or not _ours_only(folder, names):
        raise VpromError(f"{folder}: is where this command keeps its partial work, but holds "
                         "what vprom did not write there, so it is left as it is; move it "
                         "away and run again")
    shutil.rmtree(folder)


def check_owned(out: Path, kinds: Iterable[str] | None, names: Iterable[str] = (),
                what: str = "output") -> None:
    """Refuse an existing `out` that is not a vprom output of one of `kinds` (module doc);
    `kinds` None: the caller checks ownership itself."""
    if kinds is None or not (out.exists() or out.is_symlink()):
        return
    kinds = tuple(kinds)
    if out.is_dir() and not out.is_symlink() and _ours_only(out, names):
        return
    found = recognise(out)
    if found in kinds:
        return
    said = f"a vprom {found} output" if found else "not written by vprom"
    raise VpromError(f"{out}: already exists and is {said}, not a {' or '.join(kinds)} {what} "
                     "this command may replace; move it away or choose another path")


def check_output(path: str | os.PathLike, folder: bool = False) -> Path:
    """Refuse an output path that cannot be written, before any work starts.

    A file output may not be an existing folder (and a folder output not an existing file);
    no existing file may stand where one of its parent folders should be.
    """
    path = Path(path)
    what = "folder" if folder else "file"
    if path.exists() and path.is_dir() != folder:
        other = "a folder" if path.is_dir() else "a file"
        raise VpromError(f"{path}: is {other}, but this output is a {what}; choose another "
                         "path")
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise VpromError(f"{path}: {parent} is a file, so no {what} can be made "
                                 "below it; choose another path")
            break
    return path


# ---------------------------------------------------------------- inputs
def _inside(inner: Path, outer: Path) -> bool:
    return inner != outer and inner.is_relative_to(outer)


def check_not_input(out: Path, inputs: Iterable[str | os.PathLike | None],
                    inside_ok: bool = False) -> None:
    """Refuse `out` when it is, lies inside (unless `inside_ok`), or holds one of `inputs`
    (resolved paths and same-file identity both count)."""
    target = out.resolve()
    for given in inputs:
        if given is None:
            continue
        given = Path(given)
        source = given.resolve()
        same = target == source
        if not same and out.exists() and given.exists():
            with contextlib.suppress(OSError):
                same = os.path.samefile(out, given)
        if same:
            raise VpromError(f"{out}: is also an input of this command ({given}); writing "
                             "there would destroy it; choose another output path")
        if not inside_ok and _inside(target, source) and source.is_dir():
            raise VpromError(f"{out}: lies inside the input folder {given}; choose an output "
                             "path outside it")
        if _inside(source, target):
            raise VpromError(f"{out}: holds the input {given}; writing there could destroy "
                             "it; choose another output path")


@contextlib.contextmanager
def claim(out: str | os.PathLike, kinds: Iterable[str] | None, inputs: Iterable = (),
          names: Iterable[str] = (), folder: bool | None = None,
          inside_ok: bool = False) -> Iterator[Path]:
    """Check `out` against `inputs` and its owner, then hold its lock for the block.
    `folder`: the output is a folder (True) or a file (False), checked first; `inside_ok`:
    it may lie inside an input folder (a report beside the runs it reads)."""
    out = Path(out)
    if folder is not None:
        check_output(out, folder=folder)
    check_not_input(out, list(inputs), inside_ok)
    with output_lock(out):
        check_owned(out, kinds, names)  # again under the lock: the holder may have made it
        yield out


def writes(out: str | Callable, kinds: Iterable[str] | Callable | None,
           inputs: Callable = lambda a: (), names: Iterable[str] = (),
           folder: bool | None = None, inside_ok: bool = False) -> Callable:
    """Decorate a library function that writes: `claim` its output for the whole call.

    `out` names the parameter holding the output path, or is a function of the bound
    arguments (a dict) returning it; `kinds` likewise (or a fixed tuple); `inputs` returns
    the input paths from the bound arguments; `folder` and `inside_ok` as for `claim`.
    """

    def decorate(function):
        signature = inspect.signature(function)

        @functools.wraps(function)
        def wrapper(*args, **kwargs):
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            a = bound.arguments
            path = out(a) if callable(out) else a[out]
            accepted = kinds(a) if callable(kinds) else kinds
            with claim(path, accepted, inputs(a), names, folder, inside_ok):
                return function(*args, **kwargs)

        return wrapper

    return decorate


def free_space_for(path: str | os.PathLike, needed: int, what: str = "") -> None:
    """Refuse before writing `needed` bytes under `path`'s folder when the disk lacks them."""
    import shutil

    path = Path(path)
    folder = next((p for p in (path, *path.parents) if p.is_dir()), Path("."))
    free = shutil.disk_usage(folder).free
    if needed > free:
        raise VpromError(f"{path}: needs about {size_text(needed)}{what} but {folder} has "
                         f"{size_text(free)} free; free some space or choose another path")


def size_text(n: float) -> str:
    """A byte count as people read it: `512 bytes`, `1.5 MB` (1 KB = 1,024 bytes)."""
    for unit in ("bytes", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{int(n):,} bytes" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TB"


def full_disk(path: str | os.PathLike, error: OSError) -> VpromError | None:
    """The one-line error for a full disk met while writing `path`, None for other errors."""
    if error.errno not in (errno.ENOSPC, errno.EDQUOT):
        return None
    import shutil

    free = "?"
    with contextlib.suppress(OSError):
        free = size_text(shutil.disk_usage(Path(path).parent).free)
    return VpromError(f"{path}: no space left on the device while writing it ({free} free "
                      "after removing the partial output); free some space or choose "
                      "another path")
