"""`vprom mine`: stream Visual Genome into the four element pools (POOLS.h5 + a report).

Two independent passes run in two processes (spawned, so they work on every platform):

* **objects pass** — objects.json and attributes.json list the same images in the same
  order, so they are read side by side, one image record of each at a time (their image
  ids must agree). Per image, attributes are joined to objects by object id; the
  attributes of v1.4's `merged_object_ids` go to the surviving object; objects whose
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
* **counts pass** — region_descriptions.json: the same box funnel, then `parse_count` on
  every phrase (its regex pre-filter returns at once for the ~95% without a number).
  Counted phrases (1–10) of regions large enough become COUNT crops; excluded
  phrases ("five o'clock", "a 10 year old boy") are counted by reason in the report and all
  listed in `<out>.excluded_counts.tsv`.

Every crop's `labels` column holds every canonical label its source has (all names and all
attributes of the region; for counts the count and the noun): generation needs them to
prove each matrix has exactly one answer. Workers return compact numpy columns plus one
interned string table; the parent orders crops by element type, then input order, numbers
them 0..N-1 (same input → identical crops), and writes POOLS.h5 through `atomic_path`
together with `<out>.report.md`, `<out>.report.json` and the excluded-counts TSV. Input
files are identified by sha256, computed on the bytes as they are parsed.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import multiprocessing.connection
import time
from array import array
from collections import Counter
from dataclasses import dataclass, field
from itertools import zip_longest
from pathlib import Path

import numpy as np

from mining import readers
from vprom.errors import VpromError
from vprom.io import atomic_path, make_manifest
from vprom.records import COUNTS, LABEL_SEPARATOR, MIN_SIDE, ElementType
from vprom.tables import CropTable, set_manifest

ELEMENT_TYPES = tuple(e.value for e in ElementType)  # crop order: this, then input order
_CODE = {name: i for i, name in enumerate(ELEMENT_TYPES)}
FEW_CROPS = 10  # the report flags elements with fewer crops than this
TOP_N = 30  # unknown labels / excluded attributes listed in the report
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
        c["element_type"].append(_CODE[element_type])
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
class _Part:
    """What one worker returns: its crops, string table, statistics and input hashes."""

    columns: dict
    strings: list
    stats: dict
    inputs: dict
    excluded_rows: list = field(default_factory=list)
    seconds: float = 0.0  # wall time of the pass, for the summary


def _clip(x: int, y: int, w: int, h: int, width: int, height: int, stats: Counter):
    """The box clipped to the image, or None (zero-size / outside), counting each case."""
    if 0 <= x and 0 <= y and 0 < w and 0 < h and x + w <= width and y + h <= height:
        return x, y, w, h  # the common case, first: this runs ~9M times
    if w <= 0 or h <= 0:
        stats["zero_size"] += 1
        return None
    x0, y0, x1, y1 = max(x, 0), max(y, 0), min(x + w, width), min(y + h, height)
    if x1 <= x0 or y1 <= y0:
        stats["outside_image"] += 1
        return None
    if (x0, y0, x1, y1) != (x, y, x + w, y + h):
        stats["clipped"] += 1
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
def _mine_objects(paths: dict, min_side: int, vocab, position: int = 0) -> _Part:
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
    return _Part(cols.numpy(), cols.strings, stats, inputs,
                 seconds=time.perf_counter() - start)


def _image_sizes(path: Path, inputs: dict) -> dict[int, tuple[int, int]]:
    sources: list = []
    sizes = {i.image_id: (i.width, i.height) for i in readers.read_images(path, source_out=sources)}
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
            stats["duplicate_or_merged_id"] += 1
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
def _mine_counts(paths: dict, min_side: int, vocab, position: int = 1) -> _Part:
    from mining.counts import parse_count

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
            if parsed.count is None or not 1 <= parsed.count <= 10:
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
    return _Part(cols.numpy(), cols.strings, stats, inputs, rows,
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


# ---------------------------------------------------------------- the report
def _top(counter: Counter, n: int = TOP_N) -> dict:
    ranked = sorted(counter.items(), key=lambda kv: (-kv[1], kv[0]))
    return {"occurrences": sum(counter.values()), "distinct": len(counter),
            "top": [[label, count] for label, count in ranked[:n]]}


@dataclass
class MineReport:
    """What `mine` did: per pool elements and crops, and what every filter removed and why.

    `data` is JSON-able and deterministic (same input -> same report); `elapsed_s` is not
    part of it.
    """

    out: Path
    data: dict
    elapsed_s: float = 0.0
    timings: dict = field(default_factory=dict)  # seconds per phase, for the summary

    @property
    def pools(self) -> list[dict]:
        return self.data["pools"]

    def to_json(self) -> str:
        return json.dumps(self.data, indent=2, sort_keys=True) + "\n"

    def summary(self) -> str:
        d, o, r = self.data, self.data["objects"], self.data["regions"]
        by_type = Counter()
        for p in d["pools"]:
            by_type[p["element_type"]] += p["crops"]
        types = ", ".join(f"{t} {by_type[t]:,}" for t in ELEMENT_TYPES)
        excluded = ", ".join(f"{k} {v:,}" for k, v in
                             sorted(d["counts"]["excluded_by_reason"].items(),
                                    key=lambda kv: (-kv[1], kv[0]))[:4])
        few = sum(len(p["few_crops"]) for p in d["pools"])
        return "\n".join([
            f"{self.out}: {d['crops']:,} crops in {sum(p['crops'] > 0 for p in d['pools'])} "
            f"pools ({types}) from {d['images']:,} images"
            + (f" in {self.elapsed_s:.1f} s" if self.elapsed_s else "")
            + (" (" + ", ".join(f"{k} {v:.1f} s" for k, v in self.timings.items()) + ")"
               if self.timings else ""),
            f"objects: {o.get('read', 0):,} read, {o.get('kept_regions', 0):,} regions kept; "
            f"too small {o.get('too_small', 0):,}, excluded object {o.get('excluded_object', 0):,},"
            f" zero-size {o.get('zero_size', 0):,}, outside image {o.get('outside_image', 0):,},"
            f" missing image {o.get('missing_image', 0):,}",
            f"region descriptions: {r.get('read', 0):,} read, {r.get('with_number', 0):,} with a "
            f"number, {r.get('counted', 0):,} counts 1-10; not counts: {excluded or 'none'}",
            f"unknown labels: {d['unknown_labels']['names']['distinct']:,} names, "
            f"{d['unknown_labels']['attributes']['distinct']:,} attributes; "
            f"{few} elements with < {FEW_CROPS} crops",
            f"report: {_side(self.out, '.report.md')}",
        ])

    def to_markdown(self) -> str:
        d = self.data
        lines = [f"# Pools mined from Visual Genome: {self.out.name}", "",
                 f"{d['crops']:,} crops from {d['images']:,} images; regions need both sides "
                 f">= {d['config']['min_side']} px after clipping to the image.", "",
                 "## Pools", "",
                 "| element type | super-attribute | elements | crops | impure | "
                 f"elements with < {FEW_CROPS} crops |", "|---|---|---:|---:|---:|---|"]
        for p in d["pools"]:
            few = _listing(p["few_crops"])
            lines.append(f"| {p['element_type']} | {p['super_attribute'] or '-'} | "
                         f"{p['elements']} | {p['crops']:,} | {p['impure']:,} | {few} |")
        lines += ["", "Impure: regions with two or more attributes of the super-attribute "
                  "(\"red and blue shirt\"), or names of several object categories; they are "
                  "left out of that pool only.", ""]
        lines += _funnel_md("Objects (objects.json + attributes.json)", d["objects"], OBJECT_STEPS)
        lines += _funnel_md("Region descriptions (counts)", d["regions"], REGION_STEPS)
        c = d["counts"]
        lines += ["### Numbers that are not counts", "",
                  f"All of them, with region and image ids: `{c['excluded_file']}`.", "",
                  "| reason | phrases | samples |", "|---|---:|---|"]
        for reason, n in sorted(c["excluded_by_reason"].items(), key=lambda kv: (-kv[1], kv[0])):
            samples = "; ".join(c["samples"].get(reason, [])).replace("|", "/")
            lines.append(f"| {reason} | {n:,} | {samples} |")
        too_small = ", ".join(f"{k}: {v:,}" for k, v in sorted(c["too_small"].items(),
                                                              key=lambda kv: int(kv[0])))
        lines += ["", f"Counted phrases whose region is too small, by count: {too_small or 'none'}.",
                  ""]
        lines += _labels_md("Unknown object names", d["unknown_labels"]["names"])
        lines += _labels_md("Unknown attributes", d["unknown_labels"]["attributes"])
        lines += _labels_md("Excluded (non-visual) attributes dropped", d["excluded_attributes"])
        if d["missing_image_ids"]:
            lines += ["## Images missing from image_data.json", "",
                      "Their objects and regions were skipped (boxes cannot be clipped): "
                      + ", ".join(str(i) for i in d["missing_image_ids"]), ""]
        lines += ["## Inputs", "", "| file | sha256 |", "|---|---|"]
        lines += [f"| {name} | `{sha}` |" for name, sha in sorted(d["inputs"].items())]
        return "\n".join(lines) + "\n"


OBJECT_STEPS = (
    ("read", "object records read"),
    ("missing_image", "dropped: image not in image_data.json"),
    ("duplicate_or_merged_id", "dropped: id repeated, or merged into another object (v1.4)"),
    ("merged_object_ids_folded", "v1.4 merged ids folded into their surviving object"),
    ("zero_size", "dropped: zero-size box"),
    ("outside_image", "dropped: box entirely outside the image"),
    ("clipped", "kept, box clipped to the image"),
    ("same_box_merged", "joined to an earlier object with the same box (one region)"),
    ("orphan_attribute_records", "attributes.json records with no object (ignored)"),
    ("regions", "regions (distinct boxes)"),
    ("too_small", "dropped: a side under min_side"),
    ("excluded_object", "dropped: excluded object (background, part, ...)"),
    ("kept_regions", "regions feeding the pools"),
    ("attribute_annotations", "attribute annotations read"),
)
REGION_STEPS = (
    ("read", "region descriptions read"),
    ("missing_image", "dropped: image not in image_data.json"),
    ("zero_size", "dropped: zero-size box"),
    ("outside_image", "dropped: box entirely outside the image"),
    ("clipped", "kept, box clipped to the image"),
    ("with_number", "phrases with a number"),
    ("counted", "phrases counting 1-10 things"),
)


def _listing(pairs: list, limit: int = 12) -> str:
    """'a (3), b (0), ... and 40 more' (the full list is in report.json)."""
    if not pairs:
        return "-"
    text = ", ".join(f"{e} ({n})" for e, n in pairs[:limit])
    return text + (f" and {len(pairs) - limit} more" if len(pairs) > limit else "")


def _element_key(item: tuple[str, int]) -> tuple:
    """Most crops first; ties in vocabulary-neutral order, counts numerically."""
    element, n = item
    return (-n, 0, int(element), "") if element.isdigit() else (-n, 1, 0, element)


def _funnel_md(title: str, counts: dict, steps) -> list[str]:
    lines = [f"## {title}", "", "| step | number |", "|---|---:|"]
    lines += [f"| {label} | {counts.get(key, 0):,} |" for key, label in steps]
    return lines + [""]


def _labels_md(title: str, top: dict) -> list[str]:
    lines = [f"## {title}", "", f"{top['distinct']:,} distinct, {top['occurrences']:,} "
             "occurrences. Most frequent:", ""]
    lines.append(", ".join(f"{label} ({n:,})" for label, n in top["top"]) or "none")
    return lines + [""]


def _side(out: Path, suffix: str) -> Path:
    return out.with_name(out.name + suffix)


# ---------------------------------------------------------------- assembling
def _merge(parts: list[_Part]) -> tuple[CropTable, dict[str, str]]:
    """One CropTable ordered by element type, then input order; crop ids 0..N-1."""
    cols: dict[str, list] = {}
    for part in parts:
        strings = np.array(part.strings, dtype=object)
        for name, values in part.columns.items():
            if name in ("element", "super_attribute", "phrase", "labels"):
                values = strings[values]
            cols.setdefault(name, []).append(values)
    merged = {name: np.concatenate(v) for name, v in cols.items()}
    order = np.argsort(merged["element_type"], kind="stable")
    merged = {name: v[order] for name, v in merged.items()}
    merged["element_type"] = np.array(ELEMENT_TYPES, dtype=object)[merged["element_type"]]
    table = CropTable(crop_id=np.arange(len(order), dtype=np.int64), **merged)
    inputs = {}
    for part in parts:
        inputs.update(part.inputs)
    return table, dict(sorted(inputs.items()))


def _pools(table: CropTable, impure: Counter, vocab) -> list[dict]:
    """Per pool: elements, crops, impure regions and thin elements (vocabulary order)."""
    per_element = Counter(zip(table.element_type, table.super_attribute, table.element))
    pools: dict[tuple[str, str], dict[str, int]] = {}
    for etype, table_ in (("object_attribute", vocab.object_attributes),
                          ("human_attribute", vocab.human_attributes)):
        for attr, super_attribute in table_.items():
            pools.setdefault((etype, super_attribute), {})[attr] = 0
    pools[("object", "")] = {o: 0 for o in vocab.objects}
    pools[("count", "")] = {str(k): 0 for k in COUNTS}
    for (etype, super_attribute, element), n in per_element.items():
        pools.setdefault((etype, super_attribute), {})[element] = n
    out = []
    for (etype, super_attribute), elements in sorted(
            pools.items(), key=lambda kv: (_CODE[kv[0][0]], kv[0][1])):
        ranked = sorted(elements.items(), key=_element_key)
        out.append({"element_type": etype, "super_attribute": super_attribute,
                    "elements": sum(1 for _, n in ranked if n > 0),
                    "crops": sum(n for _, n in ranked),
                    "impure": impure.get(f"{etype}\t{super_attribute}", 0),
                    "per_element": dict(ranked),
                    "few_crops": [[e, n] for e, n in ranked if n < FEW_CROPS]})
    return out


def _report_data(table: CropTable, parts: list[_Part], inputs: dict, min_side: int, vocab,
                 excluded_file: str) -> dict:
    stats: dict = {}
    for part in parts:
        for key, value in part.stats.items():
            if isinstance(value, list):
                stats[key] = stats.get(key, []) + value
            elif isinstance(value, Counter):
                stats[key] = stats.get(key, Counter()) + value
            else:
                stats[key] = value
    empty = Counter()
    return {
        "config": {"min_side": min_side, "few_crops": FEW_CROPS},
        "inputs": inputs,
        "images": stats.get("images", 0),
        "crops": len(table),
        "objects": dict(sorted(stats.get("objects", empty).items())),
        "regions": dict(sorted(stats.get("regions", empty).items())),
        "missing_image_ids": sorted(set(stats.get("missing_image_ids", [])))[:20],
        "unknown_labels": {"names": _top(stats.get("unknown_names", empty)),
                           "attributes": _top(stats.get("unknown_attributes", empty))},
        "excluded_attributes": _top(stats.get("excluded_attributes", empty)),
        "counts": {"excluded_by_reason": dict(sorted(stats.get("count_excluded", empty).items())),
                   "samples": dict(sorted(stats.get("count_samples", {}).items())),
                   "too_small": dict(sorted(stats.get("count_too_small", empty).items())),
                   "excluded_file": excluded_file},
        "pools": _pools(table, stats.get("impure", empty), vocab),
    }


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
        "excluded_attributes", "aliases")}
    return hashlib.sha256(json.dumps(tables, sort_keys=True).encode()).hexdigest()


# ---------------------------------------------------------------- entry point
def _child(conn, fn, paths: dict, min_side: int, vocab, position: int) -> None:
    """Worker process body: run one pass, send back ("ok", _Part) or ("error", exception)."""
    import threading

    from tqdm import tqdm

    # tqdm's default lock is a multiprocessing semaphore that a spawned child leaks at exit
    tqdm.set_lock(threading.RLock())
    try:
        result = ("ok", fn(paths, min_side, vocab, position))
    except BaseException as e:  # noqa: BLE001 - every failure goes back to the parent
        result = ("error", e if isinstance(e, VpromError) else
                  RuntimeError(f"{type(e).__name__}: {e}"))
    conn.send(result)
    conn.close()


def _run_parts(paths: dict, min_side: int, vocab, workers: int) -> list[_Part]:
    """Both passes, in two spawned processes (workers >= 2) or one after the other here.

    Plain processes and pipes rather than a Pool: a worker that dies (killed, out of memory)
    shows up as end-of-file on its pipe instead of a result that never comes, and when one
    pass fails the other is stopped at once instead of parsing its file to the end.
    """
    passes = (_mine_objects, _mine_counts)
    if workers < 2:
        return [fn(paths, min_side, vocab, i) for i, fn in enumerate(passes)]
    ctx = multiprocessing.get_context("spawn")  # safe with h5py/threads, same on every OS
    procs, conns = [], []
    try:
        for i, fn in enumerate(passes):
            receive, send = ctx.Pipe(duplex=False)
            proc = ctx.Process(target=_child, args=(send, fn, paths, min_side, vocab, i),
                               name=f"vprom-mine-{fn.__name__[6:]}")
            proc.start()
            send.close()
            procs.append(proc)
            conns.append(receive)
        results: dict = {}
        while len(results) < len(conns):
            for conn in multiprocessing.connection.wait([c for c in conns if c not in results]):
                results[conn] = _receive(conn, procs[conns.index(conn)])
        return [results[c] for c in conns]
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.terminate()
            proc.join()


def _receive(conn, proc) -> _Part:
    try:
        status, value = conn.recv()
    except EOFError:
        proc.join()
        raise VpromError(f"vprom mine: worker {proc.name} died (exit code {proc.exitcode}) "
                         "without a result; was it killed, or out of memory? Run again, or "
                         "with --workers 1 to see the failure here") from None
    if status == "error":
        raise value
    return value


def mine(vg_dir: str | Path, out: str | Path, min_side: int = MIN_SIDE, workers: int = 2,
         vocab=None) -> MineReport:
    """Stream the VG folder `vg_dir` into POOLS.h5 at `out` (+ report and side files)."""
    start = time.perf_counter()
    vg_dir, out = Path(vg_dir), Path(out)
    if min_side < 1:
        raise VpromError(f"--min-side must be at least 1 px, got {min_side}")
    paths = {stem: readers.locate(vg_dir, stem) for stem in readers.FILES}
    if vocab is None:
        from mining.vocab import load_vocabulary

        vocab = load_vocabulary()
    parts = _run_parts(paths, min_side, vocab, workers)
    collected = time.perf_counter()
    table, inputs = _merge(parts)
    excluded_path = _side(out, ".excluded_counts.tsv")
    data = _report_data(table, parts, inputs, min_side, vocab, excluded_path.name)
    report = MineReport(out, data)
    _write(out, table, report, parts[1].excluded_rows, excluded_path, vocab)
    report.elapsed_s = time.perf_counter() - start
    report.timings = {"objects pass": parts[0].seconds, "counts pass": parts[1].seconds,
                      "merge+write": time.perf_counter() - collected}
    return report


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
            set_manifest(h5, manifest)
        with atomic_path(excluded_path) as t:
            t.write_text("region_id\timage_id\treason\tnumber\tphrase\n"
                         + "".join(row + "\n" for row in excluded_rows), encoding="utf-8")
        with atomic_path(_side(out, ".report.json")) as t:
            t.write_text(report.to_json(), encoding="utf-8")
        with atomic_path(_side(out, ".report.md")) as t:
            t.write_text(report.to_markdown(), encoding="utf-8")
