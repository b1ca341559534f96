"""The two mining passes over `readers.ImageItems`: objects (objects.json + attributes.json,
joined by object id; objects with one clipped box make one region) and counts
(region_descriptions.json phrases through `counts`). Every funnel step is counted. A region
joins the OBJECT pool with exactly one category, a super-attribute's pool with exactly one of
its attributes (two: impure); a count 1-10 on a large enough region is a COUNT crop.
"""

from __future__ import annotations

import time
from array import array
from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache, partial
from itertools import zip_longest

import numpy as np
from vprom.mining.counts import parse_words, words_for
from vprom.mining.readers import ImageItems

from vprom.domain import COUNTS, LABEL_SEPARATOR, ElementType
from vprom.errors import VpromError
from vprom.images import clip_box

ELEMENT_TYPES = tuple(e.value for e in ElementType)  # crop order: this, then input order
ELEMENT_CODE = {name: i for i, name in enumerate(ELEMENT_TYPES)}  # as stored in CropColumns
SAMPLES = 5  # sample phrases per count-exclusion reason


class CropColumns:
    """Crops as columns: numbers in compact typed arrays, strings in lists (one object each)."""

    def __init__(self) -> None:
        self.columns = {name: array("q") for name in ("image_id", "source_id")}
        self.columns.update({name: array("i") for name in ("x", "y", "w", "h")})
        self.columns.update({name: [] for name in ("element", "super_attribute", "phrase",
                                                   "labels")})
        self.columns["element_type"] = array("b")
        self.strings: dict[str, str] = {}  # equal strings share one object, pickled once

    def intern(self, text: str) -> str:
        return self.strings.setdefault(text, text)

    def add(self, element_type: str, element: str, super_attribute: str, image_id: int,
            box: tuple[int, int, int, int], source_id: int, phrase: str, labels: str) -> None:
        row = (image_id, source_id, *box, self.intern(element), self.intern(super_attribute),
               self.intern(phrase), labels, ELEMENT_CODE[element_type])
        for column, value in zip(self.columns.values(), row):
            column.append(value)

    def numpy(self) -> dict[str, np.ndarray]:
        return {name: np.array(c, dtype=c.typecode if isinstance(c, array) else object)
                for name, c in self.columns.items()}


@dataclass
class PassResult:
    """What one worker returns: its crops, statistics and input hashes."""

    columns: dict
    stats: dict
    inputs: dict
    excluded_rows: list = field(default_factory=list)
    seconds: float = 0.0  # wall time of the pass, for the summary


def concatenate(parts: list[PassResult]) -> dict[str, np.ndarray]:
    """The parts' columns end to end, each freed as it goes."""
    names = dict.fromkeys(name for part in parts for name in part.columns)
    return {name: np.concatenate([part.columns.pop(name) for part in parts
                                  if name in part.columns])  # a part may have no crops
            for name in names}


def clipped_box(x: int, y: int, w: int, h: int, width: int, height: int, stats: Counter):
    """The box clipped to the image, or None (zero-size / outside); each case counted."""
    if 0 <= x and 0 <= y and 0 < w and 0 < h and x + w <= width and y + h <= height:
        return x, y, w, h  # the common case, first: this runs ~9M times
    # an empty box counts as zero-size even where it also lies outside the image
    if w <= 0 or h <= 0:
        stats["zero_size"] += 1
        return None
    corners = clip_box((x, y, w, h), width, height)
    if corners is None:
        stats["outside_image"] += 1
        return None
    if corners != (x, y, x + w, y + h):
        stats["clipped"] += 1
    x0, y0, x1, y1 = corners
    return x0, y0, x1 - x0, y1 - y0


def missing_image(image: ImageItems, stats: dict, counts: Counter) -> None:
    """Count an image record whose image is not in image_data.json; its items are skipped."""
    counts["missing_image"] += len(image.items)
    counts["missing_image_records"] += 1
    if len(stats["missing_image_ids"]) < 20:
        stats["missing_image_ids"].append(image.image_id)


def object_stats(images: int) -> dict:
    """The statistics an objects pass (or a piece of one) counts."""
    return {"objects": Counter(), "unknown_names": Counter(), "unknown_attributes": Counter(),
            "excluded_attributes": Counter(), "impure": Counter(), "missing_image_ids": [],
            "images": images}


