"""The API's commands on features, models and people; defaults come from the job configs."""

from __future__ import annotations

from pathlib import Path

from vprom.app.reproduce import ReproduceConfig
from vprom.baselines.config import TrainConfig
from vprom.features.config import ExtractConfig
from vprom.features.crop_store import StoreJob
from vprom.processes import usable_cores

_E, _T, _R, _S = ExtractConfig, TrainConfig, ReproduceConfig, StoreJob


def _workers(workers: int | None) -> int:
    """`workers`, or one process per usable CPU core when None."""
    return usable_cores() if workers is None else workers


def extract(dataset: Path, vg: Path | None, backbone: str, out: Path, *, weights: str = _E.weights,
            batch_size: int | None = _E.batch_size, workers: int | None = _E.workers,
            device: str | None = _E.device, dtype: str = _E.dtype, resume: bool = _E.resume,
            allow_missing: bool = _E.allow_missing, compile: bool = _E.compile,
            cuda_graphs: bool = _E.cuda_graphs, input_size: int | None = _E.input_size,
            chunk_batches: int = _E.chunk_batches, decode: str = _E.decode,
            region: str = _E.region, pool: str = _E.pool, compression: str = _E.compression,
            prefetch: int = _E.prefetch, in_flight: int = _E.in_flight,
            label_noise: float = _E.label_noise, seed: int = _E.seed):
    """Backbone features per crop into one HDF5 file (resumable, multi-GPU).

    Args:
        dataset: DATASET.h5 (its crops are extracted)
        vg: Visual Genome folder (holding VG_100K/); not needed for --backbone labels
        backbone: see `vprom extract --list`; labels: each crop's labels as a multi-hot
        out: FEATS.h5 to write
        weights: imagenet, none or a file; timm:<name>: a file, none or pretrained (if cached)
        batch_size: crops per forward (default: 64 on CUDA, about 4 per CPU thread)
        workers: DataLoader processes decoding JPEGs (default: 0 on CPU, else cores per GPU - 2)
        device: cuda, cuda:N or cpu (default: cuda if available; under torchrun LOCAL_RANK's)
        dtype: stored dtype (pooling and L2 run in float32)
        resume: keep a matching partial file's chunks (`--no-resume`: start over)
        allow_missing: finish even if some images are missing (they are reported)
        compile: torch.compile the backbone (CUDA, --region crop)
        cuda_graphs: replay the trunk from one captured CUDA graph (CUDA, --region crop)
        input_size: crop side in pixels (default: the backbone's); roi: the shorter side (600)
        chunk_batches: batches per resumable chunk (a killed run redoes at most one)
        decode: cpu: Pillow in the workers; gpu: nvjpeg on the device; auto: gpu if CPUs are few
        region: crop: each box warped to SxS; roi (bottomup-r101): the detector's RoI pooling
        pool: avg: pooled, L2-normalised; cls, mean: a timm ViT's; none: the last map; heads:
            a `vprom perceive` model's predicted labels (--weights its file); auto
        compression: HDF5 compression of the features (lzf is readable only by h5py)
        prefetch: batches each worker prepares ahead
        in_flight: batches queued on the device before the oldest result is awaited
        label_noise: --backbone labels: flip each label bit with this probability (0 to 1)
        seed: --backbone labels: seed of the label noise

    >>> summary = vprom.extract("build/small/dataset.h5", "build/small/vg", "resnet18",
    ...                         "build/small/features/resnet18.h5", weights="none",
    ...                         input_size=32)
    >>> summary.out
    PosixPath('build/small/features/resnet18.h5')
    """
    config = ExtractConfig(**locals())  # the parameters are its fields
    from vprom.features.extract import extract as run

    return run(config)


