"""Benchmark: generate V-PROM at 10%, 50% and 100% of Table 1 from a full-size in-memory pool.

The pool mimics what `vprom mine` produces from all of Visual Genome: ~150,000 crops over
84 object attributes (7 super-attributes), 38 human attributes (6), 346 object categories and
counts 1-10, with Zipf-like element frequencies and realistic label lists (an attribute crop
names its object and often attributes of other super-attributes, sometimes a second one of
its own; object crops carry aliases; count crops their noun). It times the pure in-memory
generation (planning, sampling, the solver check on every matrix, all seven splits and the
validation choice), prints matrices/s and the balance measures of the full-size run.

    OMP_NUM_THREADS=1 taskset -c 0 .venv/bin/python bench/generate.py [--scales 0.1 0.5 1]
    OMP_NUM_THREADS=1 .venv/bin/python bench/generate.py --scales 1 --workers 1 2 4

With `--workers 1 2 4` it only times generation with that many worker processes
(`generate_dataset(workers=N)`, forked, `generate.draw_chunks`), each count in a fresh
process, side by side: wall, CPU (parent and workers), matrices/s and peak RSS (the parent's,
and the largest worker's: pages they share are counted in both); `--workers 1` is the
one-process anchor (no fork). Run it on a quiet machine; it prints the load average.

With `--write-pools POOLS.h5` it only writes the pool as a POOLS.h5 (with the vocabulary
group `vprom mine` writes), so the whole command line can run on it:
`vprom generate POOLS.h5 --out DATASET.h5 --scale 1`, `vprom verify DATASET.h5`.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np


from vprom.generation.generate import generate_dataset  # noqa: E402
from vprom.generation.verify.loaded import Data  # noqa: E402
from vprom.generation.labels import LabelVocabulary  # noqa: E402
from vprom.splits import load_rules  # noqa: E402
from vprom.generation.solver import check_matrix  # noqa: E402
from vprom.tables import CropTable, crop_rows  # noqa: E402

DATA = Path(__file__).resolve().parents[1] / "mining" / "data"


def _vocab(name: str, shape: list[int]) -> dict[str, list[str]]:
    """Super-attribute -> attributes: the curated file when present, else made-up names."""
    path = DATA / name
    if path.is_file():
        data = json.loads(path.read_text())
        return {k: v for k, v in data.items() if not k.startswith("_")}
    return {f"sa{k}": [f"{name[:3]}{k}_{j}" for j in range(n)] for k, n in enumerate(shape)}


def full_size_pool(seed: int = 0) -> CropTable:
    rng = np.random.default_rng(seed)
    oa = _vocab("object_attributes.json", [17, 13, 12, 9, 10, 9, 14])
    ha = _vocab("human_attributes.json", [4, 7, 6, 2, 9, 10])
    objects = [f"object{k:03d}" for k in range(346)]
    cols: dict[str, list] = {k: [] for k in ("crop_id", "image_id", "x", "y", "w", "h",
                                             "element_type", "element", "super_attribute",
                                             "source_id", "phrase", "labels")}

    def zipf(n_elements: int, total: int) -> np.ndarray:
        w = 1.0 / np.arange(1, n_elements + 1) ** 0.8
        return np.maximum(30, np.round(total * w / w.sum())).astype(int)

    def add(etype, element, sa, labels, n, phrase=""):
        start = len(cols["crop_id"])
        cols["crop_id"] += range(start, start + n)
        cols["image_id"] += rng.integers(1, 108_078, n).tolist()
        for c in "xy":
            cols[c] += rng.integers(0, 400, n).tolist()
        for c in "wh":
            cols[c] += rng.integers(100, 500, n).tolist()
        cols["element_type"] += [etype] * n
        cols["element"] += [element] * n
        cols["super_attribute"] += [sa] * n
        cols["source_id"] += range(start, start + n)
        cols["phrase"] += [phrase] * n
        cols["labels"] += labels

    def attributes(etype, table, nouns, total):
        names = [(sa, a) for sa, v in table.items() for a in v]
        sizes = zipf(len(names), total)
        for (sa, a), n in zip(names, rng.permutation(sizes)):
            labels = []
            for _ in range(n):
                lab = [a, nouns[int(rng.integers(len(nouns)))]]
                for _ in range(int(rng.integers(0, 3))):
                    lab.append(names[int(rng.integers(len(names)))][1])
                if rng.random() < 0.05:  # VG noise: a second attribute of the same kind
                    lab.append(table[sa][int(rng.integers(len(table[sa])))])
                labels.append("|".join(dict.fromkeys(lab)))
            add(etype, a, sa, labels, n)

    attributes("object_attribute", oa, objects, 50_000)
    attributes("human_attribute", ha, ["man", "woman", "person", "boy", "girl"], 20_000)
    for obj, n in zip(objects, zipf(len(objects), 70_000)):
        labels = []
        for _ in range(n):
            lab = [obj]
            if rng.random() < 0.1:
                lab.append(objects[int(rng.integers(len(objects)))])
            lab.append("red")  # attributes are not elements of the object universe
            labels.append("|".join(lab))
        add("object", obj, "", labels, n)
    for count, n in zip(range(1, 11), zipf(10, 12_000)):
        nouns = ["bowls", "cows", "people", "cups", "birds"]
        labels = [f"{count}|{nouns[int(rng.integers(5))]}" for _ in range(n)]
        add("count", str(count), "", labels, n, phrase=f"{count} things")
    return CropTable(**cols)


def vocabulary() -> LabelVocabulary:
    """The curated vocabulary (implied labels and label tables), as `vprom mine` records it."""
    from vprom.mining.vocab import load_vocabulary

    v = load_vocabulary()
    return LabelVocabulary(frozenset(v.objects), {"object_attribute": dict(v.object_attributes),
                                                  "human_attribute": dict(v.human_attributes)},
                           {k: tuple(n) for k, n in v.implied_labels.items()})


def write_pools(path: Path, crops: CropTable) -> None:
    """The pool as `vprom mine` would write it: crops, vocabulary group, manifest."""
    import h5py

    from vprom.files import atomic_path
    from vprom.manifest import make_manifest
    from vprom.tables import set_manifest

    with atomic_path(path) as tmp:
        with h5py.File(tmp, "w") as h5:
            crops.write(h5.create_group("crops"))
            vocabulary().write(h5.create_group("vocabulary"))
            set_manifest(h5, make_manifest("pools", {"bench": "bench/generate.py"},
                                           counts={"crops": len(crops)}))


def in_memory(dataset) -> Data:
    """`generate_dataset`'s result as `vprom verify` reads the file written from it."""
    m = dataset.matrices
    return Data(Path("<memory>"), dataset.crops, m, crop_rows(dataset.crops.crop_id, m.panels),
                {"seed": (dataset.counts or {}).get("seed")}, dataset.universes,
                dataset.super_attributes, dataset.vocabulary)


