"""The two mining passes over Visual Genome, each a plain function run by one worker process.

* **objects pass** (`mine_objects`) — objects.json and attributes.json list the same images
  in the same order, so they are read side by side, one image record of each at a time
  (their image ids must agree). Per image, attributes are joined to objects by object id;
  the attributes of v1.4's `merged_object_ids` go to the surviving object; objects whose
  clipped boxes are identical are one *region* (VG often annotates a box several times:
  "shirt"/red and "shirt"/orange on the same pixels), so a region gets one crop per pool and
  carries all its labels. Regions then pass a funnel, each step counted in the report:
  image missing from image_data.json → zero-size box → box outside the image (boxes partly
  outside are clipped) → a side under `min_side` px → excluded object (sky, road, …, feeds no
  pool). Labels are canonicalised only from the size step on (3/4 of VG's objects are too
  small), so the report's unknown labels are those of regions large enough to matter.
  A surviving region enters
    - the OBJECT pool if its names map to exactly one category of the vocabulary;
    - for each super-attribute S of the attribute table (human table when a name is a person
      word, object table otherwise), the (element_type, S) pool with element = its one
      attribute of S — PURITY: a region with two attributes of S ("red and blue shirt") is
      left out of that pool and counted as impure. Excluded (semantic) attributes are
      dropped first.
* **counts pass** (`mine_counts`) — region_descriptions.json: the same box funnel, then
  `parse_count` on every phrase (its regex pre-filter returns at once for the ~95% without a
  number). Counted phrases (`COUNTS`, 1–10) of regions large enough become COUNT crops;
  excluded phrases ("five o'clock", "a 10 year old boy") are counted by reason in the report
  and listed, with region and image ids, in the pass's `excluded_rows`.

Every crop's `labels` column holds every canonical label its source has (all names and all
attributes of the region; for counts the count and the noun): generation needs them to
prove each matrix has exactly one answer. A pass accumulates its crops as compact typed
arrays with one interned string table (`_Columns`), so what it sends back to the parent (a
`PassResult`) is a few numpy columns, not millions of Python objects. Input files are identified
by sha256, computed on the bytes as they are parsed.

Box clipping (`_clip`) runs once per object and region, ~9M times at full scale: the common
in-image box returns at once; the rest is clipped by `vprom.images.clip_box` and each case
(zero size, outside the image, clipped) is counted for the report's funnel.
"""

from __future__ import annotations

import time
from array import array
from collections import Counter
from dataclasses import dataclass, field
from itertools import zip_longest
from pathlib import Path

import numpy as np

from vprom.mining import readers
from vprom.errors import VpromError
from vprom.images import clip_box
from vprom.records import COUNTS, LABEL_SEPARATOR, ElementType

ELEMENT_TYPES = tuple(e.value for e in ElementType)  # crop order: this, then input order
ELEMENT_CODE = {name: i for i, name in enumerate(ELEMENT_TYPES)}  # as stored in _Columns
SAMPLES = 5  # sample phrases per count-exclusion reason


# ---------------------------------------------------------------- per-worker accumulation
class _Columns:
    """Crops as compact typed arrays; strings interned into one table (shared across rows)."""

    def __init__(self) -> None:
        self.ints = {name: array("q") for name in ("image_id", "source_id")}
        self.ints.update({name: array("i") for name in ("x", "y", "w", "h", "element",
                                                         "super_attribute", "phrase", "labels")})
        self.ints["element_type"] = array("b")
        self._index: dict[str, int] = {}
        self.strings: list[str] = []

    def intern(self, text: str) -> int:
        i = self._index.get(text)
        if i is None:
            i = self._index[text] = len(self.strings)
            self.strings.append(text)
        return i

    def add(self, element_type: str, element: str, super_attribute: str, image_id: int,
            box: tuple[int, int, int, int], source_id: int, phrase: str, labels: int) -> None:
        c = self.ints
        c["element_type"].append(ELEMENT_CODE[element_type])
        c["element"].append(self.intern(element))
        c["super_attribute"].append(self.intern(super_attribute))
        c["image_id"].append(image_id)
        for name, v in zip(("x", "y", "w", "h"), box):
            c[name].append(v)
        c["source_id"].append(source_id)
        c["phrase"].append(self.intern(phrase))
        c["labels"].append(labels)

    def numpy(self) -> dict[str, np.ndarray]:
        return {name: np.frombuffer(a, dtype=a.typecode).copy() if len(a) else
                np.zeros(0, dtype=a.typecode) for name, a in self.ints.items()}


