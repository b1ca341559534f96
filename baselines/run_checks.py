"""Whether a run learned, and whether runs may be averaged: the checks behind every report.

A run did not learn when its lowest training answer loss stayed above ln 8 (uniform scores)
less `LOSS_TOLERANCE`, or its test accuracy lies within the 95% Wilson interval of chance on
as many matrices; it is flagged, never dropped. A control (context-blind, or shuffled
context) is expected at chance: it passes while its interval's lower end is at most chance +
2 points, `vprom verify`'s rule for bias probes. Runs of one table cell are averaged over
seeds and must differ in nothing else (`settings`, `check_alike`).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from vprom.errors import VpromError
from vprom.domain import CHANCE, N_CANDIDATES, SHORTCUT_MARGIN
from vprom.statistics import wilson_interval

#: ln 8, the answer loss of uniform scores
CHANCE_LOSS = math.log(N_CANDIDATES)
#: how far below ln 8 the loss must get once for the run to count as having left it
LOSS_TOLERANCE = 0.01
#: training settings that do not change what a run learns (where, how resumed, which seed)
NOT_SETTINGS = ("seed", "out", "device", "restart", "cuda_graphs", "resume", "dataset",
                "features", "maps", "crops")


def chance_interval(n: int) -> tuple[float, float]:
    """The 95% Wilson interval of a chance-level score (12.5%) on n matrices."""
    return wilson_interval(CHANCE * n, n)


#: models that are controls whatever they are trained on: they cannot see the context
CONTROL_MODELS = ("context-blind", "context-blind-pixels")


def is_control(model: str, shuffle_context: bool) -> bool:
    """Whether a run is a control, expected at chance (see the module doc)."""
    return shuffle_context or model in CONTROL_MODELS


def control_result(metrics: dict) -> tuple[bool, str]:
    """(passed, why) for a control: at chance unless its 95% interval's lower end exceeds
    chance + SHORTCUT_MARGIN."""
    low, high = metrics["test"]["ci95"]
    limit = CHANCE + SHORTCUT_MARGIN
    accuracy = 100 * metrics["test"]["accuracy"]
    interval = f"{accuracy:.1f}% (95% interval {100 * low:.1f}–{100 * high:.1f}%)"
    if low <= limit:
        return True, f"at chance as expected: {interval}, lower end ≤ {100 * limit:.1f}%"
    return False, (f"above chance: {interval}, lower end > {100 * limit:.1f}%; the answer can "
                   "be found without the context")


def did_not_learn(metrics: dict, history: list[dict]) -> list[str]:
    """The reasons a run counts as not having learned (empty when it learned)."""
    reasons = []
    losses = [h.get("train_answer_loss", h.get("train_loss")) for h in history]
    losses = [x for x in losses if isinstance(x, (int, float))]
    if losses and min(losses) > CHANCE_LOSS - LOSS_TOLERANCE:
        reasons.append(f"its training answer loss never left ln 8 = {CHANCE_LOSS:.4f} (lowest "
                       f"{min(losses):.4f} in {len(losses)} epochs)")
    test = metrics.get("test") or {}
    n, accuracy = test.get("n") or 0, test.get("accuracy")
    if n and accuracy is not None:
        low, high = chance_interval(n)
        if low <= accuracy <= high:
            reasons.append(f"its test accuracy {100 * accuracy:.1f}% is within the chance "
                           f"interval {100 * low:.1f}–{100 * high:.1f}% of {n:,} matrices")
    return reasons


def settings(run: Path, metrics: dict) -> dict:
    """What a run was trained with, for comparing the runs of one cell."""
    config, dataset = metrics.get("config"), metrics.get("dataset_content_hash")
    manifest = {}
    if config is None or dataset is None:
        try:
            manifest = json.loads((Path(run) / "config.json").read_text())
        except (OSError, ValueError):
            manifest = {}
    config = config or manifest.get("config") or {}
    out = {k: v for k, v in config.items() if k not in NOT_SETTINGS}
    out["data set"] = dataset or (manifest.get("dataset") or {}).get("content_hash") or (
        manifest.get("inputs") or {}).get("dataset")
    out["backbone weights"] = (metrics.get("features") or {}).get("weights")
    return {k: v for k, v in out.items() if v is not None}


def check_alike(label: str, runs: list[tuple[Path, dict]]) -> None:
    """Refuse to average `runs` (path, settings) whose settings differ; name each difference."""
    first_path, first = runs[0]
    for path, other in runs[1:]:
        keys = sorted(k for k in set(first) & set(other) if first[k] != other[k])
        if keys:
            differ = "; ".join(f"{k} {_short(first[k])} in {first_path} vs {_short(other[k])} "
                               f"in {path}" for k in keys)
            raise VpromError(f"cannot average the runs of {label}: their settings differ "
                             f"({differ}); report them separately, or train them alike")


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 30 else text[:27] + "…'"
