"""Benchmark: `vprom mine` on a Visual-Genome-sized annotation corpus, against `json.load`.

1. Writes (or reuses) a corpus in VG's own schema at full scale — 108,077 images, ~5.4M
   region descriptions, ~3.8M objects, ~2.8M attribute annotations, ~1.7 GB of JSON — whose
   labels are drawn from vprom's vocabularies plus the noise real VG has: upper case, stray
   spaces, plurals, trailing punctuation, unknown labels, zero-size and out-of-image boxes,
   number phrases that are counts and ones that are not ("10 o'clock"). Text is assembled
   with f-strings and join, chunk by chunk, in two processes (objects+attributes, regions).
   Full scale takes ~30 s and 1.8 GB of disk (`--out`, default /tmp/vg_full; delete it after).
2. Side by side in one run, the cost of each pass against the bare parse of its files: the
   anchors are `ijson.items` (yajl2_c, what the streaming reader uses) over objects.json +
   attributes.json and over region_descriptions.json; each pass runs alone in this process
   on one core, its byte-range cut included (`mining.pools`). With `--rounds R`, all
   four are timed R times, one after another, and each keeps its best time.
3. Times `vprom mine --workers N` for each N of `--workers` (default 1,2,4) in a
   subprocess: wall time and peak RSS, the RSS summed over the whole process tree (polled
   from /proc every 50 ms) and the largest single process (`wait4`: the run and its workers); the
   POOLS.h5 of every N must hold the same crops. It then projects the wall time on 16 cores
   (marked as projected): the parent's serial work plus the larger of the byte-range scan and
   the passes' one-core work spread over 16 workers. The work is the one-worker run's own
   pass times (its chunks, parse included), and the serial work the rest of its wall time
   less the scan.
4. Unless `--no-json-load`, loads each JSON file with `json.load` in its own subprocess — how
   the official VG driver and the Hugging Face loader read them — and reports each peak RSS;
   the ratio compares the largest of those with mine's whole-tree peak.

    .venv/bin/python bench/mine_full_scale.py --scale 0.02       # development size
    .venv/bin/python bench/mine_full_scale.py --no-json-load     # full scale (/tmp/vg_full)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

VG_IMAGES = 108_077
OBJECTS_PER_IMAGE = 3_800_000 / VG_IMAGES  # ~35.2
REGIONS_PER_IMAGE = 5_400_000 / VG_IMAGES  # ~50
CHUNK = 2_000  # images per generated chunk
NUMBER_WORDS = ("one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")
UNKNOWN = tuple(f"thing{k}" for k in range(400)) + ("leaf", "handle", "spot", "edge", "logo",
                                                      "part", "side", "top", "design", "piece")


def _labels():
    """Label lists for the corpus, from the vocabularies vprom mines with."""
    from vprom.mining.vocab import load_vocabulary

    v = load_vocabulary()
    return {
        "objects": sorted(v.objects),
        "persons": sorted(v.person_words),
        "excluded_objects": sorted(v.excluded_objects),
        "object_attributes": sorted(v.object_attributes),
        "human_attributes": sorted(v.human_attributes),
        "excluded_attributes": sorted(v.excluded_attributes),
    }


def _noisy(rng: np.random.Generator, words: list[str]) -> list[str]:
    """VG-style spelling noise: case, stray spaces, plurals, trailing punctuation."""
    kind = rng.integers(0, 100, size=len(words))
    out = []
    for w, k in zip(words, kind):
        if k < 8:
            w = w.upper() if k < 2 else w.title()
        elif k < 12:
            w = f" {w}  "
        elif k < 20:
            w = w + "s"
        elif k < 22:
            w = w + "."
        out.append(w)
    return out


def _pick(rng, pools: list[list[str]], probs: list[float], n: int) -> list[str]:
    which = rng.choice(len(pools), size=n, p=probs)
    idx = rng.random(n)
    return [pools[k][int(i * len(pools[k]))] for k, i in zip(which, idx)]


def _boxes(rng, n: int, width: np.ndarray, height: np.ndarray):
    """Boxes: log-normal sizes (~1/5 have both sides >= 100), a few zero-size or partly out."""
    w = np.minimum(rng.lognormal(4.45, 0.9, n).astype(np.int64), width)
    h = np.minimum(rng.lognormal(4.45, 0.9, n).astype(np.int64), height)
    x = (rng.random(n) * np.maximum(width - w, 1)).astype(np.int64)
    y = (rng.random(n) * np.maximum(height - h, 1)).astype(np.int64)
    r = rng.random(n)
    w[r < 0.002] = 0  # zero-size, dropped by mine
    over = (r > 0.99)  # partly outside the image, clipped by mine
    x[over] = width[over] - w[over] // 2
    return x, y, w, h


def _image_sizes(seed: int, n: int):
    rng = np.random.default_rng([seed, 0])
    return rng.integers(500, 1025, n), rng.integers(375, 801, n)


def write_objects(out: Path, n_images: int, seed: int, labels: dict) -> tuple[int, int]:
    """objects.json (v1.4 layout) and attributes.json (v1.2 layout) for the same objects."""
    widths, heights = _image_sizes(seed, n_images)
    n_obj = n_attr = 0
    next_id = 1_000_000
    name_pools = [labels["objects"], labels["persons"], labels["excluded_objects"], list(UNKNOWN)]
    attr_pools = [labels["object_attributes"], labels["human_attributes"],
                  labels["excluded_attributes"], list(UNKNOWN)]
    with open(out / "objects.json", "w") as fo, open(out / "attributes.json", "w") as fa:
        fo.write("[")
        fa.write("[")
        for start in range(0, n_images, CHUNK):
            rng = np.random.default_rng([seed, 1, start])
            stop = min(start + CHUNK, n_images)
            counts = rng.poisson(OBJECTS_PER_IMAGE, stop - start)
            total = int(counts.sum())
            img = np.repeat(np.arange(start, stop), counts)
            x, y, w, h = _boxes(rng, total, widths[img], heights[img])
            names = _noisy(rng, _pick(rng, name_pools, [0.55, 0.15, 0.1, 0.2], total))
            second = rng.random(total) < 0.05  # a few objects carry two names
            n_attrs = rng.choice(4, size=total, p=[0.45, 0.4, 0.1, 0.05])
            attrs = _noisy(rng, _pick(rng, attr_pools, [0.5, 0.2, 0.15, 0.15], int(n_attrs.sum())))
            merged = rng.random(total) < 0.02
            obj_parts, attr_parts, a = [], [], 0
            o = 0
            for i, c in zip(range(start, stop), counts):
                objs, atts = [], []
                for _ in range(c):
                    oid = next_id
                    next_id += 2 if merged[o] else 1
                    nm = f'"{names[o]}", "{names[o - 1]}"' if second[o] else f'"{names[o]}"'
                    box = f'"h": {h[o]}, "w": {w[o]}, "y": {y[o]}, "x": {x[o]}'
                    syn = f'"synsets": ["{names[o].strip().lower()}.n.01"]'
                    mids = f"[{oid + 1}]" if merged[o] else "[]"
                    objs.append(f'{{{syn}, {box}, "object_id": {oid}, '
                                f'"merged_object_ids": {mids}, "names": [{nm}]}}')
                    k = n_attrs[o]
                    at = (f', "attributes": [{", ".join(chr(34) + t + chr(34) for t in attrs[a:a + k])}]'
                          if k else "")
                    a += k
                    atts.append(f'{{{syn}, {box}, "object_id": {oid}, "names": [{nm}]{at}}}')
                    o += 1
                image_id = i + 1
                url = f"https://cs.stanford.edu/people/rak248/VG_100K/{image_id}.jpg"
                obj_parts.append(f'{{"image_id": {image_id}, "objects": [{", ".join(objs)}], '
                                 f'"image_url": "{url}"}}')
                attr_parts.append(f'{{"image_id": {image_id}, "attributes": [{", ".join(atts)}]}}')
            sep = ", " if start else ""
            fo.write(sep + ", ".join(obj_parts))
            fa.write(sep + ", ".join(attr_parts))
            n_obj += total
            n_attr += int(n_attrs.sum())
        fo.write("]")
        fa.write("]")
    return n_obj, n_attr


def _phrases(rng, n: int, labels: dict) -> list[str]:
    """Region descriptions: mostly plain, ~4% with a count, ~2% with a non-count number."""
    nouns = labels["objects"]
    adjs = labels["object_attributes"]
    kind = rng.integers(0, 100, n)
    a = rng.integers(0, len(nouns), n)
    b = rng.integers(0, len(nouns), n)
    c = rng.integers(0, len(adjs), n)
    k = rng.integers(1, 11, n)
    out = []
    for i in range(n):
        noun, other, adj, num = nouns[a[i]], nouns[b[i]], adjs[c[i]], int(k[i])
        t = kind[i]
        if t < 3:
            out.append(f"{NUMBER_WORDS[num - 1]} {noun}s on the {other}")
        elif t < 4:
            out.append(f"{num} {adj} {noun}s")
        elif t < 5:
            out.append(f"the clock says {num} o'clock")
        elif t < 6:
            out.append(f"a {num} year old boy near the {noun}")
        elif t < 55:
            out.append(f"the {adj} {noun} is next to the {other}")
        else:
            out.append(f"a {noun} on the {other}")
    return out


def write_regions(out: Path, n_images: int, seed: int, labels: dict) -> int:
    """region_descriptions.json and image_data.json."""
    widths, heights = _image_sizes(seed, n_images)
    with open(out / "image_data.json", "w") as f:
        f.write("[" + ", ".join(
            f'{{"width": {widths[i]}, "url": "https://cs.stanford.edu/people/rak248/VG_100K/'
            f'{i + 1}.jpg", "height": {heights[i]}, "image_id": {i + 1}, "coco_id": null, '
            f'"flickr_id": {9000 + i}}}' for i in range(n_images)) + "]")
    n_regions = 0
    next_id = 1
    with open(out / "region_descriptions.json", "w") as f:
        f.write("[")
        for start in range(0, n_images, CHUNK):
            rng = np.random.default_rng([seed, 2, start])
            stop = min(start + CHUNK, n_images)
            counts = rng.poisson(REGIONS_PER_IMAGE, stop - start)
            total = int(counts.sum())
            img = np.repeat(np.arange(start, stop), counts)
            x, y, w, h = _boxes(rng, total, widths[img], heights[img])
            phrases = _phrases(rng, total, labels)
            parts, r = [], 0
            for i, c in zip(range(start, stop), counts):
                regs = []
                for _ in range(c):
                    regs.append(f'{{"region_id": {next_id}, "width": {w[r]}, "height": {h[r]}, '
                                f'"image_id": {i + 1}, "phrase": "{phrases[r]}", "y": {y[r]}, '
                                f'"x": {x[r]}}}')
                    next_id += 1
                    r += 1
                parts.append(f'{{"regions": [{", ".join(regs)}], "id": {i + 1}}}')
            f.write((", " if start else "") + ", ".join(parts))
            n_regions += total
        f.write("]")
    return n_regions


def write_corpus(out: Path, scale: float, seed: int) -> dict:
    n_images = max(1, round(VG_IMAGES * scale))
    stamp = out / "corpus.json"
    wanted = {"images": n_images, "seed": seed}
    if stamp.is_file():
        have = json.loads(stamp.read_text())
        if {k: have.get(k) for k in wanted} == wanted:
            print(f"reusing {out} ({have})")
            return have
    out.mkdir(parents=True, exist_ok=True)
    stamp.unlink(missing_ok=True)
    labels = _labels()
    t0 = time.perf_counter()
    with ProcessPoolExecutor(2) as pool:
        objects = pool.submit(write_objects, out, n_images, seed, labels)
        regions = pool.submit(write_regions, out, n_images, seed, labels)
        n_obj, n_attr = objects.result()
        n_reg = regions.result()
    size = sum((out / f"{s}.json").stat().st_size for s in
               ("image_data", "objects", "attributes", "region_descriptions"))
    info = {**wanted, "objects": n_obj, "attribute_annotations": n_attr, "regions": n_reg,
            "bytes": size, "write_s": round(time.perf_counter() - t0, 1)}
    stamp.write_text(json.dumps(info))
    print(f"wrote {out}: {info}")
    return info


# ---------------------------------------------------------------- measuring
def _tree_rss(root: int) -> tuple[int, int]:
    """(sum, max) resident bytes over `root` and all its descendants."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid, ppid = int(d), int(fields[1])
        children.setdefault(ppid, []).append(pid)
        rss[pid] = int(fields[21]) * os.sysconf("SC_PAGE_SIZE")
    total, peak, stack = 0, 0, [root]
    while stack:
        pid = stack.pop()
        total += rss.get(pid, 0)
        peak = max(peak, rss.get(pid, 0))
        stack.extend(children.get(pid, ()))
    return total, peak


