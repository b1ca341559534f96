"""The paper's whole grid in one command (`vprom reproduce`), resumable.

Builds OUT/build/; makes the panels the models read (OUT/features/<backbone>.h5,
OUT/maps/<backbone>.h5, OUT/crops/crops-<S>.h5; timm's ":" becomes "-"); trains and evaluates
model x {without, with aux} x split into OUT/runs/<panels>/<model>[-aux]/<split>/, plus the
context-blind and shuffled-context controls on neutral; reports into OUT/report/. A current
output is skipped (`is_current`), a partial run resumed by `vprom train`. Stages are imported
where used: the command line reads this module without torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from vprom.baselines.config import SOURCES, TrainConfig
from vprom.claim import writes
from vprom.domain import SPLITS
from vprom.errors import VpromError
from vprom.features.config import ExtractConfig
from vprom.manifest import is_current, make_manifest, write_manifest
from vprom.processes import usable_cores

CONTROL_SPLIT = "neutral"
#: pixel models' crop side: docs/baselines.md counts their parameters at 80 (the full
#: V-PROM's crops: 2.8 GB at 80, 21.6 GB at 224)
CROP_SIZE = 80
#: input kind -> `vprom train`'s option for it, which is also its folder under OUT
OPTION = {kind: option for option, kind in SOURCES.items()}


@dataclass(frozen=True)
class ReproduceConfig:
    """The grid; `backbones`, `weights`, `models`, `splits` are comma lists."""

    vg: Path | None
    synthetic: bool
    out: Path
    scale: float | None = None  # None: build's default (1.0 on VG, small when synthetic)
    images: int | None = None
    backbones: str = "resnet101,bottomup-r101"
    weights: str | None = None
    models: str = "mlp-sum-6,gru-shared,vqa,rn"
    splits: str = ",".join(SPLITS)
    epochs: int = TrainConfig.epochs
    seed: int = TrainConfig.seed
    device: str | None = TrainConfig.device
    input_size: int | None = ExtractConfig.input_size
    crop_size: int = CROP_SIZE
    center_features: bool = TrainConfig.center_features

    def __post_init__(self) -> None:
        object.__setattr__(self, "out", Path(self.out))


@dataclass(frozen=True)
class RunSpec:
    """One cell of the grid: `panels` is a backbone (`kind` vectors or maps) or crops-S."""

    panels: str
    model: str
    aux: bool
    split: str
    shuffle_context: bool = False
    kind: str = "vectors"

    def folder(self, runs: Path) -> Path:
        runs = runs / file_name(self.panels)
        if self.shuffle_context:
            return runs / "controls" / f"{self.model}-shuffled-context" / self.split
        name = self.model + ("-aux" if self.aux else "")
        if self.model == "context-blind":
            return runs / "controls" / name / self.split
        return runs / name / self.split

    def center_features(self, config: ReproduceConfig) -> bool:
        """Centring applies to pooled vectors only; maps and pixels train as stored."""
        return config.center_features and self.kind == "vectors"

    def settings(self, config: ReproduceConfig) -> dict:
        """This cell's settings, as its run's manifest records them."""
        return {"model": self.model, "split": self.split, "aux": self.aux,
                "shuffle_context": self.shuffle_context, "epochs": config.epochs,
                "seed": config.seed, "center_features": self.center_features(config)}

    def __str__(self) -> str:
        extra = (" +aux" if self.aux else "") + (" (shuffled context)" if self.shuffle_context
                                                 else "")
        maps = " maps" if self.kind == "maps" else ""
        return f"{self.model}{extra} on {self.split} ({self.panels}{maps})"


def file_name(backbone: str) -> str:
    """A backbone's name as a file or folder name (timm:x -> timm-x: no colon in paths)."""
    return backbone.replace(":", "-")


def _items(text: str | None, what: str) -> list[str]:
    items = [x.strip() for x in (text or "").split(",") if x.strip()]
    if not items:
        raise VpromError(f"--{what} is empty; give a comma-separated list")
    return items


def backbone_weights(config: ReproduceConfig) -> dict[str, str]:
    """backbone -> weights, checked before any work starts."""
    from vprom.features.backbones import get_backbone

    backbones = _items(config.backbones, "backbones")
    found = {name: get_backbone(name) for name in backbones}  # refuses an unknown name
    if config.weights is not None:
        weights = _items(config.weights, "weights")
        if len(weights) != len(backbones):
            raise VpromError(f"--weights has {len(weights)} entries for {len(backbones)} "
                             f"backbones ({', '.join(backbones)}); give one per backbone")
        return dict(zip(backbones, weights))
    for name in backbones:
        if not name.startswith("timm:") and found[name].imagenet is None:
            raise VpromError(
                f"backbone {name} has no published torchvision weights; pass its converted "
                f"checkpoint: --weights with one entry per backbone, e.g. --weights "
                + ",".join("PATH" if b == name else "imagenet" for b in backbones))
    # timm's pretrained weights come from the local cache, or a clear error
    return {name: "pretrained" if name.startswith("timm:") else "imagenet" for name in backbones}


