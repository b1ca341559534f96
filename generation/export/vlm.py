"""`vprom export --format vlm`: problems of `split`'s `part` for lmms-eval and VLMEvalKit, with
`limit` a sample stratified over relation x element type, shuffled and named by matrix id so
neither order nor name tells the answer (A-H: candidates 0-7). Layouts: `grid`, ml-rpm-bench's
"fused" image (the matrix with a "?" cell above the lettered candidates); `panels`, 16
letterboxed JPEGs; `text`, each crop's sorted labels. Each chunk's crops are letterboxed once,
from the JPEGs or a crop store (resized back to the box's shape).

Files: `lmms_eval/` (for --include_path) holds `<task>.yaml` in lmms-eval 0.7.3's `TaskConfig`
keys (Parquet `data_files` absolute, as `datasets` resolves them from the working directory),
`vprom_hooks.py` (a copy of `vlm_task`) and `data/<part>-NNNNN.parquet`; `vlmevalkit/<TASK>.tsv`
is the custom MCQ TSV VLMEvalKit reads with `pandas.read_csv(sep="\\t")`, `image` base64 JPEG
(panels: a list literal of 16).
"""
from __future__ import annotations

import base64
import csv
import io
import shutil
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw
from tqdm import tqdm

from vprom.domain import N_CANDIDATES, N_CONTEXT
from vprom.crop_store import CropStore, store_rows
from vprom.errors import VpromError
from vprom.files import atomic_dir, write_json
import vprom.generation.export.vlm_task as hooks
from vprom.generation.export.crops import (
    WORKERS,
    check_split,
    cut_crops,
    jpeg,
    labels,
    template_text,
)
from vprom.generation.export.hf import INT, STRING, pyarrow_modules, write_table
from vprom.images import BACKGROUND, INK, TILE_BACKGROUND, centred, font, letterbox
from vprom.tables import SPLIT_PARTS, CropTable, MatrixTable

LAYOUTS = ("grid", "panels", "text")
HOOKS = "vprom_hooks"
LETTERS = hooks.LETTERS
#: the Parquet columns' `datasets` features: the text ones, then the layout's pictures
FEATURES = {"matrix_id": INT, "question": STRING, "answer": STRING, "relation": STRING,
            "element_type": STRING, "super_attribute": STRING}
IMAGE = {"_type": "Image"}
PICTURE_FEATURES = {"grid": {"image": IMAGE}, "panels": {"images": [IMAGE]}, "text": {}}
TSV_COLUMNS = ("index", "question", *LETTERS, "answer", "category", "l2-category",
               "super_attribute")
#: the grid, px: tiles GAP apart, a LABEL strip over each candidate, SEPARATOR under the matrix
TILE, GAP, LABEL, SEPARATOR = 176, 8, 36, 32
GRID = (4 * TILE + 5 * GAP, GAP + 3 * TILE + 2 * GAP + SEPARATOR + 2 * (LABEL + TILE) + 2 * GAP)
PANEL = 336  # side of a panels-layout image
JPEG_QUALITY = 90
CHUNK = 500  # problems rendered at a time: bounds the tiles held in memory
STORE_BATCH = 256  # crops read from a crop store at a time
#: the default question; "{panels}" becomes WHERE[layout]
TEMPLATE = template_text("vlm_question.txt").strip()
WHERE = {
    "grid": "The matrix is at the top of the image, the missing cell marked \"?\"; the "
            "candidates are below it, each under its letter.",
    "panels": "Images 1 to 8 are the cells of the matrix row by row, without the last one; "
              "images 9 to 16 are the candidates A to H.",
    "text": "Here each photograph is described by the labels of what it shows.\n{rows}",
}


@dataclass(frozen=True)
class VlmOptions:
    split: str
    part: str
    layout: str
    template: str
    limit: int | None
    seed: int