def measure(cmd: list[str]) -> dict:
    """Run `cmd`; wall seconds and peak RSS: the tree's sum by polling, and the largest process
    from `wait4`, whose usage covers the command and every worker it waited for (this run's
    alone: RUSAGE_CHILDREN would also hold the earlier runs and subprocesses of this bench)."""
    t0 = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, text=True)
        peak_sum = peak_one = 0
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            s, m = _tree_rss(proc.pid)
            peak_sum, peak_one = max(peak_sum, s), max(peak_one, m)
            time.sleep(0.05)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0), err.seek(0)
        out, err = out.read(), err.read()
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{err[-2000:]}")
    maxrss = usage.ru_maxrss * 1024
    return {"wall_s": wall, "peak_tree_bytes": max(peak_sum, peak_one),
            "peak_process_bytes": max(peak_one, maxrss), "stdout": out}


def _load_avg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def anchors_and_passes(vg: Path) -> dict:
    """Seconds: bare ijson parse of each pass's files, and each pass alone on one core."""
    import ijson

    from vprom.domain import MIN_SIDE
    from vprom.mining import byte_ranges, readers
    from vprom.mining.pools import _FILES, COUNTS, OBJECTS, Setup, _jobs, _scans, run_job
    from vprom.mining.vocab import load_vocabulary

    paths = {stem: readers.locate(vg, stem) for stem in readers.FILES}
    vocab = load_vocabulary()
    sizes, _ = readers.image_sizes(paths[readers.IMAGE_DATA])
    setup = Setup(paths, sizes, MIN_SIDE, vocab)
    out = {}
    for kind in (OBJECTS, COUNTS):
        t0 = time.perf_counter()
        for stem in _FILES[kind]:
            with open(paths[stem], "rb") as f:
                for _ in ijson.items(f, "item", use_float=True):
                    pass
        out[f"{kind} parse"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        for job in _jobs({kind: _scans(paths, kind)}):
            assert run_job(setup, job)[1] is not None
        out[f"{kind} pass"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        for stem in _FILES[kind]:
            scan = byte_ranges.JoinScan.open(paths[stem])
            while not scan.done:
                scan.more()
        out[f"{kind} scan"] = time.perf_counter() - t0
    return out


def _crops_hash(path: Path) -> str:
    from fingerprint import hash_h5

    return hash_h5(path)[:16]


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, default=Path("/tmp/vg_full"))
    p.add_argument("--scale", type=float, default=1.0, help="fraction of VG's 108,077 images")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workers", default="1,2,4", help="comma-separated worker counts")
    p.add_argument("--no-json-load", action="store_true", help="skip the json.load comparison")
    p.add_argument("--rounds", type=int, default=1,
                   help="time the passes and their anchors this many times, each keeping its "
                        "best (the anchors alone move by 20%% on a shared machine)")
    args = p.parse_args(argv)
    if args.scale < 1 and args.out == Path("/tmp/vg_full"):
        args.out = Path(f"/tmp/vg_scale_{args.scale:g}")
    info = write_corpus(args.out, args.scale, args.seed)
    gb = 1e9
    print(f"load average before: {_load_avg()} (2 cores shared)")
    rounds = [anchors_and_passes(args.out) for _ in range(args.rounds)]
    t = {key: min(r[key] for r in rounds) for key in rounds[0]}  # each figure's best round
    for i, r in enumerate(rounds if args.rounds > 1 else ()):
        print(f"round {i + 1}: " + ", ".join(
            f"{kind} pass {r[kind + ' pass']:.1f} s / parse {r[kind + ' parse']:.1f} s = "
            f"{r[kind + ' pass'] / r[kind + ' parse']:.2f}x" for kind in ("objects", "counts")))
    for kind, limit in (("objects", 1.3), ("counts", 1.5)):
        print(f"{kind} pass, one core: {t[kind + ' pass']:6.1f} s (scan alone "
              f"{t[kind + ' scan']:.1f} s); bare ijson.items of its files {t[kind + ' parse']:6.1f} s"
              f" -> {t[kind + ' pass'] / t[kind + ' parse']:.2f}x (target <= {limit}x)")
    runs, hashes = {}, set()
    for n in (int(w) for w in args.workers.split(",")):
        pools = args.out.with_name(args.out.name + "_pools") / f"pools_w{n}.h5"
        runs[n] = measure([sys.executable, "-m", "vprom", "mine", "--vg", str(args.out),
                           "--out", str(pools), "--workers", str(n)])
        hashes.add(_crops_hash(pools))
        print(runs[n]["stdout"].splitlines()[0])
    print(f"\n{'workers':>8} {'wall s':>8} {'peak GB (tree)':>15} {'largest process GB':>19} "
          f"{'MB/s':>6}")
    for n, r in runs.items():
        print(f"{n:>8} {r['wall_s']:>8.1f} {r['peak_tree_bytes'] / gb:>15.2f} "
              f"{r['peak_process_bytes'] / gb:>19.2f} {info['bytes'] / r['wall_s'] / 1e6:>6.0f}")
    # the one-worker run's own stage times: its chunks' work, and the rest less the scan
    one = runs[min(runs)]
    stages = {k: float(v) for k, v in re.findall(r"(\w+ pass|merge\+write) ([\d.]+) s",
                                                  one["stdout"].splitlines()[0])}
    scan = t["objects scan"] + t["counts scan"]
    work = stages["objects pass"] + stages["counts pass"]
    serial = one["wall_s"] - work - scan  # start, image sizes, vocabulary, merge, write
    print(f"{16:>8} {serial + max(scan, work / 16):>8.1f}   (projected: serial {serial:.1f} s "
          f"+ max(scan {scan:.1f} s, one-core work {work:.1f} s / 16))")
    print(f"POOLS.h5 identical for every worker count: {len(hashes) == 1} ({sorted(hashes)})")
    if not args.no_json_load:
        mine = runs[max(runs)]
        peaks = {}
        for stem in ("image_data", "objects", "attributes", "region_descriptions"):
            path = args.out / f"{stem}.json"
            r = measure([sys.executable, "-c",
                         "import json, sys; json.load(open(sys.argv[1], 'rb'))", str(path)])
            peaks[stem] = r["peak_tree_bytes"]
            print(f"json.load {stem + '.json':26s} {r['wall_s']:6.1f} s  peak RSS "
                  f"{r['peak_tree_bytes'] / gb:.2f} GB")
        worst = max(peaks.values())
        print(f"peak RSS ratio json.load (largest file) / vprom mine: "
              f"{worst / mine['peak_tree_bytes']:.1f}x")
    print(f"load average after: {_load_avg()}")


if __name__ == "__main__":
    main()