def grid(config: ReproduceConfig) -> list[RunSpec]:
    """Per backbone its vector and map models × aux × splits and the controls; then the
    pixel models once."""
    from vprom.baselines.registry import input_kind, list_models

    models, splits = _items(config.models, "models"), _items(config.splits, "splits")
    for m in models:
        if m not in list_models():
            raise VpromError(f"unknown model {m!r} in --models; known: {', '.join(list_models())}")
    for s in splits:
        if s not in SPLITS:
            raise VpromError(f"unknown split {s!r} in --splits; the splits are {', '.join(SPLITS)}")
    if config.crop_size < 1:
        raise VpromError(f"--crop-size must be a positive number of pixels, got "
                         f"{config.crop_size}")
    kinds = {m: input_kind(m) for m in models}

    def cells(panels: str, wanted: tuple[str, ...]) -> list[RunSpec]:
        return [RunSpec(panels, m, aux, s, kind=kinds[m]) for m in models
                if kinds[m] in wanted for aux in (False, True) for s in splits]

    runs = []
    for backbone in _items(config.backbones, "backbones"):
        runs += cells(backbone, ("vectors", "maps"))
        runs += [RunSpec(backbone, "context-blind", False, CONTROL_SPLIT),
                 RunSpec(backbone, "rn", False, CONTROL_SPLIT, shuffle_context=True)]
    # --models context-blind repeats its control cell: each run once
    return list(dict.fromkeys(runs + cells(f"crops-{config.crop_size}", ("pixels",))))


def _build(config: ReproduceConfig) -> tuple[Path, Path]:
    from vprom.app.build import build

    result = build(config.out / "build", vg=config.vg, synthetic=config.synthetic,
                   images=config.images, scale=config.scale, seed=config.seed,
                   workers=usable_cores(), learned_probe=False)
    return Path(result.dataset), Path(result.vg_dir)


def _panels(config: ReproduceConfig, dataset: Path, vg_dir: Path, kind: str, panels: str,
            weights: dict[str, str]) -> Path:
    """OUT/<option>/<panels>.h5 for `kind`, made unless a current one is there."""
    out = config.out / OPTION[kind] / f"{file_name(panels)}.h5"
    if kind == "pixels":
        from vprom.features.crop_store import StoreJob, build_crop_store

        print(f"crops: {config.crop_size}x{config.crop_size} px -> {out}", flush=True)
        return build_crop_store(StoreJob(dataset, vg_dir, config.crop_size, out,
                                         usable_cores()))
    from vprom.features.extract import extract

    print(f"{OPTION[kind]}: {panels} ({weights[panels]}) -> {out}", flush=True)
    extract(ExtractConfig(dataset=dataset, vg=vg_dir, backbone=panels, weights=weights[panels],
                          out=out, device=config.device, input_size=config.input_size,
                          pool="none" if kind == "maps" else ExtractConfig.pool))
    return out


@writes(lambda a: a["config"].out, ("reproduce",), inputs=lambda a: (a["config"].vg,),
        folder=True)
def reproduce(config: ReproduceConfig) -> Path:
    """Run the grid (see the module doc); returns the report folder."""
    from vprom.app.score import perception_ceilings
    from vprom.baselines.evaluate import evaluate, format_metrics
    from vprom.baselines.report import report
    from vprom.baselines.train import train

    weights = backbone_weights(config)
    specs = grid(config)
    # the folder's mark (`vprom.claim`), before anything else goes in
    config.out.mkdir(parents=True, exist_ok=True)
    write_manifest(config.out, make_manifest("reproduce", {
        k: v for k, v in vars(config).items() if k not in ("vg", "out")}, config.seed))
    dataset, vg_dir = _build(config)
    runs_dir = config.out / "runs"
    # each panels file once, in the grid's order
    sources = {key: _panels(config, dataset, vg_dir, *key, weights)
               for key in dict.fromkeys((spec.kind, spec.panels) for spec in specs)}
    folders = []
    for number, spec in enumerate(specs, 1):
        run, source = spec.folder(runs_dir), sources[spec.kind, spec.panels]
        folders.append(run)
        if (run / "metrics.json").is_file() and is_current(
                run, [dataset, source], spec.settings(config)):
            print(f"[run {number}/{len(specs)}] {spec}: complete, skipped", flush=True)
            continue
        print(f"[run {number}/{len(specs)}] {spec} -> {run}", flush=True)
        train(TrainConfig(dataset=dataset, **{OPTION[spec.kind]: source}, model=spec.model,
                          split=spec.split, aux=spec.aux, out=run,
                          shuffle_context=spec.shuffle_context, epochs=config.epochs,
                          seed=config.seed, device=config.device,
                          center_features=spec.center_features(config)))
        print(format_metrics(evaluate(run, device=config.device)), flush=True)
    out = config.out / "report"
    print(report(folders, out, ceilings=perception_ceilings), flush=True)
    print(f"tables: {out / 'table2.md'} (Table 2 beside the paper) and {out / 'splits.md'}; "
          f"everything on one page: {out / 'report.md'}", flush=True)
    return out
