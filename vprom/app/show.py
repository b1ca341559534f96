"""`vprom show`: one matrix and its candidates as a PNG people can read (Pillow only).

A title, the 3×3 grid of context panels with "?" for the missing cell, then the 8 candidates
numbered 1–8, each crop letterboxed into a square tile. With `answer=True` the correct
candidate is framed in green and a text block spells out the matrix and its answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, PngImagePlugin

from vprom.claim import writes
from vprom.domain import N_CANDIDATES, N_CONTEXT, N_PANELS
from vprom.errors import VpromError
from vprom.file_kinds import DATASET, check_kind
from vprom.files import atomic_path
from vprom.images import (
    BACKGROUND,
    INK,
    TILE_BACKGROUND,
    ImageIndex,
    centred,
    font,
    letterbox,
    load_crop,
)
from vprom.tables import crop_rows, open_h5

TILE, GAP, MARGIN, TITLE_H, LINE_H = 160, 12, 20, 36, 22  # pixels
CAPTION_H = 40  # between grid and candidates, holding the caption
NUMBER_H = 26  # the candidate number under each candidate tile
TEXT_LINES = 7  # of the answer block
FRAME = 5  # width of the answer's green frame
COLUMNS = 4  # candidates per row
GREEN = (20, 160, 60)


@dataclass
class Shown:
    """What the picture needs of one matrix."""

    id: int
    relation: str
    element_type: str
    super_attribute: str
    answer: int
    elements: list[str]
    image_ids: list[int]
    boxes: list[tuple[int, int, int, int]]


def read_matrix(dataset: Path, matrix_id: int) -> Shown:
    """One matrix and its panels' image ids and boxes, read without loading the whole file."""
    check_kind(dataset, DATASET)
    with open_h5(dataset) as h5:
        if "matrices" not in h5 or "crops" not in h5:
            raise VpromError(f"{dataset}: a DATASET.h5 without its 'matrices' or 'crops' "
                             "group; the file is damaged: generate it again")
        ids = h5["matrices/id"][()]
        where = np.flatnonzero(ids == matrix_id)
        if len(where) == 0:
            span = (f"ids {int(ids.min())}..{int(ids.max())}" if len(ids) else "no matrices")
            raise VpromError(f"{dataset}: no matrix with id {matrix_id}; the data set has "
                             f"{len(ids):,} matrices ({span}); pass one of those to --id")
        i = int(where[0])
        g = h5["matrices"]
        panels = g["panels"][i]
        rows = crop_rows(h5["crops/crop_id"][()], panels)
        if (rows < 0).any():
            raise VpromError(f"{dataset}: matrix {matrix_id} shows crop "
                             f"{int(panels[np.argmax(rows < 0)])}, which is not in crops; run "
                             "`vprom verify` and regenerate the data set")
        if not 0 <= int(g["answer"][i]) < N_CANDIDATES:
            raise VpromError(f"{dataset}: matrix {matrix_id} has answer {int(g['answer'][i])}, "
                             "not 0..7; run `vprom verify` and regenerate the data set")
        col = {c: h5[f"crops/{c}"][()][rows] for c in ("image_id", "x", "y", "w", "h")}
        return Shown(id=matrix_id, relation=g["relation"].asstr()[i],
                     element_type=g["element_type"].asstr()[i],
                     super_attribute=g["super_attribute"].asstr()[i], answer=int(g["answer"][i]),
                     elements=list(g["elements"].asstr()[i]),
                     image_ids=[int(v) for v in col["image_id"]],
                     boxes=[tuple(int(col[c][k]) for c in ("x", "y", "w", "h"))
                            for k in range(N_PANELS)])


def canvas_size(answer: bool) -> tuple[int, int]:
    width = 2 * MARGIN + COLUMNS * TILE + (COLUMNS - 1) * GAP
    height = TITLE_H + 3 * TILE + 2 * GAP + CAPTION_H + 2 * (TILE + NUMBER_H) + GAP + MARGIN
    return width, height + (TEXT_LINES * LINE_H + GAP if answer else 0)


def _fit(draw: ImageDraw.ImageDraw, text: str, font, width: int) -> str:  # ellipsised
    if draw.textlength(text, font=font) <= width:
        return text
    while text and draw.textlength(text + "…", font=font) > width:
        text = text[:-1]
    return text + "…"


