"""The dataset card (`README.md`) of `vprom export --format hf`, `templates/hf_card.md`: YAML
front matter (licence, tags, a configuration per split and `crops`), the rows, how panels
join crops, how the data were built and what to cite. `datasets` reads `configs:` from 2.14.0.
"""

from __future__ import annotations

import json
from string import Template

from vprom.generation.export.crops import template_text

from vprom.tables import SPLIT_PARTS

MIN_DATASETS = (2, 14)


def configs(splits: list[str]) -> str:
    """The front matter's configurations of the splits (`neutral`, the first, the default)."""
    lines = ["configs:"]
    for k, split in enumerate(splits):
        lines.append(f"- config_name: {split}")
        if k == 0:
            lines.append("  default: true")
        lines.append("  data_files:")
        for part in SPLIT_PARTS:
            lines += [f"  - split: {part}", f"    path: data/{split}/{part}-*.parquet"]
    return "\n".join(lines)


def card(summary: dict, about: dict) -> str:
    splits = list(summary["splits"])
    table = "\n".join(f"| {s} | " + " | ".join(f"{summary['splits'][s][p]:,}"
                                               for p in SPLIT_PARTS) + " |" for s in splits)
    manifest = about.get("manifest", {})
    built = {k: manifest.get(k) for k in ("kind", "config", "seed", "inputs", "counts")
             if k in manifest}
    return Template(template_text("hf_card.md")).substitute(
        configs=configs(splits), version=str(manifest.get("vprom_version", "")),
        problems=f"{summary['problems']:,}", crops=f"{summary['crops']:,}", table=table,
        need="{}.{}".format(*MIN_DATASETS), min_datasets=str(MIN_DATASETS),
        build_manifest=json.dumps(built, indent=2, sort_keys=True),
        verify=about.get("verify") or "(not run for this export)")
