"""What `vprom extract` is asked to do, as one frozen dataclass (no torch needed to build it).

The command line takes its options, defaults and help from here (`vprom.fields.option`),
so each is written once; `features.extract` runs it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from vprom.errors import VpromError
from vprom.fields import option

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
#: crops per forward by default on CUDA, and for `--region roi` (where a batch counts boxes)
BATCH_SIZE = 64
#: on a CPU device a default batch holds about this many pixels per thread: 8 crops of 224 px
#: on 2 threads. On a 2-core machine 8 crops at 224 px run resnet18 and resnet50 end to end
#: 1.27x and 1.46x faster than 64, whose activations outgrow the caches; at 112 px 32 crops,
#: and at 64 px 64, are the fastest (docs/features.md)
CPU_BATCH_PIXELS = 4 * 224 * 224


def default_batch_size(device_type: str, region: str, side: int, threads: int) -> int:
    """`--batch-size` when not given: `BATCH_SIZE`, or on a CPU device with `--region crop`
    about `CPU_BATCH_PIXELS` per thread of crops `side` pixels a side (1 to `BATCH_SIZE`)."""
    if device_type != "cpu" or region != "crop":
        return BATCH_SIZE
    return max(1, min(BATCH_SIZE, CPU_BATCH_PIXELS * max(threads, 1) // (side * side)))


@dataclass(frozen=True)
class ExtractConfig:
    dataset: Path = option(positional=True, help="DATASET.h5 (its crops are extracted)")
    vg: Path = option(help="Visual Genome folder (holding VG_100K/)")
    backbone: str = option(help="see `vprom extract --list`")
    out: Path = option(output="file", help="FEATS.h5 to write")
    weights: str = option("imagenet", help=(
        "imagenet | none | PATH to a state dict; timm:<name>: FILE (.safetensors or .pth, "
        "weights only), none, or pretrained (only if already in the Hugging Face cache: vprom "
        "never downloads)"))
    # None: BATCH_SIZE on CUDA; on a CPU a batch sized to the caches (`default_batch_size`)
    batch_size: int | None = option(None, help=(
        f"crops per forward (default: {BATCH_SIZE} on CUDA, where 256 suits a large GPU; on a "
        "CPU about 8 crops of 224 px per 2 threads, more for smaller crops, at most "
        f"{BATCH_SIZE})"))
    # None: 0 on CPU (this process decodes between forwards), the cores per GPU process less 2
    workers: int | None = option(None, help="DataLoader processes reading/decoding JPEGs; 0: "
                                            "this process, with threads, between forwards "
                                            "(default: 0 on CPU; on CUDA the CPU cores per GPU "
                                            "process less 2, at most 16)")
    device: str | None = option(None, help="cuda, cuda:N or cpu (default: cuda if available; "
                                           "under torchrun each process takes its LOCAL_RANK's "
                                           "GPU)")
    dtype: str = option("float16", choices=STORED_DTYPES,
                        help="stored dtype (pooling and L2 run in float32)")
    resume: bool = option(True, flag="--no-resume",
                          help="start over even if a matching partial file exists")
    allow_missing: bool = option(False, help="finish even if some images are missing (they are "
                                             "reported)")
    compile: bool = option(False, help="torch.compile the backbone (CUDA)")
    cuda_graphs: bool = option(False, help=(
        "CUDA: replay the trunk from one CUDA graph captured at the batch size instead of "
        "launching its kernels batch by batch (--region crop; no gain measured at batch 256 "
        "on an H200, docs/extraction-speed.md)"))
    # None: the backbone's own (224 for most, 518 for DINOv2); small values for tests
    input_size: int | None = option(None, help="crop side in pixels (default: the backbone's "
                                               "training size, 224 for most); with --region "
                                               "roi the image's shorter side (default 600)")
    chunk_batches: int = option(16, help="batches per resumable chunk (a killed run redoes at "
                                         "most one chunk)")
    decode: str = option("auto", choices=DECODERS, help=(
        "where JPEGs are decoded: cpu = Pillow in the workers; gpu = torchvision on the device "
        "(nvjpeg; on a CPU device torchvision's CPU decoder in the workers); auto (default) = "
        "gpu on CUDA nodes with under 24 CPU cores per GPU, else cpu"))
    region: str = option("crop", choices=REGIONS, help=(
        "crop (default): each box warped to SxS through the whole trunk; roi (bottomup-r101): "
        "the detector's procedure: whole image at shorter side 600, res4 once per image, 14x14 "
        "RoI max pooling per box, res5"))
    pool: str = option("auto", choices=POOLS, help=(
        "auto (default): the backbone's own (avg; cls for timm token models); avg: one pooled, "
        "L2-normalised vector per crop; cls / mean (timm ViTs): the model's pooled output "
        "(class token; SigLIP's attention pool) / the patch tokens' mean, L2-normalised; none: "
        "the last conv map (ViTs: the patch tokens as a grid) per crop as an (N, C, H, W) "
        "dataset 'maps' (float16: about 200 KB per crop for resnet101 at 224, 2048x7x7; 800 KB "
        "for bottomup-r101, 2048x14x14); `vprom train` takes pooled vectors only"))
    # of the HDF5 dataset (worth it for --pool none maps)
    compression: str = option("none", choices=COMPRESSIONS, help=(
        "HDF5 compression of the stored dataset (%(default)s; gzip is readable everywhere, lzf "
        "only by h5py)"))
    prefetch: int = option(2, help="batches each worker prepares ahead (%(default)s)")
    in_flight: int = option(2, help="batches queued on the device before the oldest result is "
                                    "awaited (%(default)s; 0 waits for every batch)")

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
        if self.cuda_graphs and (self.region == "roi" or self.compile):
            raise VpromError("--cuda-graphs works with --region crop and without --compile: "
                             "a graph replays one fixed shape, and torch.compile makes its own")
