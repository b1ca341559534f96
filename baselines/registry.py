"""Baselines by name: `register_model`, `get_model`, `list_models` (torchvision's `_api.py` style).

Each model file registers builders `builder(config) -> nn.Module` with the input kind they read;
the files are imported when a model is first asked for.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

from torch import nn

from vprom.baselines.parts import ModelConfig
from vprom.errors import VpromError
from vprom.registry import Registry

Builder = Callable[[ModelConfig], nn.Module]

MODEL_FILES = ("mlp", "gru", "vqa", "rn", "context_blind", "wren", "scl", "predrnet",
               "panel_transformer", "context_blind_pixels")
MODELS: Registry[Builder] = Registry(
    "model", builtins=tuple(f"vprom.baselines.{name}" for name in MODEL_FILES))
INPUT_KINDS = ("vectors", "maps", "pixels")


def register_model(name: str, kind: str = "vectors") -> Callable[[Builder], Builder]:
    """Decorator: register `builder` under `name` (once), reading input of `kind`."""
    if kind not in INPUT_KINDS:
        raise VpromError(f"model {name!r}: input kind {kind!r} is none of {', '.join(INPUT_KINDS)}")

    def wrap(builder: Builder) -> Builder:
        builder.input_kind = kind
        return MODELS.register(name)(builder)

    return wrap


def input_kind(name: str) -> str:
    return getattr(MODELS.get(name), "input_kind", "vectors")


def list_models() -> list[str]:
    return MODELS.names()


def get_model(name: str, config: ModelConfig | None = None, **overrides) -> nn.Module:
    """Build the model `name` from `config` (defaults if None) with `overrides` of its fields."""
    builder = MODELS.get(name)
    fields = {f.name for f in dataclasses.fields(ModelConfig)}
    unknown = sorted(set(overrides) - fields)
    if unknown:
        raise VpromError(f"unknown model config field(s) {', '.join(unknown)} for {name!r}; "
                         f"the fields are {', '.join(sorted(fields))}")
    return builder(dataclasses.replace(config or ModelConfig(), **overrides))
