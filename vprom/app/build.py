"""`vprom build`: the one-shot pipeline (synth or VG) -> mine -> generate -> verify -> stats.

A stage is kept when its output's manifest is current for its inputs and settings
(`vprom.manifest.is_current`); a stage that runs first removes the later stages' files, so
a build resumes and never vouches for output of old inputs. `manifest.json` marks the folder
from the start and, once whole, lists the sha256 of every file of `STAGE_FILES`.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from vprom.claim import check_output, writes
from vprom.domain import MIN_SIDE
from vprom.errors import VpromError
from vprom.file_kinds import vg_not_folder
from vprom.files import sha256_file, write_text
from vprom.generation.generate import dataset_settings, generate
from vprom.generation.verify import verify
from vprom.generation.verify.stats import format_stats, stats, write_stats
from vprom.manifest import made_from, make_manifest, manifest_of, why_stale, write_manifest
from vprom.mining import readers
from vprom.mining.pools import mine, pools_settings
from vprom.mining.synth import write_corpus
from vprom.splits import load_rules

#: sized so `make demo` (build, extract, train twice) stays well under 10 minutes
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


def _stages(out: Path, vg_dir: Path, synthetic: bool, images, scale, seed) -> dict:
    """stage -> (output, a function listing its inputs when the stage comes, settings)."""
    pools, dataset = out / "pools.h5", out / "dataset.h5"
    stages = {"corpus": (vg_dir, list, {"images": images, "seed": seed})} if synthetic else {}
    stages["pools"] = (pools, lambda: [readers.locate(vg_dir, stem) for stem in readers.FILES],
                       pools_settings(MIN_SIDE))
    stages["dataset"] = (dataset, lambda: [pools], dataset_settings(scale, seed))
    return stages


def stale_stages(dataset: str | Path, pools: str | Path | None = None) -> list[str]:
    """Why `dataset` no longer matches what it was made from: `pools` when given, and in a
    build folder every stage's inputs and settings."""
    dataset = Path(dataset)
    problems = []
    if pools is not None and not made_from((manifest_of(dataset) or {}).get("inputs"), pools):
        problems.append(f"{dataset} was not generated from {pools} (its manifest records "
                        "other inputs)")
    built = manifest_of(dataset.parent)
    if dataset.name != "dataset.h5" or (built or {}).get("kind") != "build":
        return problems
    source = (built.get("config") or {}).get("source", "synthetic")
    vg_dir = dataset.parent / ("vg" if source == "synthetic" else source)
    stages = _stages(dataset.parent, vg_dir, False, None, built["config"].get("scale"),
                     built.get("seed"))
    for output, inputs, settings in stages.values():
        try:
            why = why_stale(output, inputs(), settings)
        except (OSError, VpromError) as e:
            why = f"its inputs cannot be read: {e}"
        if why:
            problems.append(f"{output.name} no longer matches what it was made from ({why}); "
                            "run `vprom build` again")
    return problems


#: build's stages in order, with the files each writes (relative to the build folder)
STAGE_FILES = {
    "corpus": ("vg",),
    "pools": ("pools.h5", "pools.h5.report.md", "pools.h5.report.json",
              "pools.h5.excluded_counts.tsv"),
    "dataset": ("dataset.h5",),
    "verify": ("verify.txt", "stats.json"),
}


def _stage(out: Path, name: str, stage: tuple, number: int) -> bool:
    """Whether stage `name` must run (then the later stages' files go first); says why."""
    output, inputs, settings = stage
    why = why_stale(output, inputs(), settings)
    if why is None:
        print(f"[{number}/5] {name}: kept {output.name} (made from the same inputs and "
              "settings, as its manifest records)", flush=True)
        return False
    removed = _invalidate(out, name)
    print(f"[{number}/5] {name}: {why}" + (f"; removed what was made from the old one: "
                                          f"{', '.join(removed)}" if removed else ""), flush=True)
    return True


