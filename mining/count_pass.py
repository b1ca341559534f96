"""The counts pass: region_descriptions.json into the COUNT pool (see `mining.pool_passes`).

Every region goes through the box funnel (`pool_passes.clipped_box`), then its phrase through
the prefilter of `counts.parse_count` (a digit or a number word; about one phrase in twenty
passes) and the parser. A count (`COUNTS`, 1-10) whose region is large enough becomes a COUNT
crop; a number that is not a count ("five o'clock") is counted by reason and listed, with its
region and image ids, in `excluded_rows`. VG repeats phrases ("two zebras" comes back
thousands of times), so parses are memoised, up to `MEMO` phrases.
"""

from __future__ import annotations

import time
from collections import Counter
from functools import lru_cache, partial

from vprom.domain import COUNTS, LABEL_SEPARATOR
from vprom.mining.counts import parse_words, words_for
from vprom.mining.pool_passes import (
    SAMPLES,
    CropColumns,
    PassResult,
    clipped_box,
    missing_image,
)

MEMO = 200_000  # numbered phrases whose parse is remembered


def count_stats(images: int) -> dict:
    """The statistics a counts pass (or a piece of one) counts."""
    return {"regions": Counter(), "count_excluded": Counter(), "count_samples": {},
            "count_too_small": Counter(), "missing_image_ids": [], "images": images}


def mine_counts(images, sizes: dict, min_side: int, vocab) -> PassResult:
    """The counts pass over the `readers.ImageItems`s of region_descriptions.json."""
    start = time.perf_counter()
    stats = count_stats(len(sizes))
    counts = stats["regions"]
    cols, rows = CropColumns(), []
    words = words_for(vocab)
    numbered, ascii_numbered = words.prefilter.search, words.ascii_prefilter.search
    parse = lru_cache(maxsize=MEMO)(partial(parse_words, words=words))
    for image in images:
        counts["read"] += len(image.items)
        size = sizes.get(image.image_id)
        if size is None:
            missing_image(image, stats, counts)
            continue
        for region in image.items:
            box = clipped_box(region.x, region.y, region.width, region.height, *size, counts)
            phrase = region.phrase.lower()
            if box is None or not (ascii_numbered if phrase.isascii() else numbered)(phrase):
                continue
            parsed = parse(region.phrase)
            if parsed is not None:
                _mine_phrase(image.image_id, box, region.region_id, region.phrase, parsed,
                             min_side, vocab, stats, cols, rows)
    return PassResult(cols.numpy(), cols.strings, stats, {}, rows,
                      seconds=time.perf_counter() - start)


def _mine_phrase(image_id: int, box: tuple, region_id: int, phrase: str, parsed,
                 min_side: int, vocab, stats: dict, cols: CropColumns, rows: list) -> None:
    """A phrase with a number whose box passed the funnel: a COUNT crop, or counted out."""
    counts = stats["regions"]
    counts["with_number"] += 1
    if parsed.count not in COUNTS:
        reason = parsed.excluded or "out of range"
        stats["count_excluded"][reason] += 1
        samples = stats["count_samples"].setdefault(reason, [])
        if len(samples) < SAMPLES:
            samples.append(phrase)
        one_line = " ".join(phrase.split())  # one line, no tabs
        rows.append(f"{region_id}\t{image_id}\t{reason}\t{parsed.number}\t{one_line}")
        return
    counts["counted"] += 1
    if box[2] < min_side or box[3] < min_side:
        stats["count_too_small"][str(parsed.count)] += 1
        return
    element = str(parsed.count)
    noun = vocab.canonical(parsed.noun) if parsed.noun else ""
    labels = cols.intern(LABEL_SEPARATOR.join(sorted({element, noun} - {""})))
    cols.add("count", element, "", image_id, box, region_id, phrase, labels)
