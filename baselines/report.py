"""Tables and plots over evaluated runs (`vprom report RUN... --out DIR`): runs keyed by (model,
feature source, aux, control, split) are averaged over seeds, refused when other settings differ.
DIR gets table2, splits and perception (.md and .csv), report.md, bar plots with 95%
intervals, curves.png and manifest.json (written first, then with every file's sha256)."""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import product
from pathlib import Path

import numpy as np

from vprom.baselines.paper import (CHANCE, FEATURE_TYPES, HUMANS, HUMANS_SKIPPED, LATER_SOLVERS,
                                   PAPER_NAMES, display_name, paper_accuracy)
from vprom.baselines.perception_table import (Ceilings, bar_plot, feature_source,
                                              is_reference, perception_markdown,
                                              perception_plot, perception_rows, png,
                                              recorded_attrs, run_ceilings, runs_dataset, verdict)
from vprom.baselines.metrics import control_result, did_not_learn, is_control
from vprom.errors import VpromError
from vprom.files import sha256_file, write_text
from vprom.manifest import make_manifest, write_manifest
from vprom.claim import writes
from vprom.domain import SPLITS, ElementType, Relation

#: training settings that do not change what a run learns: runs differing only here average
NOT_SETTINGS = ("seed", "out", "device", "restart", "cuda_graphs", "resume", "dataset",
                "features", "maps", "crops")


@dataclass(frozen=True)
class Entry:
    run: Path
    model: str
    backbone: str
    features: str  # feature source (perception_table.feature_source)
    aux: bool
    control: str  # "" or "shuffled context"
    split: str
    metrics: dict
    history: list = field(default_factory=list)
    settings: dict = field(default_factory=dict)
    flags: list = field(default_factory=list)  # why it did not learn; empty if it learned

    @property
    def accuracy(self) -> float:
        return 100 * self.metrics["test"]["accuracy"]

    @property
    def is_control(self) -> bool:
        return is_control(self.model, bool(self.control))

    @property
    def label(self) -> str:
        return " ".join(x for x in (display_name(self.model), self.features,
                                    "+aux" if self.aux else "", self.control) if x)


def load_entry(run: str | Path) -> Entry:
    """A run's metrics (and history); VpromError when it has not been evaluated."""
    run = Path(run)
    path = run / "metrics.json"
    if not run.exists():
        raise VpromError(f"{run}: no such folder; pass run folders of `vprom train` (or folders "
                         "holding them)")
    if not run.is_dir():
        raise VpromError(f"{run}: not a folder; pass run folders of `vprom train`")
    if not path.is_file():
        raise VpromError(f"{run}: no metrics.json; evaluate the run first (`vprom evaluate "
                         f"{run}`)")
    try:
        metrics = json.loads(path.read_text())
        backbone = metrics["features"].get("backbone") or "unknown"
        model, split, aux = metrics["model"], metrics["split"], bool(metrics["aux"])
        metrics["test"]["accuracy"]
    except (json.JSONDecodeError, KeyError, TypeError, AttributeError):
        raise VpromError(f"{path}: not a metrics file of `vprom evaluate`; evaluate the run "
                         "again") from None
    history_path = run / "history.json"
    history = json.loads(history_path.read_text()) if history_path.is_file() else []
    control = "shuffled context" if metrics.get("shuffle_context") else ""
    # a control at chance has done what it is for: it is checked by control_result instead
    flags = [] if is_control(model, bool(control)) else did_not_learn(metrics, history)
    features = feature_source(recorded_attrs(run, metrics), backbone)
    return Entry(run, model, backbone, features, aux, control, split, metrics,
                 history, settings(metrics), flags)


def expand_runs(paths) -> list[Path]:
    """Run folders: each path itself, or, for a folder of runs, every run found beneath it."""
    runs: set[Path] = set()
    for path in map(Path, paths):
        found = [] if (path / "metrics.json").is_file() else sorted(
            p.parent for p in path.rglob("metrics.json")) if path.is_dir() else []
        runs.update(found or [path])  # a path with nothing beneath is reported by load_entry
    return sorted(runs)


