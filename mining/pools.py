"""`vprom mine`: stream Visual Genome into the four element pools (POOLS.h5 + a report).

Two independent passes (`mining.pool_passes`, `mining.count_pass`) read the annotations:

* the **objects pass** reads objects.json and attributes.json side by side and feeds the
  OBJECT, OBJECT_ATTRIBUTE and HUMAN_ATTRIBUTE pools;
* the **counts pass** reads region_descriptions.json and feeds the COUNT pool.

`mining.pool_jobs` cuts the files into chunks of whole image records and spreads the chunks
of both passes over `workers` processes (with `workers=1`, all of them in this one); the
chunks of a pass are merged in file order, so the output does not depend on `workers`.

Each pass comes back as compact numpy columns plus one interned string table (a
`PassResult`); `mine` concatenates them a column at a time (the table is the only full copy
of the crops it holds), orders crops by element type, then input order, numbers them 0..N-1
(same input → identical crops), and writes POOLS.h5 through `atomic_path` together
with `<out>.report.md` and `<out>.report.json` (`mining.pool_report`) and
`<out>.excluded_counts.tsv`, which lists every number that is not a count with its region
and image ids. The manifest of POOLS.h5 pins the inputs' sha256 and the vocabulary's
(`vocabulary_digest`).

POOLS.h5 also records what generation must know of the vocabulary it was mined with, in a
`vocabulary` group (1-D UTF-8 string columns): `objects` (the categories),
`object_attribute/{label, super_attribute}` and `human_attribute/{label, super_attribute}`
(the attribute tables) and `implied/{label, value}` (one row per name and the human-attribute
value it implies: man -> male, man -> adult). Generation reads a person crop's explicit and
implied labels together and classifies every label of a crop (category, attribute of which
super-attribute) for the strict held-out splits; it cannot import `mining`, so the table
travels with the pools.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import numpy as np

from vprom.errors import VpromError
from vprom.files import atomic_path
from vprom.manifest import make_manifest
from vprom.mining import readers
from vprom.mining.pool_jobs import run_passes
from vprom.mining.pool_passes import ELEMENT_TYPES, STRING_COLUMNS, PassResult
from vprom.mining.pool_report import MineReport, report_data, side_path
from vprom.claim import writes
from vprom.domain import MIN_SIDE
from vprom.tables import CropTable, set_manifest


@writes("out", ("pools",), inputs=lambda a: (a["vg_dir"],))
def mine(vg_dir: str | Path, out: str | Path, min_side: int = MIN_SIDE, workers: int = 2,
         vocab=None) -> MineReport:
    """Stream the VG folder `vg_dir` into POOLS.h5 at `out` (+ report and side files)."""
    start = time.perf_counter()
    vg_dir, out = Path(vg_dir), Path(out)
    if min_side < 1:
        raise VpromError(f"--min-side must be at least 1 px, got {min_side}")
    paths = {stem: readers.locate(vg_dir, stem) for stem in readers.FILES}
    if vocab is None:
        from vprom.mining.vocab import load_vocabulary

        vocab = load_vocabulary()
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
    """One CropTable ordered by element type, then input order; crop ids 0..N-1.

    The passes' columns are consumed one at a time (each is freed once merged), and string
    columns stay codes into one joint table until their final order, so the full table is
    the only copy of the crops that ever lives here."""
    strings: dict[str, int] = {}
    remaps = [np.array([strings.setdefault(s, len(strings)) for s in result.strings],
                       dtype=np.int64) for result in passes]
    names = list(dict.fromkeys(name for result in passes for name in result.columns))
    order = np.argsort(np.concatenate([r.columns["element_type"] for r in passes
                                       if "element_type" in r.columns]), kind="stable")
    merged = {}
    for name in names:  # a pass without crops may have no columns
        parts = [(remap, result.columns.pop(name)) for remap, result in zip(remaps, passes)
                 if name in result.columns]
        merged[name] = np.concatenate([remap[values] if name in STRING_COLUMNS else values
                                       for remap, values in parts])[order]
        del parts
    table_of = np.array(list(strings), dtype=object)
    for name in STRING_COLUMNS:
        if name in merged:
            merged[name] = table_of[merged[name]]
    merged["element_type"] = np.array(ELEMENT_TYPES, dtype=object)[merged["element_type"]]
    table = CropTable(crop_id=np.arange(len(order), dtype=np.int64), **merged)
    inputs = {}
    for result in passes:
        inputs.update(result.inputs)
    return table, dict(sorted(inputs.items()))


def _write(out: Path, table: CropTable, report: MineReport, excluded_rows: list[str],
           excluded_path: Path, vocab) -> None:
    """POOLS.h5 is renamed into place last, so a finished POOLS.h5 always has its report."""
    import h5py

    config = {"min_side": report.data["config"]["min_side"], "vocabulary_sha256":
              vocabulary_digest(vocab)}
    counts = {"crops": len(table), "images": report.data["images"],
              "pools": {f"{p['element_type']}/{p['super_attribute']}".rstrip("/"): p["crops"]
                        for p in report.pools}}
    manifest = make_manifest("pools", config, inputs=report.data["inputs"], counts=counts)
    with atomic_path(out) as tmp:
        with h5py.File(tmp, "w") as h5:
            table.write(h5.create_group("crops"))
            write_vocabulary(h5.create_group("vocabulary"), vocab)
            set_manifest(h5, manifest)
        with atomic_path(excluded_path) as t:
            t.write_text("region_id\timage_id\treason\tnumber\tphrase\n"
                         + "".join(row + "\n" for row in excluded_rows), encoding="utf-8")
        with atomic_path(side_path(out, ".report.json")) as t:
            t.write_text(report.to_json(), encoding="utf-8")
        with atomic_path(side_path(out, ".report.md")) as t:
            t.write_text(report.to_markdown(), encoding="utf-8")


def write_vocabulary(group, vocab) -> None:
    """The `vocabulary` group of POOLS.h5 (see the module docstring)."""
    from vprom.tables import write_label_vocabulary

    write_label_vocabulary(group, vocab.objects,
                           {"object_attribute": vocab.object_attributes,
                            "human_attribute": vocab.human_attributes},
                           vocab.implied_labels)


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
