"""`vprom perceive`: a backbone fine-tuned on one split's training crops and their labels.

The pooled trunk under three linear heads, attributes (multi-label BCE), object category and
count (cross-entropy; a crop without one adds nothing), trained by Adam on a cosine from --lr
to 0 with half the crops flipped. Epoch e depends only on (seed, e) and its starting state, so
a run resumed from `<out>.resume.pt` ends with an unbroken run's bytes on the CPU (for one
torch thread count). The weights file, with the heads (`vprom extract --pool heads`), lands
after its manifest and is loaded back and checked.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from tqdm import tqdm
from vprom.features.backbones import Backbone, Loaded, TimmTrunk, get_backbone
from vprom.features.checkpoints import read_checkpoint_file
from vprom.features.perceive_data import HEADS, LabelledCrops, load_perception_data, load_pixels

from vprom.claim import writes
from vprom.errors import VpromError
from vprom.files import atomic_path
from vprom.manifest import input_hash, input_hashes, is_current, make_manifest, write_manifest
from vprom.runtime import World, cosine_lr, epoch_batches, joined_world

KIND = "perception-weights"
FORMAT = 1
EVAL_BATCH = 256
#: settings that may differ when a run is continued: how long and where, not what
RESUMABLE = ("epochs", "device")


@dataclasses.dataclass(frozen=True, kw_only=True)
class PerceiveConfig:
    dataset: Path
    vg: Path | None = None
    crops: Path | None = None
    split: str
    backbone: str
    out: Path
    weights: str | None = None  # None: ImageNet's or timm's when cached, else random init
    epochs: int = 3
    batch_size: int = 64
    input_size: int | None = None
    lr: float = 1e-3
    seed: int = 0
    device: str | None = None

    def settings(self, leave_out: tuple[str, ...] = ()) -> dict:
        """What changes the weights (paths by their content: the manifest's inputs)."""
        return {k: v for k, v in dataclasses.asdict(self).items()
                if k not in ("dataset", "vg", "crops", "out", "device", *leave_out)}


class PerceptionModel(nn.Module):
    """trunk -> average pool -> {head: logits}."""

    def __init__(self, trunk: nn.Module, dim: int, sizes: dict[str, int]):
        super().__init__()
        self.trunk = trunk
        self.heads = nn.ModuleDict({head: nn.Linear(dim, n) for head, n in sizes.items()})

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        pooled = self.trunk(x).float().mean(dim=(2, 3))
        return {head: layer(pooled) for head, layer in self.heads.items()}


class PredictedLabels(PerceptionModel):
    """trunk -> average pool -> the heads' probabilities, (B, K) in `label_order`'s order:
    attributes (sigmoid), then category and count (softmax)."""

    def __init__(self, trunk: nn.Module, dim: int, vocabulary: dict):
        super().__init__(trunk, dim, {head: len(vocabulary[head]) for head in HEADS})
        self.label_order = label_order(vocabulary)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = super().forward(x)
        return torch.cat([torch.sigmoid(out["attribute"]), out["category"].softmax(1),
                          out["count"].softmax(1)], dim=1)


def label_order(vocabulary: dict) -> list[str]:
    """The names of `PredictedLabels`' outputs: `attribute:`, `object:`, `count:` labels."""
    prefix = {"attribute": "attribute", "category": "object", "count": "count"}
    return [f"{prefix[head]}:{label}" for head in HEADS for label in vocabulary[head]]


class Targets:
    """One `LabelledCrops` on the device: pixels and the three targets."""

    def __init__(self, data: LabelledCrops, pixels: np.ndarray, device: torch.device):
        self.pixels = torch.from_numpy(pixels).to(device)
        self.attribute = torch.from_numpy(data.attributes).to(device)
        self.category = torch.from_numpy(data.category).to(device)
        self.count = torch.from_numpy(data.count).to(device)

    def __len__(self) -> int:
        return len(self.pixels)


def crop_losses(out: dict, data: Targets, index: torch.Tensor) -> torch.Tensor:
    """(3,) summed losses of the crops at `index`: attribute, category, count."""
    sums = [F.binary_cross_entropy_with_logits(out["attribute"], data.attribute[index],
                                               reduction="sum")]
    for head in ("category", "count"):
        target = getattr(data, head)[index]
        sums.append(F.cross_entropy(out[head], target, ignore_index=-1, reduction="sum")
                    if out[head].shape[1] else sums[0] * 0)  # a head without labels
    return torch.stack(sums)


def train_one_epoch(model, optimizer, data: Targets, batches, preprocess, world: World) -> dict:
    """One pass over `batches` (from `epoch_batches`); the epoch's mean loss per head."""
    model.train()
    totals = torch.zeros(3, dtype=torch.float64)
    for index, scale in batches:
        x = preprocess.normalise(data.pixels[index])
        flip = torch.rand(len(index)) < 0.5  # torch's generator, reseeded every epoch
        x = torch.where(flip.to(x.device)[:, None, None, None], x.flip(3), x)
        losses = crop_losses(model(x), data, index)
        optimizer.zero_grad(set_to_none=True)
        (losses.sum() * scale).backward()
        optimizer.step()
        losses = losses.detach().cpu().double()
        totals += losses
        batches.set_postfix(loss=f"{float(losses.sum()) / max(1, len(index)):.3f}")
    sums = world.all_sum(totals.tolist())
    return {f"train_{head}_loss": s / len(data) for head, s in zip(HEADS, sums)}


@torch.no_grad()
def evaluate(model, data: Targets, preprocess, world: World) -> dict:
    """Per-head validation accuracy (attributes: exact match), None for a head without targets."""
    model.eval()
    counts = np.zeros(6)  # right and scored, per head
    mine = torch.from_numpy(world.shard(np.arange(len(data)))).to(data.pixels.device)
    for index in mine.split(EVAL_BATCH):
        out = model(preprocess.normalise(data.pixels[index]))
        exact = ((out["attribute"] > 0).float() == data.attribute[index]).all(1)
        counts[:2] += [int(exact.sum()), len(index)]
        for k, head in enumerate(("category", "count"), start=1):
            target = getattr(data, head)[index]
            scored = target >= 0
            right = (out[head].argmax(1) == target) & scored if out[head].shape[1] else scored & False
            counts[2 * k:2 * k + 2] += [int(right.sum()), int(scored.sum())]
    counts = world.all_sum(counts.tolist())
    return {f"val_{head}_acc": counts[2 * k] / counts[2 * k + 1] if counts[2 * k + 1] else None
            for k, head in enumerate(HEADS)}


def with_heads(loaded: Loaded, path: Path) -> Loaded:
    """`loaded` (a trunk from the weights file `path`) under that file's heads, as
    `PredictedLabels` (`vprom extract --pool heads`)."""
    saved = read_checkpoint_file(path)
    heads, evidence = saved.get("heads"), saved.get("perception")
    if not isinstance(heads, dict) or not isinstance(evidence, dict):
        raise VpromError(f"{path}: holds no perception heads; --pool heads reads the weights "
                         "file of `vprom perceive` (train it again with this version)")
    with torch.random.fork_rng(devices=[]):  # the heads' initial weights are overwritten
        model = PredictedLabels(loaded.module, int(heads["attribute.weight"].shape[1]),
                                evidence["vocabulary"])
    model.heads.load_state_dict(heads)
    model.eval().requires_grad_(False)
    return dataclasses.replace(loaded, module=model)


def resume_path(out: Path) -> Path:
    return out.with_name(out.name + ".resume.pt")


def start_trunk(backbone: Backbone, weights: str | None, size: int) -> tuple[nn.Module, str]:
    """The trunk to fine-tune and its weights' name (None: the cached published, else random)."""
    pool = backbone.pool_for("auto")
    try:
        loaded = backbone.load("imagenet" if weights is None else weights, pool, size)
    except VpromError as e:
        if weights is not None:
            raise
        print(f"perceive: {e}; starting {backbone.name} from random weights", file=sys.stderr)
        loaded = backbone.load("none", pool, size)
    return loaded.module.train().requires_grad_(True), loaded.weights


def trunk_state(trunk: nn.Module) -> dict:
    """The trunk's weights as `Backbone.load` takes them (a timm trunk: the timm model's)."""
    module = trunk.model if isinstance(trunk, TimmTrunk) else trunk
    return {k: v.detach().cpu().clone() for k, v in module.state_dict().items()}


def read_resume(config: PerceiveConfig, dataset_hash: str) -> dict | None:
    """The state of an interrupted run of these settings, or None (a stale one is named)."""
    path = resume_path(config.out)
    if not path.is_file():
        return None
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - a truncated or foreign file: start over
        print(f"{path}: unreadable ({type(e).__name__}); starting over", file=sys.stderr)
        return None
    if state.get("settings") != config.settings(RESUMABLE) or state.get("dataset") != dataset_hash:
        print(f"{path}: made with other settings or data; starting over", file=sys.stderr)
        return None
    return state


@writes(lambda a: a["config"].out, (KIND,), folder=False,
        inputs=lambda a: (a["config"].dataset, a["config"].vg, a["config"].crops))
def perceive(config: PerceiveConfig) -> Path:
    """Fine-tune `config.backbone` on the split's training crops; returns the weights file."""
    if (config.vg is None) == (config.crops is None):
        raise VpromError("perceive reads the crops' pixels from exactly one of --vg DIR and "
                         "--crops CROPS.h5")
    for name in ("epochs", "batch_size", "lr"):
        if not getattr(config, name) > 0:
            raise VpromError(f"--{name.replace('_', '-')} must be positive")
    backbone = get_backbone(config.backbone)
    size = config.input_size or backbone.preprocess.input_size
    dataset_hash = input_hash(config.dataset)
    inputs = [config.dataset] + ([config.crops] if config.crops else [])
    if is_current(config.out, inputs, config.settings()):
        print(f"{config.out}: already trained with these settings; nothing to do", file=sys.stderr)
        return config.out
    with joined_world(config.device) as world, torch.random.fork_rng(devices=[]):
        data = load_perception_data(config.dataset, config.split, config.seed)
        log(world, f"{config.split}: {data.counts['train_crops']} training crops "
                   f"({len(data.train)} distinct boxes), {len(data.val)} validation boxes; "
                   f"{len(data.held_out)} held-out labels "
                   f"({', '.join(data.held_out[:8])}{' ...' if len(data.held_out) > 8 else ''})")
        smallest = len(data.train) // max(1, -(-len(data.train) // config.batch_size))
        if smallest < 2 * world.size:  # batch norm needs two crops in every slice
            raise VpromError(f"batches of {smallest} crops cannot give each of {world.size} "
                             "process(es) two crops; raise --batch-size or use fewer processes")
        pre = backbone.preprocess
        train, val = (Targets(part, load_pixels(part.crops, size, config.vg, config.crops,
                                                pre.interpolation, pre.crop_pct), world.device)
                      for part in (data.train, data.val))
        trunk, started_from = start_trunk(backbone, config.weights, size)
        with torch.no_grad():
            dim = trunk.eval()(torch.zeros(1, 3, size, size)).shape[1]
        torch.manual_seed(config.seed)
        model = PerceptionModel(trunk, dim, {h: len(v) for h, v in data.vocabulary.items()})
        # the inputs are channels_last (Preprocess.normalise): so are the weights
        model.to(world.device, memory_format=torch.channels_last)
        optimizer = torch.optim.Adam(model.parameters(), lr=config.lr)
        state = read_resume(config, dataset_hash)
        history = []
        if state is not None:
            model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
            history, started_from = state["history"], state["started_from"]
            log(world, f"{resume_path(config.out)}: resuming after epoch {len(history)}")
        trained = model if world.size == 1 else nn.parallel.DistributedDataParallel(
            model, device_ids=[world.device.index] if world.device.type == "cuda" else None)
        bar = tqdm(range(len(history), config.epochs), initial=len(history),
                   total=config.epochs, desc=f"perceive {backbone.name}", unit="epoch",
                   disable=None if world.main else True)
        for epoch in bar:
            began = time.perf_counter()
            for group in optimizer.param_groups:
                group["lr"] = cosine_lr(config.lr, epoch, config.epochs)
            torch.manual_seed(int(np.random.SeedSequence(
                [config.seed, epoch, world.rank]).generate_state(1)[0]))
            batches = tqdm(epoch_batches(len(train), config.batch_size, config.seed, epoch,
                                         world), desc=f"epoch {epoch + 1}/{config.epochs}",
                           unit="batch", leave=False, disable=None if world.main else True)
            figures = train_one_epoch(trained, optimizer, train, batches, pre, world)
            figures.update(evaluate(model, val, pre, world))
            history.append({"epoch": epoch + 1, **figures,
                            "seconds": round(time.perf_counter() - began, 3)})
            bar.set_postfix_str(describe(history[-1]))
            log(world, f"epoch {epoch + 1}/{config.epochs}: {describe(history[-1])}")
            if world.main:
                with atomic_path(resume_path(config.out)) as tmp:
                    torch.save({"format": FORMAT, "settings": config.settings(RESUMABLE),
                        "dataset": dataset_hash, "started_from": started_from,
                        "model": {k: v.detach().cpu() for k, v in model.state_dict().items()},
                        "optimizer": optimizer.state_dict(), "history": history}, tmp)
            world.barrier()
        if world.main:
            write_weights(config, model, data, history, started_from, size, inputs)
            check_loads(config.out, backbone, model, val if len(val) else train, size)
            resume_path(config.out).unlink(missing_ok=True)
            log(world, f"wrote {config.out}: {describe(history[-1])}")
    return config.out


def describe(figures: dict) -> str:
    def pct(key):
        value = figures.get(key)
        return "n/a" if value is None else f"{100 * value:.1f}%"
    loss = sum(figures[f"train_{h}_loss"] for h in HEADS)
    return (f"loss {loss:.3f}; val attribute exact-match {pct('val_attribute_acc')}, category "
            f"{pct('val_category_acc')}, count {pct('val_count_acc')}")


def write_weights(config: PerceiveConfig, model: PerceptionModel, data, history: list,
                  started_from: str, size: int, inputs: list) -> None:
    """The manifest, then the weights file renamed into place (module doc)."""
    evidence = {"split": config.split, "held_out_labels": data.held_out,
                "counts": data.counts, "vocabulary": data.vocabulary,
                "backbone": config.backbone, "input_size": size,
                "dataset_content_hash": input_hash(config.dataset), "epochs": len(history),
                "started_from": started_from, "cpu_threads": torch.get_num_threads(),
                "validation": {k: v for k, v in history[-1].items() if k.startswith("val_")},
                "attribute_accuracy": "exact match: every attribute right at probability 0.5"}
    buffer = io.BytesIO()
    heads = {k: v.detach().cpu() for k, v in model.heads.state_dict().items()}
    torch.save({"state_dict": trunk_state(model.trunk), "heads": heads, "perception": evidence},
               buffer)
    manifest = make_manifest(KIND, config.settings(), seed=config.seed,
                             inputs=input_hashes(inputs), counts=data.counts,
                             outputs={"weights": hashlib.sha256(buffer.getvalue()).hexdigest()})
    manifest.update(perception=evidence, history=history)
    config.out.unlink(missing_ok=True)  # no old weights file beside the new manifest
    write_manifest(config.out, manifest)
    with atomic_path(config.out) as tmp:
        Path(tmp).write_bytes(buffer.getvalue())


def check_loads(out: Path, backbone: Backbone, model: PerceptionModel, data: Targets,
                size: int) -> None:
    """Refuse `out` unless, loaded as `vprom extract` loads it, it computes the trained trunk."""
    loaded = backbone.load(str(out), backbone.pool_for("auto"), size).module.to(data.pixels.device)
    x = backbone.preprocess.normalise(data.pixels[:4])
    model.eval()
    with torch.no_grad():
        same = torch.allclose(loaded(x).float(), model.trunk(x).float(), atol=1e-5, rtol=1e-4)
    if not same:
        raise VpromError(f"{out}: the file written does not reproduce the trained trunk; "
                         "report this as a vprom bug")


def log(world: World, text: str) -> None:
    if world.main:
        tqdm.write(text)
