"""What `vprom train` is asked to do, as one frozen dataclass (no torch needed to build it).

Hyper-parameters (`HYPER`) left None take the model's entry in `baselines/defaults.json` (or
"*") in `resolved()`; an optimizer other than the model's takes that optimizer's own entry.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path

from vprom.errors import VpromError

OPTIMIZERS = ("adadelta", "adam")
#: constant: the paper's; cosine: from --lr to 0 over --epochs, set at every step
LR_SCHEDULES = ("constant", "cosine")
#: the settings a model's defaults entry holds; None in a TrainConfig = take the model's
HYPER = ("optimizer", "lr", "rho", "eps", "hidden", "batch_size", "score_init")
#: the settings of one optimizer (rho is AdaDelta's decay; Adam has none)
OPTIMIZER_KEYS = {"adadelta": ("lr", "rho", "eps"), "adam": ("lr", "eps")}
DEFAULTS_FILE = "defaults.json"
#: TrainConfig's panel files and the input kind each holds
SOURCES = {"features": "vectors", "maps": "maps", "crops": "pixels"}


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    """One training run; written into the run folder and every checkpoint."""

    dataset: Path
    features: Path | None = None  # the panels: pooled vectors, or
    maps: Path | None = None  # spatial maps (`vprom extract --pool none`), or
    crops: Path | None = None  # a crop store (`vprom crops`)
    model: str
    split: str
    aux: bool = False
    out: Path
    epochs: int = 20
    # None: the model's default (baselines/defaults.json)
    batch_size: int | None = None
    optimizer: str | None = None
    lr: float | None = None
    rho: float | None = None
    eps: float | None = None
    hidden: int | None = None
    score_init: float | None = None
    lr_schedule: str = "constant"
    patience: int = 5
    shuffle_context: bool = False
    center_features: bool = False
    seed: int = 0
    device: str | None = None
    cuda_graphs: bool = False
    restart: bool = False

    def __post_init__(self) -> None:
        for name in ("dataset", *SOURCES, "out"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, Path(getattr(self, name)))

    @property
    def source(self) -> tuple[str, str, Path]:
        """(option, input kind, file) of the panels: exactly one of --features, --maps, --crops."""
        given = [(name, kind, getattr(self, name)) for name, kind in SOURCES.items()
                 if getattr(self, name) is not None]
        if len(given) != 1:
            raise VpromError("train reads its panels from exactly one of --features FEATS.h5, "
                             "--maps MAPS.h5 and --crops CROPS.h5; got "
                             + (" and ".join(f"--{g[0]}" for g in given) or "none"))
        return given[0]

    def resolved(self) -> "TrainConfig":
        """This config with every hyper-parameter left None taken from the defaults."""
        defaults = load_defaults()
        entry = defaults["models"].get(self.model, defaults["models"]["*"])
        optimizer = self.optimizer or entry["optimizer"]
        if optimizer not in OPTIMIZERS:
            raise VpromError(f"unknown optimizer {optimizer!r}; use one of {', '.join(OPTIMIZERS)}")
        if self.rho is not None and optimizer != "adadelta":
            raise VpromError(f"--rho is AdaDelta's decay; {optimizer} has none (drop --rho "
                             "or use --optimizer adadelta)")
        # settings tuned for the model's optimizer do not carry over to another one
        tuned = entry if optimizer == entry["optimizer"] else defaults["optimizers"][optimizer]
        hyper = {k: tuned.get(k, entry.get(k)) for k in HYPER[1:] if getattr(self, k) is None}
        if optimizer != "adadelta":
            hyper["rho"] = None
        return dataclasses.replace(self, **hyper, optimizer=optimizer)

    def defaulted(self) -> list[str]:
            return [k for k in HYPER if getattr(self, k) is None]

    def to_dict(self) -> dict:
        return {k: (str(v) if isinstance(v, Path) else v)
                for k, v in dataclasses.asdict(self).items()}

    @classmethod
    def from_dict(cls, record: dict) -> "TrainConfig":
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in record.items() if k in known})


@cache
def load_defaults() -> dict:
    return parse_defaults(defaults_path().read_text(encoding="utf-8"), f"baselines/{DEFAULTS_FILE}")


def parse_defaults(text: str, where: str) -> dict:
    """A defaults file's JSON text, checked; VpromError naming the entry that is wrong."""
    try:
        data = json.loads(text)
        optimizers, models = data["optimizers"], data["models"]
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise VpromError(f"{where}: not a defaults file ({e}); reinstall vprom") from None
    if "*" not in models:
        raise VpromError(f"{where}: no '*' entry (the defaults of unlisted models)")
    entries = [(f"optimizers.{name}", optimizers.get(name), keys)
               for name, keys in OPTIMIZER_KEYS.items()]
    for model, entry in models.items():
        if not isinstance(entry, dict) or entry.get("optimizer") not in OPTIMIZERS:
            raise VpromError(f"{where}: models.{model} needs an optimizer, one of "
                             f"{', '.join(OPTIMIZERS)}")
        keys = sorted({"optimizer", "hidden", "batch_size", "score_init",
                       *OPTIMIZER_KEYS[entry["optimizer"]]})
        entries.append((f"models.{model}", entry, keys))
    for name, entry, keys in entries:
        if not isinstance(entry, dict) or {k for k in entry if not k.startswith("_")} != set(keys):
            raise VpromError(f"{where}: {name} must give exactly {', '.join(keys)}")
        for key, value in entry.items():
            if problem := check_value(key, value):
                raise VpromError(f"{where}: {name}: {problem}")
    return data


def check_value(key: str, value) -> str | None:
    """Why `value` is not a valid `key` hyper-parameter, or None when it is."""
    if key in ("hidden", "batch_size"):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            return f"{key} must be a whole number of at least 1, got {value!r}"
    elif key == "rho":
        if not isinstance(value, (int, float)) or not 0 <= value < 1:
            return f"rho must be in [0, 1), got {value!r}"
    elif key in ("lr", "eps", "score_init"):
        if not isinstance(value, (int, float)) or not (value > 0 and math.isfinite(value)):
            return f"{key} must be a positive number, got {value!r}"
    return None


def defaults_path() -> Path:
    return Path(str(resources.files("vprom.baselines").joinpath(DEFAULTS_FILE)))
