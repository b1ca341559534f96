"""What `vprom extract` is asked to do, as one frozen dataclass (no torch needed to build it)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from vprom.errors import VpromError

STORED_DTYPES = ("float16", "float32")
#: Pillow in the DataLoader workers, or torchvision's decoder on the device (features/crops.py)
DECODERS = ("auto", "cpu", "gpu")
#: a crop's pixels: the box warped to SxS, or the detector's RoI pooling of the whole image
REGIONS = ("crop", "roi")
#: one L2-normalised vector per crop (avg pool; a token model's own pooled output, or the mean
#: of its patch tokens), or the last map (N, C, H, W); auto: the backbone's default; heads: a
#: `vprom perceive` model's predicted labels (the average pool under its heads)
HEADS = "heads"
POOLS = ("auto", "avg", "cls", "mean", "none", HEADS)
#: --compression -> h5py's filter options (the byte shuffle helps float maps)
H5_FILTERS = {"none": {}, "gzip": {"compression": "gzip", "compression_opts": 4, "shuffle": True},
              "lzf": {"compression": "lzf", "shuffle": True}}
COMPRESSIONS = tuple(H5_FILTERS)
#: how Pillow cuts a crop (features/crops.py), as the files record it
RESIZE = "whole crop (box clipped to the image) resized to SxS, aspect ratio not kept; " \
         "bilinear with antialiasing; JPEG draft decoding at 1/2-1/8 when the crop's shorter " \
         "side is at least that many times S"
#: the backbone that reads no pixels: each crop's labels (features/labels.py)
SYMBOLIC_BACKBONE = "labels"
#: the fields that only concern pixels, with the value that means "not asked for"
PIXEL_OPTIONS = {"weights": "imagenet", "input_size": None, "region": "crop", "pool": "auto",
                 "decode": "auto", "compile": False, "cuda_graphs": False}
#: crops per forward by default on CUDA, and for `--region roi` (where a batch counts boxes)
BATCH_SIZE = 64
#: a default CPU batch's pixels per thread: larger batches outgrow the caches (docs/features.md)
CPU_BATCH_PIXELS = 4 * 224 * 224


def default_batch_size(device_type: str, region: str, side: int, threads: int) -> int:
    """`BATCH_SIZE`, or on a CPU with `--region crop` about `CPU_BATCH_PIXELS` per thread."""
    if device_type != "cpu" or region != "crop":
        return BATCH_SIZE
    return max(1, min(BATCH_SIZE, CPU_BATCH_PIXELS * max(threads, 1) // (side * side)))


@dataclass(frozen=True)
class ExtractConfig:
    dataset: Path
    vg: Path | None  # None only for the labels backbone, which reads no pixels
    backbone: str
    out: Path
    weights: str = "imagenet"
    # None: BATCH_SIZE on CUDA; on a CPU a batch sized to the caches (`default_batch_size`)
    batch_size: int | None = None
    # None: 0 on CPU (this process decodes between forwards), the cores per GPU process less 2
    workers: int | None = None
    device: str | None = None
    dtype: str = "float16"
    resume: bool = True
    allow_missing: bool = False
    compile: bool = False
    cuda_graphs: bool = False
    # None: the backbone's own (224 for most, 518 for DINOv2); small values for tests
    input_size: int | None = None
    chunk_batches: int = 16
    decode: str = "auto"
    region: str = "crop"
    pool: str = "auto"
    # of the HDF5 dataset (worth it for --pool none maps)
    compression: str = "none"
    prefetch: int = 2
    in_flight: int = 2
    # the labels backbone (features/labels.py): each bit flipped with this probability
    label_noise: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("dataset", "vg", "out"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, Path(getattr(self, name)))
        if self.vg is None and self.backbone != SYMBOLIC_BACKBONE:
            raise VpromError(f"--vg DIR is needed: backbone {self.backbone} reads the crops "
                             "from Visual Genome's images (only --backbone labels reads none)")
        if not 0 <= self.label_noise <= 1:
            raise VpromError(f"--label-noise {self.label_noise}: a probability, 0 to 1")
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
        if self.cuda_graphs and (self.region == "roi" or self.compile):
            raise VpromError("--cuda-graphs works with --region crop and without --compile: "
                             "a graph replays one fixed shape, and torch.compile makes its own")
        if self.backbone != SYMBOLIC_BACKBONE and self.label_noise:
            raise VpromError(f"--label-noise: only the labels backbone has labels to flip; "
                             f"drop it for {self.backbone}")
        for name, unset in PIXEL_OPTIONS.items():
            if self.backbone == SYMBOLIC_BACKBONE and getattr(self, name) != unset:
                raise VpromError(f"--{name.replace('_', '-')}: the labels backbone reads no "
                                 "pixels, so it changes nothing; drop it")
