"""Disk space for `vprom download`: a write goes ahead only while the free space after it
stays at or above a reserve (`DEFAULT_RESERVE`, `--reserve`), counted as the file system hands
it out (`footprint`: whole blocks per file, a block per folder).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

DEFAULT_RESERVE = 1 << 30   # 1 GiB: what a shell, an editor and a log need to keep going
_SIZE = re.compile(r"\s*(\d+(?:\.\d*)?)\s*([kmgt]?)(i?b?)\s*", re.IGNORECASE)
_UNIT = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


@dataclass(frozen=True)
class Disk:
    """The free space of one file system as an unprivileged user sees it."""

    free: int            # bytes
    block: int           # the allocation unit, bytes
    inodes: int | None   # free inodes, None where the file system does not count them


def disk(path: Path) -> Disk:
    st = os.statvfs(path)
    block = st.f_frsize or st.f_bsize or 4096
    # btrfs and some network file systems report no inode table at all (f_files == 0)
    return Disk(free=st.f_bavail * block, block=block,
                inodes=st.f_favail if st.f_files else None)


def footprint(sizes: Iterable[int], folders: int, block: int) -> int:
    """Bytes of free space that files of these sizes, and this many folders, will take."""
    files = sum(max(-(-size // block), 1) for size in sizes)   # ceil, and at least a block
    return (files + folders) * block


def parse_size(text: str) -> int:
    """Bytes from "0", "500M", "2G", "1.5GiB" (powers of 1024); refuses other text."""
    match = _SIZE.fullmatch(text)
    if not match:
        raise ValueError(f"not a size: {text!r} (e.g. 0, 500M, 2G)")
    return int(float(match.group(1)) * _UNIT[match.group(2).lower()])


def human(n: float) -> str:
    """A byte count for a message: "1.07 GB", "120.00 MB", "4096 B"."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n:.0f} B"