@dataclass
class Cell:
    entries: list[Entry]

    @property
    def accuracy(self) -> float:
        return float(np.mean([e.accuracy for e in self.entries]))

    @property
    def ci(self) -> tuple[float, float]:
        """A run's interval; over several runs, their lowest and highest bounds."""
        return (min(100 * e.metrics["test"]["ci95"][0] for e in self.entries),
                max(100 * e.metrics["test"]["ci95"][1] for e in self.entries))

    @property
    def n_test(self) -> int:
        return int(self.entries[0].metrics["test"]["n"])

    @property
    def not_learned(self) -> int:
        return sum(bool(e.flags) for e in self.entries)

    def mark(self) -> str:
        """A control's verdict, or how many runs did not learn ("" when none)."""
        if self.entries[0].is_control:
            passed = all(control_result(e.metrics)[0] for e in self.entries)
            return " (control: pass)" if passed else " (control: FAIL)"
        if not self.not_learned:
            return ""
        return (" (did not learn)" if self.not_learned == len(self.entries)
                else f" ({self.not_learned} of {len(self.entries)} did not learn)")

    def text(self, marked: bool = True) -> str:
        low, high = self.ci
        runs = f", {len(self.entries)} runs" if len(self.entries) > 1 else ""
        mark = self.mark() if marked else ""
        return f"{self.accuracy:.1f} ({low:.1f}–{high:.1f}{runs}){mark}"


def group(entries: list[Entry]) -> dict[str, dict[tuple, Cell]]:
    """split -> (model, feature source, aux, control) -> the cell of runs sharing it."""
    out: dict[str, dict[tuple, Cell]] = {}
    for e in entries:
        key = (e.model, e.features, e.aux, e.control)
        out.setdefault(e.split, {}).setdefault(key, Cell([])).entries.append(e)
    for split, cells in out.items():
        for cell in cells.values():
            check_alike(f"{cell.entries[0].label} on {split}",
                        [(e.run, e.settings) for e in cell.entries])
    return out


def _model_order(models) -> list[str]:
    return [*PAPER_NAMES, *LATER_SOLVERS] + sorted(set(models) - {*PAPER_NAMES, *LATER_SOLVERS})


def _with_later_solvers(lines: list[str], models: list[tuple], width: int) -> list[str]:
    """Table rows, one per (model, control) of `models`, with a row opening the later solvers'."""
    later = [m for m in LATER_SOLVERS if (m, "") in models]
    if not later:
        return lines
    first = next(i for i, (m, control) in enumerate(models) if m in later and not control)
    header = f"| *later solvers* ({', '.join(LATER_SOLVERS[m] for m in later)}) |" + " |" * width
    return [*lines[:first], header, *lines[first:]]


def table2_rows(cells: dict[tuple, Cell]) -> list[dict]:
    """One row per (model, feature type, aux) that we or the paper have."""
    rows = []
    feature_types = list(FEATURE_TYPES) + sorted({k[1] for k in cells} - set(FEATURE_TYPES))
    controls = sorted({(k[0], k[3]) for k in cells if is_control(k[0], bool(k[3]))})
    plain = [(m, "") for m in _model_order(k[0] for k in cells if not k[3])
             if (m, "") not in controls]
    for (model, control), features, aux in product(plain + controls, feature_types, (False, True)):
        cell = cells.get((model, features, aux, control))
        paper = None if control else paper_accuracy(model, features, aux)
        if cell is not None or paper is not None:
            rows.append({"model": model, "name": display_name(model), "features": features,
                         "aux": aux, "control": control, **figures(cell, "ours"),
                         "paper": paper, "cell": cell})
    return rows


def figures(cell: Cell | None, name: str) -> dict:
    """A cell's CSV columns, its accuracy under `name`."""
    if cell is None:
        return {name: None, "ci_low": None, "ci_high": None, "n_test": None, "runs": 0,
                "did_not_learn": None}
    low, high = cell.ci
    return {name: round(cell.accuracy, 2), "ci_low": round(low, 2), "ci_high": round(high, 2),
            "n_test": cell.n_test, "runs": len(cell.entries), "did_not_learn": cell.not_learned}


def table2_markdown(rows: list[dict]) -> str:
    columns = [(f, a) for f in dict.fromkeys(r["features"] for r in rows) for a in (False, True)]
    head = ["model"] + [f"{f}{' +aux' if a else ''} | paper" for f, a in columns]
    by_row: dict[tuple[str, str], dict] = {}
    for r in rows:
        by_row.setdefault((r["model"], r["control"]), {})[(r["features"], r["aux"])] = r
    body = []
    for (model, control), cells in by_row.items():
        values = [display_name(model) + (f" ({control})" if control else "")]
        for r in map(cells.get, columns):
            values.append(r["cell"].text() if r and r["cell"] else "—")
            values.append(f"{r['paper']:.1f}" if r and r["paper"] is not None else "—")
        body.append("| " + " | ".join(values) + " |")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * (1 + 2 * len(columns)),
             *_with_later_solvers(body, list(by_row), 2 * len(columns))]
    return "\n".join(lines) + (f"\n\nHumans (paper): {HUMANS:.1f}% ({HUMANS_SKIPPED}% of the "
                               f"questions skipped). Chance: {CHANCE:.1f}%.\n")