@dataclass
class PassResult:
    """What one worker returns: its crops, string table, statistics and input hashes."""

    columns: dict
    strings: list
    stats: dict
    inputs: dict
    excluded_rows: list = field(default_factory=list)
    seconds: float = 0.0  # wall time of the pass, for the summary


def _clip(x: int, y: int, w: int, h: int, width: int, height: int, stats: Counter):
    """The box (x, y, w, h) clipped to the image, or None (zero-size / outside), counting
    each case in `stats`."""
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


def _progress(position: int, total: int, desc: str):
    from tqdm import tqdm

    return tqdm(total=total, unit="B", unit_scale=True, desc=desc, position=position,
                leave=False, disable=None)


# ---------------------------------------------------------------- labels
class _Labeler:
    """Canonical form and role of each raw label, computed once per distinct string."""

    def __init__(self, vocab) -> None:
        self.vocab = vocab
        self.objects = vocab.objects
        self.excluded_objects = vocab.excluded_objects
        self.excluded_attributes = vocab.excluded_attributes
        self.tables = (vocab.object_attributes, vocab.human_attributes)
        self._names: dict[str, tuple[str, str]] = {}
        self._attrs: dict[str, tuple[str, str]] = {}

    def name(self, raw: str) -> tuple[str, str]:
        """(canonical, role) with role in category / person / excluded / unknown / empty."""
        got = self._names.get(raw)
        if got is None:
            c = self.vocab.canonical(raw) if isinstance(raw, str) else ""
            role = ("empty" if not c else "category" if c in self.objects else
                    "person" if self.vocab.is_person(c) else
                    "excluded" if c in self.excluded_objects else "unknown")
            got = self._names[raw] = (c, role)
        return got

    def attribute(self, raw: str) -> tuple[str, str]:
        """(canonical, role) with role in known / excluded / unknown / empty."""
        got = self._attrs.get(raw)
        if got is None:
            c = self.vocab.canonical(raw) if isinstance(raw, str) else ""
            role = ("empty" if not c else "excluded" if c in self.excluded_attributes else
                    "known" if c in self.tables[0] or c in self.tables[1] else "unknown")
            got = self._attrs[raw] = (c, role)
        return got


# ---------------------------------------------------------------- objects pass
def mine_objects(paths: dict, min_side: int, vocab, position: int = 0) -> PassResult:
    """The objects pass over objects.json + attributes.json (see the module docstring)."""
    start = time.perf_counter()
    inputs: dict[str, str] = {}
    sizes = _image_sizes(paths[readers.IMAGE_DATA], inputs)
    stats = {"objects": Counter(), "unknown_names": Counter(), "unknown_attributes": Counter(),
             "excluded_attributes": Counter(), "impure": Counter(), "missing_image_ids": [],
             "images": len(sizes)}
    cols, labeler = _Columns(), _Labeler(vocab)
    obj_path, attr_path = paths[readers.OBJECTS], paths[readers.ATTRIBUTES]
    sources: list = []
    bar = _progress(position, 0, "objects+attributes")
    objects = readers.read_objects(obj_path, bar.update, source_out=sources)
    attributes = readers.read_attributes(attr_path, bar.update, source_out=sources)
    for objs, attrs in zip_longest(objects, attributes):
        if bar.total == 0:
            bar.total = sum(s.size for s in sources)
        _check_aligned(objs, attrs, obj_path, attr_path)
        _mine_image(objs, attrs, sizes, min_side, labeler, cols, stats)
    bar.close()
    for s in sources:
        inputs[s.path.name] = s.sha256
    return PassResult(cols.numpy(), cols.strings, stats, inputs,
                 seconds=time.perf_counter() - start)


def _image_sizes(path: Path, inputs: dict) -> dict[int, tuple[int, int]]:
    sources: list = []
    sizes = readers.image_sizes(path, source_out=sources)
    inputs[path.name] = sources[0].sha256
    return sizes


