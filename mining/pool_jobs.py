"""How `vprom mine` spreads its two passes over worker processes: byte ranges of each file.

The parent reads image_data.json (the image sizes both passes need), then cuts the large
files into chunks of whole image records (`mining.byte_ranges`, ~2 MB each): objects.json
and attributes.json at the same record indices (the objects pass joins them record by
record), region_descriptions.json on its own. The chunks of both passes form one stream of
jobs, interleaved so that both advance together, which `vprom.processes.ordered_map` hands to
`workers` processes (forked, so they share the sizes and vocabulary the parent loaded) and
gives back in order. Each job parses its chunk (into typed records, `typed_records`; where
they cannot be, `byte_ranges.decode`: orjson, or `json`) - with the garbage collector off:
the records hold no cycles, and the collector would otherwise walk millions of fresh
containers - and mines it into a `PassResult`; the parent
merges the results of a pass in file order (`_Merged`), so any number of workers gives the
crops, statistics and report of a one-process run, byte for byte. The scan hashes each file
as it goes, so the sha256 of the inputs costs no extra pass.

Broken input: a chunk that does not parse, does not hold the records the scan found, or
fails a check, makes its whole pass run again here through the streaming reader
(`readers.records`), which stops at the first fault and names the file, the record, the
image and what to do, exactly as before. So does a file whose records are not all joined
alike past the point where the scan took that join as their marks (`byte_ranges`): the same
output, only slower. A `.json.zip` cannot be read at an offset, so a pass with a zipped
input is one job, streamed.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack
from functools import partial
from typing import NamedTuple

import numpy as np

from vprom import processes
from vprom.mining import byte_ranges, count_pass, readers, typed_records
from vprom.mining.pool_passes import (
    SAMPLES,
    STRING_COLUMNS,
    PassResult,
    _Columns,
    _Labeler,
    images,
    mine_objects,
    object_stats,
    typed_images,
)

OBJECTS, COUNTS = "objects", "counts"
_FILES = {OBJECTS: (readers.OBJECTS, readers.ATTRIBUTES), COUNTS: (readers.REGIONS,)}


class Setup(NamedTuple):
    """What every job needs; forked workers inherit it, spawned ones receive it once."""

    paths: dict
    sizes: dict
    min_side: int
    vocab: object
    labeler: _Labeler


def run_passes(paths: dict, min_side: int, vocab, workers: int) -> list[PassResult]:
    """The objects pass and the counts pass, as two `PassResult`s."""
    inputs: dict[str, str] = {}
    sources: list = []
    sizes = readers.image_sizes(paths[readers.IMAGE_DATA], source_out=sources)
    inputs[sources[0].path.name] = sources[0].sha256
    setup = Setup(paths, sizes, min_side, vocab, _Labeler(vocab))
    scans = {stem: byte_ranges.ArrayScan(paths[stem], marks=True) for stem in
             (readers.OBJECTS, readers.ATTRIBUTES, readers.REGIONS)
             if paths[stem].suffix != ".zip"}
    merged = {OBJECTS: _Merged(object_stats(len(sizes))),
              COUNTS: _Merged(count_pass.count_stats(len(sizes)))}
    whole: dict[str, PassResult] = {}  # a pass streamed in one piece
    total = sum(p.stat().st_size for stem, p in paths.items() if stem != readers.IMAGE_DATA)
    with processes.ordered_map(partial(run_job, setup), _jobs(scans), workers, "mine",
                               method="fork") as results:
        bar = _progress(total)
        for kind, result, size in results:
            bar.update(size)
            if kind in whole:
                continue  # a piece failed before: the pass was streamed here instead
            if result is None:
                whole[kind] = _streamed(kind, setup)
                _note_streamed(kind, paths)
            elif result.inputs:
                whole[kind] = result
            else:
                merged[kind].add(result)
        bar.close()
    for kind in (OBJECTS, COUNTS):
        if kind not in whole:
            whole[kind] = merged[kind].result()
            whole[kind].inputs = {paths[s].name: scans[s].sha256 for s in _FILES[kind]}
    for result in whole.values():
        result.inputs = {**inputs, **result.inputs}
    return [whole[OBJECTS], whole[COUNTS]]


def _jobs(scans: dict) -> Iterator[tuple]:
    """(kind, chunks) per job; (kind, None) for a pass that is streamed in one job. The two
    passes' chunks alternate so that each has read about the same share of its bytes."""
    streams, sizes = {}, {}
    for kind, stems in _FILES.items():
        if all(stem in scans for stem in stems):
            streams[kind] = byte_ranges.plan([scans[stem] for stem in stems])
            sizes[kind] = sum(scans[stem].size for stem in stems) or 1
        else:
            yield kind, None
    done = dict.fromkeys(streams, 0)
    while streams:
        kind = min(streams, key=lambda k: done[k] / sizes[k])
        chunks = next(streams[kind], None)
        if chunks is None:
            del streams[kind]
            continue
        done[kind] += sum(c.stop - c.start for c in chunks)
        yield kind, chunks