def split_rows(grouped: dict[str, dict[tuple, Cell]]) -> list[dict]:
    rows = []
    for split in [s for s in SPLITS if s in grouped] + sorted(set(grouped) - set(SPLITS)):
        for key, cell in sorted(grouped[split].items(), key=lambda kv: _key_order(kv[0])):
            rows.append({"model": key[0], "name": display_name(key[0]), "features": key[1],
                         "aux": key[2], "control": key[3], "split": split,
                         **figures(cell, "accuracy"), "cell": cell})
    return rows


def _key_order(key: tuple):
    return (bool(key[3]), _model_order([key[0]]).index(key[0]), key[1], key[2], key[3])


def splits_markdown(rows: list[dict]) -> str:
    splits = list(dict.fromkeys(r["split"] for r in rows))
    cells = {((r["model"], r["features"], r["aux"], r["control"]), r["split"]): r["cell"]
             for r in rows}
    keys = sorted({key for key, _ in cells}, key=_key_order)
    body = []
    for key in keys:
        name = display_name(key[0]) + (f" ({key[3]})" if key[3] else "")
        found = [cells.get((key, s)) for s in splits]
        values = [f"{c.accuracy:.1f}{c.mark()}" if c else "—" for c in found]
        body.append(f"| {name} | {key[1]} | {'yes' if key[2] else 'no'} | "
                    + " | ".join(values) + " |")
    lines = ["| model | features | aux | " + " | ".join(splits) + " |",
             "|" + "---|" * (3 + len(splits)),
             *_with_later_solvers(body, [(k[0], k[3]) for k in keys], 2 + len(splits))]
    return "\n".join(lines) + "\n"


def run_list(heading: str, runs: list[tuple[str, Entry, str]]) -> str:
    """`heading` over a line per (mark, run, what about it); "" for no runs."""
    if not runs:
        return ""
    lines = [f"{heading}\n", *(f"- {mark}`{e.run}` ({e.label}, {e.split}): {why}"
                               for mark, e, why in runs)]
    return "\n".join(lines) + "\n"


def not_learned_markdown(entries: list[Entry]) -> str:
    flagged = [("", e, "; ".join(e.flags)) for e in entries if e.flags]
    return run_list(f"{len(flagged)} of {len(entries)} runs did not learn:", flagged)


def controls_markdown(entries: list[Entry]) -> str:
    results = [(e, *control_result(e.metrics)) for e in entries if e.is_control]
    return run_list("Controls cannot use the context, so they are expected at chance (12.5%): a "
                    "control passes when the lower end of its 95% interval is at most 14.5%.",
                    [(f"{'pass' if passed else 'FAIL'}: ", e, why) for e, passed, why in results])


def to_csv(rows: list[dict]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=[k for k in rows[0] if k != "cell"],
                            lineterminator="\n", extrasaction="ignore")
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


def bar_chart(entries: list[Entry], breakdown: str, title: str, path: Path) -> None:
    present = {g for e in entries for g in e.metrics[breakdown]}
    known = [r.value for r in Relation] + [t.value for t in ElementType]
    groups = [g for g in known if g in present] + sorted(present - set(known))
    bars = []
    for e in entries:
        scores = [e.metrics[breakdown].get(g) or {"accuracy": 0, "ci95": [0, 0]} for g in groups]
        values = [100 * (s["accuracy"] or 0) for s in scores]
        errors = [[v - 100 * s["ci95"][0], 100 * s["ci95"][1] - v] for v, s in zip(values, scores)]
        bars.append((e.label, values, np.array(errors).T))
    bar_plot(groups, bars, 1.2 * len(groups) + 0.2 * len(entries), title, path,
             ncol=2 if len(entries) > 8 else 1)


def curves(entries: list[Entry], path: Path) -> None:
    """Training answer loss and validation accuracy per epoch, a line per run."""
    with png(path, ncols=2, figsize=(11, 4)) as (loss_ax, val_ax):
        for e in entries:
            epochs = [h["epoch"] for h in e.history]
            label = f"{e.label} / {e.split}"
            loss_ax.plot(epochs, [h.get("train_answer_loss", h["train_loss"]) for h in e.history],
                         label=label)
            val = [np.nan if h.get("val_acc") is None else 100 * h["val_acc"] for h in e.history]
            val_ax.plot(epochs, val, label=label)
        loss_ax.set(xlabel="epoch", ylabel="answer loss", title="training answer loss (no aux)")
        val_ax.set(xlabel="epoch", ylabel="validation accuracy (%)", title="validation accuracy")
        val_ax.axhline(CHANCE, color="grey", linestyle="--", linewidth=1)
        if len(entries) <= 24:
            val_ax.legend(fontsize="x-small", loc="upper left", bbox_to_anchor=(1.01, 1))


