"""The paper's whole grid in one command (`vprom reproduce`), resumable.

Steps, each skipped when its output is already complete, so a killed run continues where it
stopped (OUT/manifest.json, written first, marks OUT as a reproduce folder):

1. build the dataset (`vprom.app.build.build`: synthetic corpus or VG -> mine -> generate ->
   verify -> stats; the build itself redoes no stage whose output matches) into OUT/build/;
2. extract features per backbone into OUT/features/<backbone>.h5 (`extract` keeps a file
   whose manifest is current for the data set and the settings, and resumes a partial one;
   a timm backbone's ":" becomes "-" in file and folder names: timm-vit_base_patch16_224.dino);
3. train and evaluate every model × {without, with aux} × split per backbone, into
   OUT/runs/<backbone>/<model>[-aux]/<split>/, plus the two controls on the neutral split:
   the context-blind model, and the relation network on shuffled context panels
   (OUT/runs/<backbone>/controls/...). Every run takes its model's default hyper-parameters
   (`baselines/defaults.json`, chosen by `bench/grid.py`; each run's config.json records
   them). A run with `metrics.json` whose manifest (config.json) is current for the data set,
   the features and the cell's settings (`vprom.manifest.is_current`) is complete and
   skipped; any other is handed to `vprom train`, which resumes or continues a run of these
   settings and refuses one of other data;
4. report over every run into OUT/report/ (Table 2 beside the paper's numbers, models ×
   splits, plots). Runs that did not learn are flagged there and in the summary printed at
   the end, and cells whose runs were trained with different settings are refused.

Backbones beyond the paper's two (another ResNet, any `timm:<name>`) add their own columns to
the report. Weights: one per backbone ("imagenet" by default where the backbone has
torchvision ImageNet weights, "pretrained" for timm models, read only from the local Hugging
Face cache; the bottom-up backbone needs the path of its converted checkpoint).

The stages are imported inside the functions that run them, so the command line reads
`ReproduceConfig`'s options without importing torch (the config modules import none).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from vprom.baselines.config import TrainConfig
from vprom.errors import VpromError
from vprom.features.config import ExtractConfig
from vprom.claim import writes
from vprom.manifest import is_current, make_manifest, write_manifest
from vprom.domain import SPLITS

CONTROL_SPLIT = "neutral"


@dataclass(frozen=True)
class ReproduceConfig:
    """The grid to run; `backbones`, `weights`, `models` and `splits` are comma lists.
    Settings that mean the same as in `vprom train` or `vprom extract` take their defaults
    from those configs."""

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
    center_features: bool = TrainConfig.center_features

    def __post_init__(self) -> None:
        object.__setattr__(self, "out", Path(self.out))
        if self.vg is not None:
            object.__setattr__(self, "vg", Path(self.vg))


@dataclass(frozen=True)
class RunSpec:
    """One cell of the grid."""

    backbone: str
    model: str
    aux: bool
    split: str
    shuffle_context: bool = False

    def folder(self, runs: Path) -> Path:
        runs = runs / file_name(self.backbone)
        if self.shuffle_context:
            return runs / "controls" / f"{self.model}-shuffled-context" / self.split
        if self.model == "context-blind":
            return runs / "controls" / self.model / self.split
        return runs / (self.model + ("-aux" if self.aux else "")) / self.split

    def settings(self, config: ReproduceConfig) -> dict:
        """The run settings this cell asks for, as its run's manifest records them."""
        return {"model": self.model, "split": self.split, "aux": self.aux,
                "shuffle_context": self.shuffle_context, "epochs": config.epochs,
                "seed": config.seed, "center_features": config.center_features}

    def __str__(self) -> str:
        extra = (" +aux" if self.aux else "") + (" (shuffled context)" if self.shuffle_context
                                                 else "")
        return f"{self.model}{extra} on {self.split} ({self.backbone})"


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
    if config.weights is None:
        weights = []
        for name in backbones:
            if name.startswith("timm:"):
                get_backbone(name)
                weights.append("pretrained")  # from the local cache, or a clear error
                continue
            if get_backbone(name).imagenet is None:
                raise VpromError(
                    f"backbone {name} has no published torchvision weights; pass its converted "
                    f"checkpoint: --weights with one entry per backbone, e.g. --weights "
                    + ",".join("PATH" if b == name else "imagenet" for b in backbones))
            weights.append("imagenet")
    else:
        weights = _items(config.weights, "weights")
        if len(weights) != len(backbones):
            raise VpromError(f"--weights has {len(weights)} entries for {len(backbones)} "
                             f"backbones ({', '.join(backbones)}); give one per backbone")
        for name in backbones:
            get_backbone(name)
    return dict(zip(backbones, weights))


