"""`vprom verify`: prove a built DATASET.h5 sound before anyone trains on it.

Checks: integrity and solver (`checks`); splits, leakage and held-out labels (`split_checks`);
bias (`bias`, `audit`, `set_probes`, opt-in `learned`); the perception-only ceiling (a figure).
A file whose records cannot be read fails integrity and skips the rest.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from vprom.generation.verify.audit import Check, format_group
from vprom.generation.verify.checks import check_integrity, fatal_problems
from vprom.generation.verify.jobs import load_optimiser, prepare, run_checks
from vprom.generation.verify.loaded import load
from vprom.processes import collector_paused
from vprom.splits.rules import SplitRules


@dataclass
class VerifyReport:
    dataset: Path
    checks: list[Check]
    figures: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    def failures(self) -> str:
        """One line naming each failed check and its first problem."""
        return "; ".join(f"{c.name}: {c.problems[0] if c.problems else c.summary}"
                         for c in self.checks if not c.ok)

    def format(self) -> str:
        lines = [f"vprom verify {self.dataset}: {self.figures.get('matrices', 0):,} matrices, "
                 f"{self.figures.get('crops', 0):,} crops"]
        for c in self.checks:
            lines.append(f"  {c.status.upper():4s} {c.name:20s} {c.summary}")
            groups = [format_group(g, f) for g, f in c.figures.items()
                      if isinstance(f, dict) and "p_adjusted" in f]
            lines += [f"       {line}" for line in groups] or [f"       - {p}" for p in c.problems]
        failed = [c.name for c in self.checks if not c.ok]
        lines.append("verdict: " + (f"FAIL ({', '.join(failed)})" if failed else "PASS"))
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return {"dataset": str(self.dataset), "ok": self.ok, "figures": self.figures,
                "checks": [c.__dict__ for c in self.checks]}


def verify(dataset: str | Path, rules: SplitRules, features: str | Path | None = None, *,
           workers: int = 1, learned: bool = False) -> VerifyReport:
    """Every check on DATASET.h5 generated with `rules` (the feature probe with FEATS.h5)."""
    dataset = Path(dataset)
    with collector_paused():  # the loaded data set is millions of objects and no cycles
        data, structure = load(dataset, meanwhile=load_optimiser)
        if data is None or fatal_problems(data):
            checks = [check_integrity(data, structure)]
            skipped = "not run: the matrices cannot be read as records (see integrity)"
            checks += [Check(n, "skip", skipped) for n in ("solver", "splits", "leakage",
                                                           "held-out labels", "bias")]
            figures = {} if data is None else {"matrices": len(data.matrices),
                                               "crops": len(data.crops)}
            return VerifyReport(dataset, checks, figures)
        inputs = prepare(data, structure, rules, Path(features) if features else None, learned)
    return VerifyReport(dataset, run_checks(inputs, workers),
                        {"matrices": len(data.matrices), "crops": len(data.crops)})
