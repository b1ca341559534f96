"""Training one baseline on one split (`vprom train`), in the shape of torchvision's reference.
Per epoch: `train_one_epoch`, `evaluate` on validation, best.pt / last.pt / history.json saved;
early stop after `patience` epochs without gain. Epoch e's permutation and torch's seed come from
(seed, e, rank), and a cosine schedule's rate from (e, step), so a resumed run ends with an
unbroken run's weights. Under torchrun each process takes a slice of every batch and scales its
summed loss by world size / batch size, so DDP's gradient average is the batch mean."""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from tqdm import tqdm

from vprom.baselines import run_folder
from vprom.baselines.config import (DEFAULTS_FILE, HYPER, LR_SCHEDULES, SOURCES, TrainConfig,
                                    check_value)
from vprom.baselines.data import MatrixSet, SplitData, load_split
from vprom.baselines.parts import ModelConfig
from vprom.baselines.registry import get_model, input_kind, list_models
from vprom.baselines.run_folder import RunPlace, save_checkpoint
from vprom.domain import SPLITS
from vprom.errors import VpromError
from vprom.claim import writes
from vprom.feature_files import check_features_source
from vprom.file_kinds import CROPS, DATASET, FEATS, MAPS, check_kind
from vprom.files import write_json
from vprom.manifest import input_hash, make_manifest
from vprom.runtime import World, cosine_lr, epoch_batches, joined_world

CHECKPOINT_FORMAT = 2
EVAL_BATCH = 512
WARMUP_STEPS = 3  # eager steps before a CUDA graph capture: cuBLAS handles, optimiser state
#: each panel option's file kind, and what makes it
SOURCE_FILES = {"features": (FEATS, "pooled vectors of `vprom extract`"),
                "maps": (MAPS, "maps of `vprom extract --pool none`"),
                "crops": (CROPS, "a store of `vprom crops`")}


def check_config(config: TrainConfig) -> None:
    if config.split not in SPLITS:
        raise VpromError(f"unknown split {config.split!r}; the splits are {', '.join(SPLITS)}")
    if config.model not in list_models():
        raise VpromError(f"unknown model {config.model!r}; known models: "
                         f"{', '.join(list_models())}")
    if config.lr_schedule not in LR_SCHEDULES:
        raise VpromError(f"unknown --lr-schedule {config.lr_schedule!r}; use one of "
                         f"{', '.join(LR_SCHEDULES)}")
    if config.lr_schedule != "constant" and config.cuda_graphs:
        raise VpromError("--lr-schedule cosine changes the learning rate that captured CUDA "
                         "graphs hold fixed; drop --cuda-graphs or use a constant rate")
    for name in ("epochs", "patience"):
        if getattr(config, name) < 1:
            raise VpromError(f"--{name} must be at least 1, got {getattr(config, name)}")
    for name in HYPER[1:]:
        value = getattr(config, name)
        if value is not None and (problem := check_value(name, value)):
            raise VpromError(f"--{name.replace('_', '-')}: {problem}")
    option, kind, path = config.source
    wanted = input_kind(config.model)
    if kind != wanted:
        need = next(name for name, k in SOURCES.items() if k == wanted)
        raise VpromError(f"--model {config.model} reads {wanted}, not the {kind} of --{option}: "
                         f"pass its panels with --{need} ({SOURCE_FILES[need][1]})")
    for name, file in (("dataset", config.dataset), (option, path)):
        if not file.is_file():
            raise VpromError(f"{file}: no such file (--{name})")
    check_kind(config.dataset, DATASET, "train's first argument")
    check_kind(path, SOURCE_FILES[option][0], f"--{option}")
    check_features_source(config.dataset, path)


def build_model(config: TrainConfig, feature_dim: int,
                side: int = 0) -> tuple[torch.nn.Module, ModelConfig]:
    """The model of `config` for panels of `feature_dim` and `side`, seeded by `config.seed`."""
    config = config.resolved()
    model_config = ModelConfig(feature_dim=feature_dim, hidden=config.hidden, aux=config.aux,
                               score_init=config.score_init, side=side)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.seed)
        model = get_model(config.model, model_config)
    return model, model_config


