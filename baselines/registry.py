"""Baselines by name: `register_model`, `get_model`, `list_models` (torchvision's `_api.py` style).

Each model file registers builder functions `builder(config: ModelConfig) -> nn.Module` under
the names users type (`vprom train --model rn`). The built-in model files are imported the
first time the registry is asked for a model, so importing this module is cheap and a model
file can import `register_model` from here without a cycle.
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Callable

from torch import nn

from baselines.common import ModelConfig
from vprom.errors import VpromError

Builder = Callable[[ModelConfig], nn.Module]

_BUILTIN_MODULES = (
    "baselines.mlp",
    "baselines.gru",
    "baselines.vqa",
    "baselines.rn",
    "baselines.context_blind",
)
_MODELS: dict[str, Builder] = {}


def register_model(name: str) -> Callable[[Builder], Builder]:
    """Decorator: register `builder` under `name`; a name can be registered once."""

    def wrap(builder: Builder) -> Builder:
        if name in _MODELS:
            raise VpromError(
                f"model name {name!r} is already registered (by {_MODELS[name].__module__}); "
                "pick another name"
            )
        _MODELS[name] = builder
        return builder

    return wrap


def _load_builtin_models() -> None:
    for module in _BUILTIN_MODULES:
        importlib.import_module(module)


def list_models() -> list[str]:
    """Every registered model name, sorted."""
    _load_builtin_models()
    return sorted(_MODELS)


def get_model(name: str, config: ModelConfig | None = None, **overrides) -> nn.Module:
    """Build the model `name` from `config` (defaults if None) with `overrides` of its fields."""
    _load_builtin_models()
    if name not in _MODELS:
        raise VpromError(f"unknown model {name!r}; known models: {', '.join(sorted(_MODELS))}")
    fields = {f.name for f in dataclasses.fields(ModelConfig)}
    unknown = sorted(set(overrides) - fields)
    if unknown:
        raise VpromError(
            f"unknown model config field(s) {', '.join(unknown)} for {name!r}; "
            f"the fields are {', '.join(sorted(fields))}"
        )
    config = dataclasses.replace(config or ModelConfig(), **overrides)
    return _MODELS[name](config)
