"""The Python API: every stage of vprom as one function, the very one the command line calls.

`import vprom` exposes these functions lazily (PEP 562, `vprom/__init__.py`): `vprom.train`
imports this module, and this module imports a stage only inside the function that runs it,
so `import vprom` stays cheap and imports no torch until a function that needs it is called.

Each function takes what its command takes, as keyword arguments with the same defaults
(written once, in the function or config the call reaches): the split rules that generation and verification are handed are the ones in `splits/`
(`load_rules()`) unless a caller passes others, and `extract` and `train` take the fields of
their config dataclasses (`ExtractConfig`, `TrainConfig`: one argument per command-line
option). The examples below run in `tests/app/test_api.py`, in this order, on a small
synthetic build; docs/python-api.md is the page that explains them.
"""

from __future__ import annotations

from pathlib import Path

#: the names `import vprom` exposes, in pipeline order
__all__ = ["build", "synth", "mine", "generate", "merge", "verify", "stats", "load_dataset",
           "export", "extract", "load_features", "train", "evaluate", "report", "reproduce"]


def _rules(rules):
    """The split rules generation and verification are handed: `splits/` unless given."""
    if rules is not None:
        return rules
    from vprom.splits import load_rules

    return load_rules()


def build(out, **options):
    """One shot: (synthetic corpus or VG) -> mine -> generate -> verify -> stats, into `out`;
    stages already done there with the same settings are kept (`vprom build`). `options`:
    `vg` (a VG folder) or `synthetic=True`, `images`, `scale`, `seed`, `workers`.

    >>> result = vprom.build("build/small", synthetic=True, images=1000, scale=0.003)
    [1/5] corpus: not made yet
    [1/5] synthetic corpus: 1000 images -> build/small/vg
    ...
    >>> result.dataset, result.vg_dir
    (PosixPath('build/small/dataset.h5'), PosixPath('build/small/vg'))
    """
    from vprom.app.build import build as run

    return run(out, **options)


def synth(out, **options):
    """Write the built-in synthetic corpus in Visual Genome's layout and schema (`vprom synth`);
    `options`: `images`, `seed`, `workers`.

    >>> print(vprom.synth("data/synth", images=50))
    synthetic Visual Genome corpus: data/synth
      50 images, ...
    """
    from vprom.mining.synth import write_corpus

    return write_corpus(out, **options)


def mine(vg, out, **options):
    """Stream a Visual Genome folder into the four element pools, POOLS.h5 plus its report
    (`vprom mine`); `options`: `min_side` (the paper's 100 px), `workers`.

    >>> report = vprom.mine("data/synth", "data/synth-pools.h5", workers=1)
    >>> print(report.summary())
    data/synth-pools.h5: ... crops in ... pools ...
    report: data/synth-pools.h5.report.md
    """
    from vprom.mining.pools import mine as run

    return run(vg, out, **options)


def generate(pools, out, rules=None, **options):
    """Sample the matrices from POOLS.h5, prove each with the solver and assign every split,
    into DATASET.h5 (`vprom generate`); `options`: `scale` (of Table 1's size), `seed`,
    `shard=(k, n)` (only matrices i with i % n == k, for `merge`), `workers` (processes; the
    file is the same for any number).

    >>> summary = vprom.generate("build/small/pools.h5", "build/again.h5", scale=0.003)
    >>> summary.counts == vprom.load_dataset("build/small/dataset.h5").manifest["counts"]
    True
    """
    from vprom.generation.generate import generate as run

    return run(pools, out, _rules(rules), **options)


def merge(shards, out, rules=None):
    """Join the DATASET.h5 files of all `generate(..., shard=(k, n))` runs into the file the
    single run writes (`vprom merge`).

    >>> for k in range(2):
    ...     _ = vprom.generate("build/small/pools.h5", f"build/shard-{k}.h5", scale=0.003,
    ...                        shard=(k, 2))
    >>> _ = vprom.merge(["build/shard-0.h5", "build/shard-1.h5"], "build/merged.h5")
    >>> import h5py, numpy
    >>> with h5py.File("build/merged.h5") as a, h5py.File("build/small/dataset.h5") as b:
    ...     numpy.array_equal(a["matrices/panels"][:], b["matrices/panels"][:])
    True
    """
    from vprom.generation.generate import merge_shards

    return merge_shards(shards, out, _rules(rules))


def verify(dataset, rules=None, **options):
    """Every check of `vprom verify` on DATASET.h5 (and the context-blind probes on a
    FEATS.h5 given as `features=`); the report says whether all passed. `workers=N` shares
    the checks among N processes (default 1 here; the report is the same for any N).

    >>> report = vprom.verify("build/small/dataset.h5")
    >>> report.ok, report.failures()
    (True, '')
    """
    from vprom.generation.verify import verify as run

    return run(dataset, _rules(rules), **options)


def stats(dataset):
    """Table 1, matrices per relation, split sizes and the perception ceiling of DATASET.h5,
    as a JSON-ready dict (`vprom stats`; `vprom.generation.verify.stats.format_stats` prints it).

    >>> figures = vprom.stats("build/small/dataset.h5")
    >>> total = figures["table1"]["total"]
    >>> total["matrices"] == len(vprom.load_dataset("build/small/dataset.h5").matrices)
    True
    """
    from vprom.generation.verify.stats import stats as run

    return run(dataset)


