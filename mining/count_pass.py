"""The counts pass: region_descriptions.json into the COUNT pool (see `mining.pool_passes`).

Every region goes through the box funnel, then its phrase through `counts.parse_count`. The
pass takes images in batches of `BATCH`, so that what runs for every region runs in numpy
over a batch, and only the numbered phrases (about one in twenty) meet Python code:

- a chunk that `typed_records` reads comes as structs whose types msgspec has checked
  (`typed_images`), and the batch's phrases and boxes are taken from them field by field
  (`_columns`); otherwise each region is read with one `itemgetter`, the batch's types are
  checked column by column, and a batch with any region off the fast path's types (a float
  box, a missing key, a phrase that is not a string) is read again region by region
  (`_checked`), which names what is wrong exactly as `readers.read_regions` does;
- the box funnel (`_funnel`) is vectorised; the few boxes not wholly inside their image go
  through `pool_passes.clipped_box`, which counts each case;
- the prefilter of `parse_count` (a digit or a number word) is found for the whole batch at
  once (`_numbered`), and confirmed phrase by phrase;
- the parses of numbered phrases are memoised (VG repeats phrases: "two zebras" and
  "a clock" come back thousands of times); the memo is cleared when it grows past `MEMO`.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from functools import lru_cache
from itertools import chain, islice
from operator import attrgetter, itemgetter
from typing import NamedTuple

import numpy as np

from vprom.mining import readers, typed_records
from vprom.mining.counts import _words_for, parse_words
from vprom.mining.pool_passes import SAMPLES, PassResult, clipped_box, _Columns
from vprom.domain import COUNTS, LABEL_SEPARATOR

MEMO = 200_000  # numbered phrases remembered
BATCH = 512  # images per batch: about one ~2 MB chunk of the file


class Image(NamedTuple):
    index: int
    image_id: int
    regions: list  # rows (region id, phrase, x, y, w, h), or `typed_records.Region`s
    items: object  # the record's regions when `regions`' types are unchecked, else None
    source: object


def images(records, source) -> Iterator[Image]:
    """`Image`s of the (index, record) pairs of region_descriptions.json, checked as
    `readers.read_regions` checks them (a region's types by `mine_counts`, per batch)."""
    for index, record in records:
        readers.check_record(record, source, index, "region_descriptions.json")
        image_id = readers.image_id_of(record, source, index)
        items = record.get("regions") or ()
        try:
            regions, unchecked = list(map(_REGION_FIELDS, items)), items
        except (KeyError, TypeError):
            regions, unchecked = _checked(items, source, image_id), None
        yield Image(index, image_id, regions, unchecked, source)


_REGION_FIELDS = itemgetter("region_id", "phrase", "x", "y", "width", "height")


def typed_images(records: list, first: int, source) -> Iterator[Image]:
    """`Image`s of the records `typed_records.read` gave for a chunk whose first record is
    record #`first` of the file: already of the fast path's types."""
    for index, record in enumerate(records, first):
        yield Image(index, typed_records.image_id(record), record.regions or [], None, source)


_REGION_ATTRIBUTES = attrgetter("region_id", "phrase", "x", "y", "width", "height")
_PHRASE = attrgetter("phrase")
_BOX = tuple(map(attrgetter, ("x", "y", "width", "height")))


def _checked(items, source, image_id: int) -> list:
    """The regions of one image, each of the fast path's types or read by
    `readers.region_slow`, which names what is wrong."""
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
    cols, rows = _Columns(), []
    words = _words_for(vocab)
    parse = _memo(words)
    exact, table = words.prefilter.search, _number_keys(words.number_bytes)
    for batch in _batches(image_iter):
        images = _known(batch, sizes, stats)
        regions, row, phrases, boxes = _columns(images)
        lengths = np.array([len(image.regions) for image in images], dtype=np.int64)
        owner = np.repeat(np.arange(len(images)), lengths)
        odd = _funnel(regions, row, boxes, [sizes[image.image_id] for image in images],
                      owner, stats["regions"])
        for i in _numbered(phrases, exact, table):
            region = row(regions[i])
            box = odd.get(i, region[2:])
            if box is not None:
                _mine_phrase(images[owner[i]].image_id, box, region, parse, min_side,
                             vocab, stats, cols, rows)
    return PassResult(cols.numpy(), cols.strings, stats, {}, rows,
                      seconds=time.perf_counter() - start)


def _batches(image_iter) -> Iterator[list[Image]]:
    """Lists of up to `BATCH` images. A fault met while filling a batch is raised after the
    regions of the images before it are checked, so the first fault in the file is named."""
    image_iter = iter(image_iter)
    while True:
        batch: list[Image] = []
        try:
            batch.extend(islice(image_iter, BATCH))
        except Exception:
            for image in batch:
                if image.items is not None:
                    _checked(image.items, image.source, image.image_id)
            raise
        if not batch:
            return
        yield batch


def _known(batch: list[Image], sizes: dict, stats: dict) -> list[Image]:
    """The images of `batch` in image_data.json; the others are counted."""
    counts = stats["regions"]
    known = []
    for image in batch:
        counts["read"] += len(image.regions)
        if image.image_id in sizes:
            known.append(image)
            continue
        counts["missing_image"] += len(image.regions)
        counts["missing_image_records"] += 1
        if len(stats["missing_image_ids"]) < 20:
            stats["missing_image_ids"].append(image.image_id)
    return known


def _columns(images: list[Image]) -> tuple[list, Callable, Sequence[str], np.ndarray | None]:
    """A batch's regions; the function that gives a region's row (region id, phrase, x, y,
    w, h); their phrases; and their boxes as 4 int64 rows, None where a coordinate is beyond
    int64. The regions are `typed_records.Region`s where the chunk was read typed
    (`typed_images`: their columns are taken field by field), else rows: never both in one
    batch, which holds the images of one chunk, read one way."""
    regions = list(chain.from_iterable(image.regions for image in images))
    if not regions:
        return regions, _itself, [], None
    if not isinstance(regions[0], tuple):
        try:
            boxes = np.array([np.fromiter(map(get, regions), np.int64, len(regions))
                              for get in _BOX])
        except OverflowError:
            boxes = None
        return regions, _REGION_ATTRIBUTES, list(map(_PHRASE, regions)), boxes
    unchecked = any(image.items is not None for image in images)
    columns = _typed(regions) if unchecked else list(zip(*regions))
    if columns is None:  # a region off the fast path: read the batch region by region
        for image in images:
            if image.items is not None:
                image.regions[:] = _checked(image.items, image.source, image.image_id)
        regions = list(chain.from_iterable(image.regions for image in images))
        columns = list(zip(*regions))
    try:
        boxes = np.array(columns[2:], dtype=np.int64)
    except OverflowError:
        boxes = None
    return regions, _itself, columns[1], boxes


def _itself(region: tuple) -> tuple:
    return region


def _typed(regions: list) -> list | None:
    """The regions' 6 columns (id, phrase, x, y, w, h) if every region has the fast path's
    types (int ids and box, str phrase); else None."""
    if not regions:
        return []
    columns = list(zip(*regions))
    rid, phrase, *box = columns
    if set(map(type, phrase)) != {str}:
        return None
    ints = set(map(type, rid))
    for column in box:
        ints.update(map(type, column))
    return columns if ints == {int} else None


def _funnel(regions: list, row: Callable, boxes: np.ndarray | None, sizes: list,
            owner: np.ndarray, counts: Counter) -> dict:
    """The box funnel of `pool_passes.clipped_box` for a batch: index -> clipped box, or
    None, for each region whose box is not wholly inside its image (each case counted).
    `row`, `boxes`: as `_columns` gives them."""
    if not regions:
        return {}
    if boxes is None:  # a coordinate beyond int64: each box on its own
        inside = np.zeros(len(regions), dtype=bool)
    else:
        x, y, w, h = boxes
        width, height = np.array(sizes, dtype=np.int64).reshape(-1, 2)[owner].T
        # x + w wraps past int64 only for two values of 2**62 or more (a negative one fails)
        big = boxes.max() >= 1 << 62
        inside = np.zeros(len(regions), dtype=bool) if big else (
            (x >= 0) & (y >= 0) & (w > 0) & (h > 0) & (x + w <= width) & (y + h <= height))
    return {i: clipped_box(*row(regions[i])[2:], *sizes[owner[i]], counts)
            for i in np.flatnonzero(~inside).tolist()}


def _mine_phrase(image_id: int, box: tuple, region: tuple, parse, min_side: int, vocab,
                 stats: dict, cols: _Columns, rows: list) -> None:
    """A numbered phrase whose box passed the funnel: a COUNT crop, or counted out."""
    region_id, phrase = region[0], region[1]
    parsed = parse(phrase)
    if parsed is None:
        return
    counts = stats["regions"]
    counts["with_number"] += 1
    if parsed.count not in COUNTS:
        reason = parsed.excluded or "out of range"
        _exclude(region_id, phrase, image_id, reason, parsed.number, stats, rows)
        return
    counts["counted"] += 1
    if box[2] < min_side or box[3] < min_side:
        stats["count_too_small"][str(parsed.count)] += 1
        return
    _add_count(image_id, box, region_id, phrase, parsed, vocab, cols)


#: ASCII text as bytes: letters kept, digits marked "#", newlines kept, the rest a space
_TOKENS = bytes(c if 0x61 <= c <= 0x7A or c == 0x0A else 0x23 if 0x30 <= c <= 0x39 else 0x20
                for c in range(256))
_KEY = 8  # bytes of a token compared with the number words (see `_numbered`)
_MASKS = np.array([(1 << 8 * k) - 1 for k in range(_KEY)] + [(1 << 64) - 1], dtype=np.uint64)


def _numbered(phrases: Sequence[str], exact, table: _Keys | None) -> list[int]:
    """Indices, in order, of the phrases in which the prefilter of `parse_count` finds a
    number.

    The prefilter (`\\d|\\b(?:number words)\\b`) is the slowest part of the pass when run
    on every phrase. A phrase can only match if, in its lower case with every byte but
    letters turned into spaces and digits into "#", a "#" or a number word is a token, or if
    it is not ASCII (Unicode digits). The batch's phrases are joined by newlines and these
    lines found in numpy: each token is keyed by its first `_KEY` bytes, and a token whose
    key is a number word's (looked up in a hash table) is kept (a superset of the tokens
    that are number words). The prefilter (`exact`) then confirms each line found.
    `table`: `_number_keys`.
    """
    joined = "\n".join(phrases).lower()
    if table is None or joined.count("\n") != max(len(phrases) - 1, 0):
        return [i for i, p in enumerate(phrases) if exact(p.lower())]  # a phrase with "\n"
    tokens = joined.encode().translate(_TOKENS)
    codes = np.frombuffer(tokens, dtype=np.uint8)
    letter = np.concatenate([[False], codes >= 0x61, [False]])
    edges = np.flatnonzero(letter[1:] != letter[:-1])
    starts, lengths = edges[0::2], edges[1::2] - edges[0::2]
    fits = (lengths >= table.shortest) & (lengths <= table.longest)
    starts, lengths = starts[fits], lengths[fits]
    # the 8 bytes from each byte on, as one little-endian integer; those past the token zeroed
    padded = np.frombuffer(tokens + bytes(_KEY), dtype=np.uint8)
    eights = np.ndarray(len(codes), dtype="<u8", buffer=padded, strides=(1,))
    keys = eights[starts] & _MASKS[np.minimum(lengths, _KEY)]
    words = table.slots[(keys * table.multiplier) >> table.shift] == keys
    found = [starts[words], np.flatnonzero(codes == 0x23)]
    if not joined.isascii():
        found.append(np.flatnonzero(np.frombuffer(joined.encode(), dtype=np.uint8) >= 0x80))
    lines = np.unique(np.searchsorted(np.flatnonzero(codes == 0x0A), np.concatenate(found)))
    return [i for i in lines.tolist() if exact(phrases[i].lower())]


class _Keys(NamedTuple):
    """The number words' keys in a hash table: key k is at `slots[(k * multiplier) >> shift]`
    (multiply-shift hashing, wrapping at 64 bits); every other slot holds 0, which no token's
    key is (a token has at least one letter)."""

    slots: np.ndarray
    multiplier: np.uint64
    shift: np.uint64
    shortest: int
    longest: int


@lru_cache(maxsize=4)
def _number_keys(number_bytes) -> _Keys | None:
    """The number words keyed as `_numbered` keys tokens; None where they are not all a-z."""
    if not number_bytes:
        return None
    keys = np.unique(np.array([int.from_bytes(w[:_KEY].ljust(_KEY, b"\0"), "little")
                               for w in number_bytes], dtype=np.uint64))
    lengths = [len(w) for w in number_bytes]
    rng = np.random.default_rng(0)  # the same table every run
    bits, tries = len(keys).bit_length() + 6, 0  # 64 slots a key: 3 multipliers in 4 do
    while True:  # a multiplier that gives each key a slot of its own
        multiplier = np.uint64(int(rng.integers(0, 1 << 62)) << 1 | 1)  # odd
        shift = np.uint64(64 - bits)
        spots = (keys * multiplier) >> shift
        if len(np.unique(spots)) == len(keys):
            slots = np.zeros(1 << bits, dtype=np.uint64)
            slots[spots] = keys
            return _Keys(slots, multiplier, shift, min(lengths), max(lengths))
        tries += 1
        bits += tries % 8 == 0  # crowded: a table twice as large every 8 tries


def _memo(words):
    memo: dict = {}

    def parse(phrase: str):
        got = memo.get(phrase, memo)
        if got is memo:
            if len(memo) >= MEMO:
                memo.clear()
            got = memo[phrase] = parse_words(phrase, words)
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
