"""A training run's folder, and what `vprom train` may do with it: nothing it holds is destroyed.

Files: config.json, history.json, last.pt, best.pt (written by `train`, each atomically) and
metrics.json (by `evaluate`). `last.pt` is the run's truth: weights, optimiser state, history,
the best epoch so far and the config; the others are derived from it or from `best.pt`.

Before any data is read, `place_run` looks at OUT and decides, for the config asked for:
- nothing there, or only a config.json (the first epoch never finished): a fresh run in OUT;
- a run of other settings, or of other data (its manifest, config.json, is not current for
  the data set and features: `vprom.manifest.is_current`): refused, naming what differs
  (choose another --out, or --restart to replace it);
- a run of these settings: resumed from last.pt, or, when it already reached --epochs or
  stopped early, left alone ("nothing to do"); only `RESUMABLE` settings (how long and where
  to train, not what) may differ;
- a best.pt without last.pt (deleted to save space): refused, since it cannot be continued and
  a new run would overwrite it;
- `--restart` on a folder holding a run: the new run trains in a staging folder
  `.NAME.restart` beside OUT until its first epoch is complete, and only then replaces OUT
  (`promote`: OUT moves aside, the staging folder takes its name, files that are not the
  run's own come along, the old run's files are deleted). Until then the old run is
  untouched, whenever the process dies.

When a continued run finds a new best epoch, a metrics.json that scored the previous best.pt
no longer describes the run; it is kept as `metrics.best-epoch-K.json` (K: the epoch it
scored), and a restarted run keeps the old run's as `metrics.before-restart.json`; reports
read only `metrics.json`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import torch

from vprom.baselines.config import TrainConfig
from vprom.errors import VpromError
from vprom.manifest import why_stale

RUN_FILES = ("config.json", "history.json", "last.pt", "best.pt", "metrics.json")
#: what a run folder may hold besides RUN_FILES and still be one `train` may write into
NAMES = (*RUN_FILES, "metrics.*.json")


def inputs(arguments: dict) -> tuple:
    """The input paths of a `train` call (for `vprom.claim.writes`)."""
    config = arguments["config"]
    return (config.dataset, config.features)


# Settings that may differ when a run is continued: how long and where, not what.
RESUMABLE = ("epochs", "patience", "device", "restart", "cuda_graphs", "resume")


@dataclass(frozen=True)
class RunPlace:
    """What this `train` call does with its run folder."""

    out: Path  # the run folder the user named
    folder: Path  # where the run writes now: `out`, or the staging folder of a --restart
    state: dict | None  # the checkpoint to continue from; None for a fresh start
    finished: bool  # nothing to do: the run already reached its end
    message: str

    @property
    def staging(self) -> bool:
        return self.folder != self.out


def staging_folder(out: Path) -> Path:
    return out.parent / f".{out.name}.restart"


def load_checkpoint(path: Path) -> dict:
    """A checkpoint written by `train`, read with `weights_only=True` (no code is unpickled)."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise VpromError(f"{path}: no such checkpoint") from None
    except Exception as e:  # a truncated, foreign or malicious file: one line on which
        raise VpromError(f"{path}: refused, {_why(e)}; train the run again with --restart") \
            from None
    if not isinstance(state, dict):
        raise VpromError(f"{path}: refused, not a vprom checkpoint (it holds a "
                         f"{type(state).__name__}); train the run again with --restart")
    if isinstance(state.get("config"), dict):
        state["config"] = anchored(state["config"], path.parent)
    return state


def _why(error: Exception) -> str:
    """Why torch could not load a checkpoint, in a few words (its own text is six lines and
    suggests loading the file unsafely)."""
    text = str(error)
    if "weights_only" in text or "GLOBAL" in text:
        found = re.search(r"GLOBAL ([\w.]+)", text)
        return "it contains code objects" + (f" ({found.group(1)})" if found else "")
    first = text.strip().splitlines()[0] if text.strip() else type(error).__name__
    return f"not a vprom checkpoint ({first})"


def changes(theirs: dict, mine: dict, ignore: tuple[str, ...] = RESUMABLE) -> str:
    """The settings (other than `ignore`) whose values differ, as 'name old vs new, ...'."""
    keys = sorted(k for k in set(theirs) | set(mine)
                  if k not in ignore and theirs.get(k) != mine.get(k))
    return ", ".join(f"{k} {theirs.get(k)!r} vs {mine.get(k)!r}" for k in keys)


#: the settings that are paths: config.json publishes them relative to the run folder
PATH_KEYS = ("dataset", "features", "out")


def portable(config: dict, out: Path) -> dict:
    """`config` (a `TrainConfig.to_dict()`) with its paths relative to the run folder `out`,
    as config.json stores them: a published run folder names no home or install folder."""
    base = Path(out).resolve()
    return {k: os.path.relpath(Path(v).resolve(), base) if k in PATH_KEYS and isinstance(v, str)
            else v for k, v in config.items()}


def anchored(config: dict, out: Path) -> dict:
    """The inverse of `portable`: `config`'s relative paths as absolute ones, read from `out`
    (a run folder moved together with its data still finds it)."""
    base = Path(out).resolve()
    return {k: os.path.normpath(base / v) if k in PATH_KEYS and isinstance(v, str)
            else v for k, v in config.items()}


