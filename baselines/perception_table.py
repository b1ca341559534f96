"""Perception against reasoning: each run's feature source, and the table, plot and verdict that
set the sources side by side per split beside chance and the perception-only ceiling. The source
comes from the features file's attributes: "perfect perception (labels)" (or "labels, noise P"),
"random weights (<backbone>)", "trained perception model (<backbone>)" (`vprom perceive`'s
weights), else the backbone's paper name."""

from __future__ import annotations

import contextlib
import itertools
import json
from pathlib import Path
from typing import Callable

import numpy as np

from vprom.baselines.paper import CHANCE, display_name, feature_type
from vprom.baselines.metrics import is_control
from vprom.domain import SPLITS
from vprom.files import atomic_path
from vprom.manifest import manifest_of

PERFECT = "perfect perception (labels)"
RANDOM = "random weights"
TRAINED = "trained perception model"
#: (data set, splits) -> {split: (ceiling accuracy 0..1, test problems)}
Ceilings = Callable[[Path, list[str]], dict[str, tuple[float, int]]]


def recorded_attrs(run: Path, metrics: dict) -> dict:
    """The features file's attributes from config.json, else (`vprom score`) the metrics."""
    try:
        return json.loads((run / "config.json").read_text())["features_attrs"] or {}
    except (OSError, ValueError, KeyError, TypeError):
        return metrics.get("features") or {}


def feature_source(attrs: dict, backbone: str) -> str:
    manifest = attrs.get("manifest") if isinstance(attrs.get("manifest"), dict) else {}
    config = manifest.get("config") or {}
    if attrs.get("symbolic") or config.get("symbolic"):
        noise = float(attrs.get("label_noise", config.get("label_noise")) or 0)
        return PERFECT if noise == 0 else f"labels, noise {noise:g}"
    weights = attrs.get("weights")
    if weights == "none":
        return f"{RANDOM} ({backbone})"
    kind = attrs.get("weights_kind")
    # files extracted without that record: the weights file's manifest says
    if "weights_kind" not in attrs and isinstance(weights, str) and Path(weights).is_file():
        kind = (manifest_of(weights) or {}).get("kind")
    if kind == "perception-weights":  # `vprom perceive`'s manifest kind
        pool = attrs.get("pool", config.get("pool"))
        return f"{TRAINED} ({backbone}{', predicted labels' if pool == 'heads' else ''})"
    return feature_type(backbone)


def is_reference(source: str) -> bool:
    return source.startswith((RANDOM, "labels", PERFECT))


def _source_order(source: str) -> tuple:
    rank = (0 if source.startswith(RANDOM) else 2 if source.startswith(TRAINED)
            else 3 if source.startswith("labels") else 4 if source == PERFECT else 1)
    return rank, source


def perception_rows(grouped: dict, ceilings: dict[str, tuple[float, int]]) -> list[dict]:
    """A row per cell that is not a control, then chance and the ceiling per split."""
    splits = [s for s in SPLITS if s in grouped] + sorted(set(grouped) - set(SPLITS))
    keys = sorted({k for s in splits for k in grouped[s] if not is_control(k[0], bool(k[3]))},
                  key=lambda k: (_source_order(k[1]), k[0], k[2]))
    rows = []
    for key, split in itertools.product(keys, splits):
        if (cell := grouped[split].get(key)) is not None:
            low, high = cell.ci
            rows.append({"source": key[1], "model": key[0], "aux": key[2], "split": split,
                         "accuracy": round(cell.accuracy, 2), "ci_low": round(low, 2),
                         "ci_high": round(high, 2), "n_test": cell.n_test,
                         "runs": len(cell.entries), "cell": cell})
    for split in splits:
        rows.append({"source": "chance", "model": "", "aux": "", "split": split,
                     "accuracy": CHANCE, "ci_low": "", "ci_high": "", "n_test": "", "runs": ""})
        if split in ceilings:
            ceiling, n = ceilings[split]
            rows.append({"source": "perception-only ceiling", "model": "", "aux": "",
                         "split": split, "accuracy": round(100 * ceiling, 2), "ci_low": "",
                         "ci_high": "", "n_test": n, "runs": ""})
    return rows