def make_optimizer(config: TrainConfig, model: torch.nn.Module,
                   capturable: bool = False) -> torch.optim.Optimizer:
    settings = {"lr": config.lr, "eps": config.eps, "capturable": capturable}
    if config.optimizer == "adam":
        return torch.optim.Adam(model.parameters(), **settings)
    return torch.optim.Adadelta(model.parameters(), rho=config.rho, **settings)


def train_step(model, optimizer, data: SplitData, index: torch.Tensor, scale,
               aux: bool) -> torch.Tensor:
    """One step on the training matrices at `index`: their summed losses and correct answers."""
    part = data.parts["train"]
    out = model(data.panels(part, index))
    answer = F.cross_entropy(out.scores, part.answer[index], reduction="none")
    extra = torch.zeros_like(answer)
    if aux:
        if out.relation_logits is None or out.element_type_logits is None:
            raise VpromError("--aux: this model returned no auxiliary logits; train it "
                             "without --aux")
        extra = (F.cross_entropy(out.relation_logits, part.relation[index], reduction="none")
                 + F.cross_entropy(out.element_type_logits, part.element_class[index],
                                   reduction="none"))
    loss = (answer + extra).sum() * scale
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    correct = (out.scores.argmax(1) == part.answer[index]).sum()
    return torch.stack([answer.detach().sum(), extra.detach().sum(), correct.to(answer.dtype)])


def train_one_epoch(model, optimizer, data: SplitData, batches, aux: bool, world: World,
                    step=train_step, lr_at=None) -> dict:
    """One pass over `batches` with `step` (`train_step` or a `CudaGraphStep`), the learning
    rate of the i-th set to `lr_at(i)` when given; mean figures."""
    model.train()
    # float64 running sums on the device, read back once at the end of the epoch
    totals = torch.zeros(3, dtype=torch.float64, device=data.features.device)
    for i, (index, scale) in enumerate(batches):
        if lr_at is not None:
            for group in optimizer.param_groups:
                group["lr"] = lr_at(i)
        totals += step(model, optimizer, data, index, scale, aux)
    answer_loss, aux_loss, correct = world.all_sum(totals.tolist())
    n = len(data.parts["train"])
    figures = {"train_loss": (answer_loss + aux_loss) / n, "train_answer_loss": answer_loss / n,
               "train_acc": correct / n}
    if aux:
        figures["train_aux_loss"] = aux_loss / n
    return figures


@torch.no_grad()
def predict(model, data: SplitData, part: MatrixSet, batch_size: int = EVAL_BATCH) -> torch.Tensor:
    """The predicted answer of every matrix of `part` (one process, no DDP wrapper)."""
    was_training = model.training
    model.eval()
    index = torch.arange(len(part), device=data.features.device)
    out = [model(data.panels(part, batch)).scores.argmax(1) for batch in index.split(batch_size)]
    model.train(was_training)
    return torch.cat(out).cpu() if out else torch.zeros(0, dtype=torch.int64)


def evaluate(model, data: SplitData, part_name: str, world: World) -> float | None:
    """Accuracy on a part, each process scoring a slice; None when the part is empty."""
    part = data.parts[part_name]
    mine = world.shard(np.arange(len(part)))
    correct = 0
    if len(mine):
        sub = part.take(mine)
        correct = int((predict(model, data, sub) == sub.answer.cpu()).sum())
    correct, count = world.all_sum([correct, len(mine)])
    return correct / count if count else None


