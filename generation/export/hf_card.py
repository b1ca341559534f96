"""The dataset card (`README.md`) of `vprom export --format hf`: YAML front matter (licence,
tags, a configuration per split and `crops`), then the rows, how panels join crops, how the
data were built and what to cite. `datasets` reads `configs:` from 2.14.0 on.
"""

from __future__ import annotations

import json

from vprom.tables import SPLIT_PARTS

MIN_DATASETS = (2, 14)

CITATIONS = """```bibtex
@inproceedings{teney2020vprom,
  title     = {V-PROM: A Benchmark for Visual Reasoning Using Visual Progressive Matrices},
  author    = {Teney, Damien and Wang, Peng and Cao, Jiewei and Liu, Lingqiao and Shen,
               Chunhua and van den Hengel, Anton},
  booktitle = {Proceedings of the AAAI Conference on Artificial Intelligence},
  volume    = {34},
  number    = {07},
  pages     = {12071--12078},
  year      = {2020}
}
@article{krishna2017visualgenome,
  title   = {Visual Genome: Connecting Language and Vision Using Crowdsourced Dense
             Image Annotations},
  author  = {Krishna, Ranjay and Zhu, Yuke and Groth, Oliver and Johnson, Justin and
             Hata, Kenji and Kravitz, Joshua and Chen, Stephanie and Kalantidis, Yannis
             and Li, Li-Jia and Shamma, David A. and Bernstein, Michael S. and Fei-Fei, Li},
  journal = {International Journal of Computer Vision},
  volume  = {123},
  number  = {1},
  pages   = {32--73},
  year    = {2017}
}
@software{vprom,
  title   = {vprom: building the V-PROM benchmark from Visual Genome},
  version = {VERSION},
  note    = {the toolkit that built this data set}
}
```"""


def front_matter(splits: list[str]) -> str:
    lines = ["---", "license: cc-by-4.0", "pretty_name: V-PROM (built with vprom)",
             "tags:", "- visual-reasoning", "- progressive-matrices", "- visual-genome",
             "configs:"]
    for k, split in enumerate(splits):
        lines.append(f"- config_name: {split}")
        if k == 0:
            lines.append("  default: true")
        lines.append("  data_files:")
        for part in SPLIT_PARTS:
            lines += [f"  - split: {part}", f"    path: data/{split}/{part}-*.parquet"]
    lines += ["- config_name: crops", "  data_files:", "  - split: train",
              "    path: data/crops/crops-*.parquet", "---"]
    return "\n".join(lines)


def card(summary: dict, about: dict) -> str:
    splits = list(summary["splits"])
    table = "\n".join(f"| {s} | " + " | ".join(f"{summary['splits'][s][p]:,}"
                                               for p in SPLIT_PARTS) + " |" for s in splits)
    manifest = about.get("manifest", {})
    verify = about.get("verify") or "(not run for this export)"
    need = "{}.{}".format(*MIN_DATASETS)
    return f"""{front_matter(splits)}

# V-PROM, built with vprom

Visual progressive matrices (Teney et al., AAAI 2020) built from Visual Genome by
vprom {manifest.get('vprom_version', '')}: {summary['problems']:,}
problems over {summary['crops']:,} distinct crops. Each problem shows 8 context panels (a
3x3 matrix read row by row, the last cell missing) and 8 candidate panels; exactly one
candidate completes the matrix under the problem's relation (`and`, `or`, `union`,
`progression`) over its element type (`object_attribute`, `human_attribute`, `object`,
`count`).

## Configurations

One per split (its train / val / test parts; a held-out split's excluded problems are in
none), and `crops`:

| split | train | val | test |
|---|---|---|---|
{table}

## Rows

A problem: `id`, `relation`, `element_type`, `super_attribute`, `answer` (the correct
candidate, 0..7), `answer_element`, `panels` (16 crop ids: 8 context, then 8 candidates),
`elements` (what each panel shows), and the provenance `image_ids` (Visual Genome image of
each panel) and `boxes` (`[x, y, w, h]` in that image). A crop: `crop_id`, `image` (JPEG),
`image_id`, `box`, `element_type`, `element`, `super_attribute`, `phrase`, `source_id`,
`labels`. Crops are stored once and referenced by id (they repeat across problems).

Loading by configuration needs `datasets` {need} or later, the first that reads the
`configs:` above (an older one loads every file as one mixed table), so the snippet stops an
older one:

```python
import datasets
from datasets import load_dataset
if tuple(map(int, datasets.__version__.split(".")[:2])) < {MIN_DATASETS}:
    raise SystemExit(f"datasets {{datasets.__version__}} ignores this card's configurations; "
                     "pip install 'datasets>={need}', or load the files by data_files")
problems = load_dataset("PATH", "neutral")          # train / val / test
crops = load_dataset("PATH", "crops", split="train")
row_of = {{c: i for i, c in enumerate(crops["crop_id"])}}
p = problems["train"][0]
images = [crops[row_of[c]]["image"] for c in p["panels"]]   # 16 PIL images
```

With an older `datasets`, name the files: `load_dataset("parquet", data_files={{"train":
"PATH/data/neutral/train-*.parquet", "val": "PATH/data/neutral/val-*.parquet", "test":
"PATH/data/neutral/test-*.parquet"}})`, and `data_files="PATH/data/crops/crops-*.parquet"`
for the crops.

## How it was built

`vprom export --format hf` from a DATASET.h5 whose manifest records:

```json
{json.dumps({k: manifest.get(k) for k in ("kind", "config", "seed", "inputs", "counts")
             if k in manifest}, indent=2, sort_keys=True)}
```

`vprom verify` on that file:

```
{verify}
```

## Licence

CC BY 4.0, as Visual Genome's images and annotations, from which every crop is cut.

## Citation

{CITATIONS.replace('VERSION', str(manifest.get('vprom_version', '')))}
"""