def _invalidate(out: Path, stage: str) -> list[str]:
    """Remove the files of the stages after `stage`; their names."""
    later = list(STAGE_FILES)[list(STAGE_FILES).index(stage) + 1:]
    removed = []
    for name in later:
        for pattern in STAGE_FILES[name]:
            for p in sorted(out.glob(pattern)):
                if p.is_dir() and not p.is_symlink():
                    shutil.rmtree(p)
                else:
                    p.unlink()
                removed.append(p.name)
    return removed


def _check_options(out: Path, vg: Path | None, synthetic: bool, images, scale, seed,
                  workers) -> None:
    """Refuse options that cannot build before any stage runs (for library callers)."""
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
        raise VpromError(vg_not_folder(vg))


def _whole(value) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


@writes("out", ("build",), inputs=lambda a: (a["vg"],), folder=True)
def build(out: Path, vg: Path | None, synthetic: bool, images: int | None,
          scale: float | None, seed: int, workers: int, learned_probe: bool) -> BuildResult:
    """`vprom.app.api.build`, which holds the defaults."""
    out = Path(out)
    _check_options(out, vg, synthetic, images, scale, seed, workers)
    rules = load_rules()
    if synthetic:
        images = SYNTHETIC_IMAGES if images is None else images
    vg_dir = out / "vg" if synthetic else Path(vg)
    scale = scale if scale is not None else (SYNTHETIC_SCALE if synthetic else VG_SCALE)
    # the source relative to the build folder: the build's files name no home or install path
    source = "synthetic" if synthetic else os.path.relpath(vg_dir.resolve(), out.resolve())
    config = {"source": source, "images": images, "scale": scale}
    out.mkdir(parents=True, exist_ok=True)
    write_manifest(out, make_manifest("build", config, seed))  # vouches for nothing yet
    stages = _stages(out, vg_dir, synthetic, images, scale, seed)
    if synthetic and _stage(out, "corpus", stages["corpus"], 1):
        print(f"[1/5] synthetic corpus: {images} images -> {vg_dir}", flush=True)
        write_corpus(vg_dir, images=images, seed=seed, workers=workers)

    pools = out / "pools.h5"
    if _stage(out, "pools", stages["pools"], 2):
        print(f"[2/5] mining {vg_dir} -> {pools}", flush=True)
        print(mine(vg_dir, pools, min_side=MIN_SIDE, workers=workers).summary(), flush=True)

    dataset = out / "dataset.h5"
    if _stage(out, "dataset", stages["dataset"], 3):
        print(f"[3/5] generating matrices (scale {scale}, seed {seed}) -> {dataset}", flush=True)
        print(generate(pools, dataset, rules, scale=scale, seed=seed, workers=workers), flush=True)
    _invalidate(out, "dataset")  # verify.txt and stats.json are made again below

    print(f"[4/5] verifying {dataset}", flush=True)
    report = verify(dataset, rules, workers=workers, learned=learned_probe)
    named = dataclasses.replace(report, dataset=Path(dataset.name))  # no absolute path
    write_text(out / "verify.txt", named.format() + "\n")
    if not report.ok:
        raise VpromError(f"{dataset}: verification failed ({report.failures()}); "
                         f"see {out / 'verify.txt'}")

    print("[5/5] statistics", flush=True)
    figures = stats(dataset)
    write_stats(figures, out / "stats.json")
    print(format_stats(figures), flush=True)

    files = sorted({p for patterns in STAGE_FILES.values() for pattern in patterns
                    for p in out.glob(pattern) if p.is_file()})
    write_manifest(out, make_manifest("build", config, seed,
                                      outputs={p.name: sha256_file(p) for p in files}))
    result = BuildResult(out=out, vg_dir=vg_dir, pools=pools, dataset=dataset, stats=figures)
    print(result, flush=True)
    return result


def verify_result(dataset: Path) -> str:
    """The verdict of the build's verify.txt beside DATASET.h5 if newer (no second verify)."""
    written = dataset.parent / "verify.txt"
    if written.is_file() and written.stat().st_mtime >= dataset.stat().st_mtime:
        last = written.read_text(encoding="utf-8").strip().rsplit("\n", 1)[-1]
        if last in ("verdict: PASS", "verdict: FAIL"):
            return f"`vprom verify` {last.split()[-1]} ({written})"
    return f"no verify report beside it; run `vprom verify {dataset}`"