def vlm_options(m: MatrixTable, split: str, part: str, layout: str, prompt: str | Path | None,
                limit: int | None, seed: int) -> VlmOptions:
    """The checked options; `prompt`: a file holding the question (None: `TEMPLATE`)."""
    template = TEMPLATE
    if prompt is not None:
        try:
            template = Path(prompt).read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as e:
            raise VpromError(f"--prompt {prompt}: cannot read it ({e}); pass a UTF-8 text "
                             "file") from None
        if not template:
            raise VpromError(f"--prompt {prompt}: the file is empty; write the question in it")
    if layout not in LAYOUTS:
        raise VpromError(f"unknown --layout {layout!r}; choose one of {', '.join(LAYOUTS)}")
    check_split(m, split)
    if part not in SPLIT_PARTS:
        raise VpromError(f"unknown --part {part!r}; choose one of {', '.join(SPLIT_PARTS)}")
    if limit is not None and limit < 1:
        raise VpromError(f"--limit {limit}: pass a number of problems of at least 1")
    if layout == "text" and "{panels}" not in template:
        raise VpromError(f"--prompt {prompt}: a text-layout prompt must hold "
                         "{panels}, where the panels' labels go; add it to the file")
    return VlmOptions(split, part, layout, template, limit, seed)


def choose(m: MatrixTable, options: VlmOptions) -> np.ndarray:
    """Matrix rows of the export, in their (shuffled) export order."""
    rng = np.random.default_rng(options.seed)
    rows = np.flatnonzero(m.part_columns()[options.split] == options.part)
    if len(rows) == 0:
        raise VpromError(f"split {options.split!r} has no {options.part} problems; pass "
                         "another --part or --split")
    if options.limit is not None and options.limit < len(rows):
        cells = [rows[(m.relation[rows] == r) & (m.element_type[rows] == t)]
                 for r, t in sorted(set(zip(m.relation[rows], m.element_type[rows])))]
        quota = even_shares(np.array([len(c) for c in cells]), options.limit, rng)
        rows = np.concatenate([rng.choice(c, q, replace=False) for c, q in zip(cells, quota)])
    return rng.permutation(rows)


def even_shares(sizes: np.ndarray, total: int, rng: np.random.Generator) -> np.ndarray:
    """`total` shared over cells of `sizes` as evenly as they allow, the rest at random."""
    quota = np.zeros_like(sizes)
    while total > 0 and (quota < sizes).any():
        open_cells = np.flatnonzero(quota < sizes)
        share = total // len(open_cells)
        if share == 0:
            quota[rng.permutation(open_cells)[:total]] += 1
            break
        take = np.minimum(share, sizes[open_cells] - quota[open_cells])
        quota[open_cells] += take
        total -= int(take.sum())
    return quota


def question(template: str, layout: str, descriptions: list[str] | None = None) -> str:
    where = WHERE[layout]
    if layout == "text":
        context = [f"[{d}]" for d in descriptions[:N_CONTEXT]] + ["?"]
        rows = [f"row {r + 1}: " + " | ".join(context[3 * r:3 * r + 3]) for r in range(3)]
        rows += [f"{LETTERS[k]}: [{d}]" for k, d in enumerate(descriptions[N_CONTEXT:])]
        where = where.replace("{rows}", "\n".join(rows[:3] + ["candidates:"] + rows[3:]))
    return template.replace("{panels}", where)


