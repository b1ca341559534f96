"""POOLS.h5 in, DATASET.h5 out: `generate_dataset` plans, samples and proves every matrix in
memory and assigns each to every split with the held-out bans its panels meet; `generate`
writes it; `merge_shards` joins `--shard K/N` files into the single run's, choosing the
validation sets over all shards' training ids. Matrices are drawn in chunks by forked workers
that inherit the samplers copy-on-write (`gc.freeze()` keeps the collector off their pages);
every matrix draws from its own `Draws(seed, index)`, so any number of workers gives one file.
"""

from __future__ import annotations

import gc
import json
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import h5py
import numpy as np
from tqdm import tqdm

from vprom.errors import VpromError
from vprom.file_kinds import DATASET, POOLS, check_kind
from vprom.generation.labels import LabelVocabulary
from vprom.generation.plan import MatrixPlan, make_plan
from vprom.generation.pool_index import PoolIndex
from vprom.generation.sampler import MAX_TRIES, MIN_CONTEXT_CROPS, PlanSampler
from vprom.files import atomic_path
from vprom.manifest import check_content, input_hashes, make_manifest
from vprom.claim import writes
from vprom.processes import collector_paused, ordered_map, usable_cores
from vprom.domain import N_PANELS, SPLITS, TABLE1, ElementType
from vprom.splits.rules import SplitRules, assign, choose_val, image_sides
from vprom.tables import (
    STR,
    CropTable,
    MatrixTable,
    content_hash,
    open_h5,
    read_crop_table,
    set_manifest,
)


#: Matrices per job: the pipe traffic stays a small part of the work, and workers end together.
CHUNK = 200


@dataclass
class Chunk:
    ids: np.ndarray  # int64 matrix ids
    rows: np.ndarray  # ids x 16 crop rows of the pool
    super_attribute: list[str]
    loosened: list[tuple[str, str, str]]  # `PlanSampler.draw`'s notes, in id order


def draw_chunk(sampler: PlanSampler, indices: Sequence[int]) -> Chunk:
    drawn = [sampler.draw(i) for i in indices]
    return Chunk(np.asarray(indices, dtype=np.int64),
                 np.asarray([rows for _, rows, _ in drawn], np.int64).reshape(-1, N_PANELS),
                 [sa for sa, _, _ in drawn], [note for *_, note in drawn if note is not None])


def draw_chunks(sampler: PlanSampler, indices: Sequence[int], workers: int) -> Iterator[Chunk]:
    """Every chunk of `indices`, in order, from `workers` forked processes (none below 2)."""
    chunks = [indices[k:k + CHUNK] for k in range(0, len(indices), CHUNK)]
    gc.freeze()
    try:
        with ordered_map(partial(draw_chunk, sampler), chunks, min(workers, len(chunks)),
                         "generate", method="fork") as results:
            yield from results
    finally:
        gc.unfreeze()


@dataclass
class Dataset:
    crops: CropTable  # the crops the matrices use, sorted by crop id
    matrices: MatrixTable
    universes: dict[str, list[str]]
    super_attributes: dict[str, dict[str, list[str]]]
    counts: dict
    vocabulary: LabelVocabulary | None = None


def generate_dataset(crops: CropTable, rules: SplitRules, scale: float = 1.0, seed: int = 0,
                     shard: tuple[int, int] | None = None, source: str = "pools",
                     vocabulary: LabelVocabulary | None = None,
                     progress: bool = False, legacy_counts: bool = False,
                     workers: int = 1) -> Dataset:
    """Plan, sample, prove and assign every split, in memory (what `generate` writes).

    `vocabulary`: what the pools were mined with (None: the crops' own labels only).
    `legacy_counts`: count candidates drawn answer first, a flaw kept only to reproduce it.
    `workers`: processes drawing the matrices; the result is the same for any number."""
    # the pool index is millions of long-lived objects the collector would walk again and again
    with collector_paused():
        plan = make_plan(scale, seed, rules.design)
        pool = PoolIndex(crops, seed, rules.design, source=source, vocabulary=vocabulary)
        skipped: dict[str, list[str]] = {}
        loosened: dict[str, dict] = {}
        if shard is not None and not 0 <= shard[0] < shard[1]:
            raise VpromError(f"--shard {shard[0]}/{shard[1]}: need 0 <= K < N")
        indices = range(len(plan)) if shard is None else range(shard[0], len(plan), shard[1])
        sampler = PlanSampler(pool, plan, skipped, legacy_counts) if len(indices) else None
    chunks = []
    if sampler is not None:
        with tqdm(total=len(indices), desc="generate", unit="matrix", smoothing=0.05,
                  disable=None if progress else True) as bar:
            for chunk in draw_chunks(sampler, indices, workers):
                for name, cell, why in chunk.loosened:
                    _add_loosened(loosened, name, 1, {cell: why})
                chunks.append(chunk)
                bar.update(len(chunk.ids))
    rows = np.concatenate([c.rows for c in chunks] or [np.zeros((0, N_PANELS), np.int64)])
    table = _matrix_table(pool, plan, chunks, rows)
    parts = assign(rules, table, image_sides(rules, seed, crops.image_id[rows]),
                   np.bitwise_or.reduce(np.asarray(pool.split_bans, np.int64)[rows], axis=1))
    for split in SPLITS:
        train, test = table.id[parts[split] == "train"], table.id[parts[split] == "test"]
        if shard is None:
            train, val = choose_val(train, seed, split, scale)
        else:
            val = np.zeros(0, np.int64)  # merge_shards chooses it over all shards' train
        table.splits[split] = {"train": train, "val": val, "test": test}
    used_rows = np.unique(rows)
    used_crops = crops.take(used_rows[np.argsort(crops.crop_id[used_rows], kind="stable")])
    universes = {e.value: sorted(u.ids, key=int if e is ElementType.COUNT else None)
                 for e, u in pool.universe.items()}
    counts = _counts(table, len(plan), shard is None, skipped, loosened)
    counts["vocabulary"] = pool.vocabulary.counts()
    super_attributes = {etype.value: {sa: sorted(v) for sa, v in sorted(by_sa.items())}
                        for etype, by_sa in pool.elements_of.items() if by_sa}
    return Dataset(used_crops, table, universes, super_attributes, counts, pool.vocabulary)


