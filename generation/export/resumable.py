"""A resumable export folder (savir-t, hf): it fills as `OUT.partial/`, each file appearing
only when complete, with its settings in `STAMP`, and is renamed to `OUT` at the end. A rerun
with the same settings keeps the files there; other settings, or an existing `OUT`, are refused.
"""

from __future__ import annotations

import json
import os
from contextlib import contextmanager
from pathlib import Path
from collections.abc import Callable, Iterator

from vprom.errors import VpromError

STAMP = ".vprom-export.json"


@contextmanager
def resumable_dir(out: str | os.PathLike, settings: dict) -> Iterator[Path]:
    """Yield `OUT.partial` (new, or resumed with the same `settings`); rename it at the end."""
    out = Path(out)
    if out.exists():
        raise VpromError(f"{out} already exists; pass a new --out (an export never replaces a "
                         "folder)")
    partial, wanted = out.with_name(out.name + ".partial"), json.dumps(settings, sort_keys=True)
    stamp = partial / STAMP
    if partial.exists():
        if not stamp.is_file() or stamp.read_text(encoding="utf-8") != wanted:
            raise VpromError(f"{partial}: an unfinished export with other settings (or not "
                             "one of vprom's); rerun it with the same settings to finish it, "
                             "or remove it")
    else:
        partial.mkdir(parents=True)
        stamp.write_text(wanted, encoding="utf-8")
    yield partial
    stamp.unlink()
    os.replace(partial, out)


def write_once(path: Path, write: Callable[[Path], None]) -> bool:
    """Write `path` through `write(temporary)` unless it is already there; True if written."""
    if path.exists():
        return False
    tmp = path.with_name(f".{path.name}.{os.getpid()}.part")
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return True
