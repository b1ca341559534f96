"""Installed, vprom owns one import name, and a user's own stage-named packages cannot shadow
it.

The wheel is built from the repository and installed into a fresh venv. The heavy
dependencies (torch, h5py, ...) are borrowed from the venv running the tests through a `.pth`
file, so nothing is downloaded; that `.pth` adds a path without running the other venv's own
`.pth` files, so the editable vprom installed there stays out of sight. Then, from a folder
that holds its own `features/`, `baselines/`, `splits/` and `mining/` packages (each raising
ImportError when imported, as an unrelated project's would fail), `vprom build --synthetic`
and `python -c "import vprom.features"` must work, and the venv's site-packages must hold no
top-level name but `vprom` and its dist-info, besides the `.pth`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHADOWS = ("features", "baselines", "splits", "mining", "generation")
BORROWED = "borrowed-dependencies.pth"


def run(*args, cwd=None) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    done = subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=900)
    assert done.returncode == 0, f"{args}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A fresh venv with the wheel installed: its folder."""
    root = tmp_path_factory.mktemp("wheel")
    # built from a copy: setuptools writes build/ and *.egg-info into the tree it builds
    source = root / "source"
    shutil.copytree(ROOT, source, symlinks=True, ignore=shutil.ignore_patterns(
        ".git", ".venv", "build", "*.egg-info", "__pycache__", ".pytest_cache", "tests"))
    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
        "-w", root / "dist", source)
    [wheel] = (root / "dist").glob("vprom-*.whl")
    env = root / "venv"
    venv.create(env, with_pip=False, symlinks=True)
    python = env / "bin" / "python"
    site = Path(run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])")
                .strip())
    (site / BORROWED).write_text(sysconfig.get_paths()["purelib"] + "\n")
    run(sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "-q", wheel)
    return env


def shadowing_folder(path: Path) -> Path:
    for name in SHADOWS:
        (path / name).mkdir(parents=True)
        (path / name / "__init__.py").write_text(
            f"raise ImportError('the user\\'s own {name} package was imported')\n")
    return path


@pytest.mark.slow
def test_site_packages_holds_only_vprom(installed):
    site = Path(run(installed / "bin" / "python", "-c",
                    "import sysconfig; print(sysconfig.get_paths()['purelib'])").strip())
    names = {p.name for p in site.iterdir() if p.name != "__pycache__"}
    assert names == {"vprom", "vprom-0.1.0.dist-info", BORROWED}
    assert (site / "vprom" / "features" / "extract.py").is_file()
    assert not (site / "vprom" / "features").is_symlink()


@pytest.mark.slow
def test_own_stage_packages_do_not_shadow_vprom(installed, tmp_path):
    user = shadowing_folder(tmp_path / "project")
    python, command = installed / "bin" / "python", installed / "bin" / "vprom"
    where = run(python, "-c", "import vprom.features, vprom.baselines.config, vprom.splits, "
                "vprom.mining, vprom.generation; print(vprom.features.__file__)", cwd=user)
    assert where.startswith(str(installed))
    out = run(command, "build", "--synthetic", "--images", "1000", "--scale", "0.003",
              "--out", "build", cwd=user)
    assert "[5/5] statistics" in out and (user / "build" / "dataset.h5").is_file()
    # the library API from the same folder
    api = run(python, "-c", "import vprom; print(vprom.verify('build/dataset.h5').ok)", cwd=user)
    assert api.strip() == "True"
