"""Was this data set made from these inputs? The checks `verify` adds from the manifests.

A DATASET.h5 records the sha256 of the POOLS.h5 it was generated from (its manifest's
`inputs`); a build folder also records, beside each stage's output, what it was made from
(`X.build-config.json`: the pools hash for dataset.h5; the Visual Genome folder and the
name, size and modification time of its annotation files for pools.h5). `lineage_problems`
compares those records with the files as they are now:

- `pools` given: its sha256 must be the one the data set records;
- the data set lies in a build folder: the folder's pools.h5 must still hash as recorded, and
  the annotation files of the VG folder the build names must be those the pools were mined
  from.

A mismatch means the folder no longer describes itself: a stage was redone (or a file
replaced) without its downstream outputs being made again.
"""

from __future__ import annotations

from pathlib import Path

from vprom.errors import VpromError
from vprom.io import sha256_file
from vprom.stamps import recorded
from vprom.tables import read_manifest


def lineage_problems(dataset: str | Path, pools: str | Path | None = None) -> list[str]:
    """What does not match between `dataset`, its recorded inputs and the files now there."""
    from vprom.app.build import _fingerprint

    dataset = Path(dataset)
    try:
        inputs = read_manifest(dataset).get("inputs") or {}
    except VpromError:  # no manifest (another tool's file): the integrity check says so
        inputs = {}
    problems = []
    if pools is not None:
        pools = Path(pools)
        if inputs.get(pools.name) != sha256_file(pools):
            problems.append(f"{dataset} was not generated from {pools} (its manifest records "
                            f"{pools.name}: {inputs.get(pools.name) or 'nothing'})")
    stamp = recorded(dataset)
    sibling = dataset.with_name("pools.h5")
    if stamp is not None and sibling.is_file():
        now = sha256_file(sibling)
        if now != stamp.get("pools") or inputs.get(sibling.name, now) != now:
            problems.append(f"{sibling} changed since {dataset.name} was generated from it; "
                            "run `vprom build` again to make the data set anew")
        mined = recorded(sibling)
        if mined is not None and isinstance(mined.get("vg"), str):
            vg = (dataset.parent / mined["vg"]).resolve()
            if not vg.is_dir() or _fingerprint(vg) != mined.get("inputs"):
                problems.append(f"the annotation files in {vg} changed since {sibling.name} "
                                "was mined from them; run `vprom build` again")
    return problems
