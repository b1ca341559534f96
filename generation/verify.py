"""`vprom verify`: prove a built DATASET.h5 sound before anyone trains on it.

The checks, each a named result with its figures (thresholds explained in docs/checking.md):

1. integrity — the file's structure (groups, equal column lengths, N×16 panels and
   elements), the manifest (present, its `counts` and `outputs.content_hash` agree with the
   file, and the sidecar `X.h5.manifest.json`'s sha256 of the file if it records one),
   unique matrix and crop ids, every panel's crop present with the element and element
   type the matrix says, answers in 0..7, relations valid for the element type, no crop
   twice within a matrix, attribute matrices' context and answer of their super-attribute.
2. solver — `vprom.solver.check_matrix` on every matrix with all its panels' labels:
   exactly one candidate completes it.
3. splits — all 7 splits present, their ids known, train/val/test disjoint, the stored
   parts equal the split rules re-run on every matrix (val is drawn from the train side),
   and the paper's rules that need no spec (held-out attributes, interpolation,
   extrapolation) hold for the answers.
4. leakage — no image region (same image and box, or same VG source id) on both the
   train(+val) and the test side of any split.
5. bias — `generation.audit`: answer positions, frequency heuristics, context-blind probes.

The checks live in `generation.checks` (1-4) and `generation.bias` (5). The split rules are
handed in (the top floor loads them from `splits`), never imported from here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from generation.audit import Check
from generation.bias import check_bias
from generation.checks import check_integrity, check_leakage, check_solver, check_splits
from generation.dataset_view import load
from vprom.splitting import SplitRules


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
            lines += [f"       - {p}" for p in c.problems]
        failed = [c.name for c in self.checks if not c.ok]
        lines.append("verdict: " + (f"FAIL ({', '.join(failed)})" if failed else "PASS"))
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return {"dataset": str(self.dataset), "ok": self.ok, "figures": self.figures,
                "checks": [c.__dict__ for c in self.checks]}


def verify(dataset: str | Path, rules: SplitRules, features: str | Path | None = None, *,
           check_matrix: Callable | None = None, assigner: Callable | None = None) -> VerifyReport:
    """Run every check on DATASET.h5 (and the feature probe with a FEATS.h5).

    `rules` are the split rules the file was generated with (`splits.assign.load_rules()`).
    `check_matrix` and `assigner` default to `vprom.solver.check_matrix` and `rules.assign`;
    they are parameters so each check can be tested on its own.
    """
    dataset = Path(dataset)
    data, structure = load(dataset)
    checks = [check_integrity(data, structure)]
    if not checks[0].figures["readable"]:
        skipped = "not run: the matrices cannot be read as records (see integrity)"
        checks += [Check(n, "skip", skipped) for n in ("solver", "splits", "leakage", "bias")]
        figures = {} if data is None else {"matrices": len(data.matrices),
                                           "crops": len(data.crops)}
        return VerifyReport(dataset, checks, figures)
    checks.append(check_solver(data, check_matrix))
    checks.append(check_splits(data, rules, assigner))
    checks.append(check_leakage(data))
    checks += check_bias(data, Path(features) if features else None)
    return VerifyReport(dataset, checks, {"matrices": len(data.matrices),
                                          "crops": len(data.crops)})
