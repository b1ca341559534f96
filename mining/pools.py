"""`vprom mine`: stream Visual Genome into the four element pools (POOLS.h5 + a report).
Forked workers mine chunks of whole records (`byte_ranges`, `pool_passes`), joined in file
order: any number of workers gives one process's output (what cannot be cut is streamed).
Crops are ordered by element type, then input order. POOLS.h5 (built in memory: libhdf5 can
crash on a full disk), the reports and `.excluded_counts.tsv` are renamed in together.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from collections import Counter
from contextlib import ExitStack
from functools import partial
from itertools import repeat
from pathlib import Path
from typing import NamedTuple

import numpy as np
from tqdm import tqdm
from vprom.mining import byte_ranges, pool_passes, readers
from vprom.mining import vocab as vocabularies
from vprom.mining.pool_passes import ELEMENT_TYPES, SAMPLES, PassResult, concatenate
from vprom.mining.pool_report import MineReport, report_data, side_path

from vprom import processes
from vprom.claim import writes
from vprom.domain import MIN_SIDE
from vprom.errors import VpromError
from vprom.files import atomic_path
from vprom.manifest import make_manifest
from vprom.tables import CropTable, content_hash, set_manifest, write_label_vocabulary

OBJECTS, COUNTS = "objects", "counts"
_FILES = {OBJECTS: (readers.OBJECTS, readers.ATTRIBUTES), COUNTS: (readers.REGIONS,)}
_KEYS = {OBJECTS: ("objects", "attributes"), COUNTS: ("regions",)}  # `readers.image_of`
_MINERS = {OBJECTS: pool_passes.mine_objects, COUNTS: pool_passes.mine_counts}
# what a pass counts, for `_join`
_STATS = {OBJECTS: pool_passes.object_stats, COUNTS: pool_passes.count_stats}


class Setup(NamedTuple):
    """What every job needs; forked workers inherit it."""

    paths: dict
    sizes: dict
    min_side: int
    vocab: object


def run_passes(paths: dict, min_side: int, vocab, workers: int) -> list[PassResult]:
    """The objects pass and the counts pass, as two `PassResult`s."""
    sizes, image_data_sha = readers.image_sizes(paths[readers.IMAGE_DATA])
    setup = Setup(paths, sizes, min_side, vocab)
    scans = {kind: _scans(paths, kind) for kind in _FILES}
    parts: dict[str, list[PassResult]] = {OBJECTS: [], COUNTS: []}
    whole: dict[str, PassResult] = {}  # a pass read in one piece
    total = sum(p.stat().st_size for stem, p in paths.items() if stem != readers.IMAGE_DATA)
    with processes.ordered_map(partial(run_job, setup), _jobs(scans), workers, "mine",
                               method="fork") as results, \
            tqdm(total=total, unit="B", unit_scale=True, desc="mining", leave=False,
                 disable=None) as bar:
        for kind, result, size in results:
            bar.update(size)
            if kind in whole:
                continue  # a chunk failed before: the pass was streamed instead
            if result is None:
                whole[kind] = _streamed(kind, setup)
                names = " and ".join(paths[stem].name for stem in _FILES[kind])
                print(f"mine: {names}: a byte range did not hold the records the cut found "
                      "there (are the records written in more than one way?), so the "
                      "streaming reader read the pass again on one core: the same output, "
                      "more slowly", file=sys.stderr)
            elif result.inputs:
                whole[kind] = result
            else:
                parts[kind].append(result)
    for kind in (OBJECTS, COUNTS):
        if kind not in whole:
            whole[kind] = _join(kind, parts[kind], len(sizes))
            whole[kind].inputs = {scan.path.name: scan.sha256 for scan in scans[kind]}
        whole[kind].inputs[paths[readers.IMAGE_DATA].name] = image_data_sha
    return [whole[OBJECTS], whole[COUNTS]]


def _scans(paths: dict, kind: str) -> list | None:
    """The scans that cut the pass's files; None when one of them cannot be cut."""
    scans = [None if paths[stem].suffix == ".zip" else byte_ranges.JoinScan.open(paths[stem])
             for stem in _FILES[kind]]
    return None if None in scans else scans


def _jobs(scans: dict):
    """(kind, chunks) per job; first (kind, None) for each pass streamed in one job."""
    yield from ((kind, None) for kind, found in scans.items() if found is None)
    for kind, found in scans.items():
        if found is not None:
            yield from ((kind, chunks) for chunks in byte_ranges.plan(found))


def run_job(setup: Setup, job: tuple) -> tuple[str, PassResult | None, int]:
    """(kind, result, bytes) for one job; result None when the chunk must be streamed."""
    kind, chunks = job
    with processes.collector_paused():
        if chunks is None:
            return kind, _streamed(kind, setup), 0
        size = sum(c.stop - c.start for c in chunks)
        try:
            return kind, _mine_chunks(kind, chunks, setup), size
        except Exception:  # noqa: BLE001 - the streaming reader says what is wrong
            return kind, None, size


def _mine_chunks(kind: str, chunks: tuple, setup: Setup) -> PassResult:
    images = []
    for chunk, key in zip(chunks, _KEYS[kind]):
        records = byte_ranges.load(chunk, readers.RECORD[key])
        images.append(map(readers.image_of, range(chunk.first, chunk.first + chunk.count),
                          records, repeat(chunk.path), repeat(key)))
    return _mine(kind, images, setup)


def _streamed(kind: str, setup: Setup) -> PassResult:
    with ExitStack() as stack:
        sources = [stack.enter_context(readers.Source(setup.paths[stem]))
                   for stem in _FILES[kind]]
        result = _mine(kind, [readers.images(source, key)
                              for source, key in zip(sources, _KEYS[kind])], setup)
    result.inputs = {source.path.name: source.sha256 for source in sources}
    return result