def perceive(dataset: Path, vg: Path | None = None, *, split: str, backbone: str, out: Path,
             crops: Path | None = None, weights: str | None = None, epochs: int = 3,
             batch_size: int = 64, input_size: int | None = None, lr: float = 1e-3,
             seed: int = 0, device: str | None = None) -> Path:
    """Fine-tune a backbone on a split's training crops and labels, for `extract --weights`.

    Never reads a crop or label the split holds out from training. Resumable; returns `out`.

    Args:
        dataset: DATASET.h5
        vg: Visual Genome folder (the crops' images)
        split: the split whose training crops it learns from
        backbone: see `vprom extract --list`
        out: weights file to write (its manifest goes beside it)
        crops: instead of --vg, a crop store of `vprom crops` at the input size
        weights: imagenet, pretrained, none or a file (default: published if cached, else none)
        epochs: passes over the training crops
        batch_size: crops per optimiser step, over all processes
        input_size: crop side in pixels (default: the backbone's); extract with the same
        lr: Adam's learning rate
        seed: heads, batch order and flips
        device: cuda, cuda:N or cpu (default: cuda if available)

    >>> vprom.perceive("build/small/dataset.h5", "build/small/vg", split="neutral",
    ...                backbone="resnet18", out="build/perceive.pt", input_size=32)
    ... # doctest: +SKIP
    """
    arguments = dict(locals())  # the parameters are PerceiveConfig's fields
    from vprom.features.perceive import PerceiveConfig
    from vprom.features.perceive import perceive as run

    return run(PerceiveConfig(**arguments))


def load_features(path: Path):
    """A finished FEATS.h5 in memory: `crop_id`, `features` and the extraction's attributes.

    >>> feats = vprom.load_features("build/small/features/resnet18.h5")
    >>> panels = vprom.load_dataset("build/small/dataset.h5").matrices.panels
    >>> feats.features[feats.index_of(panels)].shape[1:], feats.attrs["backbone"]
    ((16, 512), 'resnet18')
    """
    from vprom.feature_files import load_features as run

    return run(path)


def train(dataset: Path, features: Path | None = _T.features, *, model: str, split: str,
          out: Path, maps: Path | None = _T.maps, crops: Path | None = _T.crops,
          aux: bool = _T.aux, epochs: int = _T.epochs, batch_size: int | None = _T.batch_size,
          optimizer: str | None = _T.optimizer, lr: float | None = _T.lr,
          rho: float | None = _T.rho, eps: float | None = _T.eps, hidden: int | None = _T.hidden,
          score_init: float | None = _T.score_init, lr_schedule: str = _T.lr_schedule,
          patience: int = _T.patience, shuffle_context: bool = _T.shuffle_context,
          center_features: bool = _T.center_features, seed: int = _T.seed,
          device: str | None = _T.device, cuda_graphs: bool = _T.cuda_graphs,
          restart: bool = _T.restart) -> Path:
    """Train one baseline on one split (resumable); returns `out`.

    A hyper-parameter left None takes the model's default from baselines/defaults.json.

    Args:
        dataset: DATASET.h5
        features: FEATS.h5 from `vprom extract` on this DATASET.h5 (models of pooled vectors)
        model: a registered model, e.g. rn, mlp-sum-6, gru, wren
        maps: instead of features, a maps file of `vprom extract --pool none` (map models)
        crops: instead of features, a crop store of `vprom crops` (pixel models)
        split: neutral, interpolation, ...
        out: run folder; the same command again resumes it or, when finished, does nothing
        aux: add the relation/element-type loss
        epochs: maximum epochs
        batch_size: matrices per optimiser step, over all processes (default: the model's)
        optimizer: AdaDelta is the paper's (default: the model's)
        lr: learning rate (default: the model's, or another optimizer's own)
        rho: AdaDelta's decay of its running averages (default: the model's)
        eps: the optimizer's epsilon (default: the model's)
        hidden: width of every hidden layer (default: the model's)
        score_init: the score head's initial weights, times torch's (default: the model's)
        lr_schedule: constant (the paper's), or cosine: from lr to 0 over the epochs, set at
            every step
        patience: epochs without validation gain before stopping
        shuffle_context: control: each matrix's context replaced by another matrix's
        center_features: subtract the training crops' mean feature and re-normalise
        seed: weights, batch order and the shuffled-context derangement
        device: cuda, cuda:N or cpu (default: cuda if available)
        cuda_graphs: replay each training step from a captured CUDA graph (one GPU)
        restart: train again from epoch 1, even with other settings

    >>> vprom.train("build/small/dataset.h5", "build/small/features/resnet18.h5",
    ...             model="rn", split="neutral", out="runs/rn", epochs=1, hidden=32)
    runs/rn: starting a new run
    rn on neutral: ...
    epoch 1/1: answer loss ...
    done: best val accuracy ...
    PosixPath('runs/rn')
    """
    config = TrainConfig(**locals())  # the parameters are its fields
    from vprom.baselines.train import train as run

    return run(config)


