"""The leaf registry: lazy built-ins, one registration per name, clear errors."""

from __future__ import annotations

import pytest

from vprom.errors import VpromError
from vprom.registry import Registry


def test_builtins_are_imported_on_first_use(monkeypatch):
    registry: Registry[int] = Registry("widget", builtins=("fake_widgets",), hint="see --list")
    imported = []

    def load():
        imported.append(True)
        registry.add("b", 2)
        registry.add("a", 1)

    # importing "fake_widgets" registers two widgets, as importing a model file does
    monkeypatch.setattr("importlib.import_module", lambda name: load())
    assert imported == []
    assert registry.names() == ["a", "b"] and imported == [True]
    assert registry.get("a") == 1
    registry.names()
    assert imported == [True]  # once


def test_a_name_is_registered_once_and_unknown_names_list_the_known():
    registry: Registry[int] = Registry("widget", hint="see --list")
    registry.register("x")(3)
    with pytest.raises(VpromError, match="widget name 'x' is already registered"):
        registry.add("x", 4)
    with pytest.raises(VpromError, match=r"unknown widget 'y'; known: x \(see --list\)"):
        registry.get("y")


def test_a_family_resolves_any_name_with_its_prefix_once():
    registry: Registry[str] = Registry("widget", hint="see --list")
    registry.add("plain", "p")
    made = []

    def resolve(rest: str) -> str:
        if rest == "bad":
            raise VpromError("lib:bad: no such thing")
        made.append(rest)
        return rest.upper()

    registry.add_family("lib", resolve, "lib:<name>  any lib thing")
    assert registry.get("lib:abc") == "ABC" and registry.get("lib:abc") == "ABC"
    assert made == ["abc"]  # resolved once, then cached under its full name
    assert registry.families() == {"lib": "lib:<name>  any lib thing"}
    with pytest.raises(VpromError, match="lib:bad: no such thing"):
        registry.get("lib:bad")
    # a resolved member is cached, not registered: the listing stays the same in any order
    assert registry.names() == ["plain"]
    with pytest.raises(VpromError, match=r"unknown widget 'other:x'; known: plain, "
                                         r"lib:<name> \(see --list\)"):
        registry.get("other:x")
    with pytest.raises(VpromError, match="widget family 'lib': is already registered"):
        registry.add_family("lib", resolve, "")
