"""The counts pass: region_descriptions.json into the COUNT pool (see `mining.pool_passes`).

Per image, every region goes through the box funnel (`pool_passes.clipped_box`), then its phrase
through `counts.parse_count`. Two shortcuts keep this near the cost of parsing the JSON:

- the prefilter of `parse_count` (a digit or a number word) runs once per image, over its
  phrases joined by newlines, instead of once per phrase: only the phrases it hits (about
  one in twenty) are parsed, and parsing them again gives the same answer;
- the parses of numbered phrases are memoised (VG repeats phrases: "two zebras" and
  "a clock" come back thousands of times); the memo is cleared when it grows past `MEMO`.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from operator import itemgetter
from typing import NamedTuple

from vprom.mining import readers
from vprom.mining.counts import _words_for, parse_count
from vprom.mining.pool_passes import SAMPLES, PassResult, clipped_box, _Columns
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


_REGION_FIELDS = itemgetter("region_id", "phrase", "x", "y", "width", "height")


def _regions_of(items, source, image_id: int) -> list:
    out = []
    append = out.append
    for position, item in enumerate(items):
        try:
            region = _REGION_FIELDS(item)
        except (KeyError, TypeError):
            append(readers.region_slow(item, source, image_id, position))
            continue
        rid, phrase, x, y, w, h = region
        if not (type(rid) is type(x) is type(y) is type(w) is type(h) is int
                and type(phrase) is str):
            append(readers.region_slow(item, source, image_id, position))
            continue
        append(region)
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
    words = _words_for(vocab)
    for image in image_iter:
        size = sizes.get(image.image_id)
        if size is None:
            counts["read"] += len(image.regions)
            counts["missing_image"] += len(image.regions)
            counts["missing_image_records"] += 1
            if len(stats["missing_image_ids"]) < 20:
                stats["missing_image_ids"].append(image.image_id)
            continue
        numbered = _numbered([r[1] for r in image.regions], words)
        width, height = size
        counts["read"] += len(image.regions)
        for i, (region_id, phrase, x, y, w, h) in enumerate(image.regions):
            box = clipped_box(x, y, w, h, width, height, counts)
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


#: ASCII text as bytes: letters kept, digits marked "#", newlines kept, the rest a space
_TOKENS = bytes(c if 0x61 <= c <= 0x7A or c == 0x0A else 0x23 if 0x30 <= c <= 0x39 else 0x20
                for c in range(256))


def _numbered(phrases: list, words) -> set[int]:
    """Indices of the phrases in which the prefilter of `parse_count` finds a number.

    The prefilter (`\\d|\\b(?:number words)\\b`) is the slowest part of the pass when run
    on every phrase. For ASCII text a phrase can only match if, in its lower case with every
    byte but letters turned into spaces, a digit or a number word is a token; a few bytes
    operations on the image's phrases joined find those, and the prefilter confirms each.
    """
    texts = [p if type(p) is str else "" for p in phrases]
    exact = words.prefilter.search
    joined = "\n".join(texts).lower()
    lines = joined.encode().translate(_TOKENS).split(b"\n") if joined.isascii() else ()
    if len(lines) != len(texts):  # non-ASCII text, or a phrase holding a newline
        return {i for i, p in enumerate(texts) if exact(p.lower())}
    number_words = words.number_bytes
    if number_words is None:
        return {i for i, p in enumerate(texts) if exact(p.lower())}
    return {i for i, line in enumerate(lines)
            if (b"#" in line or not number_words.isdisjoint(line.split()))
            and exact(texts[i].lower())}


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