def held_out(view) -> dict:
    """Training and validation matrices showing a held-out label, per held-out split."""
    from vprom.generation.verify.split_checks import check_held_out

    check = check_held_out(view, load_rules().design.train_bans)
    return {s: f["violating_matrices"] for s, f in check.figures.items()}


def balance(data) -> dict:
    """Answer position spread, element right-rate spread and three shortcut probes."""
    m = data.matrices
    pos = np.bincount(m.answer.astype(int), minlength=8) / len(m)
    right, shown = Counter(), Counter()
    for elements, a, et in zip(m.elements, m.answer, m.element_type):
        for k in range(8):
            key = (et, elements[8 + k])
            shown[key] += 1
            right[key] += k == a
    rates = np.array([right[k] / shown[k] for k in shown if shown[k] >= 200])
    sa_of = dict(zip(data.crops.crop_id.tolist(), data.crops.super_attribute.tolist()))
    most = least = blind_sa = 0.0
    n_attr = 0
    for elements, a, panels, et in zip(m.elements, m.answer, m.panels, m.element_type):
        # context probes: the candidate whose element the context shows most / least often
        # (among those it shows at all); ties split evenly
        freq = Counter(elements[:8])
        scores = [freq[e] for e in elements[8:]]
        top = [k for k, v in enumerate(scores) if v == max(scores)]
        most += (a in top) / len(top)
        seen = [v for v in scores if v] or [0]
        low = [k for k, v in enumerate(scores) if v == min(seen)]
        least += (a in low) / len(low)
        if et.endswith("attribute"):
            # context-blind probe: guess among the candidates of the commonest super-attribute
            sas = [sa_of[int(p)] for p in panels[8:]]
            common = Counter(sas).most_common(1)[0][0]
            group = [k for k, s in enumerate(sas) if s == common]
            blind_sa += (a in group) / len(group)
            n_attr += 1
    uses = np.unique(m.panels, return_counts=True)[1]
    return {"crop_uses_mean_p99_max": (round(float(uses.mean()), 1),
                                       float(np.percentile(uses, 99)), int(uses.max())),
            "answer_position_min_max": (float(pos.min()), float(pos.max())),
            "element_right_rate_p5_p50_p95": tuple(round(float(np.percentile(rates, q)), 4)
                                                   for q in (5, 50, 95)),
            "elements_measured": int(len(rates)),
            "probe_context_most_frequent_acc": round(most / len(m), 4),
            "probe_context_least_frequent_seen_acc": round(least / len(m), 4),
            "probe_blind_commonest_super_attribute_acc": round(blind_sa / max(n_attr, 1), 4)}


