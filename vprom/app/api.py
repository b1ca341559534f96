"""The Python API: one function per `vprom` command, the very function the command calls.

A signature is its command's options, the docstring's `Args:` their `--help`. A stage's work
is imported when called: `import vprom` imports no torch. `workers=None`: one process per usable
core. The examples run in this order in tests/app/test_api.py.
"""

from __future__ import annotations

from pathlib import Path

from vprom.app.api_models import (_workers, crops, evaluate, extract, human_score,
                                  human_serve, human_study, load_features, perceive, report,
                                  reproduce, score, train)
from vprom.claim import check_output, claim
from vprom.domain import MIN_SIDE
from vprom.errors import VpromError
from vprom.file_kinds import DATASET, FEATS, POOLS, check_kind
from vprom.manifest import check_content
from vprom.mining.download import DEFAULT_DEADLINE
from vprom.mining.download.archives import DEFAULT_RESERVE
from vprom.splits import load_rules

#: the names `import vprom` exposes, in pipeline order
__all__ = ["build", "download", "synth", "mine", "generate", "merge", "verify", "stats",
           "show_matrix", "load_dataset", "export", "extract", "load_features", "train", "evaluate",
           "report", "reproduce", "crops", "perceive", "score", "human_study", "human_serve",
           "human_score"]


def download(out: Path, *, base_url: str | None = None, images: bool = True,
             expected: Path | None = None, deadline: float = DEFAULT_DEADLINE,
             reserve: int = DEFAULT_RESERVE):
    """Fetch Visual Genome's annotations (and images): resumable, verified.

    Args:
        out: folder for the VG files
        base_url: a mirror to fetch from instead of VG's own servers
        images: also fetch and unpack the images (`--no-images`: annotations only, ~1 GB)
        expected: a mirror's file sizes and sha256 (JSON like mining/data/vg_files.json)
        deadline: seconds (or e.g. 90m, 8h) before giving up on one file, kept to resume
        reserve: bytes (or e.g. 500M, 2G) to leave free on the disk

    >>> vprom.download("data/vg", images=False)  # doctest: +SKIP
    """
    from vprom.mining.download import download as run
    from vprom.mining.download import load_expected

    return run(out, base_url=base_url, images=images, deadline=deadline, reserve=reserve,
               expected=None if expected is None else load_expected(expected))


def synth(out: Path, *, images: int = 2000, seed: int = 0, workers: int | None = None,
          zips: bool = False):
    """Write the built-in synthetic corpus in Visual Genome's layout and schema.

    Args:
        out: folder to write (an existing one only if it holds a synthetic corpus)
        images: number of images
        seed: same seed and size, same bytes
        workers: processes rendering the images (default: every usable core)
        zips: also write download/, the files zipped as VG's download page serves them

    >>> print(vprom.synth("data/synth", images=50))
    synthetic Visual Genome corpus: data/synth
      50 images, ...
    """
    from vprom.mining.synth import write_corpus

    return write_corpus(out, images=images, seed=seed, workers=_workers(workers), zips=zips)


def mine(vg: Path, out: Path, *, min_side: int = MIN_SIDE, workers: int | None = None):
    """Stream Visual Genome into the four element pools (POOLS.h5 and its report).

    Args:
        vg: folder with VG's JSON (or .json.zip)
        out: POOLS.h5 to write (its reports are written beside it)
        min_side: drop regions smaller than this, in pixels
        workers: processes reading the JSON (default: every usable core)

    >>> print(vprom.mine("data/synth", "data/synth-pools.h5", workers=1).summary())
    data/synth-pools.h5: ... crops in ... pools ...
    report: data/synth-pools.h5.report.md
    """
    from vprom.mining.pools import mine as run

    return run(vg, out, min_side=min_side, workers=_workers(workers))


