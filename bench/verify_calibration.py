"""Calibration of `vprom verify`'s bias verdict: its false alarms and its power, measured.

(a) False alarms at the probes' input. A data set generated from the VG-sized bench pool
    (`bench/generate.py`) at demo size (scale 0.05, 11,750 matrices) and at full size (scale
    1, 235,000: the probes sample `PROBE_MAX` matrices per element type) keeps its candidates,
    and each replicate draws every matrix's answer uniformly from the 8 without looking at
    them: the candidates carry no information about the answer by construction. Every bias
    check runs as `vprom verify` runs it and the family is judged together; the table gives
    the share of replicates that fail (target <= 1%), and over all groups of all replicates
    the share of raw p-values under 1% and 5% (a valid test: at most 1% and 5%).
(b) Demo seeds: `vprom build --synthetic --seed S` for each S of `--seeds`, each verified;
    every failing group is listed with its rate and p-values, so it can be explained.
(c) Power at full scale. In the full-size data set (answers drawn uniformly), a tell of known
    size is planted at one probe's input and that probe is run on the planted group:
    - label: in the smallest relation x element-type cell, the answer carries with
      probability q a label no other candidate has (a probe reading it gains q·7/8);
    - absent: in count x and, with probability q the answer is the candidate whose count
      is the smallest above the smallest count the set leaves out;
    - blocks: in object_attribute x or's mixed sets, with probability q the answer is one of
      the block of the first super-attribute shown (by name).
    Found: rate >= 14.5% and the p-value times the full family's size < 1% (Bonferroni,
    which Holm's adjusted p-value never exceeds: the figures bound verify's power from below).
    The table gives, per size, the share found and the mean rate; the smallest size found in
    >= 95% of replicates is marked.

    .venv/bin/python bench/verify_calibration.py   # a few minutes
    .venv/bin/python bench/verify_calibration.py --demo-replicates 1000 --full-replicates 100 \\
        --power-replicates 100 --seeds 0-49          # the long run (hours)
"""

from __future__ import annotations

import argparse
import dataclasses
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from generate import full_size_pool, in_memory, vocabulary  # bench/generate.py
from threadpoolctl import threadpool_limits
from vprom.generation.generate import generate_dataset
from vprom.generation.verify import audit, jobs, set_probes, verify
from vprom.splits import load_rules

from vprom.domain import N_CANDIDATES

ROOT = Path(__file__).resolve().parents[1]
#: the jobs whose results `jobs.bias_checks` reads
BIAS_JOBS = {"features", "learned group", "set type", "label group", "absent values", "blocks",
             "frequencies"}


def probe_inputs(crops, scale: float, seed: int = 0) -> jobs.Inputs:
    """What verify's bias jobs read, of the pool's data set at `scale`."""
    rules = load_rules()
    data = in_memory(generate_dataset(crops, rules, scale=scale, seed=seed,
                                      vocabulary=vocabulary()))
    return jobs.prepare(data, [], rules, None)


def set_answers(inputs: jobs.Inputs, answers: np.ndarray) -> None:
    inputs.data.matrices.answer[:] = answers
    inputs.sets.answers = answers.astype(np.int64)


def bias_family(inputs: jobs.Inputs) -> list:
    """Verify's bias checks on the current answers, judged as one family."""
    todo = [job for job in jobs.job_list(inputs) if job[0] in BIAS_JOBS]
    return jobs.bias_checks(inputs, todo, {job: jobs.run_job(inputs, job) for job in todo})


# ---------------------------------------------------------------- (a) false alarms
def false_alarms(inputs: jobs.Inputs, replicates: int, rng: np.random.Generator) -> dict:
    failed, p_values, m = 0, [], 0
    for _ in range(replicates):
        set_answers(inputs, rng.integers(0, N_CANDIDATES, len(inputs.data.matrices)))
        checks = bias_family(inputs)
        members = audit.family_groups(checks)
        m = len(members)
        failed += any(not c.ok for c in checks)
        p_values += [f["p"] for _, _, f in members]
    p = np.array(p_values)
    return {"replicates": replicates, "failed": failed, "groups": m,
            "p<0.01": float((p < 0.01).mean()), "p<0.05": float((p < 0.05).mean())}


# ---------------------------------------------------------------- (c) power
def smallest_cell(inputs: jobs.Inputs) -> tuple[str, np.ndarray, np.ndarray]:
    cells = [g for g in inputs.groups if " x " in g[0]]
    return min(cells, key=lambda g: len(g[2]))


def cell(inputs: jobs.Inputs, name: str) -> tuple[str, np.ndarray, np.ndarray]:
    return next(g for g in inputs.groups if g[0] == name)


