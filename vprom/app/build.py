"""`vprom build`: the one-shot pipeline (synth or VG) -> mine -> generate -> verify -> stats.

This module is on the top floor: it orchestrates the stages the way the command line does,
and hands generation and verification the split rules it loads from `splits`. The build
folder is self-describing: every stage writes its file atomically with its manifest inside,
and `manifest.json` at the top lists the whole build with output hashes.
A stage whose output already exists with the same configuration is not redone, so an
interrupted build resumes where it stopped. Options are checked before the first stage runs.

Layout of a build folder:
    vg/                     the synthetic corpus (with --synthetic), in VG's own layout
    pools.h5 (+ report)     element pools mined from VG
    dataset.h5              matrices, crops, splits (+ dataset.h5.manifest.json)
    verify.txt, stats.json  the verification report and Table 1 / split sizes
    manifest.json           config, seed, versions and sha256 of every file above
"""

from __future__ import annotations

import json
import math
import numbers
from dataclasses import dataclass
from pathlib import Path

from vprom.generation.dataset import generate
from vprom.generation.stats import format_stats, stats, write_stats
from vprom.generation.verify import verify
from vprom.mining.pools import mine
from vprom.mining.synth import write_corpus
from vprom.splits import load_rules
from vprom.errors import VpromError
from vprom.io import check_output, make_manifest, sha256_file, write_json, write_text
from vprom.records import MIN_SIDE

#: Defaults sized so `make demo` (build, extract, train twice) stays well under 10 minutes.
SYNTHETIC_IMAGES = 2000
SYNTHETIC_SCALE = 0.05
VG_SCALE = 1.0


@dataclass(frozen=True)
class BuildResult:
    out: Path
    vg_dir: Path
    pools: Path
    dataset: Path
    stats: dict

    def __str__(self) -> str:
        return (f"built {self.dataset} from {self.vg_dir}\n"
                f"  pools: {self.pools}\n  stats: {self.out / 'stats.json'}\n"
                f"  verify report: {self.out / 'verify.txt'}")


def _config_matches(path: Path, config: dict) -> bool:
    """True when `path` exists and its stamp records the same configuration."""
    stamp = path.with_name(path.name + ".build-config.json")
    return path.exists() and stamp.exists() and json.loads(stamp.read_text()) == config


def _fingerprint(vg_dir: Path) -> list:
    """Name, size and modification time of the annotation files: a re-downloaded or
    re-synthesised corpus invalidates the pools mined from the old one."""
    return [[p.name, p.stat().st_size, p.stat().st_mtime_ns] for p in sorted(vg_dir.iterdir())
            if p.is_file() and p.name.endswith((".json", ".json.zip"))]


def _stamp(path: Path, config: dict) -> None:
    write_json(path.with_name(path.name + ".build-config.json"), config)


def _check_options(out: Path, vg: Path | None, synthetic: bool, images, scale, seed,
                  workers) -> None:
    """Refuse options that cannot build, before any stage runs (library calls included: the
    command line's argument types refuse the same values earlier)."""
    if (vg is None) == (not synthetic):
        raise VpromError("build needs exactly one source: --vg DIR or --synthetic")
    if images is not None:
        if not synthetic:
            raise VpromError(f"--images {images}: sets the size of the synthetic corpus, so it "
                             "has no use with --vg; leave it out")
        if not _whole(images) or images < 1:
            raise VpromError(f"--images must be a whole number of at least 1, got {images!r}")
    if scale is not None and not (isinstance(scale, numbers.Real) and not isinstance(scale, bool)
                                  and math.isfinite(scale) and scale > 0):
        raise VpromError(f"--scale must be a finite number above 0 (a fraction of Table 1's "
                         f"size), got {scale!r}")
    if not _whole(seed):
        raise VpromError(f"--seed must be a whole number, got {seed!r}")
    if not _whole(workers) or workers < 1:
        raise VpromError(f"workers must be a whole number of at least 1, got {workers!r}")
    check_output(out, folder=True)
    if vg is not None and not Path(vg).is_dir():
        raise VpromError(f"{vg}: no such folder; run `vprom download --out {vg}`")


def _whole(value) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def build(out: Path, vg: Path | None = None, synthetic: bool = False, images: int | None = None,
          scale: float | None = None, seed: int = 0, workers: int = 2) -> BuildResult:
    out = Path(out)
    _check_options(out, vg, synthetic, images, scale, seed, workers)
    rules = load_rules()
    out.mkdir(parents=True, exist_ok=True)
    if synthetic:
        images = SYNTHETIC_IMAGES if images is None else images
        vg_dir = out / "vg"
        config = {"images": images, "seed": seed}
        marker = vg_dir / "synth_truth.json"
        if not _config_matches(marker, config):
            print(f"[1/5] synthetic corpus: {images} images -> {vg_dir}", flush=True)
            write_corpus(vg_dir, images=images, seed=seed, workers=workers)
            _stamp(marker, config)
    else:
        vg_dir = Path(vg)
    scale = scale if scale is not None else (SYNTHETIC_SCALE if synthetic else VG_SCALE)

    pools = out / "pools.h5"
    config = {"vg": str(vg_dir.resolve()), "min_side": MIN_SIDE, "inputs": _fingerprint(vg_dir)}
    if not _config_matches(pools, config):
        print(f"[2/5] mining {vg_dir} -> {pools}", flush=True)
        print(mine(vg_dir, pools, min_side=config["min_side"], workers=workers).summary(),
              flush=True)
        _stamp(pools, config)

    dataset = out / "dataset.h5"
    config = {"pools": sha256_file(pools), "scale": scale, "seed": seed}
    if not _config_matches(dataset, config):
        print(f"[3/5] generating matrices (scale {scale}, seed {seed}) -> {dataset}", flush=True)
        print(generate(pools, dataset, rules, scale=scale, seed=seed), flush=True)
        _stamp(dataset, config)

    print(f"[4/5] verifying {dataset}", flush=True)
    report = verify(dataset, rules)
    write_text(out / "verify.txt", report.format() + "\n")
    if not report.ok:
        raise VpromError(f"{dataset}: verification failed ({report.failures()}); "
                         f"see {out / 'verify.txt'}")

    print("[5/5] statistics", flush=True)
    figures = stats(dataset)
    write_stats(figures, out / "stats.json")
    print(format_stats(figures), flush=True)

    files = [p for p in sorted(out.iterdir()) if p.is_file() and p.name != "manifest.json"]
    write_json(out / "manifest.json", make_manifest(
        "build",
        config={"source": "synthetic" if synthetic else str(vg_dir), "images": images,
                "scale": scale},
        seed=seed,
        outputs={p.name: sha256_file(p) for p in files}))
    result = BuildResult(out=out, vg_dir=vg_dir, pools=pools, dataset=dataset, stats=figures)
    print(result, flush=True)
    return result