def _check_aligned(objs, attrs, obj_path: Path, attr_path: Path) -> None:
    if objs is None or attrs is None:
        longer, rec = (attr_path, attrs) if objs is None else (obj_path, objs)
        raise VpromError(f"{longer}: image record #{rec.index} (image {rec.image_id}) has no "
                         f"counterpart in {(obj_path if objs is None else attr_path).name}; "
                         "objects.json and attributes.json must list the same images — use "
                         "both files from one Visual Genome release")
    if objs.image_id != attrs.image_id:
        raise VpromError(f"{attr_path}: image record #{attrs.index} is image {attrs.image_id} "
                         f"but record #{objs.index} of {obj_path.name} is image {objs.image_id}; "
                         "the two files must list the same images in the same order (VG's "
                         "do) — use both files from one Visual Genome release")


def _regions_of(objs, attrs, width: int, height: int, stats: Counter) -> dict:
    """Clipped box -> [source id, raw names, raw attributes] for one image's objects."""
    extra: dict[int, list[str]] = {}
    for a in attrs.objects:
        extra.setdefault(a.object_id, []).extend(a.attributes)
    merged_away = {m for o in objs.objects for m in o.merged_ids}
    regions: dict = {}
    seen: set[int] = set()
    stats["read"] += len(objs.objects)
    for o in objs.objects:
        if o.object_id in seen or o.object_id in merged_away:
            # a repeated id keeps its first object; both cases are counted, never silent
            stats["duplicate_id" if o.object_id in seen else "merged_away"] += 1
            continue
        seen.add(o.object_id)
        raw_attrs = list(o.attributes) + extra.pop(o.object_id, [])
        for m in o.merged_ids:
            raw_attrs += extra.pop(m, [])
            stats["merged_object_ids_folded"] += 1
        box = _clip(o.x, o.y, o.w, o.h, width, height, stats)
        if box is None:
            continue
        region = regions.get(box)
        if region is None:
            regions[box] = [o.object_id, list(o.names), raw_attrs]
        else:
            stats["same_box_merged"] += 1
            region[1] += o.names
            region[2] += raw_attrs
    for oid in extra:
        if oid not in merged_away:
            stats["orphan_attribute_records"] += 1
    return regions


def _mine_image(objs, attrs, sizes: dict, min_side: int, labeler: _Labeler, cols: _Columns,
                stats: dict) -> None:
    counts = stats["objects"]
    size = sizes.get(objs.image_id)
    if size is None:
        counts["read"] += len(objs.objects)
        counts["missing_image"] += len(objs.objects)
        if len(stats["missing_image_ids"]) < 20:
            stats["missing_image_ids"].append(objs.image_id)
        counts["missing_image_records"] += 1
        return
    counts["attribute_annotations"] += (sum(len(o.attributes) for o in objs.objects)
                                        + sum(len(a.attributes) for a in attrs.objects))
    regions = _regions_of(objs, attrs, *size, counts)
    counts["regions"] += len(regions)
    for box, (source_id, raw_names, raw_attrs) in regions.items():
        if box[2] < min_side or box[3] < min_side:
            counts["too_small"] += 1
            continue
        # labels are looked at only from here on: 3/4 of VG's objects are too small to matter
        names, name_roles = _labels(raw_names, labeler.name, stats["unknown_names"])
        attributes, attr_roles = _labels(raw_attrs, labeler.attribute, stats["unknown_attributes"])
        if "excluded" in name_roles.values():
            counts["excluded_object"] += 1
            continue
        labels = cols.intern(LABEL_SEPARATOR.join(sorted(set(names) | set(attributes))))
        _add_object(objs.image_id, box, source_id, name_roles, labels, cols, stats)
        human = "person" in name_roles.values()
        _add_attributes(objs.image_id, box, source_id, attr_roles, human, labeler, labels,
                        cols, stats)
        counts["kept_regions"] += 1


def _labels(raw: list, classify, unknown: Counter) -> tuple[list[str], dict[str, str]]:
    """Canonical labels (raw order, duplicates kept out) and canonical -> role."""
    roles: dict[str, str] = {}
    for text in raw:
        try:
            canonical, role = classify(text)
        except TypeError:  # a list or dict where VG has a string: not a label
            continue
        if role == "empty":
            continue
        if role == "unknown":
            unknown[canonical] += 1
        roles.setdefault(canonical, role)
    return list(roles), roles