def label_probe(view, seed: int) -> dict:
    """`vprom verify`'s context-blind label probes (one per element type and one per relation
    x element type, trained on the neutral train part): % right and 95% CI per group."""
    from vprom.generation.verify import audit
    from vprom.generation.verify import bias

    m = view.matrices
    rng = np.random.default_rng(seed)
    train, test, _ = bias.probe_sides(view, rng, bias.PROBE_MAX)
    cands = bias.candidate_view(view, np.concatenate([train, test]))
    answers = m.answer.astype(np.int64)
    check = audit.judge_groups("bias:probe-labels", "label probe", audit.group_hits(
        m.element_type.astype(str), m.relation.astype(str), train, test,
        lambda tr, te: audit.label_group_hits(cands, answers, tr, te)))
    return {g: (round(100 * f["accuracy"], 1), round(100 * f["ci95"][0], 1),
                round(100 * f["ci95"][1], 1), f["test"]) for g, f in check.figures.items()}


def recheck(view, n: int, seed: int) -> tuple[int, int, int]:
    """Re-prove n random matrices with `check_matrix` on label strings (the verify path):
    (unsound under explicit + implied labels, unsound under explicit labels only, unsound
    under v1's reading that mixes super-attributes between panels, explicit labels only)."""
    from vprom.generation.verify.checks import reading_groups, universes

    m = view.matrices
    parts = m.parts_of()
    full, explicit = view.labels, view.explicit_labels
    universe, groups = universes(view), reading_groups(view)
    bad = [0, 0, 0]
    for i in np.random.default_rng(seed).choice(len(m), size=min(n, len(m)), replace=False):
        matrix = m.row(int(i), parts)
        t = matrix.element_type.value
        rows = view.rows[int(i)]
        bad[0] += check_matrix(matrix, [full[r] for r in rows], universe[t],
                               groups.get(t)) is not None
        bad[1] += check_matrix(matrix, [explicit[r] for r in rows], universe[t],
                               groups.get(t)) is not None
        bad[2] += check_matrix(matrix, [explicit[r] for r in rows], universe[t]) is not None
    return tuple(bad)


