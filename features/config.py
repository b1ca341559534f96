"""What `vprom extract` is asked to do, as one frozen dataclass (no torch needed to build it).

The command line takes its defaults from here, so each is written once; `features.extract`
runs it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from vprom.errors import VpromError

#: How features may be stored.
STORED_DTYPES = ("float16", "float32")


@dataclass(frozen=True)
class ExtractConfig:
    dataset: Path
    vg: Path
    backbone: str
    out: Path
    weights: str = "imagenet"
    batch_size: int = 64
    workers: int = 2
    device: str | None = None
    dtype: str = "float16"
    resume: bool = True
    allow_missing: bool = False
    compile: bool = False
    input_size: int | None = None  # None: the backbone's own (224); small values for tests
    chunk_batches: int = 16  # batches per resumable chunk

    def __post_init__(self) -> None:
        for name in ("dataset", "vg", "out"):
            object.__setattr__(self, name, Path(getattr(self, name)))
        if self.dtype not in STORED_DTYPES:
            raise VpromError(f"--dtype {self.dtype}: choose one of {', '.join(STORED_DTYPES)}")
        for name, low in (("batch_size", 1), ("workers", 0), ("chunk_batches", 1)):
            if getattr(self, name) < low:
                raise VpromError(f"{name} must be >= {low}, got {getattr(self, name)}")
        if self.input_size is not None and self.input_size < 32:
            raise VpromError(f"input_size must be >= 32 pixels, got {self.input_size}")