class CudaGraphStep:
    """`train_step` replayed from CUDA graphs captured per batch width (`--cuda-graphs`)."""

    def __init__(self, world: World):
        if world.device.type != "cuda":
            raise VpromError("--cuda-graphs needs a CUDA device; drop it on the CPU")
        if world.size > 1:
            raise VpromError("--cuda-graphs runs on one process; drop it under torchrun")
        self.eager_steps, self.graphs = 0, {}

    def __call__(self, model, optimizer, data, index, scale, aux) -> torch.Tensor:
        if self.eager_steps < WARMUP_STEPS:
            self.eager_steps += 1
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                sums = train_step(model, optimizer, data, index, scale, aux)
            torch.cuda.current_stream().wait_stream(side)
            return sums
        if len(index) not in self.graphs:
            static = index.clone(), torch.tensor(scale, device=index.device)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                sums = train_step(model, optimizer, data, *static, aux)
            self.graphs[len(index)] = graph, *static, sums
        graph, static_index, static_scale, sums = self.graphs[len(index)]
        static_index.copy_(index)
        static_scale.fill_(scale)
        graph.replay()
        return sums


@writes(lambda a: a["config"].out, ("run",),
        inputs=lambda a: (a["config"].dataset, a["config"].source[2]))
def train(config: TrainConfig) -> Path:
    """Train `config.model` on `config.split`; returns the run folder (see the module doc)."""
    defaulted, config = config.defaulted(), config.resolved()
    check_config(config)
    with joined_world(config.device) as world, torch.random.fork_rng(
            devices=[world.device.index] if world.device.type == "cuda" else []):
        graphed = CudaGraphStep(world) if config.cuda_graphs else None
        place = run_folder.place_run(config)
        world.barrier()  # every process has read the folder before rank 0 changes it
        log(world, place.message)
        if place.finished:
            return config.out
        data = load_data(config, world.device, world.size)
        model, model_config = build_model(config, data.feature_dim, data.side)
        model.to(world.device)
        optimizer = make_optimizer(config, model, capturable=graphed is not None)
        history, best = [], {"epoch": -1, "val_acc": None}
        if place.state is not None:  # resume from last.pt: its history has an entry per epoch
            run_folder.load_weights(model, place.state, place.out / "last.pt")
            optimizer.load_state_dict(place.state["optimizer"])
            history, best = place.state["history"], place.state["best"]
        header = {"format": CHECKPOINT_FORMAT, "model_config": dataclasses.asdict(model_config),
                  "features_attrs": run_folder.plain_record(data.attrs),
                  "dataset": {"content_hash": input_hash(config.dataset)},
                  "world_size": world.size}
        if world.main:
            run_folder.prepare(place)
            # config.json: the run's manifest, with its resolved settings and where they came from
            manifest = make_manifest(
                "run", config=run_folder.portable(config.to_dict(), config.out), seed=config.seed,
                inputs={"dataset": input_hash(config.dataset),
                        "features": input_hash(config.source[2])},
                counts={part: len(s) for part, s in data.parts.items()})
            manifest.update(defaulted={k: getattr(config, k) for k in defaulted},
                            defaults_file=f"baselines/{DEFAULTS_FILE}", world_size=world.size,
                            model_config=header["model_config"],
                            features_attrs=header["features_attrs"])
            write_json(place.folder / "config.json", manifest)
            hyper = ", ".join(f"{k} {getattr(config, k)}" for k in HYPER
                              if getattr(config, k) is not None)
            log(world, f"{config.model} on {config.split}: {len(data.parts['train'])} train / "
                       f"{len(data.parts['val'])} val matrices, {world.size} process(es) on "
                       f"{world.device}; {hyper}" + (f" ({', '.join(defaulted)} from "
                                                    f"{DEFAULTS_FILE})" if defaulted else ""))
        world.barrier()
        trained = model if world.size == 1 else torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[world.device.index] if world.device.type == "cuda" else None)
        try:
            for epoch in range(len(history), config.epochs):
                if run_folder.stopped(history, best, config.patience):
                    break
                began = time.perf_counter()
                torch.manual_seed(int(np.random.SeedSequence(
                    [config.seed, epoch, world.rank]).generate_state(1)[0]))
                batches = tqdm(epoch_batches(len(data.parts["train"]), config.batch_size,
                                             config.seed, epoch, world),
                               desc=f"epoch {epoch + 1}/{config.epochs}", unit="batch",
                               disable=None if world.main else True, leave=False)
                steps = len(batches)
                lr_at = None if config.lr_schedule == "constant" else (
                    lambda i: cosine_lr(config.lr, epoch + i / steps, config.epochs))
                figures = train_one_epoch(trained, optimizer, data, batches, config.aux, world,
                                          graphed or train_step, lr_at)
                figures["lr"] = optimizer.param_groups[0]["lr"]  # the epoch's last step's
                figures["val_acc"] = evaluate(model, data, "val", world)
                history.append({"epoch": epoch + 1, **figures,
                                "seconds": round(time.perf_counter() - began, 3)})
                # without validation matrices every epoch counts as the best: no early stop
                improved = figures["val_acc"] is None or best["val_acc"] is None or (
                    figures["val_acc"] > best["val_acc"])
                if improved:
                    best = {"epoch": epoch, "val_acc": figures["val_acc"]}
                if world.main:
                    place = save_epoch(place, improved, {
                        **header, "config": run_folder.portable(config.to_dict(), place.folder),
                        "model": {k: v.detach().cpu() for k, v in model.state_dict().items()},
                        "optimizer": optimizer.state_dict(), "epoch": epoch,
                        "best": dict(best), "history": [dict(h) for h in history]})
                world.barrier()
        except KeyboardInterrupt:
            if place.staging and place.folder.exists():  # the restarted run has not replaced it
                log(world, f"interrupted before the restarted run finished an epoch: {place.out} "
                           "is as it was; run the same command (with --restart) to start over")
            else:
                log(world, f"interrupted: the epochs finished so far are saved in {place.out}; "
                           "run the same command again to resume")
            raise
        val = best["val_acc"]
        log(world, f"done: best val accuracy {'n/a' if val is None else f'{100 * val:.1f}%'} "
                   f"(epoch {best['epoch'] + 1}); run folder {config.out}")
    return config.out


