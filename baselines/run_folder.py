"""A training run's folder (config.json, history.json, last.pt, best.pt, metrics.json), and what
`vprom train` may do with it: start, resume or leave a finished run, refuse one that is not current
(inputs or settings other than `RESUMABLE` differ), never destroy what it holds. `--restart` trains
in `.NAME.restart`, which replaces OUT after its first epoch; a metrics.json that scored a replaced
best.pt is kept as `metrics.best-epoch-K.json` or `metrics.before-restart.json`."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import torch

from vprom.baselines.config import TrainConfig
from vprom.errors import VpromError
from vprom.files import atomic_path
from vprom.manifest import manifest_of, why_stale

RUN_FILES = ("config.json", "history.json", "last.pt", "best.pt", "metrics.json")
#: settings that may differ when a run is continued: how long and where, not what
RESUMABLE = ("epochs", "patience", "device", "restart", "cuda_graphs", "resume")
#: settings newer than some runs, with the value that those runs trained with
ADDED = {"lr_schedule": "constant"}
#: the settings that are paths: config.json stores them relative to the run folder
PATH_KEYS = ("dataset", "features", "maps", "crops", "out")


@dataclass(frozen=True)
class RunPlace:
    out: Path  # the run folder the user named
    folder: Path  # `out`, or the staging folder of a --restart
    state: dict | None  # the checkpoint to continue from; None for a fresh start
    finished: bool  # nothing to do: the run already reached its end
    message: str

    @property
    def staging(self) -> bool:
        return self.folder != self.out


def staging_folder(out: Path) -> Path:
    return out.parent / f".{out.name}.restart"


def save_checkpoint(path: Path, state: dict, renames: contextlib.ExitStack) -> None:
    """Write `state` to a temporary of `path`, renamed into place when `renames` closes."""
    tmp = renames.enter_context(atomic_path(path))
    with open(tmp, "wb") as f:  # Python's writes report a full disk as ENOSPC, torch's do not
        torch.save(state, f)


def load_checkpoint(path: Path) -> dict:
    """A checkpoint of `train`, read with `weights_only=True` (no code is unpickled)."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise VpromError(f"{path}: no such checkpoint") from None
    except Exception as e:  # a truncated, foreign or malicious file: one line on which
        text = str(e).strip()
        found = re.search(r"GLOBAL ([\w.]+)", text)
        why = (f"it contains code objects{f' ({found.group(1)})' if found else ''}"
               if "weights_only" in text or found else
               f"not a vprom checkpoint ({text.splitlines()[0] if text else type(e).__name__})")
        raise VpromError(f"{path}: refused, {why}; train the run again with --restart") from None
    if not isinstance(state, dict):
        raise VpromError(f"{path}: refused, not a vprom checkpoint (it holds a "
                         f"{type(state).__name__}); train the run again with --restart")
    if isinstance(state.get("config"), dict):
        state["config"] = anchored(state["config"], path.parent)
    return state


def check_own_checkpoint(path: Path, manifest: dict, state: dict) -> None:
    """Refuse a checkpoint whose settings differ from its run's config.json."""
    run = path.parent
    # a setting newer than a run takes the value that the run trained with
    ours = {**ADDED, **anchored(manifest["config"], run)}
    theirs = {**ADDED, **(state.get("config") or {})}
    differ = sorted(k for k in set(ours) | set(theirs)
                    if k not in RESUMABLE and ours.get(k) != theirs.get(k))
    if differ:
        raise VpromError(f"{path}: not this run's checkpoint ({', '.join(differ)} differ from "
                         f"{run / 'config.json'}); restore the run's own {path.name}, or train "
                         "it again with --restart")


