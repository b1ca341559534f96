"""Feature extraction throughput: end-to-end `extract()` against the bare forward, side by side.

Corpus (`vg_like_corpus`, cached under --work): JPEGs of Visual Genome's sizes (width 500-800,
height 333-600, each image its own size; smooth colour fields plus noise, quality 90) with 1-6
boxes of at least 100 px each, until --crops crops; written by all cores once.

For each backbone, in one run, `--rounds` times: half of the bare forwards, one end-to-end run
per decoder, the other half (so a drift in machine load hits both alike):
- bare forward: `features.pipeline.embed` (normalise, trunk, pool, L2; channels_last;
  autocast on CUDA) on ready uint8 batches already on the device, the same batch sizes as
  the extraction's; on CUDA each timed pass ends with a synchronisation;
- end to end: the whole `features.extract.extract` call from scratch: reading the crops
  table, loading the weights (a saved random-init state dict, as real runs load a file),
  decoding (Pillow workers or the device's decoder), forward, chunk files, assembling and
  hashing FEATS.h5; "loop" is the extraction loop alone (start of the workers to the last
  chunk file, without loading the weights and assembling).
Prints crops/s and the ratios end-to-end / bare and loop / bare (target >= 0.9), and first the
CPU time one core spends decoding and cropping an image of the corpus with each decoder's
code (Pillow; torchvision + torch resize on the CPU), which says how many workers a GPU needs.

    python bench/extract.py --device cuda                        # 60,000 crops, one GPU
    python bench/extract.py --device cuda --decoders cpu,gpu     # both decoders
    .venv/bin/python bench/extract.py --crops 160 --rounds 2     # this 2-core CPU, ~6 min
    .venv/bin/python bench/extract.py --backbones timm:vit_small_patch16_224.dino,timm:convnext_atto
    .venv/bin/python bench/extract.py --crops 160 --workers 0,2  # this process vs 2 workers
    python bench/extract.py --device cuda --decoders gpu --backbones resnet101 --profile 5000
    python bench/extract.py --device cuda --decoders gpu --backbones resnet101 --graphs off,on

`--graphs off,on` times each end-to-end variant without and with `--cuda-graphs`, and the
bare forward also replayed from a CUDA graph ("bare graphed"; the ratios stay against the
eager bare forward, the yardstick the target names). `--profile-stages` prints
torch.profiler tables of the gpu decoder's stages (host and device time of nvjpeg's decode
and of the crops).

A `timm:<name>` backbone is timed at its default pooling (cls for ViTs) with its random-init
weights saved as a .safetensors file, the file real runs pass with --weights.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import shutil
import tempfile
import time
from functools import partial
from pathlib import Path

import h5py
import numpy as np
import torch
from PIL import Image


from vprom.features.backbones import get_backbone  # noqa: E402
from vprom.features.crops import decode_crops  # noqa: E402
from vprom.features.crops import (  # noqa: E402
    clip_boxes,
    crop_resize,
    decode_many,
    read_bytes,
    torch_image,
)
from vprom.features.config import ExtractConfig, default_batch_size  # noqa: E402
from vprom.features.extract import extract  # noqa: E402
from vprom.features.pipeline import CudaApi, embed  # noqa: E402
from suite_builders import load  # noqa: E402
from vprom.tables import read_crop_table  # noqa: E402

crop_tables = load("tests/features/crop_tables.py")

WIDTHS, HEIGHTS, CROPS_PER_IMAGE, MIN_SIDE = (500, 800), (333, 600), (1, 6), 100


def _write_image(args) -> None:
    path, width, height, seed = args
    rng = np.random.default_rng(seed)
    coarse = rng.integers(0, 256, size=(height // 16 + 1, width // 16 + 1, 3), dtype=np.uint8)
    smooth = np.asarray(Image.fromarray(coarse).resize((width, height), Image.BICUBIC),
                        dtype=np.int16)
    noisy = np.clip(smooth + rng.integers(-25, 26, (height, width, 3)), 0, 255)
    Image.fromarray(noisy.astype(np.uint8)).save(path, quality=90)


def vg_like_corpus(root: Path, crops: int, seed: int = 0,
                   per_image: tuple[int, int] = CROPS_PER_IMAGE) -> tuple[Path, Path, int]:
    """(DATASET.h5, VG folder, images) with `crops` boxes on VG-sized JPEGs; reused if there."""
    folder = root / f"corpus-{crops}-{seed}-{per_image[0]}-{per_image[1]}"
    dataset, vg = folder / "dataset.h5", folder / "vg"
    rng = np.random.default_rng(seed)
    rows, jobs, image_id = [], [], 0
    while len(rows) < crops:
        image_id += 1
        width, height = (int(rng.integers(lo, hi + 1)) for lo, hi in (WIDTHS, HEIGHTS))
        jobs.append((vg / "VG_100K" / f"{image_id}.jpg", width, height, seed * 10**7 + image_id))
        for _ in range(min(int(rng.integers(per_image[0], per_image[1] + 1)),
                           crops - len(rows))):
            w, h = int(rng.integers(MIN_SIDE, width + 1)), int(rng.integers(MIN_SIDE, height + 1))
            x, y = int(rng.integers(0, width - w + 1)), int(rng.integers(0, height - h + 1))
            rows.append((len(rows), image_id, x, y, w, h))
    if not (folder / "done").is_file():
        (vg / "VG_100K").mkdir(parents=True, exist_ok=True)
        with multiprocessing.Pool(os.cpu_count()) as pool:
            pool.map(_write_image, jobs, chunksize=64)
        crop_tables.write_dataset(dataset, crop_tables.crop_table(rows))
        (folder / "done").touch()
    return dataset, vg, image_id


def saved_weights(root: Path, name: str) -> Path:
    """The backbone's random-init state dict as a file (built once): a timm model's own keys
    in a .safetensors file, the others a torch state dict."""
    if name.startswith("timm:"):
        from safetensors.torch import save_file

        path = root / f"{file_name(name)}-random.safetensors"
        if not path.is_file():
            save_file(get_backbone(name).load("none").module.model.state_dict(), path)
        return path
    path = root / f"{name}-random.pth"
    if not path.is_file():
        state = get_backbone(name).load("none").module.state_dict()
        if name == "bottomup-r101":  # as the ports name it (Detectron2)
            state = {("roi_heads." if k.startswith("res5.") else "backbone.") + k: v
                     for k, v in state.items()}
        torch.save(state, path)
    return path


def file_name(backbone: str) -> str:
    return backbone.replace(":", "-")  # timm:x -> timm-x


def decode_cost(dataset: Path, vg: Path, images: int = 200, size: int = 224) -> dict:
    """CPU milliseconds per image (and per crop) to decode and crop the first `images` images
    of the corpus, one thread, with Pillow and with the torch path."""
    crops = read_crop_table(dataset)
    ids = sorted(set(crops.image_id.tolist()))[:images]
    boxes = {i: np.stack([crops.x, crops.y, crops.w, crops.h], axis=1)[crops.image_id == i]
             for i in ids}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a DataLoader worker's share
    try:
        start = time.process_time()
        for i in ids:
            decode_crops(vg / "VG_100K" / f"{i}.jpg", boxes[i], size)
        pillow = time.process_time() - start
        start = time.process_time()
        for i in ids:
            image = torch_image(read_bytes(vg / "VG_100K" / f"{i}.jpg"))
            corners, _ = clip_boxes(boxes[i], image.shape[2], image.shape[1])
            crop_resize(image, corners, size)
        tensors = time.process_time() - start
    finally:
        torch.set_num_threads(threads)
    n = sum(len(b) for b in boxes.values())
    return {"images": len(ids), "crops": n, "pillow": 1000 * pillow / len(ids),
            "pillow_crop": 1000 * pillow / n, "torch": 1000 * tensors / len(ids)}


def device_stages(dataset: Path, vg: Path, device: torch.device, batch: int,
                  calls: int = 20, size: int = 224, profile: bool = False) -> dict:
    """The `gpu` decoder's stages alone on the device, each timed to a synchronisation, over
    `calls` batches of the corpus's images as the loop makes them (about `batch` crops each):
    nvjpeg's batched decode (`decode_many`) and the crops image by image (`crop_resize`, as
    the loop cuts them) - what the GPU can take, against the rates the loop reaches."""
    crops = read_crop_table(dataset)
    boxes = np.stack([crops.x, crops.y, crops.w, crops.h], axis=1)
    order = np.argsort(crops.image_id, kind="stable")
    ids, starts = np.unique(crops.image_id[order], return_index=True)
    ends = np.r_[starts[1:], len(order)]
    groups, current, n = [], [], 0
    for image_id, a, b in zip(ids.tolist(), starts, ends):
        current.append((image_id, boxes[order[a:b]]))
        n += b - a
        if n >= batch:
            groups.append(current)
            current, n = [], 0
        if len(groups) == calls:
            break
    cuda = device.type == "cuda"
    sync = partial(torch.cuda.synchronize, device) if cuda else lambda: None
    datas = [[read_bytes(vg / "VG_100K" / f"{i}.jpg") for i, _ in g] for g in groups]
    datas = [[d.pin_memory() for d in g] for g in datas] if cuda else datas
    decode_many(datas[0], device)  # nvjpeg's start
    sync()
    start = time.perf_counter()
    images = [decode_many(d, device) for d in datas]
    sync()
    decode = time.perf_counter() - start
    corners = [[[c for c in clip_boxes(b, image.shape[2], image.shape[1])[0] if c is not None]
                for (_, b), image in zip(group, decoded)]
               for group, decoded in zip(groups, images)]
    start = time.perf_counter()
    for decoded, cs in zip(images, corners):
        for image, c in zip(decoded, cs):
            crop_resize(image, c, size)
    sync()
    one_by_one = time.perf_counter() - start
    if profile:
        from torch.profiler import ProfilerActivity, profile as profiler

        for name, run in (("decode_many", lambda: [decode_many(d, device) for d in datas]),
                          ("crop_resize", lambda: [
                              [crop_resize(i, c, size) for i, c in zip(d, cs)]
                              for d, cs in zip(images, corners)])):
            with profiler(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                run()
                sync()
            table = prof.key_averages()
            print(f"--- {name}, {len(datas)} batches: by device time, then host time")
            for key in ("self_device_time_total", "self_cpu_time_total"):
                print(table.table(sort_by=key, row_limit=10, max_name_column_width=45))
    n_images = sum(len(g) for g in groups)
    n_crops = sum(len(b) for g in groups for _, b in g)
    return {"images": n_images, "crops": n_crops, "decode": n_images / decode,
            "crop": n_crops / one_by_one}


class BareForward:
    """The trunk + pooling + L2 on ready uint8 batches on the device: no decoding, no files."""

    def __init__(self, name: str, batch: int, device: torch.device):
        self.backbone = get_backbone(name)
        self.pool = self.backbone.pools[0]  # what extract runs by default (--pool auto)
        self.device = device
        self.autocast = None  # extract's: bf16 (or fp16 where bf16 is not) on CUDA
        if device.type == "cuda":
            self.autocast = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        self.model = self.backbone.load("none").module.to(device,
                                                          memory_format=torch.channels_last)
        side = self.backbone.preprocess.input_size
        gen = torch.Generator().manual_seed(0)
        self.pixels = torch.randint(0, 256, (batch, side, side, 3), dtype=torch.uint8,
                                    generator=gen).to(device)
        self.replay = None
        self([batch, batch])  # warm-up

    def graph(self) -> None:
        """From now on each forward is a replay of one graph at the full batch size."""
        self.replay, _ = CudaApi.capture(partial(embed, self.model, self.pixels, self.backbone,
                                                 self.autocast, self.device, self.pool),
                                         self.device)

    def __call__(self, sizes) -> float:
        """Seconds for forwards of batches of these sizes."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        start = time.perf_counter()
        for size in sizes:
            if self.replay:
                self.replay()
            else:
                embed(self.model, self.pixels[:size], self.backbone, self.autocast,
                      self.device, self.pool)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return time.perf_counter() - start


