"""Baselines by name: `register_model`, `get_model`, `list_models` (torchvision's `_api.py` style).

Each model file registers builders `builder(config: ModelConfig) -> nn.Module` under the names
users type (`vprom train --model rn`). The built-in model files are imported the first time
`MODELS` is asked for a model, so a model file imports `register_model` without a cycle.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

from torch import nn

from vprom.baselines.parts import ModelConfig
from vprom.errors import VpromError
from vprom.registry import Registry

Builder = Callable[[ModelConfig], nn.Module]

MODELS: Registry[Builder] = Registry("model", builtins=(
    "vprom.baselines.mlp",
    "vprom.baselines.gru",
    "vprom.baselines.vqa",
    "vprom.baselines.rn",
    "vprom.baselines.context_blind",
))


def register_model(name: str) -> Callable[[Builder], Builder]:
    """Decorator: register `builder` under `name`; a name can be registered once."""
    return MODELS.register(name)


def list_models() -> list[str]:
    """Every registered model name, sorted."""
    return MODELS.names()


def get_model(name: str, config: ModelConfig | None = None, **overrides) -> nn.Module:
    """Build the model `name` from `config` (defaults if None) with `overrides` of its fields."""
    builder = MODELS.get(name)
    fields = {f.name for f in dataclasses.fields(ModelConfig)}
    unknown = sorted(set(overrides) - fields)
    if unknown:
        raise VpromError(
            f"unknown model config field(s) {', '.join(unknown)} for {name!r}; "
            f"the fields are {', '.join(sorted(fields))}"
        )
    return builder(dataclasses.replace(config or ModelConfig(), **overrides))
