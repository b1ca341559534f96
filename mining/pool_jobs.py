"""How `vprom mine` spreads its two passes over worker processes: byte ranges of each file.

The parent reads image_data.json, cuts the large files into chunks of whole records
(`byte_ranges`), forked workers mine each chunk into a `PassResult`, and the parent joins them
in file order, so any number of workers gives one process's output. A pass that cannot be cut
(a zip, records joined unalike) or a chunk that fails is streamed on one core instead.
"""

from __future__ import annotations

import sys
from collections import Counter
from contextlib import ExitStack
from functools import partial
from itertools import repeat
from typing import NamedTuple

from tqdm import tqdm
from vprom.mining import byte_ranges, readers
from vprom.mining.pool_passes import (
    SAMPLES,
    PassResult,
    concatenate,
    count_stats,
    mine_counts,
    mine_objects,
    object_stats,
)

from vprom import processes

OBJECTS, COUNTS = "objects", "counts"
_FILES = {OBJECTS: (readers.OBJECTS, readers.ATTRIBUTES), COUNTS: (readers.REGIONS,)}
_KEYS = {OBJECTS: ("objects", "attributes"), COUNTS: ("regions",)}  # `readers.image_of`
_MINERS = {OBJECTS: mine_objects, COUNTS: mine_counts}
_STATS = {OBJECTS: object_stats, COUNTS: count_stats}  # what a pass counts, for `_join`


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
    """The whole pass through the streaming reader."""
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
    columns, strings = concatenate(parts)
    return PassResult(columns, strings, stats, {}, rows, sum(part.seconds for part in parts))