def mine_objects(objects, attributes, sizes: dict, min_side: int, vocab) -> PassResult:
    """The objects pass over the `readers.ImageItems` of objects.json and attributes.json."""
    start = time.perf_counter()
    stats = object_stats(len(sizes))
    cols = CropColumns()
    for objs, attrs in zip_longest(objects, attributes):
        _check_aligned(objs, attrs)
        _mine_image(objs, attrs, sizes, min_side, vocab, cols, stats)
    return PassResult(cols.numpy(), stats, {}, seconds=time.perf_counter() - start)


def _check_aligned(objs: ImageItems | None, attrs: ImageItems | None) -> None:
    if objs is None or attrs is None:
        rec, other = (attrs, "objects") if objs is None else (objs, "attributes")
        raise VpromError(f"{rec.path}: image record #{rec.index} (image {rec.image_id}) "
                         f"has no counterpart in {other}.json; objects.json and attributes.json "
                         "must list the same images — use both files from one Visual Genome "
                         "release")
    if objs.image_id != attrs.image_id:
        raise VpromError(f"{attrs.path}: image record #{attrs.index} is image {attrs.image_id} "
                         f"but record #{objs.index} of {objs.path.name} is image {objs.image_id}; "
                         "the two files must list the same images in the same order (VG's do) — "
                         "use both files from one Visual Genome release")


def _regions_of(objects: list, attribute_objects: list, width: int, height: int, min_side: int,
                stats: Counter) -> dict:
    """Clipped box -> [source id, raw names, raw attributes], attributes.json's joined by id."""
    extra: dict = {}  # object id -> attributes.json's attributes (an id listed twice: both)
    for o in attribute_objects:
        extra.setdefault(o.object_id, []).extend(o.attributes or ())
    merged_away = {m for o in objects if o.merged_object_ids for m in o.merged_object_ids}
    regions: dict = {}
    small: set = set()
    seen: set[int] = set()
    stats["read"] += len(objects)
    for o in objects:
        oid = o.object_id
        if oid in seen or oid in merged_away:
            # a repeated id keeps its first object; both cases are counted, never silent
            stats["duplicate_id" if oid in seen else "merged_away"] += 1
            continue
        seen.add(oid)
        more = extra.pop(oid, ())
        for m in o.merged_object_ids or ():
            more = list(more) + list(extra.pop(m, ()))
            stats["merged_object_ids_folded"] += 1
        box = clipped_box(o.x, o.y, o.w, o.h, width, height, stats)
        if box is None:
            continue
        if box[2] < min_side or box[3] < min_side:
            if box in small:
                stats["same_box_merged"] += 1
            small.add(box)
            continue
        attributes = list(o.attributes or ()) + list(more)
        region = regions.get(box)
        if region is None:
            regions[box] = [oid, list(o.names), attributes]
        else:
            stats["same_box_merged"] += 1
            region[1] += o.names
            region[2] += attributes
    # the report leaves out what counted nothing
    stats["orphan_attribute_records"] += sum(1 for oid in extra if oid not in merged_away)
    stats["regions"] += len(regions) + len(small)
    stats["too_small"] += len(small)
    return regions


def _mine_image(objs: ImageItems, attrs: ImageItems, sizes: dict, min_side: int, vocab,
                cols: CropColumns, stats: dict) -> None:
    counts = stats["objects"]
    size = sizes.get(objs.image_id)
    if size is None:
        counts["read"] += len(objs.items)
        missing_image(objs, stats, counts)
        return
    counts["attribute_annotations"] += sum(len(o.attributes) for o in objs.items + attrs.items
                                           if o.attributes)
    regions = _regions_of(objs.items, attrs.items, *size, min_side, counts)
    name_kinds = (("category", vocab.objects), ("person", vocab.person_words),
                  ("excluded", vocab.excluded_objects))
    attribute_kinds = (("excluded", vocab.excluded_attributes),
                       ("known", vocab.object_attributes), ("known", vocab.human_attributes))
    for box, (source_id, raw_names, raw_attrs) in regions.items():
        name_roles = _roles(raw_names, vocab, name_kinds, stats["unknown_names"])
        attr_roles = _roles(raw_attrs, vocab, attribute_kinds, stats["unknown_attributes"])
        if "excluded" in name_roles.values():
            counts["excluded_object"] += 1
            continue
        labels = cols.intern(LABEL_SEPARATOR.join(sorted(name_roles.keys() | attr_roles.keys())))
        _add_crops(objs.image_id, box, source_id, name_roles, attr_roles, vocab, labels, cols,
                   stats)
        counts["kept_regions"] += 1