def _mine(kind: str, images: list, setup: Setup) -> PassResult:
    return _MINERS[kind](*images, setup.sizes, setup.min_side, setup.vocab)


def _join(kind: str, parts: list[PassResult], images: int) -> PassResult:
    """A pass's chunk results, in file order, counted as one process would count them."""
    stats = _STATS[kind](images)
    for part in parts:
        for key, value in part.stats.items():
            mine = stats[key]
            if isinstance(value, Counter):
                mine.update(value)
            elif key == "missing_image_ids":
                mine.extend(value[:20 - len(mine)])
            elif key == "count_samples":
                for reason, samples in value.items():
                    kept = mine.setdefault(reason, [])
                    kept.extend(samples[:SAMPLES - len(kept)])
    rows = [row for part in parts for row in part.excluded_rows]
    return PassResult(concatenate(parts), stats, {}, rows, sum(part.seconds for part in parts))


@writes("out", ("pools",), inputs=lambda a: (a["vg_dir"],))
def mine(vg_dir: str | Path, out: str | Path, min_side: int = MIN_SIDE, workers: int = 2,
         vocab=None) -> MineReport:
    """Stream the VG folder `vg_dir` into POOLS.h5 at `out` (+ report and side files)."""
    start = time.perf_counter()
    vg_dir, out = Path(vg_dir), Path(out)
    if min_side < 1:
        raise VpromError(f"--min-side must be at least 1 px, got {min_side}")
    paths = {stem: readers.locate(vg_dir, stem) for stem in readers.FILES}
    vocab = vocabularies.load_vocabulary() if vocab is None else vocab
    passes = run_passes(paths, min_side, vocab, workers)
    collected = time.perf_counter()
    table, inputs = _merge(passes)
    excluded_path = side_path(out, ".excluded_counts.tsv")
    data = report_data(table, passes, inputs, min_side, vocab, excluded_path.name)
    report = MineReport(out, data)
    _write(out, table, report, passes[1].excluded_rows, excluded_path, vocab)
    report.elapsed_s = time.perf_counter() - start
    report.timings = {"objects pass": passes[0].seconds, "counts pass": passes[1].seconds,
                      "merge+write": time.perf_counter() - collected}
    return report


def _merge(passes: list[PassResult]) -> tuple[CropTable, dict[str, str]]:
    """One CropTable ordered by element type, then input order; crop ids 0..N-1."""
    columns = concatenate(passes)
    order = np.argsort(columns["element_type"], kind="stable")
    # one column at a time, so only one full copy lives here
    merged = {name: columns.pop(name)[order] for name in list(columns)}
    merged["element_type"] = np.array(ELEMENT_TYPES, dtype=object)[merged["element_type"]]
    table = CropTable(crop_id=np.arange(len(order), dtype=np.int64), **merged)
    inputs = {name: sha for result in passes for name, sha in result.inputs.items()}
    return table, dict(sorted(inputs.items()))


def pools_settings(min_side: int = MIN_SIDE, vocab=None) -> dict:
    """The settings a POOLS.h5's manifest records: the minimum side and the vocabulary's sha256."""
    vocab = vocabularies.load_vocabulary() if vocab is None else vocab
    return {"min_side": min_side, "vocabulary_sha256": vocabulary_digest(vocab)}


def _write(out: Path, table: CropTable, report: MineReport, excluded_rows: list[str],
           excluded_path: Path, vocab) -> None:
    """All four files to temporaries, then renamed together, POOLS.h5 last."""
    config = pools_settings(report.data["config"]["min_side"], vocab)
    counts = {"crops": len(table), "images": report.data["images"],
              "pools": {f"{p['element_type']}/{p['super_attribute']}".rstrip("/"): p["crops"]
                        for p in report.data["pools"]}}
    manifest = make_manifest("pools", config, inputs=report.data["inputs"], counts=counts)
    texts = {excluded_path: "region_id\timage_id\treason\tnumber\tphrase\n"
             + "".join(row + "\n" for row in excluded_rows),
             side_path(out, ".report.json"): report.to_json(),
             side_path(out, ".report.md"): report.to_markdown()}
    with ExitStack() as renames:  # left in reverse: POOLS.h5's rename comes last
        renames.enter_context(atomic_path(out)).write_bytes(_pools_image(table, vocab,
                                                                          manifest))
        for path, text in texts.items():
            renames.enter_context(atomic_path(path)).write_text(text, encoding="utf-8")


def _pools_image(table: CropTable, vocab, manifest: dict) -> bytes:
    import h5py

    with h5py.File("pools.h5", "w", driver="core", backing_store=False) as h5:
        table.write(h5.create_group("crops"))
        write_label_vocabulary(h5.create_group("vocabulary"), vocab.objects,
                               {"object_attribute": vocab.object_attributes,
                                "human_attribute": vocab.human_attributes},
                               vocab.implied_labels)
        set_manifest(h5, {**manifest, "outputs": {"content_hash": content_hash(h5)}})
        h5.flush()
        return h5.id.get_file_image()


def vocabulary_digest(vocab) -> str:
    """sha256 of the vocabulary's tables, so the manifest pins what the pools were mined with."""
    def plain(value):
        if hasattr(value, "items"):
            return sorted((str(k), plain(v)) for k, v in value.items())
        if isinstance(value, (set, frozenset, list, tuple)):
            return sorted(str(v) for v in value)
        return value

    tables = {name: plain(getattr(vocab, name, None)) for name in (
        "object_attributes", "human_attributes", "objects", "person_words", "excluded_objects",
        "excluded_attributes", "aliases", "implied_labels")}
    return hashlib.sha256(json.dumps(tables, sort_keys=True).encode()).hexdigest()
