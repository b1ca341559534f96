"""The report of `vprom mine`: what each pool holds, and what every filter removed and why.
`report_data` merges the passes' statistics and the crops into one deterministic dict;
`MineReport` renders it as `<out>.report.json`, `<out>.report.md` and the printed `summary`.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from vprom.mining.pool_passes import ELEMENT_CODE, ELEMENT_TYPES, PassResult

from vprom.domain import COUNTS
from vprom.tables import CropTable

FEW_CROPS = 10  # the report flags elements with fewer crops than this
TOP_N = 30  # unknown labels / excluded attributes listed in the report
COUNT_RANGE = f"{COUNTS[0]}-{COUNTS[-1]}"


def report_data(table: CropTable, passes: list[PassResult], inputs: dict, min_side: int, vocab,
                excluded_file: str) -> dict:
    """The report's dictionary: the two passes' statistics, and the pools of `table`."""
    objects, counts = (result.stats for result in passes)
    stats = {key: +value if isinstance(value, Counter) else value  # + drops zero counts
             for key, value in {**objects, **counts}.items()}
    missing = objects["missing_image_ids"] + counts["missing_image_ids"]
    return {
        "config": {"min_side": min_side, "few_crops": FEW_CROPS},
        "inputs": inputs,
        "images": stats["images"],
        "crops": len(table),
        "objects": dict(sorted(stats["objects"].items())),
        "regions": dict(sorted(stats["regions"].items())),
        "missing_image_ids": sorted(set(missing))[:20],
        "unknown_labels": {"names": _top(stats["unknown_names"]),
                           "attributes": _top(stats["unknown_attributes"])},
        "excluded_attributes": _top(stats["excluded_attributes"]),
        "counts": {"excluded_by_reason": dict(sorted(stats["count_excluded"].items())),
                   "samples": dict(sorted(stats["count_samples"].items())),
                   "too_small": dict(sorted(stats["count_too_small"].items())),
                   "excluded_file": excluded_file},
        "pools": _pools(table, stats["impure"], vocab),
    }


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
            pools.items(), key=lambda kv: (ELEMENT_CODE[kv[0][0]], kv[0][1])):
        ranked = sorted(elements.items(), key=_element_key)
        out.append({"element_type": etype, "super_attribute": super_attribute,
                    "elements": sum(1 for _, n in ranked if n > 0),
                    "crops": sum(n for _, n in ranked),
                    "impure": impure.get(f"{etype}\t{super_attribute}", 0),
                    "per_element": dict(ranked),
                    "few_crops": [[e, n] for e, n in ranked if n < FEW_CROPS]})
    return out


def _top(counter: Counter, n: int = TOP_N) -> dict:
    ranked = sorted(counter.items(), key=lambda kv: (-kv[1], kv[0]))
    return {"occurrences": sum(counter.values()), "distinct": len(counter),
            "top": [[label, count] for label, count in ranked[:n]]}


def _element_key(item: tuple[str, int]) -> tuple:
    """Most crops first; ties in vocabulary-neutral order, counts numerically."""
    element, n = item
    return (-n, 0, int(element), "") if element.isdigit() else (-n, 1, 0, element)


@dataclass
class MineReport:
    """What `mine` did; `data` is JSON-able and deterministic (`elapsed_s`, `timings` are not)."""

    out: Path
    data: dict
    elapsed_s: float = 0.0
    timings: dict = field(default_factory=dict)  # seconds per phase, for the summary

    def to_json(self) -> str:
        return json.dumps(self.data, indent=2, sort_keys=True) + "\n"

    def summary(self) -> str:
        d, o, r = self.data, self.data["objects"], self.data["regions"]
        types = ", ".join(f"{t} {sum(p['crops'] for p in d['pools'] if p['element_type'] == t):,}"
                          for t in ELEMENT_TYPES)
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
            (f"objects: {o.get('read', 0):,} read, {o.get('kept_regions', 0):,} regions kept; "
            f"too small {o.get('too_small', 0):,}, excluded object {o.get('excluded_object', 0):,},"
            f" zero-size {o.get('zero_size', 0):,}, outside image {o.get('outside_image', 0):,},"
            f" clipped {o.get('clipped', 0):,}, duplicate id {o.get('duplicate_id', 0):,},"
            f" missing image {o.get('missing_image', 0):,}"),
            (f"region descriptions: {r.get('read', 0):,} read, {r.get('with_number', 0):,} with "
             f"a number, {r.get('counted', 0):,} counts {COUNT_RANGE}; not counts: "
             f"{excluded or 'none'}"),
            (f"unknown labels: {d['unknown_labels']['names']['distinct']:,} names, "
            f"{d['unknown_labels']['attributes']['distinct']:,} attributes; "
            f"{few} elements with < {FEW_CROPS} crops"),
            f"report: {side_path(self.out, '.report.md')}",
        ])

    def to_markdown(self) -> str:
        d = self.data
        lines = [f"# Pools mined from Visual Genome: {self.out.name}", "",
                 (f"{d['crops']:,} crops from {d['images']:,} images; regions need both sides "
                 f">= {d['config']['min_side']} px after clipping to the image."), "",
                 "## Pools", "",
                 ("| element type | super-attribute | elements | crops | impure | "
                 f"elements with < {FEW_CROPS} crops |"), "|---|---|---:|---:|---:|---|"]
        for p in d["pools"]:
            few = _listing(p["few_crops"])
            lines.append(f"| {p['element_type']} | {p['super_attribute'] or '-'} | "
                         f"{p['elements']} | {p['crops']:,} | {p['impure']:,} | {few} |")
        lines += ["", ("Impure: regions with two or more attributes of the super-attribute "
                  "(\"red and blue shirt\"), or names of several object categories; they are "
                  "left out of that pool only."), ""]
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
    ("duplicate_id", "dropped: object id repeated within its image (the first one kept)"),
    ("merged_away", "dropped: merged into another object (v1.4)"),
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
    ("counted", f"phrases counting {COUNT_RANGE} things"),
)


def _listing(pairs: list, limit: int = 12) -> str:
    """'a (3), b (0), ... and 40 more' (the full list is in report.json); '-' for none."""
    text = ", ".join(f"{e} ({n})" for e, n in pairs[:limit])
    return text + (f" and {len(pairs) - limit} more" if len(pairs) > limit else "") or "-"


def _funnel_md(title: str, counts: dict, steps) -> list[str]:
    lines = [f"## {title}", "", "| step | number |", "|---|---:|"]
    lines += [f"| {label} | {counts.get(key, 0):,} |" for key, label in steps]
    return lines + [""]


def _labels_md(title: str, top: dict) -> list[str]:
    lines = [f"## {title}", "", (f"{top['distinct']:,} distinct, {top['occurrences']:,} "
             "occurrences. Most frequent:"), ""]
    lines.append(", ".join(f"{label} ({n:,})" for label, n in top["top"]) or "none")
    return lines + [""]


def side_path(out: Path, suffix: str) -> Path:
    """A side file of POOLS.h5 `out`: its name with `suffix` appended."""
    return out.with_name(out.name + suffix)