def load_weights(model, state: dict, path: Path) -> None:
    try:
        model.load_state_dict(state["model"])
    except (RuntimeError, KeyError, TypeError) as e:
        details = [line.strip() for line in str(e).splitlines() if line.strip()]
        raise VpromError(f"{path}: its weights do not fit the run's {type(model).__name__} "
                         f"model ({(details[1:2] or details[:1] or [type(e).__name__])[0]}); "
                         f"restore the run's own {path.name}, or train it again with --restart"
                         ) from None


def portable(config: dict, out: Path) -> dict:
    """`config` (a `TrainConfig.to_dict()`) with its paths relative to the run folder `out`."""
    base = Path(out).resolve()
    return {k: os.path.relpath(Path(v).resolve(), base) if k in PATH_KEYS and isinstance(v, str)
            else v for k, v in config.items()}


def anchored(config: dict, out: Path) -> dict:
    base = Path(out).resolve()
    return {k: os.path.normpath(base / v) if k in PATH_KEYS and isinstance(v, str)
            else v for k, v in config.items()}


def plain_record(value):
    """`value` (FEATS.h5 attributes) as plain JSON values, absolute paths cut to file names."""
    if isinstance(value, dict):
        return {str(k): plain_record(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain_record(v) for v in value]
    if isinstance(value, Path):
        value = str(value)
    if isinstance(value, str) and os.path.isabs(value) and "\n" not in value:
        return Path(value).name
    return value


def stopped(history: list[dict], best: dict, patience: int) -> bool:
    """Early stopping: `patience` epochs since the best validation accuracy."""
    return (best["val_acc"] is not None and bool(history)
            and history[-1]["epoch"] - (best["epoch"] + 1) >= patience)


def place_run(config: TrainConfig) -> RunPlace:
    out = config.out
    if config.restart:
        if any((out / name).is_file() for name in RUN_FILES if name != "config.json"):
            return RunPlace(out, staging_folder(out), None, False,
                            f"{out}: --restart: training a new run in {staging_folder(out)}; "
                            "the run in the folder is replaced once the new one has finished "
                            "an epoch")
        return RunPlace(out, out, None, False, f"{out}: starting a new run")
    if (out / "best.pt").is_file() and not (out / "last.pt").is_file():
        raise VpromError(f"{out} holds a best.pt but no last.pt, so its run cannot be "
                         f"continued; `vprom evaluate {out}` still scores it. Pass --restart "
                         "to train it again, or choose another --out")
    state = load_checkpoint(out / "last.pt") if (out / "last.pt").is_file() else None
    if state is not None or (out / "config.json").is_file():
        recorded = (manifest_of(out) or {}).get("config") or {}
        # a setting the run predates, asked at the value the run trained with, is not compared
        settings = {k: v for k, v in portable(config.to_dict(), out).items()
                    if k not in RESUMABLE and not (k in ADDED and k not in recorded
                                                   and v == ADDED[k])}
        why = why_stale(out, [config.dataset, config.source[2]], settings)
        if why:
            raise VpromError(f"{out} holds a run this one cannot continue ({why}); choose "
                             "another --out, or pass --restart to replace that run (its files "
                             "are kept until the new run has finished an epoch)")
        if state is not None:
            check_own_checkpoint(out / "last.pt", manifest_of(out), state)
    if state is None:
        return RunPlace(out, out, None, False, f"{out}: starting a new run")
    done, best = len(state["history"]), state["best"]
    if done >= config.epochs or stopped(state["history"], best, config.patience):
        val = "n/a" if best["val_acc"] is None else f"{100 * best['val_acc']:.1f}%"
        return RunPlace(out, out, state, True,
                        f"{out}: this run is finished ({done} epochs, best val accuracy {val} "
                        f"at epoch {best['epoch'] + 1}); nothing to do. `vprom evaluate {out}` "
                        "scores it; a larger --epochs continues it; --restart trains it again")
    return RunPlace(out, out, state, False, f"{out}: resuming after epoch {done}")


def prepare(place: RunPlace) -> None:
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
    """Keep a metrics.json as `name`, by default `metrics.best-epoch-K.json` (K its epoch)."""
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
