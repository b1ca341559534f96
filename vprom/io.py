"""Atomic file writing, hashing and the manifest that makes a build folder self-describing.

Every output is written under a temporary name in the same folder, flushed and fsynced, then
renamed into place: a killed run never leaves a file that looks finished, and a file the user
already had is replaced only by a complete one. The temporary name is
`.<name>.<pid>.<random>.part`: a run that was killed (even with SIGKILL) leaves its part
behind, and the next write of the same output deletes the parts whose process is gone.

`check_output` refuses an output path that cannot be written (a folder where a file is
wanted, a file in the way of its parent folders) before any work starts.
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import json
import os
import platform
import shutil
import signal
import tempfile
import time
from pathlib import Path
from typing import Iterator

from vprom.errors import VpromError

FORMAT_VERSION = 1


@contextlib.contextmanager
def _interrupts_held() -> Iterator[None]:
    """Hold Ctrl-C and SIGTERM (POSIX) for a few statements: a temporary that exists is then
    always known to the code that removes it. A held signal is taken as soon as it ends."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside `path`; on success fsync it and rename it to `path`.

    On any exception (an interrupt included, wherever it lands) the temporary file is removed
    and `path` is left as it was.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    clean_stale_parts(path)
    tmp = None
    try:
        with _interrupts_held():
            fd, name = tempfile.mkstemp(prefix=_part_prefix(path), suffix=".part",
                                        dir=path.parent)
            tmp = Path(name)
            os.close(fd)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; outputs follow the user's umask
        yield tmp
        _fsync(tmp)
        os.replace(tmp, path)
        _fsync_dir(path.parent)
    except BaseException:
        if tmp is not None:
            tmp.unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike) -> Iterator[Path]:
    """Like `atomic_path` for a folder: fill the yielded folder, it is renamed to `path` at the end.

    An existing folder at `path` is replaced only after the new one is complete.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    clean_stale_parts(path)
    tmp = None
    try:
        with _interrupts_held():
            tmp = Path(tempfile.mkdtemp(prefix=_part_prefix(path), suffix=".part",
                                        dir=path.parent))
        os.chmod(tmp, 0o777 & ~_umask())
        yield tmp
        old = None
        if path.exists():
            old = path.with_name(f".{path.name}.old-{os.getpid()}")
            os.replace(path, old)
        os.replace(tmp, path)
        if old is not None:
            shutil.rmtree(old)
        _fsync_dir(path.parent)
    except BaseException:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        raise


def _part_prefix(path: Path) -> str:
    return f".{path.name}.{os.getpid()}."


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def clean_stale_parts(path: str | os.PathLike) -> list[Path]:
    """Delete the temporary parts of `path` left by runs that are no longer alive."""
    path = Path(path)
    removed = []
    if not path.parent.is_dir():
        return removed
    for part in path.parent.glob(f".{glob.escape(path.name)}.*.part"):
        pid = part.name[len(path.name) + 2:].split(".", 1)[0]
        if pid.isdigit() and (int(pid) == os.getpid() or _alive(int(pid))):
            continue  # ours, or a live run's (parts from before pids were named are stale)
        if part.is_dir():
            shutil.rmtree(part, ignore_errors=True)
        else:
            part.unlink(missing_ok=True)
        removed.append(part)
    return removed


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


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_json(path: str | os.PathLike, obj) -> None:
    write_text(path, json.dumps(obj, indent=2, sort_keys=True) + "\n")


def _fsync(path: Path) -> None:
    with open(path, "rb+") as f:
        os.fsync(f.fileno())


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def make_manifest(
    kind: str,
    config: dict,
    seed: int | None = None,
    inputs: dict[str, str] | None = None,
    counts: dict | None = None,
    outputs: dict[str, str] | None = None,
) -> dict:
    """The JSON manifest stored beside (and inside) every artifact.

    `inputs` and `outputs` map file names to sha256 hex digests; `counts` holds whatever
    sizes the stage wants recorded (crops per pool, matrices per split, ...).
    """
    from vprom import __version__

    return {
        "format_version": FORMAT_VERSION,
        "kind": kind,
        "vprom_version": __version__,
        "python": platform.python_version(),
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "config": config,
        "seed": seed,
        "inputs": inputs or {},
        "counts": counts or {},
        "outputs": outputs or {},
    }


def manifest_path(path: str | os.PathLike) -> Path:
    """Where the manifest of an artifact lives beside it: `X.h5` -> `X.h5.manifest.json`."""
    path = Path(path)
    return path.with_name(path.name + ".manifest.json")
