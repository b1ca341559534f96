"""Colours and surfaces of the synthetic corpus, painted inside a glyph's mask: a colour is
the fill (`SPEC.colors`), a material the surface (`SPEC.materials`: base, ink, pattern), a
texture a pattern over the fill. Patterns are `TILE`×`TILE` masks drawn once per name from a
generator seeded by the name's stable hash, so they never vary between runs or processes.
"""

from __future__ import annotations

import math
from functools import cache

import numpy as np
from PIL import Image, ImageChops, ImageDraw, ImageFilter
from vprom.mining.synth.spec import RGB, SPEC

TILE = 192


@cache
def pattern_tile(name: str) -> Image.Image:
    """A TILE×TILE "L" mask of a texture or material pattern (255 where the ink goes)."""
    tile = Image.new("L", (TILE, TILE), 0)
    d = ImageDraw.Draw(tile)
    rng = np.random.default_rng(abs(hash_str(name)))  # fixed per name: tiles never vary
    if name == "striped":
        for k in range(-TILE, TILE, 12):
            d.line([(k, 0), (k + TILE, TILE)], fill=255, width=5)
    elif name == "spotted":
        for y in range(4, TILE, 14):
            for x in range(4 + (y // 14 % 2) * 7, TILE, 14):
                d.ellipse([x - 3, y - 3, x + 3, y + 3], fill=255)
    elif name == "checkered":
        for y in range(0, TILE, 10):
            for x in range(0, TILE, 10):
                if (x // 10 + y // 10) % 2 == 0:
                    d.rectangle([x, y, x + 9, y + 9], fill=255)
    elif name == "plaid":
        for k in range(0, TILE, 16):
            d.rectangle([k, 0, k + 3, TILE], fill=170)
            d.rectangle([0, k, TILE, k + 3], fill=170)
            d.rectangle([k + 8, 0, k + 9, TILE], fill=255)
            d.rectangle([0, k + 8, TILE, k + 9], fill=255)
    elif name == "furry":
        for _ in range(900):
            x, y = rng.integers(0, TILE, 2)
            a = rng.uniform(0, 2 * math.pi)
            d.line([(x, y), (x + 5 * math.cos(a), y + 5 * math.sin(a))], fill=255, width=1)
    elif name == "wood":
        for k in range(0, TILE, 7):
            d.line([(x, k + 2.5 * math.sin(x / 9 + k)) for x in range(0, TILE, 6)], fill=255, width=2)
    elif name == "brick":
        for row, y in enumerate(range(0, TILE, 12)):
            d.line([(0, y), (TILE, y)], fill=255, width=2)
            for x in range((row % 2) * 12, TILE, 24):
                d.line([(x, y), (x, y + 12)], fill=255, width=2)
    elif name == "stone":
        for _ in range(70):
            x, y = rng.integers(0, TILE, 2)
            r = rng.integers(7, 14)
            d.ellipse([x - r, y - r * 0.8, x + r, y + r * 0.8], outline=255, width=2)
    return tile


def hash_str(s: str) -> int:
    """A stable (not per-process salted) hash, for seeding fixed pattern tiles."""
    h = 0
    for ch in s.encode():
        h = (h * 131 + ch) % (1 << 61)
    return h


def fill_mask(im: Image.Image, box: tuple[int, int, int, int], color: RGB, mask: Image.Image,
              pattern: str | None = None) -> None:
    """Paint `color` inside `mask` at box (x, y), optionally only where `pattern` has ink."""
    x, y = box[0], box[1]
    if pattern is not None:
        tile = pattern_tile(pattern).crop((x % 64, y % 64, x % 64 + mask.width, y % 64 + mask.height))
        mask = ImageChops.multiply(mask, tile)
    im.paste(color, (x, y, x + mask.width, y + mask.height), mask)


def shade(color: RGB, f: float) -> RGB:
    """Darker (f < 1) or lighter (f > 1, towards white) version of a colour."""
    if f <= 1:
        return tuple(int(c * f) for c in color)
    return tuple(int(c + (255 - c) * (f - 1)) for c in color)


def contrast(color: RGB) -> RGB:
    """A pattern colour that stands out on `color`."""
    return shade(color, 0.35) if sum(color) > 240 else shade(color, 1.7)


def muted(rng: np.random.Generator, lo: int, hi: int) -> RGB:
    """A random greyish colour of brightness in [lo, hi): backgrounds, clutter, mats."""
    base = int(rng.integers(lo, hi))
    return tuple(min(255, max(0, base + int(d))) for d in rng.integers(-14, 15, 3))


def paint_material(im: Image.Image, gbox, mask: Image.Image, material: str) -> None:
    x, y, w, h = gbox
    base, ink, tile = SPEC.materials[material]
    if material == "glass":
        # see-through: blend with what is behind, then highlights and a rim
        region = im.crop((x, y, x + w, y + h))
        im.paste(Image.blend(region, Image.new("RGB", (w, h), base), 0.6), (x, y), mask)
        d = Image.new("L", (w, h), 0)
        ImageDraw.Draw(d).line([(w * 0.25, h * 0.7), (w * 0.55, h * 0.2)], fill=255, width=max(2, w // 14))
        fill_mask(im, gbox, ink, ImageChops.multiply(mask, d))
        edge = ImageChops.subtract(mask, mask.filter(ImageFilter.MinFilter(3)))
        fill_mask(im, gbox, (60, 110, 130), edge)
        return
    fill_mask(im, gbox, base, mask)
    if tile is not None:
        fill_mask(im, gbox, ink, mask, tile)
    elif material == "metal":
        sheen = Image.linear_gradient("L").rotate(90).resize((w, h))
        band = sheen.point(lambda v: 255 if 100 < v < 150 else 0)
        fill_mask(im, gbox, ink, ImageChops.multiply(mask, band))
    elif material == "plastic":
        gloss = Image.new("L", (w, h), 0)
        g = ImageDraw.Draw(gloss)
        g.ellipse([w * 0.2, h * 0.15, w * 0.5, h * 0.35], fill=255)
        g.line([(0, h * 0.6), (w, h * 0.6)], fill=255, width=2)
        fill_mask(im, gbox, ink, ImageChops.multiply(mask, gloss))


def paint_texture(im: Image.Image, gbox, mask: Image.Image, fill: RGB, texture: str) -> None:
    _x, _y, w, h = gbox
    if texture == "smooth":
        shading = Image.linear_gradient("L").resize((w, h)).point(lambda v: v * 0.45)
        fill_mask(im, gbox, shade(fill, 0.45), ImageChops.multiply(mask, shading))
        gloss = Image.new("L", (w, h), 0)
        ImageDraw.Draw(gloss).ellipse([w * 0.22, h * 0.14, w * 0.46, h * 0.3], fill=230)
        fill_mask(im, gbox, (255, 255, 255), ImageChops.multiply(mask, gloss))
    elif texture == "furry":
        grown = mask.filter(ImageFilter.MaxFilter(5))
        fill_mask(im, gbox, contrast(fill), grown, "furry")
    else:
        fill_mask(im, gbox, contrast(fill), mask, texture)