def load_data(config: TrainConfig, device: torch.device, processes: int = 1) -> SplitData:
    """The run's split on `device`, refused when it cannot train over `processes` processes."""
    _, kind, path = config.source
    data = load_split(config.dataset, path, config.split, kind=kind,
                      shuffle_context=config.shuffle_context, seed=config.seed,
                      center=config.center_features)
    n = len(data.parts["train"])
    if n == 0:
        raise VpromError(f"{config.dataset}: split {config.split!r} has no training matrices; "
                         "regenerate the dataset at a larger --scale or pick another split")
    smallest = n // max(1, math.ceil(n / config.batch_size))
    if smallest < processes:
        raise VpromError(f"batches of {smallest} matrices cannot be split over {processes} "
                         "processes; raise --batch-size or use fewer processes")
    return data.to(device)


def save_epoch(place: RunPlace, improved: bool, state: dict) -> RunPlace:
    """Rank 0 after an epoch: checkpoints and history.json, then a --restart's promotion."""
    folder = place.folder
    if improved:
        run_folder.supersede_metrics(folder)  # it scored the best.pt about to be replaced
    with contextlib.ExitStack() as renames:  # renamed in reverse: best.pt, then last.pt
        save_checkpoint(folder / "last.pt", state, renames)
        if improved:
            save_checkpoint(folder / "best.pt",
                            {k: v for k, v in state.items() if k != "optimizer"}, renames)
    write_json(folder / "history.json", state["history"])
    h, epochs = state["history"][-1], state["config"]["epochs"]
    val = "n/a" if h["val_acc"] is None else f"{100 * h['val_acc']:.1f}%"
    aux = "" if h.get("train_aux_loss") is None else f" (+ aux loss {h['train_aux_loss']:.4f})"
    tqdm.write(f"epoch {h['epoch']}/{epochs}: answer loss {h['train_answer_loss']:.4f}{aux}, "
               f"train {100 * h['train_acc']:.1f}%, val {val}" + (" (best)" if improved else ""))
    if place.staging:
        place = run_folder.promote(place)
        tqdm.write(place.message)
    return place


def log(world: World, text: str) -> None:
    if world.main:
        tqdm.write(text)
