"""Writing files so that a killed run never leaves one that looks finished; hashing them.

Every output is written under a temporary name beside it, `.<name>.<pid>.<8 hex>.part`
(`.<name>.<pid>.old.part` for a folder being swapped out), fsynced, then renamed into place. The
next write of the output deletes the parts of dead writers. A full disk becomes one line naming
the output (`full_disk`), also when a library (torch) replaced the ENOSPC with its own error.
"""

from __future__ import annotations

import contextlib
import errno
import glob
import hashlib
import io
import json
import os
import re
import secrets
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from vprom.errors import VpromError, in_chain


def _remove(tmp: Path | None) -> None:
    if tmp is None:
        return
    if tmp.is_dir() and not tmp.is_symlink():
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        tmp.unlink(missing_ok=True)


@contextlib.contextmanager
def _replacing(path: Path, folder: bool) -> Iterator[list]:
    path.parent.mkdir(parents=True, exist_ok=True)
    clean_stale_parts(path)
    state = [None]
    try:
        made = False
        while not made:  # named before it is made, so an interrupt always finds it to remove
            state[0] = path.parent / f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.part"
            with contextlib.suppress(FileExistsError):
                if folder:
                    os.mkdir(state[0], 0o777)  # the umask applies, as for any folder made
                else:
                    os.close(os.open(state[0], os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
                made = True
        yield state
    except BaseException as e:
        _remove(state[0])
        error = full_disk(path, in_chain(e, OSError))
        if error is not None:
            raise error from None
        raise


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside `path`, renamed to `path` only when the block succeeds."""
    path = Path(path)
    with _replacing(path, folder=False) as state:
        yield state[0]
        with open(state[0], "rb+") as f:
            os.fsync(f.fileno())
        os.replace(state[0], path)
        _fsync_dir(path.parent)


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike) -> Iterator[Path]:
    """`atomic_path` for a folder; the old folder is put back if the swap is cut short."""
    path = Path(path)
    old = None
    with _replacing(path, folder=True) as state:
        try:
            yield state[0]
            if path.exists():
                old = path.with_name(f".{path.name}.{os.getpid()}.old.part")
                os.replace(path, old)
            os.replace(state[0], path)
            state[0] = None
            _remove(old)
            _fsync_dir(path.parent)
        except BaseException:
            if old is not None and old.exists() and not path.exists():
                os.replace(old, path)  # the user keeps the old folder
            raise


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        pass
    return True


PART = re.compile(r"\.(?P<name>.+)\.(?P<pid>\d+)\.(?:[0-9a-f]{8}|old)\.part")


def is_temporary(name: str) -> bool:
    return PART.fullmatch(name) is not None


def clean_stale_parts(path: str | os.PathLike) -> None:
    """Delete the temporary parts of `path` (its own only) whose writers are dead."""
    path = Path(path)
    if not path.parent.is_dir():
        return
    for part in sorted(path.parent.glob(f".{glob.escape(path.name)}.*.part")):
        found = PART.fullmatch(part.name)
        if found is None or found["name"] != path.name:
            continue  # another output's part (`.e.jsonl.<pid>...` is not one of `e`)
        pid = int(found["pid"])
        if pid == os.getpid() or _alive(pid):
            continue  # ours, or a live run's
        if part.name.endswith(".old.part") and not (path.exists() or path.is_symlink()):
            os.replace(part, path)  # killed mid-swap: the previous output comes back
            continue
        _remove(part)


def preallocate(path: str | os.PathLike) -> None:
    """Reserve `path`'s blocks, so writes through a memory map never meet a full disk."""
    fd = os.open(path, os.O_RDWR)
    try:
        size = os.fstat(fd).st_size
        if size and hasattr(os, "posix_fallocate"):
            try:
                os.posix_fallocate(fd, 0, size)
            except OSError as e:
                if e.errno not in (errno.EOPNOTSUPP, errno.EINVAL):  # no fallocate there
                    raise OSError(e.errno, e.strerror, str(path)) from None
    finally:
        os.close(fd)


def write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_npy(path: str | os.PathLike, array) -> None:
    """`np.save` into `path` atomically, through Python so a full disk raises ENOSPC."""
    npy = io.BytesIO()
    np.save(npy, array)
    with atomic_path(path) as tmp:
        tmp.write_bytes(npy.getbuffer())


def write_json(path: str | os.PathLike, obj) -> None:
    write_text(path, json.dumps(obj, indent=2, sort_keys=True) + "\n")


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def sha256_file(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def size_text(n: float) -> str:
    """A byte count as people read it: `512 bytes`, `1.5 MB` (1 KB = 1,024 bytes)."""
    for unit in ("bytes", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{int(n):,} bytes" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024


def free_space_for(path: str | os.PathLike, needed: int, what: str = "") -> None:
    """Refuse `path` before writing when its disk lacks `needed` bytes."""
    path = Path(path)
    folder = next((p for p in (path, *path.parents) if p.is_dir()), Path("."))
    free = shutil.disk_usage(folder).free
    if needed > free:
        raise VpromError(f"{path}: needs about {size_text(needed)}{what} but {folder} has "
                         f"{size_text(free)} free; free some space or choose another path")


def full_disk(path: str | os.PathLike, error: OSError | None) -> VpromError | None:
    """The one-line error for a full disk met while writing `path`, None for other errors."""
    if error is None or error.errno not in (errno.ENOSPC, errno.EDQUOT):
        return None
    free = "?"
    with contextlib.suppress(OSError):
        free = size_text(shutil.disk_usage(Path(path).parent).free)
    return VpromError(f"{path}: no space left on the device while writing it ({free} free after "
                      "removing the partial output); free some space or choose another path")
