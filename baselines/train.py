"""Training one baseline on one split (`vprom train`), resumable and data-parallel.

Objective: softmax cross-entropy over the 8 candidate scores. With `aux`, the two auxiliary
heads add their cross-entropies (relation, 4-way; element type, 3-way) with equal weight; they
are used only in training. Optimiser: AdaDelta (the paper's; lr 1.0) or Adam (lr 1e-4).

Epochs and batches. Epoch e visits the training matrices in the order of a permutation drawn
from a generator seeded by (seed, e); the order is cut into ceil(n / batch_size) batches of
near-equal size (so no tiny last batch). Dropout-like randomness, if a model has any, comes
from the torch generator reseeded at each epoch from (seed, e, rank). Everything an epoch does
is thus a function of the seed, the epoch number and the weights it starts from, which is why
resuming from the checkpoint of epoch e reaches the same final weights as an unbroken run.

After every epoch the split's validation set is scored; the best validation accuracy so far
is kept as `best.pt` (early stopping after `patience` epochs without gain), the latest state
as `last.pt`, and `history.json` gets the epoch's figures. Every file is written atomically.

Data parallel: under `torchrun` (WORLD_SIZE > 1) each process takes a contiguous slice of
every batch and the model is wrapped in DistributedDataParallel (gloo on CPU, nccl on CUDA).
Each process's loss is its slice's summed loss divided by the global batch size, times the
number of processes, so DDP's gradient average equals the one-process batch mean: the same
updates as one process (up to float summation order). Validation is sharded and the counts
summed across processes; only rank 0 writes files.

Run folder: config.json (the TrainConfig, model config, feature attributes, input hashes),
history.json, last.pt, best.pt (and metrics.json from `vprom evaluate`). Checkpoints hold
only tensors and plain Python values, so `torch.load(path, weights_only=True)` reads them.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from tqdm import tqdm

from baselines.common import ModelConfig
from baselines.config import OPTIMIZERS, TrainConfig
from baselines.data import MatrixSet, SplitData, load_split
from baselines.registry import get_model, list_models
from features.devices import World, joined_world
from vprom.errors import VpromError
from vprom.io import atomic_path, make_manifest, sha256_file, write_json
from vprom.records import SPLITS

CHECKPOINT_FORMAT = 1
EVAL_BATCH = 512
# Fields that may differ when a run is resumed: how long to train and where, not what.
RESUMABLE_CHANGES = ("epochs", "patience", "device", "resume")


def check_config(config: TrainConfig) -> None:
    """Refuse a config that cannot run, before any data is read."""
    if config.split not in SPLITS:
        raise VpromError(f"unknown split {config.split!r}; the splits are {', '.join(SPLITS)}")
    if config.model not in list_models():
        raise VpromError(f"unknown model {config.model!r}; known models: "
                         f"{', '.join(list_models())}")
    if config.optimizer not in OPTIMIZERS:
        raise VpromError(f"unknown optimizer {config.optimizer!r}; use one of "
                         f"{', '.join(OPTIMIZERS)}")
    for name in ("epochs", "batch_size", "hidden", "patience"):
        if getattr(config, name) < 1:
            raise VpromError(f"--{name.replace('_', '-')} must be at least 1, "
                             f"got {getattr(config, name)}")
    if config.lr is not None and not config.lr > 0:
        raise VpromError(f"--lr must be positive, got {config.lr}")
    for name in ("dataset", "features"):
        if not getattr(config, name).is_file():
            raise VpromError(f"{getattr(config, name)}: no such file (--{name})")


# ---------------------------------------------------------------- the run folder
def _changes(theirs: dict, mine: dict, ignore: tuple[str, ...]) -> str:
    """The fields (other than `ignore`) whose values differ, as 'name old vs new, ...'."""
    keys = sorted(k for k in set(theirs) | set(mine)
                  if k not in ignore and theirs.get(k) != mine.get(k))
    return ", ".join(f"{k} {theirs.get(k)!r} vs {mine.get(k)!r}" for k in keys)


def _stored_config(out: Path) -> dict | None:
    path = out / "config.json"
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())["config"]
    except (json.JSONDecodeError, KeyError, TypeError):
        raise VpromError(f"{path}: not a vprom run config; choose another --out") from None


def load_checkpoint(path: Path) -> dict:
    """A checkpoint written by `train`, read with `weights_only=True` (no code is unpickled)."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise VpromError(f"{path}: no such checkpoint") from None
    except Exception as e:  # a truncated or foreign file: say which and what to do
        raise VpromError(f"{path}: cannot be read as a vprom checkpoint ({e}); train the run "
                         "again") from None