def _roles(raw: list, vocab, kinds: tuple, unknown: Counter) -> dict[str, str]:
    """Canonical label -> its role: the first of `kinds` (role, labels) that holds it."""
    roles: dict[str, str] = {}
    for text in raw:
        canonical = vocab.canonical(text) if isinstance(text, str) else ""
        if not canonical:  # also a list or a number where VG has a string
            continue
        role = next((role for role, labels in kinds if canonical in labels), "unknown")
        if role == "unknown":
            unknown[canonical] += 1
        roles.setdefault(canonical, role)
    return roles


def _add_crops(image_id, box, source_id, name_roles: dict, attr_roles: dict, vocab,
               labels: str, cols: CropColumns, stats: dict) -> None:
    """A crop in each pool that exactly one of the region's labels belongs to; two: impure."""
    human = "person" in name_roles.values()
    element_type = "human_attribute" if human else "object_attribute"
    table = vocab.human_attributes if human else vocab.object_attributes
    pools = {("object", ""): [n for n, role in name_roles.items() if role == "category"]}
    for attr, role in attr_roles.items():
        if role == "excluded":
            stats["excluded_attributes"][attr] += 1
        elif role == "known" and attr in table:
            pools.setdefault((element_type, table[attr]), []).append(attr)
    for (pool_type, super_attribute), members in sorted(pools.items()):
        if len(members) == 1:
            cols.add(pool_type, members[0], super_attribute, image_id, box, source_id, "", labels)
        elif members:  # "red and blue shirt": neither colour is a clean example of its pool
            stats["impure"][f"{pool_type}\t{super_attribute}"] += 1


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
    numbered = words.prefilter.search
    parse = lru_cache(maxsize=MEMO)(partial(parse_words, words=words))
    for image in images:
        counts["read"] += len(image.items)
        size = sizes.get(image.image_id)
        if size is None:
            missing_image(image, stats, counts)
            continue
        for region in image.items:
            box = clipped_box(region.x, region.y, region.width, region.height, *size, counts)
            if box is None or not numbered(region.phrase.lower()):
                continue
            parsed = parse(region.phrase)
            if parsed is not None:
                _mine_phrase(image.image_id, box, region.region_id, region.phrase, parsed,
                             min_side, vocab, stats, cols, rows)
    return PassResult(cols.numpy(), stats, {}, rows, seconds=time.perf_counter() - start)


def _mine_phrase(image_id: int, box: tuple, region_id: int, phrase: str, parsed,
                 min_side: int, vocab, stats: dict, cols: CropColumns, rows: list) -> None:
    """A phrase with a number whose box passed the funnel: a COUNT crop, or counted out."""
    stats["regions"]["with_number"] += 1
    if parsed.count not in COUNTS:
        reason = parsed.excluded or "out of range"
        stats["count_excluded"][reason] += 1
        samples = stats["count_samples"].setdefault(reason, [])
        if len(samples) < SAMPLES:
            samples.append(phrase)
        one_line = " ".join(phrase.split())  # one line, no tabs
        rows.append(f"{region_id}\t{image_id}\t{reason}\t{parsed.number}\t{one_line}")
        return
    stats["regions"]["counted"] += 1
    element = str(parsed.count)
    if box[2] < min_side or box[3] < min_side:
        stats["count_too_small"][element] += 1
        return
    noun = vocab.canonical(parsed.noun) if parsed.noun else ""
    labels = cols.intern(LABEL_SEPARATOR.join(sorted({element, noun} - {""})))
    cols.add("count", element, "", image_id, box, region_id, phrase, labels)