def file_names(value):
    """`value` (JSON-like) with every absolute path replaced by its file name: what a features
    file made elsewhere records about its source must not name a home folder in config.json."""
    if isinstance(value, dict):
        return {k: file_names(v) for k, v in value.items()}
    if isinstance(value, list):
        return [file_names(v) for v in value]
    if isinstance(value, str) and os.path.isabs(value) and "\n" not in value:
        return Path(value).name
    return value


def published_metrics(metrics: dict, run: Path) -> dict:
    """metrics.json as written: the run is ".", its data set and features relative to it."""
    base = Path(run).resolve()

    def relative(path: str) -> str:
        return os.path.relpath(Path(path).resolve(), base)

    return {**metrics, "run": ".", "dataset": relative(metrics["dataset"]),
            "features": {**metrics["features"], "path": relative(metrics["features"]["path"])},
            "config": portable(metrics["config"], run)}


def stored_config(out: Path) -> dict | None:
    """The config recorded in OUT/config.json, None when there is none."""
    path = out / "config.json"
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())["config"]
    except (json.JSONDecodeError, KeyError, TypeError):
        raise VpromError(f"{path}: not a vprom run config; choose another --out") from None


def stopped(history: list[dict], best: dict, patience: int) -> bool:
    """Early stopping: `patience` epochs since the best validation accuracy."""
    if best["val_acc"] is None or not history:
        return False
    return history[-1]["epoch"] - (best["epoch"] + 1) >= patience


def is_finished(state: dict, config: TrainConfig) -> bool:
    return len(state["history"]) >= config.epochs or stopped(state["history"], state["best"],
                                                            config.patience)


def place_run(config: TrainConfig) -> RunPlace:
    """Decide what to do with `config.out` (see the module doc); `config` is resolved."""
    out, mine = config.out, portable(config.to_dict(), config.out)
    last, best = out / "last.pt", out / "best.pt"
    state = load_checkpoint(last) if last.is_file() else None
    theirs = portable(state["config"], out) if state is not None else (
        portable(load_checkpoint(best)["config"], out) if best.is_file() else stored_config(out))
    has_run = any((out / name).is_file() for name in RUN_FILES if name != "config.json")
    if config.restart:
        if not has_run:
            return RunPlace(out, out, None, False, f"{out}: starting a new run")
        return RunPlace(out, staging_folder(out), None, False,
                       f"{out}: --restart: training a new run in {staging_folder(out)}; the run "
                       "in the folder is replaced once the new one has finished an epoch")
    if theirs is not None:
        differ = changes(theirs, mine)
        if differ:
            raise VpromError(f"{out} holds a run with other settings ({differ}); choose another "
                             "--out, or pass --restart to replace that run (its files are kept "
                             "until the new run has finished an epoch)")
        stale = (out / "config.json").is_file() and why_stale(
            out, [config.dataset, config.features], {})
        if stale:
            raise VpromError(f"{out} holds a run made from other data ({stale}); choose another "
                             "--out, or pass --restart to replace that run")
    if state is None:
        if best.is_file():
            raise VpromError(f"{out} holds a best.pt but no last.pt, so its run cannot be "
                             f"continued; `vprom evaluate {out}` still scores it. Pass --restart "
                             "to train it again, or choose another --out")
        return RunPlace(out, out, None, False, f"{out}: starting a new run")
    done = len(state["history"])
    if is_finished(state, config):
        val = state["best"]["val_acc"]
        return RunPlace(out, out, state, True,
                       f"{out}: this run is finished ({done} epochs, best val accuracy "
                       f"{'n/a' if val is None else f'{100 * val:.1f}%'} at epoch "
                       f"{state['best']['epoch'] + 1}); nothing to do. `vprom evaluate {out}` "
                       "scores it; a larger --epochs continues it; --restart trains it again")
    return RunPlace(out, out, state, False, f"{out}: resuming after epoch {done}")


def prepare(place: RunPlace) -> None:
    """Rank 0, before training: the folder to write in exists (a stale staging one is cleared)."""
    if place.staging and place.folder.exists():
        shutil.rmtree(place.folder)  # the first epoch of an earlier, interrupted --restart
    place.folder.mkdir(parents=True, exist_ok=True)


def promote(place: RunPlace) -> RunPlace:
    """Rank 0, after the staged run's first epoch: it replaces the old run in OUT."""
    out = place.out
    old = out.parent / f".{out.name}.replaced-{os.getpid()}"
    supersede_metrics(out, "metrics.before-restart.json")  # a result the user had: kept
    os.replace(out, old)
    os.replace(place.folder, out)
    for entry in sorted(old.iterdir()):  # what the user keeps beside the run stays with it
        if entry.name not in RUN_FILES:
            os.replace(entry, out / entry.name)
    shutil.rmtree(old)
    return RunPlace(out, out, None, False, f"{out}: the new run replaced the old one")


def supersede_metrics(folder: Path, name: str | None = None) -> None:
    """Keep a metrics.json that scored a best.pt about to be replaced, under another name
    (`metrics.best-epoch-K.json` for the epoch it scored, unless `name` is given)."""
    metrics = folder / "metrics.json"
    if not metrics.is_file():
        return
    if name is None:
        try:
            scored = int(json.loads(metrics.read_text())["checkpoint"]["epoch"])
            name = f"metrics.best-epoch-{scored}.json"
        except (ValueError, KeyError, TypeError):
            name = "metrics.superseded.json"
    os.replace(metrics, folder / name)