def batch_size(name: str, args) -> int:
    """--batch-size, else 256 on CUDA (the issue's figures) and on a CPU what `vprom extract`
    takes by default for this backbone's input size."""
    if args.batch_size:
        return args.batch_size
    if args.device.startswith("cuda"):
        return 256
    return default_batch_size("cpu", "crop", get_backbone(name).preprocess.input_size,
                              torch.get_num_threads())


def run(name: str, dataset: Path, vg: Path, crops: int, args, root: Path) -> list[dict]:
    device = torch.device(args.device)
    batch = batch_size(name, args)
    sizes = [batch] * (crops // batch)
    sizes += [crops % batch] if crops % batch else []
    half = len(sizes) // 2
    bare_forward = BareForward(name, batch, device)
    weights = saved_weights(root, name)
    variants = [(d, w, g) for d in args.decoders.split(",") for w in args.workers.split(",")
                for g in args.graphs.split(",")]
    bare, whole, loop = 0.0, dict.fromkeys(variants, 0.0), dict.fromkeys(variants, 0.0)
    ratios, resolved = {v: [] for v in variants}, {}
    for _ in range(args.rounds):
        first = bare_forward(sizes[:half])
        runs = {}
        for decoder, workers, graphs in variants:
            runs[decoder, workers, graphs] = extract(ExtractConfig(
                dataset=dataset, vg=vg, backbone=name, weights=str(weights),
                out=root / f"{file_name(name)}-{decoder}.h5", batch_size=batch,
                workers=None if workers == "auto" else int(workers), device=args.device,
                decode=decoder, resume=False, cuda_graphs=graphs == "on"))
            with h5py.File(runs[decoder, workers, graphs].out, "r") as h5:
                resolved[decoder] = f"{decoder}:{h5.attrs['decode']}" if decoder == "auto" \
                    else decoder
        b = first + bare_forward(sizes[half:])
        bare += b
        for variant, summary in runs.items():
            whole[variant] += summary.seconds
            loop[variant] += summary.loop_seconds
            ratios[variant].append(b / summary.seconds)
    n = crops * args.rounds
    graphed = None
    if "on" in args.graphs.split(","):
        bare_forward.graph()
        bare_forward(sizes)  # the first replays
        graphed = n / sum(bare_forward(sizes) for _ in range(args.rounds))
    return [{"backbone": name, "decode": resolved[v[0]], "workers": v[1], "graphs": v[2],
             "batch": batch, "crops": n, "bare": n / bare, "bare_graphed": graphed,
             "e2e": n / whole[v], "loop": n / loop[v], "ratios": ratios[v]} for v in variants]


def profiled(name: str, decoder: str, crops: int, args, root: Path) -> Path:
    """One more end-to-end run of `crops` crops under torch.profiler (CPU, and CUDA's
    kernels on a GPU): prints the top operators by host time and by device time, and writes
    a Chrome trace (chrome://tracing, Perfetto) - where the loop's time goes."""
    from torch.profiler import ProfilerActivity, profile

    dataset, vg, _ = vg_like_corpus(root, crops, args.seed)
    cuda = args.device.startswith("cuda")
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as prof:
        extract(ExtractConfig(dataset=dataset, vg=vg, backbone=name,
                              weights=str(saved_weights(root, name)),
                              out=root / f"{file_name(name)}-profiled.h5",
                              batch_size=batch_size(name, args), device=args.device,
                              decode=decoder,
                              resume=False, cuda_graphs=args.graphs.split(",")[-1] == "on"))
    trace = root / f"trace-{file_name(name)}-{decoder}.json"
    prof.export_chrome_trace(str(trace))
    table = prof.key_averages()
    print(table.table(sort_by="self_cpu_time_total", row_limit=15, max_name_column_width=50))
    if cuda:
        print(table.table(sort_by="self_device_time_total", row_limit=15,
                          max_name_column_width=50))
    return trace


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--backbones", default="resnet101,resnet18")
    p.add_argument("--crops", type=int, default=60000, help="crops per backbone and round "
                   "(60,000: the target size; a 2-core CPU needs ~160)")
    p.add_argument("--decoders", default="auto", help="comma-separated --decode values")
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, ...")
    p.add_argument("--batch-size", type=int, default=None, help="default: 256 on CUDA; on a "
                   "CPU extract's own default for the backbone's input size")
    p.add_argument("--workers", default="auto", help="comma-separated --workers values, each "
                   "timed end to end in the same rounds (auto: extract's own default)")
    p.add_argument("--graphs", default="off", help="comma-separated: off, on (--cuda-graphs)")
    p.add_argument("--profile-stages", action="store_true", help="CUDA: profile the gpu "
                   "decoder's stages (torch.profiler; top kernels by device and host time)")
    p.add_argument("--rounds", type=int, default=1, help="interleaved bare/end-to-end rounds")
    p.add_argument("--work", type=Path, default=None,
                   help="folder for the corpus and files (kept; default: a temporary one)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--profile", type=int, default=0, metavar="CROPS",
                   help="then profile one end-to-end run of CROPS crops (first backbone and "
                        "decoder): top operators printed, a Chrome trace written under --work")
    args = p.parse_args(argv)
    cuda = args.device.startswith("cuda")
    root = args.work or Path(tempfile.mkdtemp(prefix="vprom-bench-extract-"))
    root.mkdir(parents=True, exist_ok=True)
    try:
        started = time.perf_counter()
        dataset, vg, images = vg_like_corpus(root, args.crops, args.seed)
        print(f"corpus: {args.crops} crops on {images} images ({args.crops / images:.2f} per "
              f"image), {WIDTHS[0]}-{WIDTHS[1]} x {HEIGHTS[0]}-{HEIGHTS[1]} px; written in "
              f"{time.perf_counter() - started:.0f} s", flush=True)
        cost = decode_cost(dataset, vg)
        print(f"decoding + cropping on one core ({cost['images']} images): Pillow "
              f"{cost['pillow']:.1f} ms/image ({cost['pillow_crop']:.1f} ms/crop); torchvision + "
              f"torch resize {cost['torch']:.1f} ms/image", flush=True)
        if cuda and "gpu" in args.decoders.split(","):
            batch = args.batch_size or 256  # `batch_size`'s CUDA default
            st = device_stages(dataset, vg, torch.device(args.device), batch,
                               profile=args.profile_stages)
            print(f"gpu decoder's stages alone ({st['images']} images, {st['crops']} crops, "
                  f"batches of ~{batch} crops): nvjpeg decode {st['decode']:.0f} "
                  f"images/s; crops {st['crop']:.0f} crops/s", flush=True)
        device = (torch.cuda.get_device_name(args.device) if cuda else
                  f"cpu, {torch.get_num_threads()} threads")
        print(f"torch {torch.__version__}, {device}, weights random, each backbone at its own "
              "input size")
        print(f"{'backbone':34s} {'decode':8s} {'workers':>7s} {'graphs':>6s} "
              f"{'batch':>5s} {'crops':>7s} "
              f"{'bare fwd/s':>10s} {'e2e/s':>9s} {'loop/s':>9s} {'e2e/bare':>8s} "
              f"{'loop/bare':>9s}  per-round e2e/bare")
        for name in args.backbones.split(","):
            results = run(name, dataset, vg, args.crops, args, root)
            for r in results:
                print(f"{r['backbone']:34s} {r['decode']:8s} {r['workers']:>7s} "
                      f"{r['graphs']:>6s} {r['batch']:5d} {r['crops']:7d} "
                      f"{r['bare']:10.2f} {r['e2e']:9.2f} {r['loop']:9.2f} "
                      f"{r['e2e'] / r['bare']:8.3f} "
                      f"{r['loop'] / r['bare']:9.3f}  "
                      + " ".join(f"{x:.3f}" for x in r["ratios"]), flush=True)
            if results[0]["bare_graphed"]:
                print(f"{name}: bare forward replayed from a CUDA graph "
                      f"{results[0]['bare_graphed']:.2f} crops/s (eager {results[0]['bare']:.2f})")
        if args.profile:
            trace = profiled(args.backbones.split(",")[0], args.decoders.split(",")[0],
                             args.profile, args, root)
            print(f"trace: {trace}")
    finally:
        if args.work is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
