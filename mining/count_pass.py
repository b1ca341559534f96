"""The counts pass: region_descriptions.json into the COUNT pool (see `mining.pool_passes`).

Per image, every region goes through the box funnel (`pool_passes._clip`), then its phrase
through `counts.parse_count`. Two shortcuts keep this near the cost of parsing the JSON:

- the prefilter of `parse_count` (a digit or a number word) runs once per image, over its
  phrases joined by newlines, instead of once per phrase: only the phrases it hits (about
  one in twenty) are parsed, and parsing them again gives the same answer;
- the parses of numbered phrases are memoised (VG repeats phrases: "two zebras" and
  "a clock" come back thousands of times); the memo is cleared when it grows past `MEMO`.
"""

from __future__ import annotations

import bisect
import itertools
import time
from collections import Counter
from collections.abc import Iterator
from typing import NamedTuple

from vprom.mining import readers
from vprom.mining.counts import _words_for, parse_count
from vprom.mining.pool_passes import SAMPLES, PassResult, _clip, _Columns
from vprom.records import COUNTS, LABEL_SEPARATOR

MEMO = 200_000  # numbered phrases remembered


class Image(NamedTuple):
    index: int
    image_id: int
    regions: list  # (region id, phrase, x, y, w, h) per region


def images(records, source) -> Iterator[Image]:
    """`Image`s of the (index, record) pairs of region_descriptions.json, checked as
    `readers.read_regions` checks them."""
    for index, record in records:
        readers.check_record(record, source, index, "region_descriptions.json")
        image_id = readers.image_id_of(record, source, index)
        yield Image(index, image_id, _regions_of(record.get("regions") or (), source, image_id))


def _regions_of(items, source, image_id: int) -> list:
    out = []
    append = out.append
    for position, item in enumerate(items):
        try:
            rid, phrase, x, y, w, h = (item["region_id"], item["phrase"], item["x"], item["y"],
                                       item["width"], item["height"])
        except (KeyError, TypeError):
            append(readers.region_slow(item, source, image_id, position))
            continue
        if (type(rid) is not int or type(phrase) is not str or type(x) is not int
                or type(y) is not int or type(w) is not int or type(h) is not int):
            append(readers.region_slow(item, source, image_id, position))
            continue
        append((rid, phrase, x, y, w, h))
    return out


def count_stats(images: int) -> dict:
    return {"regions": Counter(), "count_excluded": Counter(), "count_samples": {},
            "count_too_small": Counter(), "missing_image_ids": [], "images": images}


def mine_counts(image_iter, sizes: dict, min_side: int, vocab) -> PassResult:
    """The counts pass over the `images(...)` of region_descriptions.json."""
    start = time.perf_counter()
    stats = count_stats(len(sizes))
    counts = stats["regions"]
    cols, rows = _Columns(), []
    parse = _memo(vocab)
    prefilter = _words_for(vocab).prefilter
    for image in image_iter:
        size = sizes.get(image.image_id)
        if size is None:
            counts["read"] += len(image.regions)
            counts["missing_image"] += len(image.regions)
            counts["missing_image_records"] += 1
            if len(stats["missing_image_ids"]) < 20:
                stats["missing_image_ids"].append(image.image_id)
            continue
        numbered = _numbered([r[1] for r in image.regions], prefilter)
        width, height = size
        counts["read"] += len(image.regions)
        for i, (region_id, phrase, x, y, w, h) in enumerate(image.regions):
            if 0 <= x and 0 <= y and 0 < w and 0 < h and x + w <= width and y + h <= height:
                box = (x, y, w, h)  # the common case, inline: this runs ~5.4M times
            else:
                box = _clip(x, y, w, h, width, height, counts)
                if box is None:
                    continue
            if i not in numbered:
                continue
            parsed = parse(phrase)
            if parsed is None:
                continue
            counts["with_number"] += 1
            if parsed.count not in COUNTS:
                reason = parsed.excluded or "out of range"
                _exclude(region_id, phrase, image.image_id, reason, parsed.number, stats, rows)
                continue
            counts["counted"] += 1
            if box[2] < min_side or box[3] < min_side:
                stats["count_too_small"][str(parsed.count)] += 1
                continue
            _add_count(image.image_id, box, region_id, phrase, parsed, vocab, cols)
    return PassResult(cols.numpy(), cols.strings, stats, {}, rows,
                      seconds=time.perf_counter() - start)


def _numbered(phrases: list, prefilter) -> set[int]:
    """Indices of the phrases in which `prefilter` finds a number (see the module docstring)."""
    texts = [p if type(p) is str else "" for p in phrases]
    joined = "\n".join(texts)
    lowered = joined.lower()
    if len(lowered) != len(joined):  # a character whose lower case is longer: one by one
        return {i for i, p in enumerate(texts) if prefilter.search(p.lower())}
    starts = list(itertools.accumulate((len(p) + 1 for p in texts), initial=0))
    return {bisect.bisect_right(starts, m.start()) - 1 for m in prefilter.finditer(lowered)}


def _memo(vocab):
    memo: dict = {}

    def parse(phrase: str):
        got = memo.get(phrase, memo)
        if got is memo:
            if len(memo) >= MEMO:
                memo.clear()
            got = memo[phrase] = parse_count(phrase, vocab)
        return got
    return parse


def _exclude(region_id: int, phrase: str, image_id: int, reason: str, number: str, stats: dict,
             rows: list) -> None:
    stats["count_excluded"][reason] += 1
    samples = stats["count_samples"].setdefault(reason, [])
    if len(samples) < SAMPLES:
        samples.append(phrase)
    one_line = " ".join(phrase.split())  # one line, no tabs
    rows.append(f"{region_id}\t{image_id}\t{reason}\t{number}\t{one_line}")


def _add_count(image_id: int, box, region_id: int, phrase: str, parsed, vocab,
               cols: _Columns) -> None:
    element = str(parsed.count)
    noun = vocab.canonical(parsed.noun) if parsed.noun else ""
    labels = cols.intern(LABEL_SEPARATOR.join(sorted({element, noun} - {""})))
    cols.add("count", element, "", image_id, box, region_id, phrase, labels)
