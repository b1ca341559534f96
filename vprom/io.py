"""Atomic file writing, hashing and the manifest that makes a build folder self-describing.

Every output is written under a temporary name in the same folder, flushed and fsynced, then
renamed into place: a killed run never leaves a file that looks finished, and a file the user
already had is replaced only by a complete one. The temporary name is
`.<name>.<pid>.<random>.part`: a run that was killed (even with SIGKILL) leaves its part
behind, and the next write of the same output deletes the parts whose process is gone.

`check_output` (from vprom.outputs) refuses an output path that cannot be written (a folder where a file is
wanted, a file in the way of its parent folders) before any work starts.
"""

from __future__ import annotations

import contextlib
import errno
import glob
import hashlib
import json
import os
import platform
import secrets
import shutil
import time
from pathlib import Path
from typing import Iterator

# check_output lives in vprom.outputs now; imported from here too by the CLI and older code
from vprom.outputs import check_output, check_owned, full_disk  # noqa: F401

FORMAT_VERSION = 1


def _new_part(path: Path, folder: bool) -> Iterator[Path]:
    """Yield a fresh temporary name beside `path`, then make it (O_EXCL / mkdir).

    The name is bound by the caller before the file exists, so an interrupt landing at any
    point, on whichever thread the OS delivered it to, finds a name the cleanup removes
    (missing_ok). Nothing depends on blocking signals, which a mask on one thread cannot do.
    """
    while True:
        tmp = path.parent / f"{_part_prefix(path)}{secrets.token_hex(4)}.part"
        yield tmp
        try:
            if folder:
                os.mkdir(tmp, 0o777)  # the umask applies, as for any folder the user makes
            else:
                os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
            return
        except FileExistsError:
            continue


def _remove(tmp: Path | None) -> None:
    if tmp is None:
        return
    if tmp.is_dir() and not tmp.is_symlink():
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        tmp.unlink(missing_ok=True)


def _as_full_disk(path: Path, error: BaseException) -> BaseException:
    """A full disk met while writing `path` as one line naming it; other errors unchanged."""
    if isinstance(error, OSError):
        return full_disk(path, error) or error
    return error


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside `path`; on success fsync it and rename it to `path`.

    On any exception (an interrupt included, wherever it lands) the temporary file is removed
    and `path` is left as it was. A full disk becomes one line naming `path`.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    clean_stale_parts(path)
    tmp = None
    try:
        for tmp in _new_part(path, folder=False):
            pass
        yield tmp
        _fsync(tmp)
        os.replace(tmp, path)
        _fsync_dir(path.parent)
    except BaseException as e:
        _remove(tmp)
        error = _as_full_disk(path, e)
        if error is not e:
            raise error from None
        raise


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike, kinds: tuple[str, ...] = (),
               marker: str | None = None) -> Iterator[Path]:
    """Like `atomic_path` for a folder: fill the yielded folder, it is renamed to `path` at the end.

    An existing folder at `path` is replaced only when it is empty, its manifest.json names
    one of `kinds`, or it holds `marker`: never a folder vprom did not write. It is replaced
    only after the new one is complete; if the swap is interrupted, the old one is put back.
    """
    path = Path(path)
    _check_replaceable(path, kinds, marker)
    path.parent.mkdir(parents=True, exist_ok=True)
    clean_stale_parts(path)
    tmp = old = None
    try:
        for tmp in _new_part(path, folder=True):
            pass
        yield tmp
        _check_replaceable(path, kinds, marker)  # may have appeared while we worked
        if path.exists():
            old = path.with_name(f".{path.name}.{os.getpid()}.old.part")
            os.replace(path, old)
        os.replace(tmp, path)
        tmp = None
        _remove(old)
        _fsync_dir(path.parent)
    except BaseException as e:
        _remove(tmp)
        if old is not None and old.exists() and not path.exists():
            os.replace(old, path)  # the swap was cut short: the user keeps the old folder
        error = _as_full_disk(path, e)
        if error is not e:
            raise error from None
        raise


def _check_replaceable(path: Path, kinds: tuple[str, ...], marker: str | None) -> None:
    if not (path.exists() or path.is_symlink()):
        return
    if path.is_dir() and not path.is_symlink():
        if not any(path.iterdir()) or (marker is not None and (path / marker).exists()):
            return
    check_owned(path, kinds or ("(none)",))


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
        if part.name.endswith(".old.part") and not (path.exists() or path.is_symlink()):
            os.replace(part, path)  # killed mid-swap: the previous output comes back
            continue
        if part.is_dir():
            shutil.rmtree(part, ignore_errors=True)
        else:
            part.unlink(missing_ok=True)
        removed.append(part)
    return removed


def preallocate(path: str | os.PathLike) -> None:
    """Reserve every block of `path` on disk now (posix_fallocate): writes through a memory
    map of it can then never meet a full disk, which a mapping reports as SIGBUS."""
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


class OpenFile:
    """A reader over one open file (`self._h5`) of rows keyed by `self.crop_id`: usable in a
    `with` block, closed by `close()`, as long as its rows."""

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._h5.close()

    def __len__(self) -> int:
        return len(self.crop_id)