def generate(pools: Path, out: Path, *, scale: float = 1.0, seed: int = 0,
             shard: tuple[int, int] | None = None, workers: int | None = None,
             legacy_counts: bool = False):
    """Sample matrices from the pools, prove each, assign every split.

    Args:
        pools: POOLS.h5 from `vprom mine`
        out: DATASET.h5 to write
        scale: fraction of Table 1's 235,000 matrices
        seed: same pools and seed, same data set
        shard: (K, N): only matrices i with i % N == K; `merge` joins the N shards
        workers: processes drawing matrices (default: every usable core; same file for any)
        legacy_counts: the original release's count candidates, which give the answer away

    >>> summary = vprom.generate("build/small/pools.h5", "build/again.h5", scale=0.003)
    >>> summary.counts == vprom.load_dataset("build/small/dataset.h5").manifest["counts"]
    True
    """
    from vprom.generation.generate import generate as run

    return run(pools, out, load_rules(), scale=scale, seed=seed, shard=shard,
               legacy_counts=legacy_counts, workers=_workers(workers))


def merge(shards: list[Path], out: Path):
    """Join the DATASET.h5 files of all `generate --shard K/N` runs into one.

    Args:
        shards: the N shard files, in any order
        out: DATASET.h5 to write, equal to the single run's

    >>> for k in range(2):
    ...     _ = vprom.generate("build/small/pools.h5", f"build/shard-{k}.h5", scale=0.003,
    ...                        shard=(k, 2))
    >>> merged = vprom.merge(["build/shard-0.h5", "build/shard-1.h5"], "build/merged.h5")
    >>> merged.counts == vprom.load_dataset("build/small/dataset.h5").manifest["counts"]
    True
    """
    from vprom.generation.generate import merge_shards

    return merge_shards(shards, out, load_rules())


def build(out: Path, *, vg: Path | None = None, synthetic: bool = False,
          images: int | None = None, scale: float | None = None, seed: int = 0,
          workers: int | None = None, learned_probe: bool = False):
    """One shot: (synth or VG) -> mine -> generate -> verify -> stats; a build resumes.

    Args:
        out: build folder
        vg: an unpacked Visual Genome folder
        synthetic: build from the built-in synthetic corpus instead
        images: synthetic corpus size (default: 2,000 images)
        scale: fraction of Table 1's size (default: 1.0 on VG, 0.05 synthetic)
        seed: seed of the synthetic corpus and of the matrices
        workers: processes of every stage (default: every usable core)
        learned_probe: verify also with the learned candidates-only probe (verify --learned)

    >>> vprom.build("build/small", synthetic=True, images=1000, scale=0.003).dataset
    [1/5] corpus: not made yet
    ...
    PosixPath('build/small/dataset.h5')
    """
    from vprom.app.build import build as run

    return run(out, vg=vg, synthetic=synthetic, images=images, scale=scale, seed=seed,
               workers=_workers(workers), learned_probe=learned_probe)


def verify(dataset: Path, *, pools: Path | None = None, features: Path | None = None,
           workers: int | None = None, learned: bool = False):
    """Integrity, solver, splits, leakage, bias probes and the perception-only ceiling.

    Returns the report (`ok`: every check passed); VpromError if its inputs changed.

    Args:
        dataset: DATASET.h5 to check
        pools: also check that the data set was generated from this POOLS.h5
        features: also run the context-blind probes on this FEATS.h5
        workers: processes sharing the checks (default: every usable core; same report)
        learned: also judge a context-blind model trained on the candidates' labels

    >>> report = vprom.verify("build/small/dataset.h5")
    >>> report.ok, report.failures()
    (True, '')
    """
    from vprom.app.build import stale_stages
    from vprom.generation.verify import verify as run

    check_kind(dataset, DATASET)
    for option, path, kind in (("--pools", pools, POOLS), ("--features", features, FEATS)):
        if path is not None:
            check_kind(path, kind, option)
    if pools is not None:
        check_content(pools)
    problems = stale_stages(dataset, pools)
    if problems:
        raise VpromError(f"{dataset}: verification failed (inputs: {'; '.join(problems)})")
    return run(dataset, load_rules(), features=features, workers=_workers(workers),
               learned=learned)


