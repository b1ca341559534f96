"""The house of floors: every import goes down a floor, and no imports run in a circle.

Every module of the package is read with `ast`, imports inside functions included. A module
may import its own package, the packages of the floors below it and the third-party
libraries its floor is allowed. The stages on floor 2 do not import each other, with one
exception: generation builds on `splits` (the split rules and the pure function that assigns
every matrix), a leaf that imports only the ground floor. `vprom.runtime` (the
devices and processes of the torch stages) is the one ground-level module allowed torch: it
sits just above the ground, below `features` and `baselines`, which both run on it.
"""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
STAGES = ("mining", "splits", "generation", "features", "baselines")
GROUND_LIBRARIES = {"numpy", "h5py", "PIL"}
#: floor -> (the packages below it it may import, the third-party libraries it may import)
RULES = {
    "ground": ((), GROUND_LIBRARIES),
    "mining": (("ground",), GROUND_LIBRARIES | {"ijson", "msgspec", "requests",
                                                 "urllib3", "tqdm"}),
    "splits": (("ground",), GROUND_LIBRARIES),
    "generation": (("ground", "splits"), GROUND_LIBRARIES | {"tqdm", "pyarrow", "scipy",
                                                        "threadpoolctl", "torch"}),
    "runtime": (("ground",), GROUND_LIBRARIES | {"torch"}),
    "features": (("ground", "runtime"),
                 GROUND_LIBRARIES | {"tqdm", "torch", "torchvision", "timm", "huggingface_hub"}),
    "baselines": (("ground", "runtime", "splits", "features"),
                  GROUND_LIBRARIES | {"tqdm", "torch", "matplotlib"}),
    # vprom.data (the public torch Dataset and its loader) sits beside baselines: it needs
    # torch, which the rest of vprom/*.py may not import
    "data": (("ground", "runtime", "splits", "features"), GROUND_LIBRARIES | {"torch"}),
    "top": (("ground", "runtime", "mining", "splits", "generation", "features", "baselines",
             "data"),
            None),
}
#: (module, the top-floor module it may import lazily, the function that may import it)
FACADE = ("vprom", "vprom.app.api", "__getattr__")


def floor(module: str) -> str:
    """The floor of an internal module name."""
    parts = module.split(".")
    if module == "vprom.__main__" or parts[:2] == ["vprom", "app"]:
        return "top"
    if parts[:2] == ["vprom", "runtime"]:
        return "runtime"
    if parts[:2] == ["vprom", "data"]:
        return "data"
    return parts[1] if len(parts) > 1 and parts[1] in STAGES else "ground"


def modules() -> dict[str, Path]:
    out = {}
    for package in ("vprom",) + STAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            parts = parts if package == "vprom" else ("vprom",) + parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            out[name] = path
    return out


def imports(path: Path, name: str) -> set[str]:
    """Every module `path` imports, at any depth of its code (relative imports resolved)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = name.split(".")[: len(name.split(".")) - node.level +
                                        (1 if path.name == "__init__.py" else 0)]
                base = ".".join(package + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def facade_imports(path: Path) -> set[str]:
    """What the module-level `__getattr__` of `path` imports (the lazy facade's imports)."""
    tree = ast.parse(path.read_text(), str(path))
    found = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == FACADE[2]:
            for inner in ast.walk(node):
                if isinstance(inner, ast.ImportFrom):
                    found.add(inner.module or "")
                    found.update(f"{inner.module}.{a.name}" for a in inner.names)
    return found


def imports_at_load(name: str) -> set[str]:
    """What module `name` imports, less the facade's lazy import (run on first attribute use,
    never when the module is loaded)."""
    found = imports(MODULES[name], name)
    if name == FACADE[0]:
        found -= facade_imports(MODULES[name])
    return found


MODULES = modules()
GRAPH = {name: {m for m in imports_at_load(name) if m in MODULES and m != name}
         for name, path in MODULES.items()}


@pytest.mark.parametrize("name", sorted(MODULES))
def test_imports_only_go_down(name):
    mine = floor(name)
    below, libraries = RULES[mine]
    problems = []
    for imported in sorted(imports_at_load(name)):
        top = imported.split(".")[0]
        if top in STAGES:
            problems.append(f"{imported} (a stage is imported as vprom.{top})")
        elif top == "vprom":
            if imported not in MODULES and imported.rsplit(".", 1)[0] in MODULES:
                imported = imported.rsplit(".", 1)[0]  # `from package.module import name`
            target = floor(imported)
            if target != mine and target not in below:
                problems.append(f"{imported} (floor {target})")
        elif libraries is not None and top not in sys.stdlib_module_names \
                and top not in libraries and top != "__future__":
            problems.append(f"{imported} (library not allowed on floor {mine})")
    assert not problems, f"{name} (floor {mine}) imports " + ", ".join(problems)


def test_nothing_imports_the_top_floor():
    users = {name: sorted(m for m in targets if floor(m) == "top")
             for name, targets in GRAPH.items() if floor(name) != "top"}
    assert not {k: v for k, v in users.items() if v}


def test_no_import_cycles():
    cycles, state, stack = [], {}, []

    def visit(node: str) -> None:
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(GRAPH[node]):
            if state.get(nxt) == "open":
                cycles.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = "done"

    for node in sorted(GRAPH):
        if node not in state:
            visit(node)
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


def test_the_checker_sees_lazy_imports(tmp_path):
    path = tmp_path / "lazy.py"
    path.write_text("def f():\n    from vprom.baselines.train import train\n    import torch\n")
    assert {"vprom.baselines.train", "vprom.baselines.train.train", "torch"} <= imports(path, "vprom.x")


def test_the_facade_imports_the_api_lazily_and_nothing_else():
    path = MODULES[FACADE[0]]
    assert facade_imports(path) == {"vprom.app", FACADE[1]}
    top_level = [n for n in ast.parse(path.read_text()).body
                 if isinstance(n, (ast.Import, ast.ImportFrom))]
    assert not top_level, "vprom/__init__.py must import nothing when it is loaded"


def test_no_symlinks_are_tracked():
    """The stage folders install by the build backend's package-dir mapping, not by links."""
    listing = subprocess.run(["git", "ls-files", "-s"], cwd=ROOT, capture_output=True,
                             text=True)
    if listing.returncode:
        pytest.skip("not a git checkout")
    assert [line for line in listing.stdout.splitlines() if line.startswith("120000")] == []


@pytest.mark.parametrize("stage", STAGES)
def test_a_stage_has_one_import_name(stage):
    """`vprom.<stage>` imports; the bare folder name does not, under this pytest configuration
    (importlib mode, no repository folder on sys.path) as for users."""
    assert importlib.import_module(f"vprom.{stage}").__file__.startswith(str(ROOT / stage))
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(stage)