def run_job(setup: Setup, job: tuple) -> tuple[str, PassResult | None, int]:
    """(kind, result, bytes) for one job; result None when the chunk must be streamed."""
    kind, chunks = job
    with processes.collector_paused():  # see the module docstring
        if chunks is None:
            return kind, _streamed(kind, setup), 0
        size = sum(c.stop - c.start for c in chunks)
        try:
            return kind, _mine_chunks(kind, chunks, setup), size
        except Exception:  # noqa: BLE001 - the streaming reader says what is wrong
            return kind, None, size


def _mine_chunks(kind: str, chunks: tuple, setup: Setup) -> PassResult:
    if kind == OBJECTS:
        return mine_objects(_images(chunks[0], "objects"), _images(chunks[1], "attributes"),
                            setup.sizes, setup.min_side, setup.labeler)
    return count_pass.mine_counts(_images(chunks[0], "regions"), setup.sizes, setup.min_side,
                                  setup.vocab)


def _images(chunk: byte_ranges.Chunk, key: str) -> Iterator:
    """The `Image`s of a chunk for its pass (`key`: "objects", "attributes" or "regions"),
    from typed records where `typed_records` reads the chunk, else from its dicts."""
    source = readers.FileRef(chunk.path)
    kind = "regions" if key == "regions" else "objects"
    records = byte_ranges.load(chunk, partial(typed_records.read, kind=kind))
    if typed_records.typed(records):
        if key == "regions":
            yield from count_pass.typed_images(records, chunk.first, source)
        else:
            yield from typed_images(records, chunk.first, source, key)
        return
    pairs = zip(range(chunk.first, chunk.first + chunk.count), records)
    yield from (count_pass.images(pairs, source) if key == "regions"
                else images(pairs, source, key))


def _streamed(kind: str, setup: Setup) -> PassResult:
    """The whole pass through the streaming reader (zipped input, or a chunk that failed)."""
    with ExitStack() as stack:
        sources = [stack.enter_context(readers.Source(setup.paths[stem]))
                   for stem in _FILES[kind]]
        if kind == OBJECTS:
            result = mine_objects(
                images(readers.records(sources[0], "objects.json"), sources[0], "objects"),
                images(readers.records(sources[1], "attributes.json"), sources[1], "attributes"),
                setup.sizes, setup.min_side, setup.labeler)
        else:
            result = count_pass.mine_counts(
                count_pass.images(readers.records(sources[0], "region_descriptions.json"),
                                  sources[0]), setup.sizes, setup.min_side, setup.vocab)
    result.inputs = {s.path.name: s.sha256 for s in sources}
    return result


def _note_streamed(kind: str, paths: dict) -> None:
    """Say why a pass that the streaming reader read without fault ran on one core."""
    names = " and ".join(paths[stem].name for stem in _FILES[kind])
    print(f"mine: {names}: a byte range did not hold the records the scan found there (are "
          "the records written in more than one way?), so the streaming reader read the "
          "pass again on one core: the same output, more slowly", file=sys.stderr)


class _Merged:
    """The `PassResult`s of a pass's chunks, joined in file order as one pass would count."""

    def __init__(self, stats: dict):
        self.stats = stats
        self.columns: dict[str, list] = {}
        self.table = _Columns()  # for its string table only
        self.rows: list[str] = []
        self.seconds = 0.0

    def add(self, part: PassResult) -> None:
        remap = np.array([self.table.intern(s) for s in part.strings], dtype=np.int32)
        for name, values in part.columns.items():
            if name in STRING_COLUMNS and len(values):
                values = remap[values].astype(values.dtype)
            self.columns.setdefault(name, []).append(values)
        for key, value in part.stats.items():
            mine = self.stats[key]
            if isinstance(value, Counter):
                mine.update(value)
            elif key == "missing_image_ids":
                mine.extend(value[:20 - len(mine)])
            elif key == "count_samples":
                for reason, samples in value.items():
                    kept = mine.setdefault(reason, [])
                    kept.extend(samples[:SAMPLES - len(kept)])
        self.rows.extend(part.excluded_rows)
        self.seconds += part.seconds

    def result(self) -> PassResult:
        columns = {name: np.concatenate(self.columns.pop(name)) for name in list(self.columns)}
        return PassResult(columns, self.table.strings, self.stats, {}, self.rows, self.seconds)


def _progress(total: int):
    from tqdm import tqdm

    return tqdm(total=total, unit="B", unit_scale=True, desc="mining", leave=False,
                disable=None)
