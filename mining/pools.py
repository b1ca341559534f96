"""`vprom mine`: stream Visual Genome into the four element pools (POOLS.h5 + a report).

The two passes (`pool_jobs`) give the same output on any number of workers. Crops are ordered
by element type, then input order, and numbered 0..N-1. POOLS.h5 (with its vocabulary and a
manifest of inputs, settings and content hash), the reports and `.excluded_counts.tsv` are
renamed into place together, POOLS.h5 last; it is built in memory (libhdf5 can crash on ENOSPC).
"""

from __future__ import annotations

import hashlib
import json
import time
from contextlib import ExitStack
from pathlib import Path

import numpy as np
from vprom.mining import readers
from vprom.mining import vocab as vocabularies
from vprom.mining.pool_jobs import run_passes
from vprom.mining.pool_passes import (
    ELEMENT_TYPES,
    STRING_COLUMNS,
    PassResult,
    concatenate,
)
from vprom.mining.pool_report import MineReport, report_data, side_path

from vprom.claim import writes
from vprom.domain import MIN_SIDE
from vprom.errors import VpromError
from vprom.files import atomic_path
from vprom.manifest import make_manifest
from vprom.tables import (
    CropTable,
    content_hash_of,
    set_manifest,
    write_label_vocabulary,
)


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
    columns, strings = concatenate(passes)
    order = np.argsort(columns["element_type"], kind="stable")
    table_of = np.array(strings, dtype=object)
    merged = {}
    for name in list(columns):  # one column at a time, so only one full copy lives here
        values = columns.pop(name)[order]
        merged[name] = table_of[values] if name in STRING_COLUMNS else values
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
                        for p in report.pools}}
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
    """The bytes of POOLS.h5, made in memory, its manifest carrying its content hash."""
    import h5py

    with h5py.File("pools.h5", "w", driver="core", backing_store=False) as h5:
        table.write(h5.create_group("crops"))
        write_label_vocabulary(h5.create_group("vocabulary"), vocab.objects,
                               {"object_attribute": vocab.object_attributes,
                                "human_attribute": vocab.human_attributes},
                               vocab.implied_labels)
        set_manifest(h5, {**manifest, "outputs": {"content_hash": content_hash_of(h5)}})
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
