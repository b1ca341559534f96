"""Test accuracy of a trained run (`vprom evaluate RUN`), with breakdowns and 95% intervals.

`evaluate` rebuilds the run's model from `best.pt`, predicts its split's test matrices and
writes the scores, the run's settings and whether it learned to `RUN/metrics.json`. It refuses
other data or features than the run's, and holds the run's claim so no `train` replaces best.pt.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from vprom.baselines.config import TrainConfig
from vprom.baselines.metrics import control_result, did_not_learn, is_control
from vprom.baselines.metrics import INTERVAL, breakdowns, format_breakdowns, format_score
from vprom.baselines.run_folder import (check_own_checkpoint, load_checkpoint, load_weights,
                                        plain_record, portable)
from vprom.baselines.train import build_model, load_data, predict
from vprom.claim import claim
from vprom.errors import VpromError
from vprom.feature_files import check_features_source
from vprom.files import write_json
from vprom.manifest import check_made_from, input_hash
from vprom.domain import CHANCE, N_CONTEXT
from vprom.runtime import resolve_device


def _check_run(run: Path) -> None:
    if not run.is_dir():
        raise VpromError(f"{run}: no such folder; pass a run folder of `vprom train`")
    if not (run / "config.json").is_file():
        raise VpromError(f"{run}: no config.json; is this a run folder of `vprom train`?")
    if not (run / "best.pt").is_file():
        raise VpromError(f"{run / 'best.pt'}: no such checkpoint; the run has not finished an "
                         "epoch yet (re-running its `vprom train` command continues it)")


def check_inputs(run: Path, manifest: dict, state: dict, data_attrs: dict | None = None) -> None:
    """Refuse to score a run on another data set, or on other features than it was trained on."""
    config = state["config"]
    recorded = state.get("dataset") or manifest.get("dataset") or {
        "sha256": (manifest.get("inputs") or {}).get("dataset")}
    check_made_from(recorded, config["dataset"], f"the run {run}",
                    "restore that data set, or train a new run on this one")
    panels = TrainConfig.from_dict(config).source[2]
    check_features_source(config["dataset"], panels)
    if data_attrs is None:
        return
    trained, now = plain_record(state.get("features_attrs") or {}), plain_record(data_attrs)
    # the manifest differs between two extractions of the same features
    differ = sorted(k for k in set(trained) | set(now) if k != "manifest"
                    and trained.get(k) != now.get(k))
    if differ:
        raise VpromError(f"{panels} is not the features file the run {run} was "
                         f"trained on ({', '.join(differ)} differ); evaluate it with those "
                         "features, or train a new run on these")


def evaluate(run_dir: str | Path, device: str | None = None) -> dict:
    """Score `run_dir`'s best checkpoint on its split's test set; writes metrics.json."""
    run = Path(run_dir)
    _check_run(run)  # before the claim: a mistyped path makes no lock file
    with claim(run, ("run",), folder=True):
        _check_run(run)  # again, under the claim
        try:
            manifest = json.loads((run / "config.json").read_text())
            manifest["config"]
        except (json.JSONDecodeError, KeyError, TypeError):
            raise VpromError(f"{run / 'config.json'}: not a vprom run config") from None
        state = load_checkpoint(run / "best.pt")
        check_own_checkpoint(run / "best.pt", manifest, state)
        config = TrainConfig.from_dict(state["config"]).resolved()
        check_inputs(run, manifest, state)
        data = load_data(config, resolve_device(device))
        check_inputs(run, manifest, state, data.attrs)
        test = data.parts["test"]
        if len(test) == 0:
            raise VpromError(f"{config.dataset}: split {config.split!r} has no test matrices; "
                             "nothing to evaluate")
        model, _ = build_model(config, data.feature_dim, data.side)
        load_weights(model, state, run / "best.pt")
        model.to(data.features.device)
        correct = (predict(model, data, test) == test.answer.cpu()).numpy()
        # the answer panel's row of the panel table: one per crop
        answer_crop = test.rows.gather(1, N_CONTEXT + test.answer[:, None]).cpu().numpy()[:, 0]
        metrics = {
            "run": str(run), "model": config.model, "split": config.split, "aux": config.aux,
            "shuffle_context": config.shuffle_context, "seed": config.seed,
            "features": {k: state["features_attrs"].get(k) for k in ("backbone", "weights")}
            | {"path": str(config.source[2])},
            "dataset": str(config.dataset), "dataset_content_hash": input_hash(config.dataset),
            "config": config.to_dict(),
            "checkpoint": {"epoch": state["best"]["epoch"] + 1,
                           "val_acc": state["best"]["val_acc"]},
            "chance": CHANCE,
            **breakdowns(correct, test.relation_name, test.element_type, answer_crop),
        }
        if is_control(config.model, config.shuffle_context):  # expected at chance: checked so
            passed, why = control_result(metrics)
            metrics["control"] = {"expected": "chance", "passed": passed, "why": why}
            metrics["did_not_learn"] = []
        else:
            metrics["did_not_learn"] = did_not_learn(metrics, state["history"])
        write_json(run / "metrics.json", published_metrics(metrics, run))
        return metrics


def published_metrics(metrics: dict, run: Path) -> dict:
    """metrics.json as written: paths relative to the run."""
    def relative(path: str) -> str:
        return os.path.relpath(Path(path).resolve(), run.resolve())

    return {**metrics, "run": ".", "dataset": relative(metrics["dataset"]),
            "features": {**metrics["features"], "path": relative(metrics["features"]["path"])},
            "config": portable(metrics["config"], run)}


def format_metrics(metrics: dict) -> str:
    aux = " +aux" if metrics["aux"] else ""
    control = " (shuffled context)" if metrics["shuffle_context"] else ""
    lines = [f"{metrics['model']}{aux}{control} on {metrics['split']} "
             f"({metrics['features'].get('backbone')} features), best epoch "
             f"{metrics['checkpoint']['epoch']}",
             f"test accuracy {format_score(metrics['test'])}   {INTERVAL}; chance 12.5%"]
    lines += format_breakdowns(metrics)
    if metrics.get("control"):
        verdict = "PASS" if metrics["control"]["passed"] else "FAIL"
        lines.append(f"CONTROL {verdict}: {metrics['control']['why']}")
    lines += [f"DID NOT LEARN: {reason}" for reason in metrics.get("did_not_learn") or []]
    lines.append(f"written to {Path(metrics['run']) / 'metrics.json'}")
    return "\n".join(lines)