def plant_label(inputs, rows, answers, q, rng):
    """The label probe's view with a label only the answer carries, in `rows` with
    probability q: every label set gets a twin with the planted label."""
    view = inputs.view
    planted = rows[rng.random(len(rows)) < q]
    label_row = view.label_row.copy()
    label_row[planted, answers[planted]] += len(view.row_labels)
    n_labels = view.n_labels.copy()
    n_labels[planted, answers[planted]] += 1
    new = 1 + max((max(s, default=-1) for s in view.row_labels), default=-1)
    return dataclasses.replace(view, label_row=label_row, n_labels=n_labels,
                               row_labels=view.row_labels + [s + (new,) for s in view.row_labels])


def count_values(inputs) -> np.ndarray:
    return np.array([[int(e) if e.isdigit() else 0 for e in row]
                     for row in inputs.sets.elements.tolist()], dtype=np.int64)


def plant_absent(values, rows, answers, q, rng):
    """With probability q the answer is the candidate whose count is the smallest above the
    smallest count the set leaves out (when one is)."""
    out = answers.copy()
    for i in rows[rng.random(len(rows)) < q]:
        absent = min(set(range(1, 11)) - set(values[i].tolist()))
        above = [(v, j) for j, v in enumerate(values[i]) if v > absent]
        if above:
            out[i] = min(above)[1]
    return out


def plant_blocks(codes, rows, answers, q, rng):
    """With probability q the answer is a random candidate of the first super-attribute."""
    out = answers.copy()
    for i in rows[rng.random(len(rows)) < q]:
        out[i] = rng.choice(np.flatnonzero(codes[i] == codes[i].min()))
    return out


def power(inputs: jobs.Inputs, m: int, sizes: dict, replicates: int,
          rng: np.random.Generator) -> list[dict]:
    """Per tell and size: the share of replicates whose planted group is found."""
    n = len(inputs.data.matrices)
    name, tr, te = smallest_cell(inputs)
    values = count_values(inputs)
    sas = inputs.sets.super_attributes
    codes = np.unique(sas, return_inverse=True)[1].reshape(sas.shape)
    _, btr, bte = cell(inputs, "object_attribute x or")
    mixed = (codes != codes[:, :1]).any(axis=1)
    btr, bte = btr[mixed[btr]], bte[mixed[bte]]
    _, atr, ate = cell(inputs, "count x and")
    tells = {
        "label": (name, len(te), lambda a, q: audit.label_group_hits(
            plant_label(inputs, np.r_[tr, te], a, q, rng), a, tr, te)),
        "absent": ("count x and", len(ate), lambda a, q: set_probes.absent_hits(
            values, plant_absent(values, np.r_[atr, ate], a, q, rng), atr, ate)),
        "blocks": ("object_attribute x or (mixed)", len(bte), lambda a, q: set_probes.block_hits(
            codes, plant_blocks(codes, np.r_[btr, bte], a, q, rng), btr, bte)),
    }
    rows = []
    for tell, (group, n_test, hits_of) in tells.items():
        for q in sizes[tell]:
            found, rates = 0, []
            for _ in range(replicates):
                hits = hits_of(rng.integers(0, N_CANDIDATES, n), q)
                f = audit.group_test(hits)
                rates.append(f["accuracy"])
                found += f["accuracy"] >= audit.LIMIT and m * f["p"] < audit.FAMILY_ALPHA
            rows.append({"tell": tell, "group": group, "test": n_test, "q": q,
                         "rate": float(np.mean(rates)), "found": found / replicates})
    return rows


# ---------------------------------------------------------------- (b) demo seeds
def seed_list(text: str) -> list[int]:
    out = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out += list(range(int(lo), int(hi or lo) + 1))
    return out


def group_line(check, group: str, f: dict) -> str:
    return (f"{check.name} {group}: {100 * f['accuracy']:.1f}% n={f['test']} p={f['p']:.2g} "
            f"adjusted={f['p_adjusted']:.2g}")


def demo_seeds(seeds: list[int], out: Path, learned: bool) -> list[tuple[int, list[str]]]:
    """(seed, failing groups) of each demo build, built unless its data set is there, and
    verified (with the learned probe if `learned`)."""
    results = []
    for seed in seeds:
        folder = out / str(seed)
        if not (folder / "dataset.h5").is_file():
            done = subprocess.run([sys.executable, "-m", "vprom", "build", "--synthetic",
                                   "--seed", str(seed), "--out", str(folder), "--workers", "1"],
                                  cwd=ROOT, capture_output=True, text=True, check=False)
            if not (folder / "dataset.h5").is_file():
                print(f"  seed {seed}: not built: {done.stderr.strip()[-300:]}", flush=True)
                continue
        report = verify(folder / "dataset.h5", load_rules(), learned=learned)
        family = audit.family_groups(report.checks)
        failing = [group_line(*member) for member in family if member[2]["failed"]]
        failing += [f"{c.name}: {c.summary}" for c in report.checks
                    if not c.ok and not c.name.startswith("bias:")]
        results.append((seed, failing))
        closest = min(family, key=lambda member: (member[2]["p_adjusted"], member[2]["p"]))
        print(f"  seed {seed}: " + ("; ".join(failing) if failing else "pass") +
              f" (least p: {group_line(*closest)})", flush=True)
    return results