def _model(row: dict) -> str:
    return display_name(row["model"]) + (" +aux" if row["aux"] is True else "")


def perception_markdown(rows: list[dict], ceiling_note: str) -> str:
    splits = list(dict.fromkeys(r["split"] for r in rows))
    lines = ["| feature source | model | " + " | ".join(splits) + " |",
             "|" + "---|" * (2 + len(splits))]
    by_row: dict[tuple[str, str], dict[str, dict]] = {}
    for r in rows:
        by_row.setdefault((r["source"], _model(r)), {})[r["split"]] = r
    for (source, model), cells in by_row.items():
        values = [(cells[s]["cell"].text(marked=False) if "cell" in cells[s]
                   else f"{cells[s]['accuracy']:.1f}") if s in cells else "—" for s in splits]
        lines.append(f"| {source} | {model} | " + " | ".join(values) + " |")
    return ("Test accuracy (%) by feature source and split, with the 95% interval over each "
            "split's test problems, clustered by answer crop. Random weights see no element; a "
            "trained perception model recognises them imperfectly; labels are perfect "
            "perception, so what a labels run misses is reasoning. " + ceiling_note + "\n\n"
            + "\n".join(lines) + "\n")


def runs_dataset(entries: list) -> tuple[Path | None, str]:
    """The runs' one data set, or None and why."""
    datasets = {(e.run / e.metrics.get("dataset", "")).resolve() for e in entries}
    if len(datasets) != 1:
        return None, f"the runs use {len(datasets)} data sets"
    dataset = next(iter(datasets))
    if not dataset.is_file():
        return None, f"the runs' data set {dataset} is not there"
    return dataset, ""


def run_ceilings(entries: list, ceilings: Ceilings | None) -> tuple[dict, str]:
    """The ceiling of each split of the runs' data set, and how it was made or why it is missing."""
    dataset, why = runs_dataset(entries)
    if ceilings is None or dataset is None:
        return {}, f"No perception-only ceiling: {why or 'no ceiling was asked for'}."
    return ceilings(dataset, sorted({e.split for e in entries})), (
        "The perception-only ceiling is what perfect recognition scores without finding the "
        "relation, by picking the candidate from how often the context shows its element "
        "(`vprom verify`'s rule, generation/verify/ceiling.py), computed on each split's test "
        f"problems of {dataset.name}.")


#: the feature sources in a working benchmark's order, best first (then the controls)
EXPECTED_ORDER = (PERFECT, TRAINED, RANDOM)


def verdict(grouped: dict, ceilings: dict[str, tuple[float, int]], verified: str) -> str:
    """The runs beside chance and the ceiling, and whether `EXPECTED_ORDER` holds."""
    neutral = grouped.get("neutral", {})
    lines = ["verdict:", f"  data set: {verified}"]
    if not neutral:
        return "\n".join([*lines, "  no run on the neutral split to set side by side"])
    ceiling = ceilings.get("neutral")
    lines.append(f"  neutral: chance {CHANCE:.1f}%" + (
        f", perception-only ceiling {100 * ceiling[0]:.1f}%" if ceiling else ""))
    ranked = sorted(neutral.items(), key=lambda kv: (not _is_control(kv[0]),
                                                      _source_order(kv[0][1])), reverse=True)
    lines += [f"    {_name(key)}: {cell.text()}" for key, cell in ranked]
    for split in [s for s in SPLITS if s in grouped and s != "neutral"]:
        for key, cell in grouped[split].items():
            if key in neutral and not _is_control(key):
                change = cell.accuracy - neutral[key].accuracy
                lines.append(f"  {split}: {_name(key)} {cell.text()}, "
                             f"{abs(change):.1f} points {'below' if change < 0 else 'above'} "
                             "neutral")
    tiers = [(source, [c for k, c in neutral.items()
                       if not _is_control(k) and k[1].startswith(source)])
             for source in EXPECTED_ORDER]
    controls = [c for k, c in neutral.items() if _is_control(k)]
    tiers = [t for t in tiers if t[1]] + [("controls", controls)]
    problems = [f"{upper} is not clear above {lower}"
                for (upper, above), (lower, below) in itertools.pairwise(tiers)
                if below and min(c.ci[0] for c in above) <= max(c.ci[1] for c in below)]
    problems += [f"control {c.entries[0].label} misses chance ({c.ci[0]:.2f}–{c.ci[1]:.2f}%)"
                 for c in controls if not c.ci[0] <= CHANCE <= c.ci[1]]
    problems += [] if controls else ["no control was run"]
    lines.append("  a working benchmark: perfect perception > trained perception > random "
                 "weights > controls on neutral, each 95% interval clear of the next, the "
                 f"controls' holding chance ({CHANCE:.1f}%), and held-out splits below neutral")
    lines.append("  here: " + ("; ".join(problems) if problems else "the order holds"))
    return "\n".join(lines)