def grid_positions() -> list[tuple[int, int]]:
    """Top-left corners of the 9 matrix cells (the 9th is the "?"), then of candidates A-H."""
    left = (GRID[0] - (3 * TILE + 2 * GAP)) // 2
    cells = [(left + c * (TILE + GAP), GAP + r * (TILE + GAP)) for r in range(3)
             for c in range(3)]
    top = GAP + 3 * TILE + 2 * GAP + SEPARATOR + LABEL
    return cells + [(GAP + (k % 4) * (TILE + GAP), top + (k // 4) * (LABEL + TILE + GAP))
                    for k in range(N_CANDIDATES)]


@lru_cache(maxsize=1)
def grid_canvas() -> np.ndarray:
    im = Image.new("RGB", GRID, BACKGROUND)
    draw = ImageDraw.Draw(im)
    positions = grid_positions()
    for x, y in positions[:8]:
        draw.rectangle([x, y, x + TILE - 1, y + TILE - 1], fill=TILE_BACKGROUND)
    x, y = positions[8]
    draw.rectangle([x, y, x + TILE - 1, y + TILE - 1], fill=TILE_BACKGROUND, outline=INK,
                   width=3)
    centred(draw, (x, y, x + TILE, y + TILE), "?", font(96))
    line = positions[9][1] - LABEL - SEPARATOR // 2
    draw.line([(GAP, line), (GRID[0] - GAP, line)], fill=INK, width=2)
    for k, (x, y) in enumerate(positions[9:]):
        centred(draw, (x, y - LABEL, x + TILE, y), LETTERS[k], font(30))
    return np.asarray(im)


def render_grid(tiles: list[np.ndarray]) -> bytes:
    canvas = grid_canvas().copy()
    positions = grid_positions()
    for tile, (x, y) in zip(tiles, positions[:8] + positions[9:]):
        canvas[y:y + TILE, x:x + TILE] = tile
    return jpeg(Image.fromarray(canvas), JPEG_QUALITY)


def unstretched(pixels: np.ndarray, w: int, h: int, side: int) -> np.ndarray:
    """A crop store's S x S crop (channels first) resized back to the w x h box's shape in
    the tile and centred, as `letterbox` tiles the crop (bilinear: half Lanczos's cost)."""
    scale = side / max(w, h, 1)
    fitted = (max(1, round(w * scale)), max(1, round(h * scale)))
    crop = Image.fromarray(pixels.transpose(1, 2, 0)).resize(fitted, Image.Resampling.BILINEAR)
    return np.asarray(letterbox(crop, side))


def open_store(path: Path, dataset: Path, crops: CropTable, rows: np.ndarray,
               layout: str) -> tuple[CropStore, np.ndarray]:
    """The crop store at `path` and its row of each crop-table row in `rows` (else -1)."""
    store = CropStore(path)
    try:
        side = TILE if layout == "grid" else PANEL
        if store.size < side:
            raise VpromError(f"--crops {path}: its crops are {store.size} px, smaller than the "
                             f"{layout} layout's {side} px tiles; build one with `vprom crops "
                             f"--size {side}` or more, or leave out --crops to cut the JPEGs")
        used = np.unique(rows)
        where = np.full(len(crops), -1, np.int64)
        where[used] = store_rows(store, dataset, crops.crop_id[used], "the data set")
    except BaseException:
        store.close()
        raise
    return store, where


def tiles_of(crops: CropTable, used: np.ndarray, source, side: int) -> dict[int, np.ndarray]:
    """The side x side tile of every crop row in `used`, from JPEGs or `open_store`'s store."""
    tiles: dict[int, np.ndarray] = {}
    if isinstance(source, Path):
        cut_crops(crops, used, source,
                  lambda r, im: tiles.__setitem__(r, np.asarray(letterbox(im, side))))
        return tiles
    store, where = source
    with ThreadPoolExecutor(WORKERS) as pool:  # Pillow resizes without the GIL
        for start in range(0, len(used), STORE_BATCH):
            batch = used[start:start + STORE_BATCH]
            tiles.update(zip(batch.tolist(), pool.map(
                unstretched, store.read_rows(where[batch]), crops.w[batch], crops.h[batch],
                [side] * len(batch))))
    return tiles


def chunk_pictures(crops: CropTable, rows: np.ndarray, chosen: np.ndarray, source,
                   layout: str) -> list:
    """Per problem of `chosen`: the grid JPEG, or the list of 16 panel JPEGs."""
    needed = rows[chosen]
    tiles = tiles_of(crops, np.unique(needed), source, TILE if layout == "grid" else PANEL)
    with ThreadPoolExecutor(WORKERS) as pool:  # Pillow encodes without the GIL
        if layout == "grid":
            return list(pool.map(lambda problem: render_grid([tiles[r] for r in problem]),
                                 needed.tolist()))
        encoded = dict(zip(tiles, pool.map(lambda t: jpeg(Image.fromarray(t), JPEG_QUALITY),
                                           tiles.values())))
    return [[encoded[r] for r in problem] for problem in needed.tolist()]


def problem_records(crops: CropTable, m: MatrixTable, rows: np.ndarray, chosen: np.ndarray,
                    options: VlmOptions, pictures: list) -> list[dict]:
    records = []
    for i, picture in zip(chosen.tolist(), pictures):
        texts = [", ".join(sorted(labels(crops, r))) for r in rows[i].tolist()] \
            if options.layout == "text" else None
        records.append({
            "matrix_id": int(m.id[i]), "answer": LETTERS[int(m.answer[i])],
            "question": question(options.template, options.layout, texts),
            "relation": str(m.relation[i]), "element_type": str(m.element_type[i]),
            "super_attribute": str(m.super_attribute[i]), "picture": picture,
            "options": texts[N_CONTEXT:] if texts else
            [f"candidate {c}" if options.layout == "grid" else f"image {N_CONTEXT + k + 1}"
             for k, c in enumerate(LETTERS)]})
    return records


def tsv_cells(values) -> str:
    """Tab-separated cells, quoted as pandas reads them. Callers append the base64 image cell
    unquoted: `csv.writer` scanning ~150 KB of it costs more than rendering the picture."""
    buffer = io.StringIO()
    csv.writer(buffer, delimiter="\t", lineterminator="\n").writerow(values)
    return buffer.getvalue()[:-1]  # the terminator: a cell holding it is quoted


def problem_columns(problems: list[dict], layout: str) -> dict:
    columns = {k: [p[k] for p in problems] for k in FEATURES}
    if layout == "grid":
        columns["image"] = [{"bytes": p["picture"], "path": f"{p['matrix_id']}.jpg"}
                            for p in problems]
    elif layout == "panels":
        columns["images"] = [[{"bytes": b, "path": f"{p['matrix_id']}-{k + 1}.jpg"}
                              for k, b in enumerate(p["picture"])] for p in problems]
    return columns


def tsv_line(p: dict, layout: str) -> str:
    cells = tsv_cells([p["matrix_id"], p["question"], *p["options"], p["answer"],
                       p["relation"], p["element_type"], p["super_attribute"]])
    if layout == "grid":
        cells += "\t" + base64.b64encode(p["picture"]).decode("ascii")
    elif layout == "panels":
        cells += "\t" + str([base64.b64encode(b).decode("ascii") for b in p["picture"]])
    return cells + "\n"


def write_vlm(crops: CropTable, m: MatrixTable, rows: np.ndarray, out: Path, source,
              options: VlmOptions, manifest: dict) -> dict:
    """Write the export folder `out`, the pictures from `source` (`tiles_of`); its counts."""
    pyarrow_modules()  # before any work
    chosen = choose(m, options)
    layout, part = options.layout, options.part
    task = f"vprom_{options.split}_{part}_{layout}"
    tsv = Path("vlmevalkit") / f"{task.upper()}.tsv"
    final = out.resolve() / "lmms_eval"
    starts = range(0, len(chosen), CHUNK)
    with atomic_dir(out) as tmp:
        lmms = tmp / "lmms_eval"
        (lmms / "data").mkdir(parents=True)
        shutil.copyfile(hooks.__file__, lmms / f"{HOOKS}.py")
        yaml = template_text("lmms_eval_task.yaml").format(
            split=options.split, part=part, layout=layout, task=task, folder=final,
            hooks=HOOKS, data=final / "data" / f"{part}-*.parquet")
        (lmms / f"{task}.yaml").write_text(yaml, encoding="utf-8")
        (tmp / "vlmevalkit").mkdir()
        with open(tmp / tsv, "w", encoding="utf-8", newline="") as f:
            f.write(tsv_cells(TSV_COLUMNS) + ("\timage" if layout != "text" else "") + "\n")
            for shard, start in enumerate(tqdm(starts, desc=f"export vlm {layout}",
                                               unit="chunk", disable=None)):
                block = chosen[start:start + CHUNK]
                pictures = ([None] * len(block) if layout == "text" else
                            chunk_pictures(crops, rows, block, source, layout))
                problems = problem_records(crops, m, rows, block, options, pictures)
                write_table(lmms / "data" / f"{part}-{shard:05d}.parquet",
                            problem_columns(problems, layout),
                            {**FEATURES, **PICTURE_FEATURES[layout]})
                f.writelines(tsv_line(p, layout) for p in problems)
        counts = {"problems": len(chosen), "split": options.split, "part": part,
                  "layout": layout, "limit": options.limit, "task": task,
                  "shards": len(starts), "tsv": str(tsv)}
        (tmp / "prompt.txt").write_text(options.template + "\n", encoding="utf-8")
        write_json(tmp / "manifest.json", {**manifest, "counts": counts})
    return counts