@writes("out", ("report",), inputs=lambda a: tuple(a["run_dirs"]), folder=True, inside_ok=True)
def report(run_dirs, out: str | Path, ceilings: Ceilings | None = None,
           verified: Callable[[Path], str] | None = None) -> str:
    """Write the tables and plots over `run_dirs` into `out`; returns a summary and verdict."""
    run_dirs = expand_runs(run_dirs)
    if not run_dirs:
        raise VpromError("report needs at least one run folder")
    entries = [load_entry(r) for r in run_dirs]
    out = Path(out)
    config = {"runs": [os.path.relpath(r.resolve(), out.resolve()) for r in run_dirs]}
    out.mkdir(parents=True, exist_ok=True)
    write_manifest(out, make_manifest("report", config))  # vouches for no file yet
    grouped = group(entries)
    t2 = table2_rows({k: c for k, c in grouped.get("neutral", {}).items()
                      if not is_reference(k[1])})
    split_ceilings, how = run_ceilings(entries, ceilings)
    pr = perception_rows(grouped, split_ceilings)
    pr_md = perception_markdown(pr, how)
    sp = split_rows(grouped)
    neutral = [e for e in entries if e.split == "neutral"] or entries
    shown = "neutral split" if neutral[0].split == "neutral" else "all runs"
    backbones = ", ".join(sorted({f"{e.backbone} ({e.features}, weights "
                                  f"{e.metrics['features'].get('weights')})" for e in entries}))
    if "none" in {e.metrics["features"].get("weights") for e in entries}:
        backbones += (".\n\n**Some runs use randomly initialised backbone weights: their numbers "
                      "are not comparable with the paper's** (they are shown under Perception "
                      "against reasoning, not in Table 2)")
    t2_md = ("Test accuracy (%) on the neutral split, ours (95% interval, clustered by answer "
             "crop) beside the paper's (Teney et al. 2020, Table 2).\n\n" + table2_markdown(t2))
    sp_md = "Test accuracy (%) per split.\n\n" + splits_markdown(sp)
    blank = {"features": "", "aux": "", "control": "", **figures(None, "ours")}
    t2_csv = [*t2, {"model": "humans", "name": f"Humans ({HUMANS_SKIPPED}% skipped)", **blank,
                    "paper": HUMANS},
              {"model": "chance", "name": "Chance", **blank, "paper": CHANCE}]
    files = {"table2.md": t2_md, "table2.csv": to_csv(t2_csv), "splits.md": sp_md,
             "splits.csv": to_csv(sp), "perception.md": pr_md, "perception.csv": to_csv(pr)}
    for name, text in files.items():
        write_text(out / name, text)
    for breakdown, name in (("by_relation", "relation"), ("by_element_type", "element type")):
        bar_chart(neutral, breakdown, f"accuracy by {name} ({shown})", out / f"{breakdown}.png")
    with_history = [e for e in entries if e.history]
    perception_plot(pr, out / "perception.png")
    plots = ["perception.png", "by_relation.png", "by_element_type.png"]
    if with_history:
        curves(with_history, out / "curves.png")
        plots.append("curves.png")
    not_learned = not_learned_markdown(entries)
    controls = controls_markdown(entries)
    page = (f"# V-PROM baselines: {len(entries)} runs\n\nFeatures: {backbones}.\n\n"
            f"## Table 2 (neutral split)\n\n{t2_md}\n## Splits\n\n{sp_md}\n"
            f"## Perception against reasoning\n\n{pr_md}\n"
            + (f"## Controls (expected at chance)\n\n{controls}\n" if controls else "")
            + (f"## Runs that did not learn\n\n{not_learned}\n" if not_learned else "")
            + "## Plots\n\n" + "".join(f"![{p}]({p})\n\n" for p in plots))
    write_text(out / "report.md", page)
    written = ["report.md", *files, *plots]
    write_manifest(out, make_manifest("report", config, outputs={
        name: sha256_file(out / name) for name in written}))
    dataset, why = runs_dataset(entries)
    checked = verified(dataset) if dataset and verified else f"not checked ({why or 'not asked'})"
    return (f"report over {len(entries)} runs written to {out}:\n"
            + "\n".join(f"  {out / name}" for name in written)
            + (f"\n{controls.rstrip()}" if controls else "")
            + (f"\n{not_learned.rstrip()}" if not_learned else "")
            + f"\n\nperception against reasoning ({out / 'perception.md'}):\n"
            + "\n".join(line for line in pr_md.splitlines() if line.startswith("|"))
            + "\n" + verdict(grouped, split_ceilings, checked))


def settings(metrics: dict) -> dict:
    """What a run was trained with, for comparing the runs of one cell."""
    out = {k: v for k, v in (metrics.get("config") or {}).items() if k not in NOT_SETTINGS}
    out["data set"] = metrics.get("dataset_content_hash")
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