def _resume_state(config: TrainConfig) -> dict | None:
    """The checkpoint to continue from, after checking the run folder matches `config`."""
    stored = _stored_config(config.out)
    mine = config.to_dict()
    if not config.resume:
        changes = _changes(stored, mine, ("device", "resume")) if stored is not None else ""
        if changes:
            raise VpromError(f"{config.out} holds a run with a different config ({changes}); "
                             "pass --resume to continue it, or choose another --out")
        return None
    last = config.out / "last.pt"
    if not last.is_file():
        return None  # nothing to resume: start from scratch
    state = load_checkpoint(last)
    changes = _changes(state["config"], mine, RESUMABLE_CHANGES)
    if changes:
        raise VpromError(f"{last}: was trained with another config ({changes}); only --epochs, "
                         "--patience and --device may change on --resume; choose another "
                         "--out to train this config")
    return state


def _write_config(config: TrainConfig, data: SplitData, model_config: ModelConfig,
                  world: World) -> None:
    manifest = make_manifest(
        "run", config=config.to_dict(), seed=config.seed,
        inputs={"dataset": sha256_file(config.dataset), "features": sha256_file(config.features)},
        counts={part: len(s) for part, s in data.parts.items()})
    manifest["model_config"] = dataclasses.asdict(model_config)
    manifest["features_attrs"] = _plain(data.attrs)
    manifest["world_size"] = world.size
    write_json(config.out / "config.json", manifest)


def _plain(value):
    """`value` with numpy scalars/arrays turned into Python ones (JSON- and weights_only-safe)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
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


# ---------------------------------------------------------------- model and optimiser
def build_model(config: TrainConfig, feature_dim: int) -> tuple[torch.nn.Module, ModelConfig]:
    """The model, its weights drawn from `config.seed` (the caller's RNG is left alone)."""
    model_config = ModelConfig(feature_dim=feature_dim, hidden=config.hidden, aux=config.aux)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.seed)
        model = get_model(config.model, model_config)
    return model, model_config


def _optimizer(config: TrainConfig, model: torch.nn.Module) -> torch.optim.Optimizer:
    if config.optimizer == "adam":
        return torch.optim.Adam(model.parameters(), lr=config.learning_rate)
    return torch.optim.Adadelta(model.parameters(), lr=config.learning_rate)


def _epoch_seed(seed: int, epoch: int, *more: int) -> int:
    return int(np.random.SeedSequence([seed, epoch, *more]).generate_state(1)[0])


def batches(n: int, batch_size: int, seed: int, epoch: int) -> list[np.ndarray]:
    """Epoch `epoch`'s batches: a seeded permutation cut in ceil(n/batch_size) near-equal parts."""
    order = np.random.default_rng(np.random.SeedSequence([seed, epoch])).permutation(n)
    return np.array_split(order, max(1, math.ceil(n / batch_size)))


# ---------------------------------------------------------------- one epoch
def _losses(out, part: MatrixSet, index: torch.Tensor, aux: bool):
    """Summed answer loss and summed auxiliary loss (0 without aux) over the slice."""
    answer = F.cross_entropy(out.scores, part.answer[index], reduction="sum")
    if not aux:
        return answer, answer.new_zeros(())
    if out.relation_logits is None or out.element_type_logits is None:
        raise VpromError("--aux: this model returned no auxiliary logits; train it without "
                         "--aux")
    extra = (F.cross_entropy(out.relation_logits, part.relation[index], reduction="sum")
             + F.cross_entropy(out.element_type_logits, part.element_class[index],
                               reduction="sum"))
    return answer, extra


def train_epoch(model, optimizer, data: SplitData, config: TrainConfig, epoch: int,
                world: World) -> dict:
    """One pass over the training matrices; returns the epoch's loss and accuracy figures."""
    part = data.parts["train"]
    model.train()
    torch.manual_seed(_epoch_seed(config.seed, epoch, world.rank))
    # Running sums stay on the device (answer loss, aux loss, correct, count): reading them
    # back every batch would stall a GPU.
    totals = torch.zeros(4, dtype=torch.float64, device=data.features.device)
    plan = batches(len(part), config.batch_size, config.seed, epoch)
    bar = tqdm(plan, desc=f"epoch {epoch + 1}/{config.epochs}", unit="batch",
               disable=None if world.main else True, leave=False)
    for step, batch in enumerate(bar):
        local = torch.from_numpy(world.shard(batch)).to(data.features.device)
        out = model(data.panels(part, local))
        answer, extra = _losses(out, part, local, config.aux)
        loss = (answer + extra) * (world.size / len(batch))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        correct = (out.scores.argmax(1) == part.answer[local]).sum()
        totals += torch.stack([answer.detach().double(), extra.detach().double(),
                               correct.double(), totals.new_tensor(len(local))])
        if world.main and step % 20 == 0 and not bar.disable:
            bar.set_postfix(loss=f"{totals[0].item() / max(totals[3].item(), 1):.3f}")
    answer_loss, aux_loss, correct, count = world.all_sum(totals.tolist())
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
def train(config: TrainConfig) -> Path:
    """Train `config.model` on `config.split`; returns the run folder (see the module doc)."""
    check_config(config)
    with joined_world(config.device) as world:
        devices = [world.device.index] if world.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices):  # the caller's RNG state is not touched
            _run(config, world)
    return config.out


