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
#: Where JPEGs are decoded: Pillow in the DataLoader workers, or torchvision's decoder on the
#: extraction device (nvjpeg on CUDA); auto picks per machine (features/decoding.py).
DECODERS = ("auto", "cpu", "gpu")
#: What a crop's pixels are: the box warped to SxS, or the detector's RoI pooling of the image.
REGIONS = ("crop", "roi")
#: avg: one pooled, L2-normalised vector per crop; none: the last conv map (N, C, H, W);
#: cls / mean (token models, timm): the model's own pooled output (class token, or SigLIP's
#: attention pool) / the mean of the patch tokens, L2-normalised; auto: the backbone's default.
POOLS = ("auto", "avg", "cls", "mean", "none")
COMPRESSIONS = ("none", "gzip", "lzf")


@dataclass(frozen=True)
class ExtractConfig:
    dataset: Path
    vg: Path
    backbone: str
    out: Path
    weights: str = "imagenet"
    batch_size: int = 64
    workers: int | None = None  # None: 2 on CPU, the cores per GPU process less 2 on CUDA
    device: str | None = None
    dtype: str = "float16"
    resume: bool = True
    allow_missing: bool = False
    compile: bool = False
    input_size: int | None = None  # None: the backbone's own (224); small values for tests
    chunk_batches: int = 16  # batches per resumable chunk
    decode: str = "auto"
    region: str = "crop"
    pool: str = "auto"
    compression: str = "none"  # of the HDF5 dataset (worth it for --pool none maps)
    prefetch: int = 2  # batches each DataLoader worker prepares ahead
    in_flight: int = 2  # batches queued on the device before the oldest result is awaited

    def __post_init__(self) -> None:
        for name in ("dataset", "vg", "out"):
            object.__setattr__(self, name, Path(getattr(self, name)))
        for name, choices in (("dtype", STORED_DTYPES), ("decode", DECODERS),
                              ("region", REGIONS), ("pool", POOLS),
                              ("compression", COMPRESSIONS)):
            if getattr(self, name) not in choices:
                raise VpromError(f"--{name} {getattr(self, name)}: choose one of "
                                 f"{', '.join(choices)}")
        for name, low in (("batch_size", 1), ("workers", 0), ("chunk_batches", 1),
                          ("prefetch", 1), ("in_flight", 0)):
            value = getattr(self, name)
            if value is not None and value < low:
                raise VpromError(f"{name} must be >= {low}, got {value}")
        if self.input_size is not None and self.input_size < 32:
            raise VpromError(f"input_size must be >= 32 pixels, got {self.input_size}")
        if self.compile and self.region == "roi":
            raise VpromError("--compile works with --region crop only: whole images differ in "
                             "size, and each new size would compile the trunk again")