def _is_control(key: tuple) -> bool:
    return is_control(key[0], bool(key[3]))


def _name(key: tuple) -> str:
    model = _model({"model": key[0], "aux": key[2]})
    return f"control {model}{', ' + key[3] if key[3] else ''}" if _is_control(key) else (
        f"{key[1]}, {model}")


def perception_plot(rows: list[dict], path: Path) -> None:
    splits = list(dict.fromkeys(r["split"] for r in rows))
    series = list(dict.fromkeys((r["source"], _model(r)) for r in rows
                                if r["source"] not in ("chance", "perception-only ceiling")))
    cells = {(r["source"], _model(r), r["split"]): r for r in rows}
    bars = []
    for source, model in series:
        found = [cells.get((source, model, s)) for s in splits]
        errors = np.array([[r["accuracy"] - r["ci_low"], r["ci_high"] - r["accuracy"]]
                           if r else [0, 0] for r in found]).T
        bars.append((f"{source} · {model}", [r["accuracy"] if r else np.nan for r in found],
                     errors))
    ceilings = [(j, cells[("perception-only ceiling", "", s)]["accuracy"])
                for j, s in enumerate(splits) if ("perception-only ceiling", "", s) in cells]
    bar_plot(splits, bars, 1.6 * len(splits) + 0.3 * len(series), "perception against reasoning",
             path, ceilings=ceilings)


@contextlib.contextmanager
def png(path: Path, **subplots):
    """The axes of a new figure, saved as a PNG at `path` when the block ends."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(**subplots)
    yield axes
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=120, bbox_inches="tight")
    plt.close(fig)


def bar_plot(groups: list[str], bars: list[tuple], width: float, title: str, path: Path,
             ncol: int = 1, ceilings: list[tuple[int, float]] = ()) -> None:
    """Per (label, values, errors [2, groups]) of `bars` a bar in each group."""
    bar_width = 0.8 / max(len(bars), 1)
    x = np.arange(len(groups))
    with png(path, figsize=(max(6.0, width), 4)) as ax:
        for i, (label, values, errors) in enumerate(bars):
            # clipped: at 0% and 100% the interval's end is the estimate up to float rounding
            ax.bar(x + i * bar_width - 0.4 + bar_width / 2, values, bar_width,
                   yerr=np.clip(errors, 0, None), capsize=2, label=label)
        for j, value in ceilings:
            ax.hlines(value, j - 0.45, j + 0.45, colors="black", linewidth=2,
                      label="perception-only ceiling" if j == 0 else None)
        ax.axhline(CHANCE, color="grey", linestyle="--", linewidth=1, label="chance")
        ax.set_xticks(x, [g.replace("_", "\n") for g in groups])
        ax.set(ylabel="test accuracy (%)", ylim=(0, 100), title=title)
        ax.legend(fontsize="x-small", ncol=ncol, loc="upper left", bbox_to_anchor=(1.01, 1))