def evaluate(run: Path, *, device: str | None = _T.device) -> dict:
    """Test accuracy, 95% interval and breakdowns; also written to RUN/metrics.json.

    Args:
        run: a run folder of `vprom train`
        device: cuda, cuda:N or cpu (default: cuda if available)

    >>> metrics = vprom.evaluate("runs/rn")
    >>> 0 <= metrics["test"]["accuracy"] <= 1, sorted(metrics["by_relation"])[0]
    (True, 'and')
    """
    from vprom.baselines.evaluate import evaluate as run_evaluation

    return run_evaluation(run, device=device)


def report(runs: list[Path], out: Path):
    """Table 2, models x splits, perception against reasoning, and a verdict on the runs.

    Args:
        runs: evaluated run folders, or folders holding them
        out: folder for the tables (Markdown, CSV) and plots

    >>> print(vprom.report(["runs/rn"], "reports"))
    report over 1 runs written to reports:
    ...
    """
    from vprom.app.build import verify_result
    from vprom.app.score import perception_ceilings
    from vprom.baselines.report import report as run

    return run(runs, out, ceilings=perception_ceilings, verified=verify_result)


def reproduce(out: Path, *, vg: Path | None = None, synthetic: bool = False,
              scale: float | None = _R.scale, images: int | None = _R.images,
              backbones: str = _R.backbones, weights: str | None = _R.weights,
              models: str = _R.models, splits: str = _R.splits, epochs: int = _R.epochs,
              seed: int = _R.seed, device: str | None = _R.device,
              input_size: int | None = _R.input_size, crop_size: int = _R.crop_size,
              center_features: bool = _R.center_features) -> Path:
    """The paper's full grid (models x features x aux x splits); returns the report folder.

    Resumable. Hours on VG, so the tests do not run the example.

    Args:
        out: folder for the build, features, runs and report
        vg: an unpacked Visual Genome folder
        synthetic: the synthetic corpus instead (a smoke test)
        scale: fraction of Table 1's size (default: 1.0 on VG, 0.05 synthetic)
        images: synthetic corpus size (default: 2,000 images)
        backbones: comma list (see `vprom extract --list`)
        weights: comma list, one per backbone (default: imagenet; pretrained for timm:<name>)
        models: comma list of registered models, each trained without and with --aux
        splits: comma list
        epochs: maximum epochs per run
        seed: seed of the build and of every run
        device: cuda, cuda:N or cpu (default: cuda if available)
        input_size: crop side for extraction (default: the backbone's, 224)
        crop_size: side S of the crop store that pixel models read
        center_features: train vector models on centred features (see `vprom train --help`)

        vprom.reproduce("repro", vg="data/vg", models="rn", splits="neutral")
    """
    config = ReproduceConfig(**locals())  # the parameters are its fields
    from vprom.app.reproduce import reproduce as run

    return run(config)