def grid(config: ReproduceConfig) -> list[RunSpec]:
    """Every run, grouped by backbone: models × aux × splits, then the controls."""
    from vprom.baselines.registry import input_kind, list_models

    models, splits = _items(config.models, "models"), _items(config.splits, "splits")
    for m in models:
        if m not in list_models():
            raise VpromError(f"unknown model {m!r} in --models; known: {', '.join(list_models())}")
        if input_kind(m) != "vectors":
            raise VpromError(f"--models {m}: reproduce trains on the pooled features it extracts, "
                             f"and {m} reads {input_kind(m)}; train it with `vprom train "
                             f"--{'maps' if input_kind(m) == 'maps' else 'crops'}`")
    for s in splits:
        if s not in SPLITS:
            raise VpromError(f"unknown split {s!r} in --splits; the splits are {', '.join(SPLITS)}")
    runs = []
    for backbone in _items(config.backbones, "backbones"):
        runs += [RunSpec(backbone, m, aux, s) for m in models for aux in (False, True)
                 for s in splits]
        runs += [RunSpec(backbone, "context-blind", False, CONTROL_SPLIT),
                 RunSpec(backbone, "rn", False, CONTROL_SPLIT, shuffle_context=True)]
    return runs


def _build(config: ReproduceConfig) -> tuple[Path, Path]:
    from vprom.app.build import build

    if (config.vg is None) == (not config.synthetic):
        raise VpromError("reproduce needs exactly one source: --vg DIR or --synthetic")
    result = build(config.out / "build", vg=config.vg, synthetic=config.synthetic,
                   images=config.images, scale=config.scale, seed=config.seed)
    return Path(result.dataset), Path(result.vg_dir)


def _features(config: ReproduceConfig, dataset: Path, vg_dir: Path, backbone: str,
              weights: str) -> Path:
    """OUT/features/<backbone>.h5, extracted unless a current file is there (`extract`)."""
    from vprom.features.extract import extract

    out = config.out / "features" / f"{file_name(backbone)}.h5"
    print(f"features: {backbone} ({weights}) -> {out}", flush=True)
    extract(ExtractConfig(dataset=dataset, vg=vg_dir, backbone=backbone, weights=weights,
                          out=out, device=config.device, input_size=config.input_size))
    return out


def _train_and_evaluate(spec: RunSpec, run: Path, dataset: Path, features: Path,
                        config: ReproduceConfig) -> None:
    from vprom.baselines.evaluate import evaluate, format_metrics
    from vprom.baselines.train import train

    train(TrainConfig(dataset=dataset, features=features, model=spec.model, split=spec.split,
                      aux=spec.aux, out=run, shuffle_context=spec.shuffle_context,
                      epochs=config.epochs, seed=config.seed, device=config.device,
                      center_features=config.center_features))
    print(format_metrics(evaluate(run, device=config.device)), flush=True)


@writes(lambda a: a["config"].out, ("reproduce",), inputs=lambda a: (a["config"].vg,),
        folder=True)
def reproduce(config: ReproduceConfig) -> Path:
    """Run the grid (see the module doc); returns the report folder."""
    from vprom.app.ceilings import perception_ceilings
    from vprom.baselines.report import report

    weights = backbone_weights(config)
    specs = grid(config)
    # the folder's mark (`vprom.claim`), written before anything else goes into it
    config.out.mkdir(parents=True, exist_ok=True)
    write_manifest(config.out, make_manifest("reproduce", {
        k: v for k, v in vars(config).items() if k not in ("vg", "out")}, config.seed))
    dataset, vg_dir = _build(config)
    runs_dir = config.out / "runs"
    features = {b: _features(config, dataset, vg_dir, b, w) for b, w in weights.items()}
    folders = []
    for number, spec in enumerate(specs, 1):
        run = spec.folder(runs_dir)
        folders.append(run)
        if (run / "metrics.json").is_file() and is_current(
                run, [dataset, features[spec.backbone]], spec.settings(config)):
            print(f"[run {number}/{len(specs)}] {spec}: complete, skipped", flush=True)
            continue
        print(f"[run {number}/{len(specs)}] {spec} -> {run}", flush=True)
        _train_and_evaluate(spec, run, dataset, features[spec.backbone], config)
    out = config.out / "report"
    print(report(folders, out, ceilings=perception_ceilings), flush=True)
    print(f"tables: {out / 'table2.md'} (Table 2 beside the paper) and {out / 'splits.md'}; "
          f"everything on one page: {out / 'report.md'}", flush=True)
    return out