def _add_object(image_id, box, source_id, name_roles: dict, labels: int, cols: _Columns,
                stats: dict) -> None:
    categories = [n for n, role in name_roles.items() if role == "category"]
    if len(categories) == 1:
        cols.add("object", categories[0], "", image_id, box, source_id, "", labels)
    elif len(categories) > 1:
        stats["impure"]["object\t"] += 1  # names of several categories on one region


def _add_attributes(image_id, box, source_id, attr_roles: dict, human: bool,
                    labeler: _Labeler, labels: int, cols: _Columns, stats: dict) -> None:
    element_type = "human_attribute" if human else "object_attribute"
    table = labeler.tables[1] if human else labeler.tables[0]
    by_super: dict[str, list[str]] = {}
    for attr, role in attr_roles.items():
        if role == "excluded":
            stats["excluded_attributes"][attr] += 1
        elif role == "known" and attr in table:
            by_super.setdefault(table[attr], []).append(attr)
    for super_attribute in sorted(by_super):
        members = by_super[super_attribute]
        if len(members) == 1:
            cols.add(element_type, members[0], super_attribute, image_id, box, source_id, "",
                     labels)
        else:  # "red and blue shirt": neither colour is a clean example of its pool
            stats["impure"][f"{element_type}\t{super_attribute}"] += 1


# ---------------------------------------------------------------- counts pass
def mine_counts(paths: dict, min_side: int, vocab, position: int = 1) -> PassResult:
    """The counts pass over region_descriptions.json (see the module docstring)."""
    from vprom.mining.counts import parse_count

    start = time.perf_counter()
    inputs: dict[str, str] = {}
    sizes = _image_sizes(paths[readers.IMAGE_DATA], inputs)
    stats = {"regions": Counter(), "count_excluded": Counter(), "count_samples": {},
             "count_too_small": Counter(), "missing_image_ids": [], "images": len(sizes)}
    counts = stats["regions"]
    cols, rows, sources = _Columns(), [], []
    bar = _progress(position, 0, "region descriptions")
    for image in readers.read_regions(paths[readers.REGIONS], bar.update, source_out=sources):
        if bar.total == 0:
            bar.total = sources[0].size
        size = sizes.get(image.image_id)
        if size is None:
            counts["read"] += len(image.regions)
            counts["missing_image"] += len(image.regions)
            counts["missing_image_records"] += 1
            if len(stats["missing_image_ids"]) < 20:
                stats["missing_image_ids"].append(image.image_id)
            continue
        for region in image.regions:
            counts["read"] += 1
            box = _clip(region.x, region.y, region.w, region.h, *size, counts)
            if box is None:
                continue
            parsed = parse_count(region.phrase, vocab)  # None at once without a number
            if parsed is None:
                continue
            counts["with_number"] += 1
            if parsed.count not in COUNTS:
                reason = parsed.excluded or "out of range"
                _exclude(region, image.image_id, reason, parsed.number, stats, rows)
                continue
            counts["counted"] += 1
            if box[2] < min_side or box[3] < min_side:
                stats["count_too_small"][str(parsed.count)] += 1
                continue
            _add_count(image.image_id, box, region, parsed, vocab, cols)
    bar.close()
    inputs[sources[0].path.name] = sources[0].sha256
    return PassResult(cols.numpy(), cols.strings, stats, inputs, rows,
                 seconds=time.perf_counter() - start)


def _exclude(region, image_id: int, reason: str, number: str, stats: dict, rows: list) -> None:
    stats["count_excluded"][reason] += 1
    samples = stats["count_samples"].setdefault(reason, [])
    if len(samples) < SAMPLES:
        samples.append(region.phrase)
    phrase = " ".join(region.phrase.split())  # one line, no tabs
    rows.append(f"{region.region_id}\t{image_id}\t{reason}\t{number}\t{phrase}")


def _add_count(image_id: int, box, region, parsed, vocab, cols: _Columns) -> None:
    element = str(parsed.count)
    noun = vocab.canonical(parsed.noun) if parsed.noun else ""
    labels = cols.intern(LABEL_SEPARATOR.join(sorted({element, noun} - {""})))
    cols.add("count", element, "", image_id, box, region.region_id, region.phrase, labels)