def simulate(args, rng: np.random.Generator) -> None:
    """(a) and (c): the false-alarm and power tables."""
    crops = full_size_pool()
    with threadpool_limits(1, user_api="blas"):
        print("(a) false alarms, answers drawn without the candidates (target <= 1%):")
        print(f"  {'size':6s}{'matrices':>10s}{'groups':>8s}{'replicates':>12s}"
              f"{'failed':>8s}{'share':>8s}{'p<1%':>8s}{'p<5%':>8s}")
        full = None
        for label, scale, reps in (("demo", 0.05, args.demo_replicates),
                                   ("full", args.full_scale, args.full_replicates)):
            if not reps and (label == "demo" or not args.power_replicates):
                continue  # full-size inputs without replicates serve the power table
            inputs = probe_inputs(crops, scale, args.seed)
            r = false_alarms(inputs, reps, rng) if reps else None
            if r:
                print(f"  {label:6s}{len(inputs.data.matrices):>10,}{r['groups']:>8}"
                      f"{reps:>12}{r['failed']:>8}{100 * r['failed'] / reps:>7.1f}%"
                      f"{100 * r['p<0.01']:>7.2f}%{100 * r['p<0.05']:>7.2f}%", flush=True)
            full = (inputs, r["groups"] if r else None)
        if not args.power_replicates:
            return
        inputs, m = full
        m = args.family_size or m
        if m is None:
            set_answers(inputs, rng.integers(0, N_CANDIDATES, len(inputs.data.matrices)))
            m = len(audit.family_groups(bias_family(inputs)))
        print(f"(c) power at full scale ({args.power_replicates} replicates per size; found: "
              f"rate >= 14.5% and p x {m} < 1%):")
        sizes = {"label": [e / 100 * N_CANDIDATES / (N_CANDIDATES - 1)
                           for e in args.label_excess],
                 "absent": args.absent_q, "blocks": args.blocks_q}
        rows = power(inputs, m, sizes, args.power_replicates, rng)
        print(f"  {'tell':8s}{'group':32s}{'test':>7s}{'q':>8s}{'rate':>8s}{'found':>8s}")
        for tell in sizes:
            mine = [r for r in rows if r["tell"] == tell]
            smallest = next((r["q"] for r in mine if r["found"] >= 0.95), None)
            for r in mine:
                mark = "  <- smallest >= 95%" if r["q"] == smallest else ""
                print(f"  {tell:8s}{r['group']:32s}{r['test']:>7,}{r['q']:>8.3f}"
                      f"{100 * r['rate']:>7.1f}%{100 * r['found']:>7.0f}%{mark}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--demo-replicates", type=int, default=40)
    ap.add_argument("--full-replicates", type=int, default=3)
    ap.add_argument("--power-replicates", type=int, default=20)
    ap.add_argument("--label-excess", type=float, nargs="*", default=[2.5, 3.0, 4.0],
                    help="label tell sizes, as a perfect reader's excess in points")
    ap.add_argument("--absent-q", type=float, nargs="*", default=[0.05, 0.075, 0.1])
    ap.add_argument("--blocks-q", type=float, nargs="*", default=[0.2, 0.3, 0.4])
    ap.add_argument("--family-size", type=int, help="groups in the full-size family "
                    "(default: counted on a full-size replicate)")
    ap.add_argument("--seeds", type=seed_list, default=[], help="demo seeds, e.g. 0-49")
    ap.add_argument("--builds", type=Path, default=Path("/tmp/vprom-calibration"))
    ap.add_argument("--learned", action="store_true", help="verify the demo seeds also with "
                    "the learned probe (verify --learned)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--full-scale", type=float, default=1.0, help="(smaller: a quick trial)")
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    start = time.perf_counter()
    if args.demo_replicates or args.full_replicates or args.power_replicates:
        simulate(args, rng)
    if args.seeds:
        print(f"(b) demo seeds {args.seeds[0]}..{args.seeds[-1]} ({len(args.seeds)} builds):")
        results = demo_seeds(args.seeds, args.builds, args.learned)
        failed = sum(bool(f) for _, f in results)
        print(f"  {failed} of {len(results)} fail ({100 * failed / len(results):.1f}%)")
    print(f"{time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
