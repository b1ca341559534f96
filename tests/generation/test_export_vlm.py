"""`vprom export --format vlm`: the grid image read from its pixels (from the JPEGs and from a
crop store), the lmms-eval Parquet and the VLMEvalKit TSV read as those harnesses read them,
the stratified --limit, no leak of the answer, and bad input refused in one line."""

from __future__ import annotations

import base64
import colorsys
import io
import itertools
import string
from collections import Counter

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from PIL import Image, ImageDraw, ImageFont
from vprom.generation.export import export

from tests.dataset_fixture import build_records, write_dataset, write_images
from tests.generation.synthetic_build import synthetic_build  # noqa: F401 (fixture)
from vprom.app import cli
from vprom.features.crop_store import StoreJob, build_crop_store
from vprom.generation.export.vlm import TILE, grid_positions
from vprom.errors import VpromError
from vprom.tables import read_matrix_table

LETTERS = "ABCDEFGH"
#: 16 saturated hues, neighbours 95 apart in a channel, none near the grey or white of
#: the canvas: the crops of the pixel test's matrix
PALETTE = [tuple(round(255 * v) for v in colorsys.hsv_to_rgb(k / 16, 1, 1)) for k in range(16)]


def rows(out, part="test"):
    return pq.read_table(sorted((out / "lmms_eval" / "data").glob(f"{part}-*.parquet"))).to_pylist()


