"""The 52 object silhouettes of the synthetic corpus (the category channel): one connected
glyph of ellipses, polygons and holes each (`data/glyphs.json`), rendered as an "L" mask once
per (category, size).
"""

from __future__ import annotations

from functools import lru_cache

from PIL import Image, ImageDraw, ImageFilter
from vprom.mining.synth.spec import GLYPHS


def _scale(points, w: int, h: int) -> list[tuple[float, float]]:
    return [(x * (w - 1), y * (h - 1)) for x, y in points]


@lru_cache(maxsize=4096)
def glyph_mask(category: str, w: int, h: int) -> Image.Image:
    """The silhouette of `category` as an "L" mask of size (w, h) (255 inside)."""
    mask = Image.new("L", (w, h), 0)
    d = ImageDraw.Draw(mask)
    side = min(w, h)
    for kind, *args in GLYPHS[category]:
        hole = kind.startswith("hole_")
        shape, ink, thinnest = kind.removeprefix("hole_"), 0 if hole else 255, 1 if hole else 2
        if shape == "poly":
            d.polygon(_scale(args[0], w, h), fill=ink)
        elif shape == "line":
            d.line(_scale(args[0], w, h), fill=ink, width=max(thinnest, round(args[1] * side)),
                   joint=None if hole else "curve")
        else:
            (x0, y0), (x1, y1) = _scale([args[0:2], args[2:4]], w, h)
            if shape == "ellipse":
                d.ellipse([x0, y0, x1, y1], fill=ink)
            elif shape == "rect":
                d.rectangle([x0, y0, x1, y1], fill=ink)
            elif shape == "pie":
                d.pieslice([x0, y0, x1, y1], args[4], args[5], fill=ink)
            else:
                d.arc([x0, y0, x1, y1], args[4], args[5], fill=ink,
                      width=max(thinnest, round(args[6] * side)))
    return mask


@lru_cache(maxsize=512)
def solid_glyph_mask(category: str, w: int, h: int) -> Image.Image:
    """A glyph for small sizes (count groups): holes closed so it stays one blob."""
    return glyph_mask(category, w, h).filter(ImageFilter.MaxFilter(3))