def _load_data(config: TrainConfig, world: World) -> SplitData:
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


def _run(config: TrainConfig, world: World) -> None:
    state = _resume_state(config)
    data = _load_data(config, world)
    model, model_config = build_model(config, data.feature_dim)
    model.to(world.device)
    optimizer = _optimizer(config, model)
    history, best, start = _restore(state, model, optimizer)
    if world.main:
        _open_run(config, data, model_config, world, fresh=state is None, start=start)
    world.barrier()
    wrapped = _wrap(model, world)
    for epoch in range(start, config.epochs):
        if _stopped(history, best, config):
            break
        began = time.perf_counter()
        figures = train_epoch(wrapped, optimizer, data, config, epoch, world)
        figures["val_acc"] = accuracy(model, data, "val", world)
        history.append({"epoch": epoch + 1, **figures,
                        "seconds": round(time.perf_counter() - began, 3)})
        # Without validation matrices every epoch counts as the best (no early stopping).
        improved = figures["val_acc"] is None or best["val_acc"] is None or (
            figures["val_acc"] > best["val_acc"])
        if improved:
            best = {"epoch": epoch, "val_acc": figures["val_acc"]}
        if world.main:
            _end_epoch(config, model, model_config, optimizer, data, epoch, history, best,
                       improved, world)
        world.barrier()
    val = best["val_acc"]
    _log(world, f"done: best val accuracy {'n/a' if val is None else f'{100 * val:.1f}%'} "
                f"(epoch {best['epoch'] + 1}); run folder {config.out}")


def _restore(state: dict | None, model, optimizer) -> tuple[list[dict], dict, int]:
    """Load a checkpoint's weights and optimiser state; returns (history, best, first epoch)."""
    if state is None:
        return [], {"epoch": -1, "val_acc": None}, 0
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    torch.set_rng_state(state["rng"]["torch"])
    return state["history"], state["best"], state["epoch"] + 1


def _open_run(config: TrainConfig, data: SplitData, model_config: ModelConfig, world: World,
              fresh: bool, start: int) -> None:
    """Rank 0: prepare the run folder and say what is about to happen."""
    config.out.mkdir(parents=True, exist_ok=True)
    if fresh:
        for name in ("last.pt", "best.pt", "history.json", "metrics.json"):
            (config.out / name).unlink(missing_ok=True)  # a new run leaves no stale results
    _write_config(config, data, model_config, world)
    _log(world, f"{config.model} on {config.split}: {len(data.parts['train'])} train / "
                f"{len(data.parts['val'])} val matrices, {world.size} process(es) on "
                f"{world.device}" + (f"; resuming after epoch {start}" if start else ""))


def _wrap(model: torch.nn.Module, world: World) -> torch.nn.Module:
    """The model as trained: DDP-wrapped when there are several processes."""
    if world.size == 1:
        return model
    ids = [world.device.index] if world.device.type == "cuda" else None
    return torch.nn.parallel.DistributedDataParallel(model, device_ids=ids)


def _stopped(history: list[dict], best: dict, config: TrainConfig) -> bool:
    """Early stopping: `patience` epochs since the best validation accuracy."""
    if best["val_acc"] is None or not history:
        return False
    return history[-1]["epoch"] - (best["epoch"] + 1) >= config.patience


def _end_epoch(config, model, model_config, optimizer, data, epoch, history, best, improved,
               world) -> None:
    state = {
        "format": CHECKPOINT_FORMAT,
        "config": config.to_dict(),
        "model_config": dataclasses.asdict(model_config),
        "features_attrs": _plain(data.attrs),
        "model": {k: v.detach().cpu() for k, v in model.state_dict().items()},
        "optimizer": optimizer.state_dict(),
        "epoch": epoch,
        "best": dict(best),
        "history": [dict(h) for h in history],
        "rng": {"torch": torch.get_rng_state()},
        "world_size": world.size,
    }
    if improved:
        _save_checkpoint(config.out / "best.pt", {k: v for k, v in state.items()
                                                   if k != "optimizer"})
    _save_checkpoint(config.out / "last.pt", state)
    write_json(config.out / "history.json", history)
    h = history[-1]
    val = "n/a" if h["val_acc"] is None else f"{100 * h['val_acc']:.1f}%"
    _log(world, f"epoch {epoch + 1}/{config.epochs}: loss {h['train_loss']:.4f}, train "
                f"{100 * h['train_acc']:.1f}%, val {val}" + (" (best)" if improved else ""))


def _log(world: World, text: str) -> None:
    if world.main:
        tqdm.write(text)