def _matrix_table(pool: PoolIndex, plan: MatrixPlan, chunks: list[Chunk],
                  rows: np.ndarray) -> MatrixTable:
    ids = np.concatenate([c.ids for c in chunks] or [np.zeros(0, np.int64)])
    group = plan.group_of[ids].astype(np.int64)
    relation = np.array([g.relation.value for g in plan.groups], dtype=object)
    element_type = np.array([g.element_type.value for g in plan.groups], dtype=object)
    return MatrixTable(
        id=ids, relation=relation[group], element_type=element_type[group],
        super_attribute=[sa for c in chunks for sa in c.super_attribute],
        answer=plan.answer[ids], panels=np.asarray(pool.crop_id, dtype=np.int64)[rows],
        elements=np.asarray(pool.element, dtype=object)[rows], splits={})


def _add_loosened(loosened: dict[str, dict], key: str, matrices: int, why: dict) -> None:
    """Count `matrices` of group `key` drawn loosened, and why per cell, as the manifest has it."""
    entry = loosened.setdefault(key, {"matrices": 0, "why": {}})
    entry["matrices"] += matrices
    entry["why"].update(why)


def _counts(table: MatrixTable, planned: int, val_chosen: bool, skipped: dict,
            loosened: dict) -> dict:
    by_type: dict[str, dict[str, int]] = {}
    for (etype, relation), n in sorted(Counter(zip(table.element_type, table.relation)).items()):
        by_type.setdefault(etype, {})[relation] = n
    return {
        "matrices": len(table),
        "planned_matrices": planned,
        "by_element_type_relation": by_type,
        "splits": {s: {p: int(len(ids)) for p, ids in table.splits[s].items()}
                   for s in SPLITS if s in table.splits},
        "val_chosen": val_chosen,
        "super_attributes_too_small": {k: sorted(v) for k, v in sorted(skipped.items())},
        "held_out_bans_loosened": dict(sorted(loosened.items())),
    }


@dataclass
class GenerateSummary:
    out: Path
    counts: dict
    seconds: float

    def __str__(self) -> str:
        c = self.counts
        lines = [f"wrote {self.out}: {c['matrices']:,} matrices in {self.seconds:.1f} s"]
        for etype, rel in c["by_element_type_relation"].items():
            lines.append(f"  {etype:17s} " + "  ".join(f"{r} {n:,}" for r, n in rel.items()))
        lines.append(f"  {'split':34s} {'train':>8s} {'val':>7s} {'test':>8s}")
        for s, p in c["splits"].items():
            lines.append(f"  {s:34s} {p['train']:8,d} {p['val']:7,d} {p['test']:8,d}")
        if not c["val_chosen"]:
            lines.append("  (shard: val is chosen when the shards are merged: `vprom merge`)")
        if too_small := c.get("super_attributes_too_small"):
            lines.append("  super-attributes left out (too few sound matrices): " + "; ".join(
                f"{k}: {', '.join(v)}" for k, v in too_small.items()))
        if loosened := c.get("held_out_bans_loosened"):
            lines.append("  matrices that could not avoid held-out labels (pools too "
                         "thin; such a matrix leaves the training set of the split whose label "
                         "it shows):")
            for key, v in loosened.items():
                cells = "; ".join(f"{cell}: {why}" for cell, why in v["why"].items())
                lines.append(f"    {key}: {v['matrices']:,} ({cells})")
        if not (c.get("vocabulary") or {}).get("recorded", True):
            lines.append("  note: the pools record no vocabulary (mined by an older vprom, or "
                         "not by `vprom mine`): no implied labels were applied, and labels "
                         "were classified by the crops' own elements; re-run `vprom mine`")
        return "\n".join(lines)


