"""Crops per second on a CPU at each batch size: what `vprom extract`'s CPU default is sized by.

For each backbone, in `--rounds` interleaved rounds, at every `--batch-sizes` value (each at
the backbone's own input size, or `--input-size`):
- bare forward: `bench/extract.py`'s `BareForward` (normalise, trunk, pool, L2 on ready uint8
  batches), the same batches as extraction would cut;
- end to end: the whole `features.extract.extract` call on `bench/extract.py`'s VG-sized
  corpus (Pillow decoding between forwards, chunk files, assembling).
Prints crops/s for each, the batch size `vprom extract` takes by default here (marked `*`),
and each rate against the default's (`x default`).

    .venv/bin/python bench/cpu_batch.py                                   # resnet18, resnet50
    .venv/bin/python bench/cpu_batch.py --backbones resnet18 --input-size 112
    .venv/bin/python bench/cpu_batch.py --backbones timm:convnext_atto --no-e2e
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

import torch

from extract import BareForward, saved_weights, vg_like_corpus  # noqa: E402
from vprom.features.backbones import get_backbone  # noqa: E402
from vprom.features.config import ExtractConfig, default_batch_size  # noqa: E402
from vprom.features.extract import extract  # noqa: E402


def rates(name: str, args, dataset: Path, vg: Path, root: Path) -> dict[int, list[float]]:
    """Per batch size: [bare crops/s, end-to-end crops/s (or 0)] over all rounds."""
    device = torch.device("cpu")
    forwards = {b: BareForward(name, b, device) for b in args.batch_sizes}
    if args.input_size:  # BareForward takes the backbone's size: re-make its pixels
        for f in forwards.values():
            f.pixels = torch.randint(0, 256, (len(f.pixels), args.input_size, args.input_size,
                                              3), dtype=torch.uint8)

    def config(batch: int) -> ExtractConfig:
        return ExtractConfig(dataset=dataset, vg=vg, backbone=name, out=root / "feats.h5",
                             weights=str(saved_weights(root, name)), batch_size=batch,
                             input_size=args.input_size, device="cpu", resume=False)

    if args.e2e:
        extract(config(args.batch_sizes[0]))  # warm: files in the page cache
    bare = dict.fromkeys(args.batch_sizes, 0.0)
    whole = dict.fromkeys(args.batch_sizes, 0.0)
    for _ in range(args.rounds):
        for b in args.batch_sizes:
            bare[b] += forwards[b]([b] * (args.crops // b) + (
                [args.crops % b] if args.crops % b else []))
            if args.e2e:
                whole[b] += extract(config(b)).seconds
    n = args.crops * args.rounds
    return {b: [n / bare[b], n / whole[b] if whole[b] else 0.0] for b in args.batch_sizes}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--backbones", default="resnet18,resnet50")
    p.add_argument("--batch-sizes", default="4,8,16,32,64",
                   type=lambda s: [int(b) for b in s.split(",")])
    p.add_argument("--crops", type=int, default=160, help="crops per batch size and round")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--input-size", type=int, default=None, help="default: each backbone's own")
    p.add_argument("--no-e2e", dest="e2e", action="store_false",
                   help="bare forwards only (no corpus, no extract runs)")
    p.add_argument("--work", type=Path, default=None,
                   help="folder for the corpus and files (kept; default: a temporary one)")
    args = p.parse_args(argv)
    root = args.work or Path(tempfile.mkdtemp(prefix="vprom-bench-cpu-batch-"))
    root.mkdir(parents=True, exist_ok=True)
    try:
        dataset, vg, images = vg_like_corpus(root, args.crops) if args.e2e else (None, None, 0)
        threads = torch.get_num_threads()
        print(f"torch {torch.__version__}, cpu, {threads} threads, {args.crops} crops"
              + (f" on {images} images" if images else "") + f", {args.rounds} rounds")
        print(f"{'backbone':34s} {'side':>4s} {'batch':>6s} {'bare/s':>8s} {'x default':>9s} "
              f"{'e2e/s':>8s} {'x default':>9s}")
        for name in args.backbones.split(","):
            side = args.input_size or get_backbone(name).preprocess.input_size
            chosen = default_batch_size("cpu", "crop", side, threads)
            measured = rates(name, args, dataset, vg, root)
            base = measured.get(chosen)
            for b, (bare, e2e) in measured.items():
                mark = "*" if b == chosen else " "
                print(f"{name:34s} {side:4d} {b:5d}{mark} {bare:8.2f} "
                      f"{bare / base[0] if base else float('nan'):9.3f} {e2e:8.2f} "
                      f"{e2e / base[1] if base and base[1] else float('nan'):9.3f}",
                      flush=True)
            print(f"{name}: default here {chosen} crops"
                  + ("" if base else " (not among --batch-sizes)"))
    finally:
        if args.work is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
