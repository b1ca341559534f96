"""Training one baseline on one split (`vprom train`), resumable and data-parallel.

Objective: softmax cross-entropy over the 8 candidate scores. With `aux`, the two auxiliary
heads add their cross-entropies (relation, 4-way; element type, 3-way) with equal weight; they
are used only in training. Optimiser: AdaDelta (the paper's) or Adam. Every hyper-parameter the
user does not give is the model's default from `baselines/defaults.json` (`TrainConfig`).

Epochs and steps: `baselines.steps` (the epoch's batches as device tensors, a step that reads
nothing back, optional CUDA graphs). Dropout-like randomness, if a model has any, comes from
the torch generator reseeded at each epoch from (seed, e, rank). Everything an epoch does is
thus a function of the seed, the epoch number and the weights it starts from, which is why
resuming from the checkpoint of epoch e reaches the same final weights as an unbroken run.

After every epoch the split's validation set is scored; the best validation accuracy so far
is kept as `best.pt` (early stopping after `patience` epochs without gain), the latest state
as `last.pt`, and `history.json` gets the epoch's figures. Every file is written atomically.
What a call does with an existing run folder (resume, nothing to do, refuse, --restart) is
decided by `baselines.run_folder` before any data is read; nothing a user had is destroyed.

Provenance: the features file must come from this data set (`check_features_source`); the
run records the data set's content hash so that `evaluate` can refuse another one.

Data parallel: under `torchrun` (WORLD_SIZE > 1) each process takes a contiguous slice of
every batch and the model is wrapped in DistributedDataParallel (gloo on CPU, nccl on CUDA).
Each process's loss is its slice's summed loss divided by the global batch size, times the
number of processes, so DDP's gradient average equals the one-process batch mean: the same
updates as one process (up to float summation order). Validation is sharded and the counts
summed across processes; only rank 0 writes files.

Run folder: config.json (the resolved TrainConfig, which settings came from the defaults
file, model config, feature attributes, input hashes), history.json, last.pt, best.pt (and
metrics.json from `vprom evaluate`). Checkpoints hold only tensors and plain Python values, so
`torch.load(path, weights_only=True)` reads them.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from vprom.baselines import run_folder
from vprom.baselines.parts import ModelConfig
from vprom.baselines.config import (
    HYPER,
    OPTIMIZERS,
    TrainConfig,
    check_value,
    defaults_path,
)
from vprom.baselines.data import MatrixSet, SplitData, load_split
from vprom.baselines.registry import get_model, list_models
from vprom.baselines.run_folder import RunPlace, load_checkpoint
from vprom.baselines.steps import Stepper, batches, epoch_share, make_optimizer
from vprom.errors import VpromError
from vprom.claim import writes
from vprom.feature_files import check_features_source
from vprom.files import atomic_path, write_json
from vprom.manifest import input_hash, make_manifest
from vprom.domain import SPLITS
from vprom.runtime import World, joined_world

__all__ = ["train", "build_model", "load_checkpoint", "predict", "accuracy", "train_epoch"]

CHECKPOINT_FORMAT = 2
EVAL_BATCH = 512


def check_config(config: TrainConfig) -> None:
    """Refuse a (resolved) config that cannot run, before any data is read."""
    if config.split not in SPLITS:
        raise VpromError(f"unknown split {config.split!r}; the splits are {', '.join(SPLITS)}")
    if config.model not in list_models():
        raise VpromError(f"unknown model {config.model!r}; known models: "
                         f"{', '.join(list_models())}")
    if config.optimizer not in OPTIMIZERS:
        raise VpromError(f"unknown optimizer {config.optimizer!r}; use one of "
                         f"{', '.join(OPTIMIZERS)}")
    for name in ("epochs", "patience"):
        if getattr(config, name) < 1:
            raise VpromError(f"--{name} must be at least 1, got {getattr(config, name)}")
    for name in HYPER[1:]:
        value = getattr(config, name)
        problem = None if value is None else check_value(name, value)
        if problem:
            raise VpromError(f"--{name.replace('_', '-')}: {problem}")
    for name in ("dataset", "features"):
        if not getattr(config, name).is_file():
            raise VpromError(f"{getattr(config, name)}: no such file (--{name})")


# ---------------------------------------------------------------- model and optimiser
def build_model(config: TrainConfig, feature_dim: int) -> tuple[torch.nn.Module, ModelConfig]:
    """The model of `config` (resolved here: None means the model's default), its weights
    drawn from `config.seed` (the caller's RNG is left alone)."""
    config = config.resolved()
    model_config = ModelConfig(feature_dim=feature_dim, hidden=config.hidden, aux=config.aux,
                               score_init=config.score_init)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.seed)
        model = get_model(config.model, model_config)
    return model, model_config


def _optimizer(config: TrainConfig, model: torch.nn.Module, device: torch.device):
    return make_optimizer(config.optimizer, model.parameters(), lr=config.lr, eps=config.eps,
                          rho=config.rho, capturable=config.cuda_graphs and device.type == "cuda")


def _epoch_seed(seed: int, epoch: int, *more: int) -> int:
    return int(np.random.SeedSequence([seed, epoch, *more]).generate_state(1)[0])


# ---------------------------------------------------------------- one epoch
def train_epoch(stepper: Stepper, config: TrainConfig, epoch: int, world: World) -> dict:
    """One pass over the training matrices; returns the epoch's loss and accuracy figures."""
    share = epoch_share(len(stepper.part), config.batch_size, config.seed, epoch, world)
    stepper.model.train()
    torch.manual_seed(_epoch_seed(config.seed, epoch, world.rank))
    stepper.load(share)
    for _ in tqdm(range(share.steps), desc=f"epoch {epoch + 1}/{config.epochs}", unit="batch",
                  disable=None if world.main else True, leave=False):
        stepper.run()
    # the one read-back of the epoch
    answer_loss, aux_loss, correct, count = world.all_sum([*stepper.figures().tolist(),
                                                           share.count])
    figures = {"train_loss": (answer_loss + aux_loss) / count,
               "train_answer_loss": answer_loss / count,
               "train_acc": correct / count}
    if config.aux:
        figures["train_aux_loss"] = aux_loss / count
    return figures


@torch.no_grad()
def predict(model, data: SplitData, part: MatrixSet, batch_size: int = EVAL_BATCH) -> torch.Tensor:
    """The predicted answer of every matrix of `part` (one process, no DDP wrapper)."""
    was_training = model.training
    model.eval()
    out = []
    for start in range(0, len(part), batch_size):
        index = torch.arange(start, min(start + batch_size, len(part)),
                             device=data.features.device)
        out.append(model(data.panels(part, index)).scores.argmax(1))
    model.train(was_training)
    if not out:
        return torch.zeros(0, dtype=torch.int64)
    return torch.cat(out).cpu()


def accuracy(model, data: SplitData, part_name: str, world: World) -> float | None:
    """Accuracy on a part, each process scoring a slice; None when the part is empty."""
    part = data.parts[part_name]
    mine = world.shard(np.arange(len(part)))
    correct = 0
    if len(mine):
        sub = part.take(mine)
        correct = int((predict(model, data, sub) == sub.answer.cpu()).sum())
    correct, count = world.all_sum([correct, len(mine)])
    return correct / count if count else None


# ---------------------------------------------------------------- the run
def rng_devices(device: torch.device) -> list[int]:
    """The CUDA devices whose generators `fork_rng` saves and restores around a run."""
    return [device.index] if device.type == "cuda" else []


def ddp_device_ids(device: torch.device) -> list[int] | None:
    """DistributedDataParallel's `device_ids`: this process's GPU, None on the CPU."""
    return [device.index] if device.type == "cuda" else None


@writes(lambda a: a["config"].out, ("run",), inputs=run_folder.inputs, names=run_folder.NAMES)
def train(config: TrainConfig) -> Path:
    """Train `config.model` on `config.split`; returns the run folder (see the module doc).

    The whole loop is here: open the run (`Run.open`: the folder, the data, the model, the
    optimiser, the epoch to start from), then per epoch train, score validation, keep the
    best and write the checkpoints (`Run.end_epoch`), until the last epoch or early stop.
    """
    requested = config
    config = config.resolved()
    check_config(config)
    with joined_world(config.device) as world:
        if config.cuda_graphs and world.device.type != "cuda":
            raise VpromError("--cuda-graphs needs a CUDA device; drop it on the CPU")
        with torch.random.fork_rng(devices=rng_devices(world.device)):
            run = Run.open(config, requested.defaulted(), world)
            if run is None:
                return config.out
            try:
                for epoch in range(run.start, config.epochs):
                    if run_folder.stopped(run.history, run.best, config.patience):
                        break
                    began = time.perf_counter()
                    figures = train_epoch(run.stepper, config, epoch, world)
                    figures["val_acc"] = accuracy(run.model, run.data, "val", world)
                    run.end_epoch(epoch, figures, time.perf_counter() - began)
            except KeyboardInterrupt:
                run.interrupted()
                raise
            val = run.best["val_acc"]
            _log(world, f"done: best val accuracy {'n/a' if val is None else f'{100 * val:.1f}%'}"
                        f" (epoch {run.best['epoch'] + 1}); run folder {config.out}")
    return config.out


def _load_data(config: TrainConfig, world: World) -> SplitData:
    check_features_source(config.dataset, config.features)
    data = load_split(config.dataset, config.features, config.split,
                      shuffle_context=config.shuffle_context, seed=config.seed,
                      center=config.center_features)
    if len(data.parts["train"]) == 0:
        raise VpromError(f"{config.dataset}: split {config.split!r} has no training matrices; "
                         "regenerate the dataset at a larger --scale or pick another split")
    smallest = min(len(b) for b in batches(len(data.parts["train"]), config.batch_size, 0, 0))
    if smallest < world.size:
        raise VpromError(f"batches of {smallest} matrices cannot be split over {world.size} "
                         "processes; raise --batch-size or use fewer processes")
    return data.to(world.device)


@dataclass
class Run:
    """One training run between its epochs: what `train`'s loop reads and `end_epoch` keeps."""

    config: TrainConfig
    world: World
    place: RunPlace  # what this call does with the run folder (a --restart stages first)
    data: SplitData
    model: torch.nn.Module  # unwrapped: what checkpoints hold and validation scores
    model_config: ModelConfig
    optimizer: torch.optim.Optimizer
    stepper: Stepper  # the training step over the (DDP-wrapped) model
    history: list[dict]
    best: dict  # {"epoch", "val_acc"} of the best epoch so far
    start: int  # the first epoch this call trains

    @property
    def folder(self) -> Path:
        """Where the run writes now: OUT, or a --restart's staging folder until promoted."""
        return self.place.folder

    @classmethod
    def open(cls, config: TrainConfig, defaulted: list[str], world: World) -> Run | None:
        """The run ready for its next epoch (fresh or resumed); None when nothing is left."""
        place = run_folder.place_run(config)
        world.barrier()  # every process has read the folder before rank 0 changes it
        _log(world, place.message)
        if place.finished:
            return None
        data = _load_data(config, world)
        model, model_config = build_model(config, data.feature_dim)
        model.to(world.device)
        optimizer = _optimizer(config, model, world.device)
        history, best, start = _restore(place.state, model, optimizer)
        if world.main:
            run_folder.prepare(place)
            _write_config(place.folder, config, defaulted, data, model_config, world)
            _log(world, f"{config.model} on {config.split}: {len(data.parts['train'])} train / "
                        f"{len(data.parts['val'])} val matrices, {world.size} process(es) on "
                        f"{world.device}; {_settings(config, defaulted)}")
        world.barrier()
        shape = epoch_share(len(data.parts["train"]), config.batch_size, config.seed, start,
                            world).index.shape
        stepper = Stepper(_wrap(model, world), optimizer, data, config.aux, world, *shape,
                          cuda_graphs=config.cuda_graphs)
        return cls(config, world, place, data, model, model_config, optimizer, stepper,
                   history, best, start)

    def end_epoch(self, epoch: int, figures: dict, seconds: float) -> None:
        """Record the epoch, keep it as the best when validation improved (without
        validation matrices every epoch counts as the best: no early stopping), write the
        checkpoints and, after a --restart's first epoch, promote the staging folder."""
        world = self.world
        self.history.append({"epoch": epoch + 1, **figures, "seconds": round(seconds, 3)})
        improved = figures["val_acc"] is None or self.best["val_acc"] is None or (
            figures["val_acc"] > self.best["val_acc"])
        if improved:
            if world.main:
                run_folder.supersede_metrics(self.folder)
            self.best = {"epoch": epoch, "val_acc": figures["val_acc"]}
        if world.main:
            self.save(epoch, improved)
            if self.place.staging:
                self.place = run_folder.promote(self.place)
                _log(world, self.place.message)
        world.barrier()

    def save(self, epoch: int, improved: bool) -> None:
        """last.pt (and best.pt when `improved`) and history.json, each atomically."""
        config, folder, history = self.config, self.folder, self.history
        state = {
            "format": CHECKPOINT_FORMAT,
            "config": run_folder.portable(config.to_dict(), folder),
            "model_config": dataclasses.asdict(self.model_config),
            "features_attrs": run_folder.file_names(plain(self.data.attrs)),
            "dataset": {"content_hash": input_hash(config.dataset)},
            "model": {k: v.detach().cpu() for k, v in self.model.state_dict().items()},
            "optimizer": self.optimizer.state_dict(),
            "epoch": epoch,
            "best": dict(self.best),
            "history": [dict(h) for h in history],
            "rng": {"torch": torch.get_rng_state()},
            "world_size": self.world.size,
        }
        if improved:
            _save_checkpoint(folder / "best.pt", {k: v for k, v in state.items()
                                                  if k != "optimizer"})
        _save_checkpoint(folder / "last.pt", state)
        write_json(folder / "history.json", history)
        h = history[-1]
        val = "n/a" if h["val_acc"] is None else f"{100 * h['val_acc']:.1f}%"
        _log(self.world, f"epoch {epoch + 1}/{config.epochs}: loss {h['train_loss']:.4f}, "
                         f"train {100 * h['train_acc']:.1f}%, val {val}"
                         + (" (best)" if improved else ""))

    def interrupted(self) -> None:
        """Say what Ctrl-C left: the finished epochs, or a restart's old run untouched."""
        out = self.config.out
        if self.place.staging and self.folder.exists():  # not promoted yet
            _log(self.world, f"interrupted before the restarted run finished an epoch: {out} "
                             "is as it was; run the same command (with --restart) to start over")
        else:
            _log(self.world, f"interrupted: the epochs finished so far are saved in {out}; "
                             "run the same command again to resume")


def _settings(config: TrainConfig, defaulted: list[str]) -> str:
    values = ", ".join(f"{k} {getattr(config, k)}" for k in HYPER if getattr(config, k) is not None)
    source = f" ({', '.join(defaulted)} from {defaults_path().name})" if defaulted else ""
    return values + source


def _restore(state: dict | None, model, optimizer) -> tuple[list[dict], dict, int]:
    """Load a checkpoint's weights and optimiser state; returns (history, best, first epoch)."""
    if state is None:
        return [], {"epoch": -1, "val_acc": None}, 0
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    torch.set_rng_state(state["rng"]["torch"])
    return state["history"], state["best"], state["epoch"] + 1


def _write_config(folder: Path, config: TrainConfig, defaulted: list[str], data: SplitData,
                  model_config: ModelConfig, world: World) -> None:
    manifest = make_manifest(
        "run", config=run_folder.portable(config.to_dict(), config.out), seed=config.seed,
        inputs={"dataset": input_hash(config.dataset),
                "features": input_hash(config.features)},
        counts={part: len(s) for part, s in data.parts.items()})
    manifest["defaulted"] = {k: getattr(config, k) for k in defaulted}
    manifest["defaults_file"] = f"baselines/{defaults_path().name}"  # not the install path
    manifest["model_config"] = dataclasses.asdict(model_config)
    manifest["features_attrs"] = run_folder.file_names(plain(data.attrs))
    manifest["world_size"] = world.size
    write_json(folder / "config.json", manifest)


def plain(value):
    """`value` with numpy scalars/arrays turned into Python ones (JSON- and weights_only-safe)."""
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, Path):
        return str(value)
    return value


def _save_checkpoint(path: Path, state: dict) -> None:
    with atomic_path(path) as tmp:
        torch.save(state, tmp)


def _wrap(model: torch.nn.Module, world: World) -> torch.nn.Module:
    """The model as trained: DDP-wrapped when there are several processes."""
    if world.size == 1:
        return model
    return torch.nn.parallel.DistributedDataParallel(model,
                                                     device_ids=ddp_device_ids(world.device))


def _log(world: World, text: str) -> None:
    if world.main:
        tqdm.write(text)