def dataset_settings(scale: float, seed: int, shard: tuple[int, int] | None = None,
                     legacy_counts: bool = False) -> dict:
    """Every setting that changes a DATASET.h5 made from given pools: its manifest's config."""
    return {"scale": scale, "seed": seed, "shard": list(shard) if shard else None,
            "min_context_crops": MIN_CONTEXT_CROPS, "max_tries": MAX_TRIES,
            "table1": {e.value: n for e, n in TABLE1.items()},
            # recorded so the file says it carries the flaw on purpose
            "legacy_count_candidates": True if legacy_counts else None}


@writes("out", ("dataset",), inputs=lambda a: (a["pools"],))
def generate(pools: Path, out: Path, rules: SplitRules, scale: float = 1.0, seed: int = 0,
             shard: tuple[int, int] | None = None,
             legacy_counts: bool = False, workers: int | None = None) -> GenerateSummary:
    """POOLS.h5 -> DATASET.h5 (`generate_dataset`; `workers` None: one per usable core)."""
    start = time.perf_counter()
    pools, out = Path(pools), Path(out)
    workers = usable_cores() if workers is None else workers
    if workers < 1:
        raise VpromError(f"--workers must be 1 or more, got {workers}")
    check_pools_file(pools)
    crops = read_crop_table(pools, POOLS)  # read into memory and closed: workers fork after this
    with open_h5(pools) as h5:
        vocabulary = LabelVocabulary.read(h5.get("vocabulary"), str(pools))
    data = generate_dataset(crops, rules, scale=scale, seed=seed, shard=shard,
                            source=str(pools), vocabulary=vocabulary,
                            progress=True, legacy_counts=legacy_counts, workers=workers)
    config = dataset_settings(scale, seed, shard, legacy_counts)
    manifest = make_manifest("dataset", config=config, seed=seed,
                             inputs=input_hashes([pools]), counts=data.counts)
    _write(out, data, manifest)
    return GenerateSummary(out, data.counts, time.perf_counter() - start)


def check_pools_file(path: Path) -> None:
    check_kind(path, POOLS)
    with open_h5(path) as h5:
        raw = h5.attrs.get("manifest")
    if raw is None:
        raise VpromError(f"{path}: no manifest, so not a POOLS.h5 written by `vprom mine` (or "
                         "an incomplete one); mine the pools again")
    try:
        kind = json.loads(raw).get("kind")
    except (TypeError, ValueError, AttributeError):
        kind = "unreadable"
    if kind != "pools":
        raise VpromError(f"{path}: its manifest says it is a '{kind}' file, not a POOLS.h5; "
                         "pass the pools file that `vprom mine` wrote")
    check_content(path)


def _write(out: Path, data: Dataset, manifest: dict) -> None:
    with atomic_path(out) as tmp:
        with h5py.File(tmp, "w") as h5:
            data.crops.write(h5.create_group("crops"))
            data.matrices.write(h5.create_group("matrices"), h5.create_group("splits"))
            vocab = h5.create_group("vocab")
            for etype, names in data.universes.items():
                vocab.create_dataset(etype, data=np.asarray(names, dtype=object), dtype=STR)
            for etype, by_sa in data.super_attributes.items():
                g = vocab.create_group(f"super_attributes/{etype}")
                for sa, names in by_sa.items():
                    g.create_dataset(sa, data=np.asarray(names, dtype=object), dtype=STR)
            if data.vocabulary is not None:
                data.vocabulary.write(vocab.create_group("labels"))
        # the content hash covers the data only, so storing it afterwards leaves it unchanged
        manifest = {**manifest, "outputs": {"content_hash": content_hash(tmp)}}
        with h5py.File(tmp, "r+") as h5:
            set_manifest(h5, manifest)