def one_run(scale: float, seed: int, workers: int) -> dict:
    """Generate once with `workers` processes; this process's figures (for `--workers`)."""
    crops, vocab, rules = full_size_pool(), vocabulary(), load_rules()
    t, cpu = time.perf_counter(), time.process_time()
    data = generate_dataset(crops, rules, scale=scale, seed=seed, vocabulary=vocab,
                            workers=workers)
    wall, own = time.perf_counter() - t, time.process_time() - cpu
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {"workers": workers, "matrices": data.counts["matrices"], "wall_s": wall,
            "cpu_parent_s": own, "cpu_workers_s": kids.ru_utime + kids.ru_stime,
            "rss_parent_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "rss_worker_mb": kids.ru_maxrss / 1024}


def side_by_side(scales: list[float], seed: int, workers: list[int]) -> None:
    """Each (scale, workers) in a fresh process, so peak RSS is its own."""
    print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at start")
    print(f"{'scale':>5s} {'workers':>7s} {'matrices':>8s} {'wall s':>7s} {'x 1':>5s} "
          f"{'CPU s':>6s} {'(workers)':>9s} {'matrices/s':>10s} {'RSS MB':>7s} "
          f"{'(worker)':>8s}")
    for scale in scales:
        anchor = None
        for n in workers:
            out = subprocess.run([sys.executable, __file__, "--one-run", str(n), "--scales",
                                  str(scale), "--seed", str(seed)], check=True,
                                 capture_output=True, text=True).stdout
            f = json.loads(out.strip().splitlines()[-1])
            anchor = anchor or f["wall_s"]
            cpu = f["cpu_parent_s"] + f["cpu_workers_s"]
            print(f"{scale:5.2f} {n:7d} {f['matrices']:8,d} {f['wall_s']:7.1f} "
                  f"{anchor / f['wall_s']:5.2f} {cpu:6.1f} {f['cpu_workers_s']:9.1f} "
                  f"{f['matrices'] / f['wall_s']:10,.0f} {f['rss_parent_mb']:7.0f} "
                  f"{f['rss_worker_mb']:8.0f}", flush=True)
    print(f"load average at the end {os.getloadavg()[0]:.2f}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scales", type=float, nargs="+", default=[0.1, 0.5, 1.0])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workers", type=int, nargs="+", default=None,
                   help="only time generation with these worker counts, side by side")
    p.add_argument("--one-run", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--verify", type=int, default=5000,
                   help="re-check this many matrices of the last run with the string solver")
    p.add_argument("--write-pools", type=Path, default=None,
                   help="only write the pool as this POOLS.h5 (for `vprom generate`)")
    args = p.parse_args()
    if args.one_run is not None:
        print(json.dumps(one_run(args.scales[0], args.seed, args.one_run)))
        return
    if args.workers:
        side_by_side(args.scales, args.seed, args.workers)
        return
    t = time.perf_counter()
    crops = full_size_pool()
    print(f"pool: {len(crops):,} crops built in {time.perf_counter() - t:.1f} s")
    if args.write_pools:
        write_pools(args.write_pools, crops)
        print(f"wrote {args.write_pools}")
        return
    data = None
    for scale in args.scales:
        t, cpu = time.perf_counter(), time.process_time()
        data = generate_dataset(crops, load_rules(), scale=scale, seed=args.seed,
                                vocabulary=vocabulary())
        dt, dcpu = time.perf_counter() - t, time.process_time() - cpu
        n = data.counts["matrices"]
        print(f"scale {scale:4.2f}: {n:7,d} matrices in {dt:6.1f} s wall, {dcpu:6.1f} s CPU "
              f"= {n / dt:6,.0f} matrices/s wall, {n / dcpu:6,.0f} matrices/s CPU")
    print("split sizes at the last scale (train / val / test):")
    for s, parts in data.counts["splits"].items():
        print(f"  {s:34s} {parts['train']:8,d} {parts['val']:7,d} {parts['test']:8,d}")
    print(f"used crops: {len(data.crops):,} of {len(crops):,}")
    print("balance:", json.dumps(balance(data)))
    view = in_memory(data)
    print("context-blind label probes (% right, 95% CI, test matrices; chance 12.5):")
    for group, figures in label_probe(view, args.seed).items():
        print(f"  {group:34s} {figures[0]:5.1f}  ({figures[1]:.1f}-{figures[2]:.1f})  "
              f"{figures[3]:,}")
    print(f"held-out labels in training (held_out_* splits): {held_out(view)}")
    full, explicit, mixed = recheck(view, args.verify, args.seed)
    print(f"string-level re-check of {args.verify:,} random matrices: {full} unsound under "
          f"explicit + implied labels, {explicit} under explicit labels; {mixed} have a second "
          "answer under v1's readings mixing super-attributes between panels (not V-PROM "
          "readings, reported for comparison)")
    from vprom.generation.verify.ceiling import format_ceiling, perception_ceiling

    print(format_ceiling(perception_ceiling(data.matrices)))


if __name__ == "__main__":
    main()