def load_dataset(path):
    """A DATASET.h5 in memory: its crops and matrices tables (every split included) and its
    manifest (docs/formats.md).

    >>> data = vprom.load_dataset("build/small/dataset.h5")
    >>> data.matrices.panels.shape[1], len(data.matrices) == len(data.matrices.id)
    (16, True)
    >>> m = data.matrix(0)          # a vprom.domain.Matrix with its full provenance
    >>> 0 <= m.answer < 8, dict(m.splits)["neutral"] in ("train", "val", "test", "excluded")
    (True, True)
    >>> test = data.matrices.splits["neutral"]["test"]   # matrix ids
    """
    from vprom.tables import DatasetFile

    return DatasetFile.read(path)


def export(dataset, format, out, vg=None, **options):
    """DATASET.h5 as JSON lines (`format="jsonl"`), the original release's layout
    ("original") or one npz per problem ("npz"); the last two hold pixels and need `vg`, the
    Visual Genome folder (`vprom export`). `options`: `copy`, `split`, `size`.

    >>> print(vprom.export("build/small/dataset.h5", "jsonl", "build/small/dataset.jsonl"))
    wrote build/small/dataset.jsonl: ... matrices as JSON lines
    """
    from vprom.generation.export import export as run

    return run(dataset, format, out, vg_dir=vg, **options)


def extract(dataset, vg, backbone, out, **options):
    """Backbone features for every crop of DATASET.h5 into one FEATS.h5 (`vprom extract`);
    `options` are the other fields of `vprom.features.config.ExtractConfig`, one per option
    of the command (`weights`, `batch_size`, `input_size`, `device`, `pool`, ...).

    >>> summary = vprom.extract("build/small/dataset.h5", "build/small/vg", "resnet18",
    ...                         "build/small/features/resnet18.h5", weights="none",
    ...                         input_size=32)
    >>> summary.out
    PosixPath('build/small/features/resnet18.h5')
    """
    from vprom.features.config import ExtractConfig
    from vprom.features.extract import extract as run

    return run(ExtractConfig(dataset=dataset, vg=vg, backbone=backbone, out=out, **options))


def load_features(path):
    """A finished FEATS.h5 in memory: `crop_id`, `features` (float32, one row per crop) and
    the attributes naming backbone, weights and preprocessing.

    >>> feats = vprom.load_features("build/small/features/resnet18.h5")
    >>> panels = vprom.load_dataset("build/small/dataset.h5").matrices.panels
    >>> feats.features[feats.index_of(panels)].shape[1:], feats.attrs["backbone"]
    ((16, 512), 'resnet18')
    """
    from vprom.feature_files import load_features as run

    return run(path)


def train(dataset, features, model, split, out, **options):
    """Train one baseline on one split into the run folder `out`, resuming an interrupted
    run (`vprom train`); `options` are the other fields of `vprom.baselines.config.
    TrainConfig` (`aux`, `epochs`, `lr`, `hidden`, `seed`, `device`, ...). Returns `out`.

    >>> vprom.train("build/small/dataset.h5", "build/small/features/resnet18.h5",
    ...             model="rn", split="neutral", out="runs/rn", epochs=1, hidden=32)
    runs/rn: starting a new run
    rn on neutral: ...
    epoch 1/1: loss ...
    done: best val accuracy ...
    PosixPath('runs/rn')
    """
    from vprom.baselines.config import TrainConfig
    from vprom.baselines.train import train as run

    return run(TrainConfig(dataset=dataset, features=features, model=model, split=split,
                           out=out, **options))


def evaluate(run, **options):
    """Test accuracy of a trained run with a 95% interval and per-relation and per-element-type
    breakdowns, also written to the run's metrics.json (`vprom evaluate`); `options`:
    `device`.

    >>> metrics = vprom.evaluate("runs/rn")
    >>> 0 <= metrics["test"]["accuracy"] <= 1, sorted(metrics["by_relation"])[0]
    (True, 'and')
    """
    from vprom.baselines.evaluate import evaluate as run_evaluation

    return run_evaluation(run, **options)


def report(runs, out):
    """Table 2 and the models x splits tables (Markdown, CSV) and plots over evaluated runs
    (`vprom report`); returns a summary of the files written.

    >>> print(vprom.report(["runs/rn"], "reports"))
    report over 1 runs written to reports:
    ...
    """
    from vprom.baselines.report import report as run

    return run(runs, out)


def reproduce(out, vg=None, synthetic=False, **options):
    """The paper's grid in one call: build -> extract -> train every model x aux x split ->
    report (`vprom reproduce`); `options` are the other fields of
    `vprom.app.reproduce.ReproduceConfig`. Returns the report folder. (Hours on Visual
    Genome; the example is not run by the tests for that reason.)

        vprom.reproduce("repro", vg="data/vg", models="rn", splits="neutral")
    """
    from vprom.app.reproduce import ReproduceConfig
    from vprom.app.reproduce import reproduce as run

    return run(ReproduceConfig(vg=vg, synthetic=synthetic, out=Path(out), **options))
