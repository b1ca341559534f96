"""The paper's whole grid in one command (`vprom reproduce`), resumable.

Steps, each skipped when its output is already complete, so a killed run continues where it
stopped:

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
   them). A run with `metrics.json` is complete and skipped; one with a checkpoint is
   resumed (`vprom train` resumes by default);
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

from vprom.baselines.config import DEFAULTS_FILE, TrainConfig
from vprom.errors import VpromError
from vprom.features.config import ExtractConfig
from vprom.fields import borrowed, like, option
from vprom.claim import writes
from vprom.domain import SPLITS

CONTROL_SPLIT = "neutral"


@dataclass(frozen=True)
class ReproduceConfig:
    """The grid to run; `backbones`, `weights`, `models` and `splits` are comma lists.
    Settings that mean the same as in `vprom train` or `vprom extract` are borrowed from
    their configs (`like`), help and default included, and handed on with `borrowed`."""

    vg: Path | None
    synthetic: bool
    out: Path = option(output="folder", help="folder for the build, features, runs and report")
    scale: float | None = None  # None: build's default (1.0 on VG, small when synthetic)
    images: int | None = None
    backbones: str = option("resnet101,bottomup-r101",
                            help="comma list (see `vprom extract --list`)")
    weights: str | None = option(None, help="comma list, one per backbone (default: imagenet "
                                            "for torchvision ones, pretrained for timm:<name>, "
                                            "from the local Hugging Face cache only)")
    models: str = option("mlp-sum-6,gru-shared,vqa,rn",
                         help="comma list of models, each trained without and with --aux, at "
                              f"its defaults from baselines/{DEFAULTS_FILE}")
    splits: str = option(",".join(SPLITS), help="comma list")
    epochs: int = like(TrainConfig, "epochs", help="maximum epochs per run")
    seed: int = like(TrainConfig, "seed", help="seed of the build and of every run")
    device: str | None = like(TrainConfig, "device")
    input_size: int | None = like(ExtractConfig, "input_size", help="crop side for extraction "
                                  "(default: the backbone's, 224)")
    center_features: bool = like(TrainConfig, "center_features")

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
    from vprom.baselines.registry import list_models

    models, splits = _items(config.models, "models"), _items(config.splits, "splits")
    for m in models:
        if m not in list_models():
            raise VpromError(f"unknown model {m!r} in --models; known: {', '.join(list_models())}")
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
                          out=out, **borrowed(config, ExtractConfig)))
    return out


def _train_and_evaluate(spec: RunSpec, run: Path, dataset: Path, features: Path,
                        config: ReproduceConfig) -> None:
    from vprom.baselines.evaluate import evaluate, format_metrics
    from vprom.baselines.train import train

    train(TrainConfig(dataset=dataset, features=features, model=spec.model, split=spec.split,
                      aux=spec.aux, out=run, shuffle_context=spec.shuffle_context,
                      **borrowed(config, TrainConfig)))
    print(format_metrics(evaluate(run, device=config.device)), flush=True)


@writes(lambda a: a["config"].out, ("reproduce",), inputs=lambda a: (a["config"].vg,),
        names=("build", "features", "runs", "report"))
def reproduce(config: ReproduceConfig) -> Path:
    """Run the grid (see the module doc); returns the report folder."""
    from vprom.baselines.report import report

    weights = backbone_weights(config)
    specs = grid(config)
    dataset, vg_dir = _build(config)
    runs_dir = config.out / "runs"
    features = {b: _features(config, dataset, vg_dir, b, w) for b, w in weights.items()}
    folders = []
    for number, spec in enumerate(specs, 1):
        run = spec.folder(runs_dir)
        folders.append(run)
        if (run / "metrics.json").is_file():
            print(f"[run {number}/{len(specs)}] {spec}: complete, skipped", flush=True)
            continue
        print(f"[run {number}/{len(specs)}] {spec} -> {run}", flush=True)
        _train_and_evaluate(spec, run, dataset, features[spec.backbone], config)
    out = config.out / "report"
    print(report(folders, out), flush=True)
    print(f"tables: {out / 'table2.md'} (Table 2 beside the paper) and {out / 'splits.md'}; "
          f"everything on one page: {out / 'report.md'}", flush=True)
    return out