def tile_positions() -> list[tuple[int, int]]:
    """Top-left corner of the 9 grid cells (row-major) then the 8 candidates."""
    width, _ = canvas_size(False)
    grid_left = (width - (3 * TILE + 2 * GAP)) // 2
    grid = [(grid_left + c * (TILE + GAP), TITLE_H + r * (TILE + GAP))
            for r in range(3) for c in range(3)]
    top = TITLE_H + 3 * TILE + 2 * GAP + CAPTION_H
    candidates = [(MARGIN + (k % COLUMNS) * (TILE + GAP),
                   top + (k // COLUMNS) * (TILE + NUMBER_H + GAP)) for k in range(N_CANDIDATES)]
    return grid + candidates


def answer_lines(m: Shown) -> list[str]:
    e = m.elements
    sa = m.super_attribute or "none"
    kind = m.element_type.replace("_", " ")
    lines = [f"answer: candidate {m.answer + 1} ({e[N_CONTEXT + m.answer]})",
             f"relation: {m.relation}   element type: {kind}   super-attribute: {sa}"]
    for r in range(3):
        row = e[3 * r: 3 * r + 3] if r < 2 else e[6:8] + ["?"]
        lines.append(f"row {r + 1}: " + " | ".join(row))
    for half in range(2):
        ks = range(half * COLUMNS, (half + 1) * COLUMNS)
        # "number: element", so a count matrix reads "1: 9   2: 7", not "1 9  2 7"
        lines.append("candidates   " + "   ".join(f"{k + 1}: {e[N_CONTEXT + k]}" for k in ks))
    return lines


def render(m: Shown, crops: list[Image.Image], answer: bool = False) -> Image.Image:
    width, height = canvas_size(answer)
    im = Image.new("RGB", (width, height), BACKGROUND)
    draw = ImageDraw.Draw(im)
    title, small, big = font(20), font(16), font(72)
    centred(draw, (0, 0, width, TITLE_H), f"V-PROM matrix {m.id}: which candidate completes "
             "the grid?", title)
    positions = tile_positions()
    for k, (x, y) in enumerate(positions):
        if k == 8:  # the missing last cell of the grid
            draw.rectangle([x, y, x + TILE - 1, y + TILE - 1], fill=TILE_BACKGROUND,
                           outline=INK, width=2)
            centred(draw, (x, y, x + TILE, y + TILE), "?", big)
            continue
        im.paste(letterbox(crops[k if k < 8 else k - 1], TILE), (x, y))
        draw.rectangle([x, y, x + TILE - 1, y + TILE - 1], outline=(150, 150, 150))
        if k > 8:  # a candidate's number
            centred(draw, (x, y + TILE, x + TILE, y + TILE + NUMBER_H), str(k - 8), title)
    top = positions[9][1]
    centred(draw, (0, top - CAPTION_H, width, top), "candidates", title)
    if answer:
        x, y = positions[9 + m.answer]
        draw.rectangle([x - FRAME, y - FRAME, x + TILE + FRAME - 1, y + TILE + FRAME - 1],
                       outline=GREEN, width=FRAME)
        y0 = height - MARGIN - TEXT_LINES * LINE_H
        for n, line in enumerate(answer_lines(m)):
            draw.text((MARGIN, y0 + n * LINE_H), _fit(draw, line, small, width - 2 * MARGIN),
                      font=small, fill=GREEN if n == 0 else INK)
    return im


@dataclass
class ShowSummary:
    """What `show` wrote, printable."""

    out: Path
    matrix: Shown
    answer: bool
    size: tuple[int, int]

    def __str__(self) -> str:
        m = self.matrix
        sa = f", super-attribute {m.super_attribute}" if m.super_attribute else ""
        marked = (f"; answer marked: candidate {m.answer + 1} ({m.elements[N_CONTEXT + m.answer]})"
                  if self.answer else "; answer not shown (add --answer)")
        return (f"wrote {self.out} ({self.size[0]}x{self.size[1]} PNG): matrix {m.id}, "
                f"{m.relation} of {m.element_type.replace('_', ' ')}s{sa}, {N_CONTEXT} context "
                f"panels and {N_CANDIDATES} candidates{marked}")


@writes("out", ("show",), inputs=lambda a: (a["dataset"], a["vg_dir"]))
def show(dataset: str | Path, matrix_id: int, vg_dir: str | Path, out: str | Path,
         answer: bool = False) -> ShowSummary:
    """Write matrix `matrix_id` of DATASET.h5 as a PNG at `out` (atomically)."""
    if Path(out).suffix.lower() != ".png":
        raise VpromError(f"--out {out}: show writes a PNG picture; name the file *.png")
    m = read_matrix(Path(dataset), int(matrix_id))
    index = ImageIndex(vg_dir)
    crops = [load_crop(index.path(image_id), box) for image_id, box in zip(m.image_ids, m.boxes)]
    picture = render(m, crops, answer)
    mark = PngImagePlugin.PngInfo()  # how a later run knows the file is its own to replace
    mark.add_text("vprom", "show")
    with atomic_path(out) as tmp:
        picture.save(tmp, format="PNG", pnginfo=mark)
    return ShowSummary(Path(out), m, answer, picture.size)