def stats(dataset: Path, *, json: Path | None = None) -> dict:
    """Table 1, split sizes and the perception-only ceiling, as a JSON-ready dict.

    Args:
        dataset: DATASET.h5
        json: also write the figures to this JSON file

    >>> figures = vprom.stats("build/small/dataset.h5")
    >>> total = figures["table1"]["total"]
    >>> total["matrices"] == len(vprom.load_dataset("build/small/dataset.h5").matrices)
    True
    """
    from vprom.generation.verify.stats import stats as run
    from vprom.generation.verify.stats import write_stats

    if json is None:
        return run(dataset)
    with claim(json, ("stats",), inputs=(dataset,)):
        figures = run(dataset)
        write_stats(figures, json)
    return figures


def show_matrix(dataset: Path, matrix_id: int, vg: Path, out: Path, *, answer: bool = False):
    """Render one matrix and its candidates as a PNG.

    Args:
        dataset: DATASET.h5
        matrix_id: the matrix's id
        vg: folder holding the VG images
        out: PNG to write
        answer: mark the answer, the relation and the elements

    >>> print(vprom.show_matrix("build/small/dataset.h5", 0, "build/small/vg", "m0.png"))
    wrote m0.png ...
    """
    from vprom.app.show import show as run

    return run(dataset, matrix_id, vg, out, answer=answer)


def load_dataset(path: Path):
    """A DATASET.h5 in memory: its crops and matrices tables (every split) and its manifest.

    >>> m = vprom.load_dataset("build/small/dataset.h5").matrix(0)  # with its provenance
    >>> 0 <= m.answer < 8, dict(m.splits)["neutral"] in ("train", "val", "test", "excluded")
    (True, True)
    """
    from vprom.tables import DatasetFile

    return DatasetFile.read(path)


def export(dataset: Path, format: str, out: Path, *, vg: Path | None = None,
           features: Path | None = None, copy: bool = False, split: str = "neutral",
           size: int = 160, style: str = "pgm", part: str = "test", layout: str = "grid",
           prompt: Path | None = None, limit: int | None = None, seed: int = 0,
           crops: Path | None = None):
    """The data set as JSON lines, the original release's layout, npz, SAViR-T, hf or vlm files.

    Args:
        dataset: DATASET.h5
        format: jsonl, original, npz, savir-t, hf or vlm (see `vprom export --help`)
        out: a file for jsonl, a folder for the others
        vg: Visual Genome folder (VG_100K/, VG_100K_2/): original, npz, hf, vlm (not text)
        features: savir-t: the resnet101 maps file (`vprom extract --pool none`)
        copy: original: panels as plain copies instead of symlinks (clients that open
            panels through os.readlink cannot read them)
        split: npz: the split whose train, val and test are written; vlm: whose --part
        size: npz: panel side in pixels
        style: npz: pgm (DeepMind PGM's files), raven (RAVEN's) or color (RGB panels)
        part: vlm: train, val or test
        layout: vlm: grid (one image a problem), panels (16 images) or text (labels only)
        prompt: vlm: a question template file; "{panels}" in it becomes where the panels are
        limit: vlm: at most this many problems, stratified over relation x element type
        seed: vlm: seed of the --limit sample and of the shuffled problem order
        crops: vlm: a crop store (`vprom crops`, size >= 176 grid, 336 panels) instead of --vg

    >>> print(vprom.export("build/small/dataset.h5", "jsonl", "build/small/dataset.jsonl"))
    wrote build/small/dataset.jsonl: ... matrices as JSON lines
    """
    out = check_output(out, folder=format != "jsonl", option="--out")  # before any work
    if format == "savir-t":
        from vprom.generation.export.savir import export_savir, summary

        if features is None:
            raise VpromError("--format savir-t reads the panels' maps: pass --features "
                             "MAPS.h5 (from `vprom extract --backbone resnet101 --pool none`)")
        return summary(out, export_savir(dataset, features, out))
    verify_text = None
    if format == "hf":  # the card quotes the verification; unsound data is not shared
        report = verify(dataset)
        if not report.ok:
            raise VpromError(f"{dataset}: verification failed ({report.failures()}); an hf "
                             "export is for sharing, so it needs a verified data set")
        verify_text = report.format()
    from vprom.generation.export import export as run

    return run(dataset, format, out, vg_dir=vg, copy=copy, split=split, size=size, style=style,
               verify_text=verify_text, part=part, layout=layout, prompt=prompt, limit=limit,
               seed=seed, crop_store=crops)