def crops(dataset: Path, vg: Path, size: int, out: Path, *, workers: int | None = None,
          compression: str = _S.compression, chunk_crops: int = _S.chunk_crops) -> Path:
    """Every crop of a data set once, as uint8 SxS pixels, for pixel models (resumable).

    Args:
        dataset: DATASET.h5 (every crop its matrices show)
        vg: Visual Genome folder (holding VG_100K/)
        size: side S of the square crops in pixels; uint8 RGB costs 3*S*S bytes a crop
        out: CROPS.h5 to write
        workers: processes decoding JPEGs (default: every usable core)
        compression: HDF5 compression of the pixels (photos shrink little; reads slow down)
        chunk_crops: crops per resumable chunk

    >>> vprom.crops("build/small/dataset.h5", "build/small/vg", 32, "build/crops-32.h5")
    ... # doctest: +SKIP
    """
    from vprom.features.crop_store import build_crop_store

    return build_crop_store(StoreJob(dataset, vg, size, out, _workers(workers), compression,
                                     chunk_crops))


def score(dataset: Path, predictions: Path, *, split: str = "neutral", out: Path | None = None,
          model: str | None = None, features: str = "own",
          baselines: tuple[Path, ...] = ()) -> tuple[dict, dict]:
    """Score anyone's predictions like `vprom evaluate`: (metrics, perception-only ceiling).

    Args:
        dataset: DATASET.h5 the predictions were made on
        predictions: CSV (matrix_id,choice[,score_0..score_7]), JSON lines (matrix_id and
            choice or response), lmms-eval's samples or VLMEvalKit's predictions
        split: the split whose test part is scored
        out: folder for metrics.json, a run to `vprom report` (default: PREDICTIONS's)
        model: the model's name in reports (default: the --out folder's name)
        features: what the model read, shown as the report's feature column
        baselines: runs, folders of runs or a `vprom report` folder to print beside it

    >>> metrics, ceiling = vprom.score("build/small/dataset.h5", "mine/predictions.csv")
    ... # doctest: +SKIP
    """
    from vprom.app.score import score_predictions

    return score_predictions(dataset, predictions, split, out, model, features, baselines)


def human_study(dataset: Path, vg: Path, out: Path, *, split: str = "neutral",
                part: str = "test", n: int = 60, seed: int = 0,
                size: int = 160):  # 16 panels of 160 px fit a 1280x800 screen unscrolled
    """Sample V-PROM problems into a self-contained browser study folder.

    Args:
        dataset: DATASET.h5
        vg: Visual Genome folder (its images)
        out: study folder to write
        split: the split whose problems are sampled
        part: which part of the split: train, val or test
        n: problems in the study, even across relations and element types
        seed: same data set, options and seed: the same study
        size: panel side in pixels

    >>> print(vprom.human_study("build/small/dataset.h5", "build/small/vg", "study", n=8))
    wrote study: 8 problems ...
    """
    from vprom.app.human.study import make_study

    return make_study(dataset, vg, out, split=split, n=n, part=part, seed=seed, size=size)


def human_serve(study: Path, *, host: str = "127.0.0.1", port: int = 8000) -> None:
    """Serve a study on this machine and record each answer (JSON lines).

    Args:
        study: a folder written by `vprom human-study`
        host: address to listen on (127.0.0.1: this machine only; 0.0.0.0: every interface)
        port: the port (0: any free one)

    >>> vprom.human_serve("study", port=8000)  # doctest: +SKIP
    """
    from vprom.app.human.server import serve

    serve(study, host, port)


def human_score(study: Path, responses: tuple[Path, ...] = ()) -> dict:
    """Human accuracy and skips by relation and element type; also in STUDY/metrics.json.

    Args:
        study: a folder written by `vprom human-study`
        responses: JSON-lines response files (default: STUDY/responses/*.jsonl)

    >>> metrics = vprom.human_score("study")  # doctest: +SKIP
    """
    from vprom.app.human.study import score_study

    return score_study(study, responses)
