"""`vprom synth`: a Visual Genome in miniature, in VG's own files, layout and schema, so the
pipeline runs and is tested without the 15 GB download (never a substitute for VG in results).
`synth_truth.json` holds the expected pools with their sources' ids, the noise, the miner's
rules and every output's sha256. Each image has its own generator (`plan`), so workers render
in any order and records are appended in image order: any worker count gives the same bytes.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path

import vprom.mining.synth.vg as synth_vg
from vprom.mining.synth.plan import HEIGHT, WIDTH, render_image
from vprom.mining.synth.spec import SPEC, check_vocabulary

from vprom.claim import writes
from vprom.domain import MIN_SIDE
from vprom.errors import VpromError
from vprom.files import atomic_dir, sha256_file
from vprom.manifest import make_manifest, write_manifest
from vprom.processes import ordered_map

JPEG_QUALITY = 90
TRUTH = "synth_truth.json"
KIND = "synthetic-corpus"  # the kind its manifest names
FILES = ("image_data.json", "objects.json", "attributes.json", "region_descriptions.json")
PER_IMAGE_FILES = FILES + synth_vg.FILES
ALL_FILES = PER_IMAGE_FILES + (synth_vg.SYNSETS,)


def _render_to(args) -> tuple[list[str], dict]:
    """Worker: draw one image and save its JPEG; its records (JSON text) and facts."""
    seed, index, folder = args
    img, im = render_image(seed, index)
    image_folder, coco_id, flickr_id = synth_vg.decorate(seed, index, img)
    im.save(Path(folder) / image_folder / f"{img.image_id}.jpg", "JPEG", quality=JPEG_QUALITY)
    iid, url = img.image_id, synth_vg.URL.format(image_folder, img.image_id)
    rels = synth_vg.relationships(img)
    qas = synth_vg.question_answers(img)
    objects = {"image_id": iid, "objects": img.objects, "image_url": url}
    relationships = synth_vg.relationship_records(img, rels)
    # VG's files are plain json.dump output: ", " and ": " separators, no indentation
    records = [json.dumps(record, ensure_ascii=False) for record in (
        {"width": WIDTH, "url": url, "height": HEIGHT, "image_id": iid,
         "coco_id": coco_id, "flickr_id": flickr_id},
        objects,
        {"image_id": iid, "attributes": img.attributes},
        {"regions": img.regions, "id": iid},
        synth_vg.scene_graph(img, rels),
        relationships,
        qas,
        synth_vg.without_merged(objects),
        synth_vg.without_merged(relationships),
    )]
    facts = {"expected": img.expected, "noise": img.noise, "objects": len(img.objects),
             "regions": len(img.regions), "folder": image_folder,
             "coco_id": coco_id is not None, "flickr_id": flickr_id is not None,
             "relationships": len(rels), "question_answers": len(qas["qas"]),
             "synsets": synth_vg.synset_names(img, rels)}
    return records, facts


@dataclass
class SynthSummary:
    """What `write_corpus` wrote, printable."""

    out: Path
    images: int
    objects: int
    regions: int
    pools: dict  # element_type -> super_attribute -> element -> crops
    noise: dict  # kind -> number of ids touched
    seconds: float

    def __str__(self) -> str:
        lines = [f"synthetic Visual Genome corpus: {self.out}",
                 (f"  {self.images} images, {self.objects} objects, {self.regions} regions "
                 f"({self.seconds:.1f} s, {self.images / max(self.seconds, 1e-9):.0f} images/s)")]
        for et, supers in self.pools.items():
            crops = [n for els in supers.values() for n in els.values()]
            lines.append(f"  expected pool {et}: {len(crops)} elements, {sum(crops)} crops "
                         f"(min {min(crops) if crops else 0} per element)")
        lines.append("  noise injected: "
                     + ", ".join(f"{k} {v}" for k, v in sorted(self.noise.items())))
        return "\n".join(lines)


@writes("out", None)  # ownership: the synthetic corpus is known by its TRUTH file
def write_corpus(out: Path, images: int = 2000, seed: int = 0, workers: int = 1,
                 zips: bool = False) -> SynthSummary:
    """Write the corpus to folder `out`, replaced when complete; `zips`: also `out/download/`."""
    out = Path(out)
    if images < 1:
        raise VpromError(f"--images {images}: need at least one image")
    if workers < 1:
        raise VpromError(f"--workers {workers}: need at least one process")
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not (out / TRUTH).exists())):
        raise VpromError(f"{out}: exists and is not a synthetic corpus (no {TRUTH}); "
                         "choose an empty or new folder")
    check_vocabulary()
    start = time.perf_counter()
    with atomic_dir(out) as tmp:
        for name in synth_vg.FOLDERS:
            (tmp / name).mkdir()
        facts = _write_files(tmp, images, seed, workers)
        truth = _truth(tmp, seed, facts)
        if zips:
            synth_vg.write_zips(tmp)
        (tmp / TRUTH).write_text(json.dumps(truth, indent=1, sort_keys=True) + "\n",
                                 encoding="utf-8")
        write_manifest(tmp, make_manifest(KIND, {"images": images, "seed": seed}, seed,
                                          outputs=truth["outputs"]))
    return SynthSummary(out, images, sum(f["objects"] for f in facts),
                        sum(f["regions"] for f in facts), truth["pools"],
                        {k: len(v["ids"]) for k, v in truth["noise"].items()},
                        time.perf_counter() - start)


def _write_files(tmp: Path, images: int, seed: int, workers: int) -> list[dict]:
    """Render every image, appending its records in image order; the images' facts."""
    from tqdm import tqdm

    facts = []
    jobs = ((seed, i, str(tmp)) for i in range(images))
    with contextlib.ExitStack() as stack:
        handles = [stack.enter_context(open(tmp / name, "w", encoding="utf-8"))
                   for name in PER_IMAGE_FILES]
        # workers ignore Ctrl-C and are stopped when this block is left, however it is left
        results = stack.enter_context(ordered_map(_render_to, jobs, workers, "synth",
                                                  chunksize=16))
        for i, (records, image_facts) in enumerate(
                tqdm(results, total=images, desc="synth", unit="img", disable=None)):
            for f, record in zip(handles, records):
                f.write(("[" if i == 0 else ", ") + record)
            facts.append(image_facts)
        for f in handles:
            f.write("]")
    synsets = set().union(*(f["synsets"] for f in facts))
    (tmp / synth_vg.SYNSETS).write_text(json.dumps(synth_vg.synset_records(synsets),
                                                    ensure_ascii=False), encoding="utf-8")
    return facts


