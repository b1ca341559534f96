"""What `vprom train` is asked to do, as one frozen dataclass (no torch needed to build it).

The config is written into every run folder and checkpoint; the command line takes its
defaults from here, so each is written once.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

OPTIMIZERS = ("adadelta", "adam")
DEFAULT_LR = {"adadelta": 1.0, "adam": 1e-4}


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    """One training run; written into the run folder and every checkpoint."""

    dataset: Path
    features: Path
    model: str
    split: str
    aux: bool = False
    out: Path
    epochs: int = 20
    batch_size: int = 64
    optimizer: str = "adadelta"
    lr: float | None = None  # default: 1.0 AdaDelta, 1e-4 Adam
    hidden: int = 512
    patience: int = 5
    shuffle_context: bool = False
    center_features: bool = False
    seed: int = 0
    device: str | None = None
    resume: bool = False

    def __post_init__(self) -> None:
        for name in ("dataset", "features", "out"):
            object.__setattr__(self, name, Path(getattr(self, name)))

    @property
    def learning_rate(self) -> float:
        return self.lr if self.lr is not None else DEFAULT_LR[self.optimizer]

    def to_dict(self) -> dict:
        return {k: (str(v) if isinstance(v, Path) else v)
                for k, v in dataclasses.asdict(self).items()}

    @classmethod
    def from_dict(cls, record: dict) -> "TrainConfig":
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in record.items() if k in known})
