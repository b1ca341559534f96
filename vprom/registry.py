"""Things of one kind registered by name: models, backbones (torchvision's `_api.py` style).

A name is registered once; an unknown one is refused with the known ones. The `builtins`
modules are imported on the first look-up (so they can import `register` without a cycle); a
*family* (`add_family`) resolves any name `prefix:<rest>`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Generic, TypeVar

from vprom.errors import VpromError

T = TypeVar("T")


class Registry(Generic[T]):
    def __init__(self, kind: str, builtins: tuple[str, ...] = (), hint: str = ""):
        self.kind = kind
        self.builtins = builtins
        self.hint = hint  # appended to "unknown name" errors, e.g. where to list them
        self._items: dict[str, T] = {}
        self._origin: dict[str, str] = {}
        self._families: dict[str, tuple[Callable[[str], T], str]] = {}
        self._resolved: dict[str, T] = {}  # family members already asked for (not listed)
        self._loaded = False

    def add(self, name: str, item: T, origin: str = "") -> T:
        if name in self._items:
            raise VpromError(f"{self.kind} name {name!r} is already registered (by "
                             f"{self._origin[name] or 'another module'}); pick another name")
        self._items[name] = item
        self._origin[name] = origin
        return item

    def register(self, name: str) -> Callable[[T], T]:  # a decorator
        return lambda item: self.add(name, item, getattr(item, "__module__", ""))

    def add_family(self, prefix: str, resolve: Callable[[str], T], usage: str) -> None:
        """Names `prefix:<rest>` resolve through `resolve(rest)`; `usage` says how to name one."""
        if prefix in self._families:
            raise VpromError(f"{self.kind} family {prefix!r}: is already registered")
        self._families[prefix] = (resolve, usage)

    def families(self) -> dict[str, str]:
        self._load_builtins()
        return {prefix: usage for prefix, (_, usage) in sorted(self._families.items())}

    def _load_builtins(self) -> None:
        if not self._loaded:
            self._loaded = True
            for module in self.builtins:
                importlib.import_module(module)

    def names(self) -> list[str]:
        self._load_builtins()
        return sorted(self._items)

    def get(self, name: str) -> T:
        self._load_builtins()
        prefix, colon, rest = name.partition(":")
        if name not in self._items and colon and prefix in self._families:
            if name not in self._resolved:
                self._resolved[name] = self._families[prefix][0](rest)
            return self._resolved[name]
        if name not in self._items:
            hint = f" ({self.hint})" if self.hint else ""
            families = "".join(f", {p}:<name>" for p in self._families)
            raise VpromError(f"unknown {self.kind} {name!r}; known: "
                             f"{', '.join(sorted(self._items))}{families}{hint}")
        return self._items[name]