def _truth(tmp: Path, seed: int, facts: list[dict]) -> dict:
    from vprom import __version__

    sources: dict = {}   # element type -> super-attribute -> element -> source ids
    noise: dict = {}
    for image in facts:
        for et, sup, el, sid in image["expected"]:
            sources.setdefault(et, {}).setdefault(sup, {}).setdefault(el, []).append(sid)
        for kind, ids in image["noise"].items():
            noise.setdefault(kind, []).extend(ids)
    jpegs = hashlib.sha256()
    for p in sorted((p for name in synth_vg.FOLDERS for p in (tmp / name).iterdir()),
                    key=lambda p: int(p.stem)):
        jpegs.update(f"{p.parent.name}/{p.name}".encode() + b"\0" + p.read_bytes())
    numbered = list(enumerate(facts, 1))   # image ids
    vg = {"VG_100K_2": [i for i, f in numbered if f["folder"] == "VG_100K_2"],
          "coco_id": [i for i, f in numbered if f["coco_id"]],
          "flickr_id": [i for i, f in numbered if f["flickr_id"]],
          "relationships": sum(f["relationships"] for f in facts),
          "question_answers": sum(f["question_answers"] for f in facts),
          "synsets": len(json.loads((tmp / synth_vg.SYNSETS).read_text("utf-8")))}
    return {
        "format": "vprom-synth-truth", "format_version": 2, "vprom_version": __version__,
        "seed": seed, "images": len(facts), "min_side": MIN_SIDE, "image_size": [WIDTH, HEIGHT],
        "rules": SPEC.miner_rules,
        "pools": {et: {s: {el: len(ids) for el, ids in sorted(els.items())}
                       for s, els in sorted(sup.items())} for et, sup in sorted(sources.items())},
        "pool_sources": sources,
        "noise": {k: {"effect": SPEC.noise_effects[k], "ids": sorted(v)}
                  for k, v in sorted(noise.items())},
        "vg": vg,
        "outputs": {**{name: sha256_file(tmp / name) for name in ALL_FILES},
                    "VG_100K*/*.jpg": jpegs.hexdigest()},
    }