def decoded(data: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB")).astype(int)


# ---------------------------------------------------------------- the grid, from pixels
@pytest.fixture(scope="module", params=["jpegs", "crop store"])
def coloured(tmp_path_factory, request):
    """A data set whose matrix 0 shows 16 crops, each painted one PALETTE colour, exported
    from its JPEGs or from its crop store."""
    root = tmp_path_factory.mktemp("vlm-colours")
    crops, matrices = build_records(1, seed=3)
    m = matrices[0]
    colour = {crop_id: PALETTE[k] for k, crop_id in enumerate(m.panels)}
    folder = root / "vg" / "VG_100K"
    folder.mkdir(parents=True)
    for image_id in sorted({c.image_id for c in crops}):
        im = Image.new("RGB", (320, 240), (128, 128, 128))
        draw = ImageDraw.Draw(im)
        for c in crops:
            if c.image_id == image_id:
                draw.rectangle([c.x, c.y, c.x + c.w - 1, c.y + c.h - 1],
                               fill=colour.get(c.crop_id, (128, 128, 128)))
        im.save(folder / f"{image_id}.jpg", quality=95)
    dataset = write_dataset(root / "d.h5", crops, matrices)
    parts = read_matrix_table(dataset).part_columns()
    split, part = next((s, col[0]) for s, col in parts.items() if col[0] != "excluded")
    out = root / "out"
    source = {"vg_dir": root / "vg"}
    if request.param == "crop store":
        source = {"crop_store": build_crop_store(
            StoreJob(dataset, root / "vg", TILE, root / "crops.h5", workers=1),
            log=lambda _: None)}
    export(dataset, "vlm", out, split=split, part=part, **source)
    row = next(r for r in rows(out, part) if r["matrix_id"] == m.id)
    return m, colour, decoded(row["image"]["bytes"])


def box_of(pixels: np.ndarray, colour) -> tuple[int, int, int, int]:
    """Bounding box (x0, y0, x1, y1) of the pixels within 40 of `colour` in every channel."""
    ys, xs = np.nonzero((np.abs(pixels - np.array(colour)) < 40).all(axis=2))
    assert len(xs) > 2000, f"colour {colour} is not in the image"
    return xs.min(), ys.min(), xs.max() + 1, ys.max() + 1


def glyph(mask: np.ndarray) -> np.ndarray:
    """A dark-pixel mask cut to its bounding box and scaled to 24x24."""
    ys, xs = np.nonzero(mask)
    cut = mask[ys.min():ys.max() + 1, xs.min():xs.max() + 1]
    return np.asarray(Image.fromarray(cut.astype(np.uint8) * 255).resize((24, 24))) > 127


def letter_templates() -> list[np.ndarray]:
    out = []
    for letter in LETTERS:
        im = Image.new("L", (80, 80), 255)
        ImageDraw.Draw(im).text((20, 10), letter, fill=0, font=ImageFont.load_default(size=40))
        out.append(glyph(np.asarray(im) < 128))
    return out


def test_grid_puts_candidate_k_under_letter_k(coloured):
    m, colour, pixels = coloured
    height, width = pixels.shape[:2]
    assert max(height, width) == 1024
    context = [box_of(pixels, colour[c]) for c in m.panels[:8]]
    candidates = [box_of(pixels, colour[c]) for c in m.panels[8:]]
    # the context reads row by row in a 3x3 matrix; the candidates lie below all of it
    centres = [((x0 + x1) / 2, (y0 + y1) / 2) for x0, y0, x1, y1 in context]
    for k, (x, y) in enumerate(centres[1:], 1):
        before = centres[k - 1]
        assert (x > before[0]) if k % 3 else (y > before[1] and x < before[0])
    assert min(y0 for _, y0, _, _ in candidates) > max(y1 for _, _, _, y1 in context)
    templates = letter_templates()
    for k, (x0, y0, x1, y1) in enumerate(candidates):
        if k % 4:  # two rows of four, in reading order
            before = candidates[k - 1]
            assert x0 > before[2] and abs((y0 + y1) - (before[1] + before[3])) <= 2
        dark = (pixels[max(y0 - 80, 0):y0, x0:x1] < 100).all(axis=2)
        inked = np.flatnonzero(dark.any(axis=1))
        bottom = top = inked[-1]  # the band of inked rows nearest the tile: its letter
        while top - 1 in inked:
            top -= 1
        seen = glyph(dark[top:bottom + 1])
        distances = [np.count_nonzero(seen != t) for t in templates]
        assert int(np.argmin(distances)) == k, f"the letter above candidate {k}: {distances}"


# ---------------------------------------------------------------- from a crop store
@pytest.fixture(scope="module")
def from_store(tmp_path_factory):
    """A small data set with its JPEGs and its crop store (S = 224), and one part's grid
    export from each: (dataset, root, rows from the JPEGs, rows from the store)."""
    root = tmp_path_factory.mktemp("vlm-store")
    crops, matrices = build_records(1, seed=0)
    dataset = write_dataset(root / "d.h5", crops, matrices)
    vg = write_images(root / "vg", crops)
    store = build_crop_store(StoreJob(dataset, vg, 224, root / "crops.h5", workers=1),
                             log=lambda _: None)
    part = "test"
    split = next(s for s, col in read_matrix_table(dataset).part_columns().items()
                 if (col == part).sum() >= 3)
    export(dataset, "vlm", root / "jpegs", vg_dir=vg, split=split, part=part)
    export(dataset, "vlm", root / "store", crop_store=store, split=split, part=part)
    return dataset, root, rows(root / "jpegs", part), rows(root / "store", part)


def test_a_grid_from_a_crop_store_matches_the_grid_from_the_jpegs(from_store):
    """The store holds resized pixels (S x S, aspect not kept), not the JPEGs, so a tile from
    it is resampled twice: equal to the JPEGs' tile within resampling error, and nearer to
    it than to any other tile of the problem."""
    _, _, jpegs, stored = from_store
    assert len(jpegs) >= 3
    assert [{**r, "image": r["image"]["path"]} for r in jpegs] == \
        [{**r, "image": r["image"]["path"]} for r in stored]
    places = [p for k, p in enumerate(grid_positions()) if k != 8]  # 8: the "?" cell
    for a, b in zip(jpegs, stored):
        want, got = decoded(a["image"]["bytes"]), decoded(b["image"]["bytes"])
        assert np.abs(want - got).mean() < 2
        tiles = [(want[y:y + TILE, x:x + TILE], got[y:y + TILE, x:x + TILE]) for x, y in places]
        for k, (_, tile) in enumerate(tiles):
            errors = [np.abs(tile - other).mean() for other, _ in tiles]
            assert errors[k] < 6 and int(np.argmin(errors)) == k


def test_a_crop_store_of_another_data_set_or_too_small_is_refused(from_store, synthetic_build,
                                                                   tmp_path, capsys):
    dataset, root, _, _ = from_store
    small = build_crop_store(StoreJob(dataset, root / "vg", 24, tmp_path / "small.h5",
                                      workers=1), log=lambda _: None)
    for data, store, message in (
            (synthetic_build[0], root / "crops.h5", "made from another data set than"),
            (dataset, small, "its crops are 24 px, smaller than the grid layout's 176 px")):
        code = cli.main(["export", str(data), "--format", "vlm", "--crops", str(store),
                         "--out", str(tmp_path / "o")])
        err = capsys.readouterr().err.strip()
        assert code != 0 and message in err and len(err.splitlines()) == 1
        assert not (tmp_path / "o").exists()


# ---------------------------------------------------------------- formats, as the harnesses read them
@pytest.fixture(scope="module")
def exports(synthetic_build, tmp_path_factory):
    dataset, vg = synthetic_build
    root = tmp_path_factory.mktemp("vlm")
    summaries = {layout: export(dataset, "vlm", root / layout, vg_dir=vg if layout != "text"
                                else None, layout=layout, limit=40, seed=1)
                 for layout in ("grid", "panels", "text")}
    return dataset, root, summaries


def vlmevalkit_rows(tsv) -> list[dict]:
    """VLMEvalKit's reading of a custom MCQ TSV, restated from its source (vlmeval/dataset/
    __init__.py build_dataset, image_base.py ImageBaseDataset and image_mcq.py build_prompt):
    pandas.read_csv(sep="\\t"); a `question` column and columns A and B make an MCQ data set,
    one with `image` (or `image_path`) an image one; `index` becomes str; an image cell is
    base64, or a Python list literal of them (`toliststr`), and 64 characters or fewer name
    another row's index; the options are the capital-letter columns present and not NaN."""
    data = pd.read_csv(tsv, sep="\t")
    assert "question" in [c.lower() for c in data.columns] and "A" in data and "B" in data
    out = []
    for _, line in data.iterrows():
        row = {"index": str(line["index"]), "question": line["question"],
               "answer": line["answer"], "category": line["category"],
               "l2-category": line["l2-category"],
               "options": {c: line[c] for c in string.ascii_uppercase
                           if c in line and not pd.isna(line[c])}}
        if "image" in data:
            cell = str(line["image"])
            assert len(cell) > 64
            images = [str(x) for x in eval(cell)] if cell.startswith("[") else [cell]
            row["images"] = [Image.open(io.BytesIO(base64.b64decode(x))) for x in images]
        out.append(row)
    return out


def test_lmms_eval_parquet_rows(exports):
    dataset, root, summaries = exports
    m = read_matrix_table(dataset)
    where = {int(i): k for k, i in enumerate(m.id)}
    for layout, summary in summaries.items():
        got = rows(root / layout)
        assert len(got) == summary.counts["problems"] == 40
        for r in got:
            i = where[r["matrix_id"]]
            assert r["answer"] == LETTERS[int(m.answer[i])]
            assert (r["relation"], r["element_type"]) == (m.relation[i], m.element_type[i])
            assert m.splits["neutral"]["test"].tolist().count(r["matrix_id"]) == 1
        if layout == "grid":
            assert Image.open(io.BytesIO(got[0]["image"]["bytes"])).size == (744, 1024)
        if layout == "panels":
            assert len(got[0]["images"]) == 16
        if layout == "text":
            assert "image" not in got[0] and "images" not in got[0]
            assert got[0]["question"].count("\n") >= 12  # 3 rows, "candidates:", A-H
        yaml = (root / layout / "lmms_eval" / f"{summary.counts['task']}.yaml").read_text()
        assert f"test: {root / layout}/lmms_eval/data/test-*.parquet" in yaml
        assert "!function vprom_hooks.process_results" in yaml
        assert (root / layout / "lmms_eval" / "vprom_hooks.py").is_file()


def test_vlmevalkit_tsv_reads_as_an_mcq_data_set(exports):
    dataset, root, summaries = exports
    m = read_matrix_table(dataset)
    where = {int(i): k for k, i in enumerate(m.id)}
    for layout, summary in summaries.items():
        read = vlmevalkit_rows(root / layout / summary.counts["tsv"])
        assert len(read) == 40
        for r in read:
            i = where[int(r["index"])]
            assert list(r["options"]) == list(LETTERS)
            assert r["answer"] == LETTERS[int(m.answer[i])]
            assert (r["category"], r["l2-category"]) == (m.relation[i], m.element_type[i])
            assert len(r.get("images", [])) == {"grid": 1, "panels": 16, "text": 0}[layout]
        if layout == "text":
            i = where[int(read[0]["index"])]
            assert read[0]["options"]["A"] in read[0]["question"]


def test_limit_is_stratified_and_seeded(synthetic_build, tmp_path):
    dataset, _ = synthetic_build
    m = read_matrix_table(dataset)
    test = np.isin(m.id, m.splits["neutral"]["test"])
    sizes = Counter(zip(m.relation[test], m.element_type[test]))
    ids = {}
    for name, seed in (("a", 0), ("b", 0), ("c", 5)):
        export(dataset, "vlm", tmp_path / name, layout="text", limit=26, seed=seed)
        ids[name] = [r["matrix_id"] for r in rows(tmp_path / name)]
    assert ids["a"] == ids["b"] and ids["a"] != ids["c"] and len(set(ids["a"])) == 26
    where = {int(i): k for k, i in enumerate(m.id)}
    drawn = Counter((m.relation[where[i]], m.element_type[where[i]]) for i in ids["a"])
    # water-filling: cells with problems left share evenly; a full cell had no more to give
    open_counts = [drawn[c] for c in sizes if drawn[c] < sizes[c]]
    assert open_counts and max(open_counts) - min(open_counts) <= 1
    assert all(drawn[c] <= min(open_counts) + 1 for c in sizes)
    assert sum(drawn.values()) == 26


def test_no_file_but_the_answer_column_reveals_the_answer(exports):
    _, root, summaries = exports
    for layout in ("grid", "panels"):
        got = rows(root / layout)
        assert len({r["question"] for r in got}) == 1  # the same text for every problem
        names = [im["path"] for r in got for im in (r.get("images") or [r["image"]])]
        ids = {str(r["matrix_id"]) for r in got}
        assert all(n.split(".")[0].split("-")[0] in ids for n in names)
        read = vlmevalkit_rows(root / layout / summaries[layout].counts["tsv"])
        assert len({tuple(r["options"].values()) for r in read}) == 1
    # the order is shuffled: neither by matrix id nor grouped by answer
    got = rows(root / "grid")
    order = [r["matrix_id"] for r in got]
    assert order != sorted(order)
    answers = [r["answer"] for r in got]
    assert sum(a != b for a, b in itertools.pairwise(answers)) > len(answers) // 2
    files = {p.relative_to(root / "grid").as_posix() for p in (root / "grid").rglob("*")}
    assert files == {"lmms_eval", "lmms_eval/data", "lmms_eval/data/test-00000.parquet",
                     "lmms_eval/vprom_hooks.py", "lmms_eval/vprom_neutral_test_grid.yaml",
                     "vlmevalkit", "vlmevalkit/VPROM_NEUTRAL_TEST_GRID.tsv", "prompt.txt",
                     "manifest.json"}


def test_prompt_file_replaces_the_template(synthetic_build, tmp_path):
    dataset, _ = synthetic_build
    prompt = tmp_path / "prompt.txt"
    prompt.write_text("Solve it.\n{panels}\nReply with a single letter.")
    export(dataset, "vlm", tmp_path / "out", layout="text", limit=3, prompt=prompt)
    text = rows(tmp_path / "out")[0]["question"]
    assert text.startswith("Solve it.\n") and text.endswith("Reply with a single letter.")
    assert "row 1: [" in text and "\nH: [" in text


@pytest.mark.parametrize("args, message", [
    (["--layout", "text", "--split", "nosuch"], "no split 'nosuch'"),
    (["--layout", "text", "--prompt", "{missing}"], "must hold {panels}"),
    (["--layout", "grid"], "pass --vg"),
    (["--layout", "text", "--prompt", "{empty}"], "the file is empty"),
])
def test_bad_input_is_one_line(synthetic_build, tmp_path, capsys, args, message):
    dataset, _ = synthetic_build
    (tmp_path / "missing.txt").write_text("Which one?")
    (tmp_path / "empty.txt").write_text("\n")
    args = [a.replace("{missing}", str(tmp_path / "missing.txt"))
            .replace("{empty}", str(tmp_path / "empty.txt")) for a in args]
    code = cli.main(["export", str(dataset), "--format", "vlm", "--out", str(tmp_path / "o"),
                     *args])
    err = capsys.readouterr().err.strip()
    assert code != 0 and message in err and len(err.splitlines()) == 1
    assert not (tmp_path / "o").exists()


def test_an_empty_part_is_refused(tmp_path):
    crops, matrices = build_records(1, seed=3)
    dataset = write_dataset(tmp_path / "d.h5", crops, matrices)
    m = read_matrix_table(dataset)
    empty = next(((s, p) for s in m.splits for p in ("train", "val", "test")
                  if len(m.splits[s].get(p, [])) == 0), None)
    assert empty is not None, "the fixture leaves a part of some split empty"
    with pytest.raises(VpromError, match=f"has no {empty[1]} problems"):
        export(dataset, "vlm", tmp_path / "o", layout="text", split=empty[0], part=empty[1])