@writes("out", ("dataset",), inputs=lambda a: tuple(a["shards"]))
def merge_shards(shards: Sequence[Path], out: Path, rules: SplitRules) -> GenerateSummary:
    """Join the DATASET.h5 files of all N `--shard K/N` runs into the single run's file."""
    start = time.perf_counter()
    manifests, crops, tables, universes, sas, vocabulary = _read_shards(shards)
    config = manifests[0]["config"]
    scale, seed = config["scale"], config["seed"]
    ids = np.concatenate([t.id for t in tables])
    order = np.argsort(ids, kind="stable")
    planned = manifests[0]["counts"]["planned_matrices"]
    if not np.array_equal(ids[order], np.arange(planned)):
        raise VpromError(f"merge_shards: the shards hold {len(ids)} matrices, the run planned "
                         f"{planned}; a shard file is incomplete or repeated")
    splits = {}
    for split in SPLITS:
        train = np.sort(np.concatenate([t.splits[split]["train"] for t in tables]))
        train, val = choose_val(train, seed, split, scale)
        test = np.sort(np.concatenate([t.splits[split]["test"] for t in tables]))
        splits[split] = {"train": train, "val": val, "test": test}
    table = MatrixTable(**{f: np.concatenate([getattr(t, f) for t in tables])[order]
                           for f in MatrixTable.__dataclass_fields__ if f != "splits"},
                        splits=splits)
    every = CropTable(**{f: np.concatenate([getattr(c, f) for c in crops])
                         for f in CropTable.__dataclass_fields__})
    _, first = np.unique(every.crop_id, return_index=True)  # sorted by crop id, like one run
    skipped: dict[str, set] = {}
    loosened: dict[str, dict] = {}
    for m in manifests:
        for key, names in m["counts"].get("super_attributes_too_small", {}).items():
            skipped.setdefault(key, set()).update(names)
        for key, v in (m["counts"].get("held_out_bans_loosened") or {}).items():
            _add_loosened(loosened, key, v["matrices"], v["why"])
    counts = _counts(table, planned, True, skipped, loosened)
    if "vocabulary" in manifests[0]["counts"]:
        counts["vocabulary"] = manifests[0]["counts"]["vocabulary"]
    manifest = make_manifest("dataset", config={**config, "shard": None,
                                                "merged_from": len(shards)},
                             seed=seed, inputs=manifests[0]["inputs"], counts=counts)
    _write(Path(out), Dataset(every.take(first), table, universes, sas, counts, vocabulary),
           manifest)
    return GenerateSummary(Path(out), counts, time.perf_counter() - start)


def _read_shards(shards: Sequence[Path]):
    if not shards:
        raise VpromError("merge_shards: no shard files given")
    manifests, crops, tables = [], [], []
    for path in shards:
        check_kind(path, DATASET)
        with open_h5(path) as h5:
            if "manifest" not in h5.attrs or "vocab" not in h5:
                raise VpromError(f"{path}: not a DATASET.h5 written by vprom generate --shard")
            manifests.append(json.loads(h5.attrs["manifest"]))
            if not manifests[-1]["config"].get("shard"):
                raise VpromError(f"{path}: this is a whole DATASET.h5, not one shard; merge "
                                 "takes the N files of `vprom generate --shard K/N`, K = 0..N-1")
            crops.append(CropTable.read(h5["crops"]))
            tables.append(MatrixTable.read(h5["matrices"], h5["splits"]))
    _check_one_run(shards, manifests)
    with open_h5(shards[0]) as h5:
        universes, sas, vocabulary = read_vocab(h5["vocab"], shards[0])
    return manifests, crops, tables, universes, sas, vocabulary


def _check_one_run(shards: Sequence[Path], manifests: list[dict]) -> None:
    """Refuse a shard of another run or count of shards, and one given twice."""
    n, seen, first = len(shards), {}, manifests[0]
    for path, m in zip(shards, manifests):
        k, of = tuple(m["config"].get("shard") or (0, 1))
        if (m["config"]["scale"], m["config"]["seed"], m.get("inputs")) != (
                first["config"]["scale"], first["config"]["seed"], first.get("inputs")):
            raise VpromError(f"{path}: a shard of another run than {shards[0]} (scale "
                             f"{m['config']['scale']}, seed {m['config']['seed']} vs "
                             f"{first['config']['scale']}, {first['config']['seed']}, or "
                             "other pools); pass every shard of one run once")
        if of != n or (k, of) in seen:
            why = (f"shard {k}/{of} like {seen[k, of]}" if (k, of) in seen else
                   f"shard {k}/{of}, but {n} file(s) were given")
            raise VpromError(f"{path}: {why}; pass every shard of one run once")
        seen[k, of] = path


def read_vocab(vocab: h5py.Group, path: Path) -> tuple[dict, dict, LabelVocabulary | None]:
    """`_write`'s `vocab` group: universes, super-attributes' elements, label vocabulary."""
    universes = {k: ds.asstr()[()].tolist() for k, ds in vocab.items()
                 if isinstance(ds, h5py.Dataset) and ds.dtype.kind == "O"}
    sas = {etype: {sa: g[sa].asstr()[()].tolist() for sa in g}
           for etype, g in vocab.get("super_attributes", {}).items()}
    return universes, sas, LabelVocabulary.read(vocab.get("labels"), str(path))
