"""Things of one kind registered by name: models, backbones (torchvision's `_api.py` style).

A `Registry` is a leaf: it imports none of the modules that fill it. Its built-in members
live in modules named in `builtins`, imported the first time the registry is asked for a
name, so importing the registry is cheap and a member module can import `register` from its
owner without an import cycle. Names are registered once; an unknown name raises a
VpromError that lists the known ones.
"""

from __future__ import annotations

import importlib
from typing import Callable, Generic, TypeVar

from vprom.errors import VpromError

T = TypeVar("T")


class Registry(Generic[T]):
    def __init__(self, kind: str, builtins: tuple[str, ...] = (), hint: str = ""):
        self.kind = kind
        self.builtins = builtins
        self.hint = hint  # appended to "unknown name" errors, e.g. where to list them
        self._items: dict[str, T] = {}
        self._origin: dict[str, str] = {}
        self._loaded = False

    def add(self, name: str, item: T, origin: str = "") -> T:
        """Register `item` under `name`; a name can be registered once."""
        if name in self._items:
            raise VpromError(f"{self.kind} name {name!r} is already registered (by "
                             f"{self._origin[name] or 'another module'}); pick another name")
        self._items[name] = item
        self._origin[name] = origin
        return item

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator: `add` the decorated function under `name`."""

        def wrap(item: T) -> T:
            return self.add(name, item, getattr(item, "__module__", ""))

        return wrap

    def _load_builtins(self) -> None:
        if not self._loaded:
            self._loaded = True
            for module in self.builtins:
                importlib.import_module(module)

    def names(self) -> list[str]:
        """Every registered name, sorted."""
        self._load_builtins()
        return sorted(self._items)

    def get(self, name: str) -> T:
        self._load_builtins()
        if name not in self._items:
            hint = f" ({self.hint})" if self.hint else ""
            raise VpromError(f"unknown {self.kind} {name!r}; known: "
                             f"{', '.join(sorted(self._items))}{hint}")
        return self._items[name]
