"""Drawing the synthetic corpus's objects and scenery so every claimed label is visible. Each
super-attribute has its own channel: category the silhouette (a glyph of `data/glyphs.json`,
ellipses, polygons and holes, as an "L" mask); color, material and texture the fill, surface
and pattern (`paint`); scene the background in the box; action marks around it; shape an
outline; plant condition the foliage; a count N, N glyphs on a mat.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from PIL import Image, ImageDraw, ImageFilter
from vprom.mining.synth.paint import fill_mask, muted, paint_material, paint_texture
from vprom.mining.synth.spec import GLYPHS, RGB, SPEC


def draw_object(im: Image.Image, box, category: str, attrs: dict[str, str | tuple[str, str]],
                rng: np.random.Generator, number: int | None = None) -> None:
    """One object: `attrs` maps super-attribute -> attribute (color may be a pair: impure)."""
    scene, action, shape = attrs.get("scene"), attrs.get("action"), attrs.get("shape")
    draw_scene_background(im, box, scene, rng)   # each draws nothing for None
    draw_action_under(im, box, action)
    draw_shape_outline(im, box, shape)
    gbox = glyph_area(box, action, shape)
    if "plant condition" in attrs:
        paint_plant(im, gbox, category, attrs["plant condition"], rng)
    else:
        _draw_glyph(im, gbox, category, attrs)
    if number is not None:  # a clock's hour or a sign's number
        x, y, w, h = gbox
        ImageDraw.Draw(im).text((x + w * 0.36, y + h * 0.2), str(number), fill=(255, 255, 255),
                                font_size=max(10, h // 4))
    draw_action_over(im, box, action)
    if scene == "foggy":  # a haze over the finished box
        x, y, w, h = box
        region = im.crop((x, y, x + w, y + h))
        im.paste(Image.blend(region, Image.new("RGB", region.size, (235, 238, 240)), 0.62), (x, y))


def _draw_glyph(im: Image.Image, gbox, category: str, attrs) -> None:
    _x, _y, w, h = gbox
    mask = glyph_mask(category, w, h)
    color = attrs.get("color")
    if "material" in attrs:
        paint_material(im, gbox, mask, attrs["material"])
        return
    if isinstance(color, tuple):  # impure: two colours, left and right half
        left = mask.copy()
        ImageDraw.Draw(left).rectangle([w // 2, 0, w, h], fill=0)
        fill_mask(im, gbox, SPEC.colors[color[1]], mask)
        fill_mask(im, gbox, SPEC.colors[color[0]], left)
        fill = SPEC.colors[color[0]]
    else:
        fill = SPEC.colors[color] if color else SPEC.uncolored
        fill_mask(im, gbox, fill, mask)
    if "texture" in attrs:
        paint_texture(im, gbox, mask, fill, attrs["texture"])


def glyph_area(box, action: str | None, shape: str | None) -> tuple[int, int, int, int]:
    """Where the glyph goes in an object's box, leaving room for marks and outlines."""
    x, y, w, h = box
    fx, fy, fw, fh = 0.12, 0.1, 0.76, 0.78
    if shape is not None:
        fx, fy, fw, fh = 0.22, 0.2, 0.56, 0.56
    if action == "parked":
        fy, fh = 0.14, 0.64
    elif action == "flying":
        fx, fy, fw, fh = 0.24, 0.12, 0.64, 0.6
    elif action == "hanging":
        fy, fh = 0.3, 0.62
    elif action == "floating":
        fy, fh = 0.22, 0.66
    return (x + int(w * fx), y + int(h * fy), max(8, int(w * fw)), max(8, int(h * fh)))


def draw_shape_outline(im: Image.Image, box, shape: str | None) -> None:
    x, y, w, h = box
    d = ImageDraw.Draw(im)
    cx, cy = x + w / 2, y + h / 2
    s = min(w, h) * 0.43
    outline, width = SPEC.outline, 4
    if shape == "round":
        d.ellipse([cx - s, cy - s, cx + s, cy + s], outline=outline, width=width)
    elif shape == "square":
        d.rectangle([cx - s, cy - s, cx + s, cy + s], outline=outline, width=width)
    elif shape == "rectangular":
        d.rectangle([x + w * 0.06, cy - s * 0.62, x + w * 0.94, cy + s * 0.62], outline=outline, width=width)
    elif shape == "triangular":
        d.polygon([(cx, cy - s * 1.05), (cx + s * 1.1, cy + s * 0.85), (cx - s * 1.1, cy + s * 0.85)],
                  outline=outline, width=width)
    elif shape == "curved":
        d.arc([x + w * 0.08, y + h * 0.05, x + w * 0.92, y + h * 0.95], 20, 160, fill=outline, width=6)


def paint_plant(im: Image.Image, gbox, category: str, condition: str, rng: np.random.Generator) -> None:
    """A tree or flower drawn in one of the five plant conditions."""
    x, y, w, h = gbox
    d = ImageDraw.Draw(im)
    trunk = (100, 62, 30)
    stem_w = max(3, w // 9) if category == "tree" else max(2, w // 20)
    cx = x + w // 2
    if condition == "dead":
        d.line([(cx, y + h), (cx + w * 0.12, y + h * 0.45)], fill=(90, 80, 70), width=stem_w)
        d.pieslice([x + w * 0.05, y + h * 0.2, x + w * 0.95, y + h * 0.9], 200, 340, fill=(120, 108, 96))
        for k in range(5):
            px = x + w * (0.15 + 0.17 * k)
            d.line([(px, y + h * 0.4), (px + 3, y + h * 0.72)], fill=(95, 85, 75), width=2)
        return
    d.line([(cx, y + h), (cx, y + h * 0.45)], fill=trunk if category == "tree" else (40, 120, 40),
           width=stem_w)
    if condition == "bare":
        for k, (dx, dy) in enumerate(((-0.35, -0.35), (0.35, -0.3), (-0.2, -0.5), (0.22, -0.52), (0, -0.55))):
            sy = y + h * (0.6 - 0.06 * k)
            d.line([(cx, sy), (cx + w * dx, sy + h * dy * 0.6)], fill=trunk, width=max(2, stem_w // 2))
        return
    crown = [x + w * 0.08, y + h * 0.02, x + w * 0.92, y + h * 0.62]
    if condition == "dry":
        d.ellipse(crown, fill=(200, 168, 80))
        for _ in range(6):
            px, py = x + w * rng.uniform(0.2, 0.8), y + h * rng.uniform(0.1, 0.5)
            d.line([(px, py), (px + 6, py + 5), (px + 2, py + 10)], fill=(120, 90, 40), width=1)
        return
    d.ellipse(crown, fill=(45, 140, 45))
    if condition == "leafy":
        for _ in range(14):
            px, py = x + w * rng.uniform(0.12, 0.88), y + h * rng.uniform(0.04, 0.58)
            d.ellipse([px - 5, py - 3, px + 5, py + 3], fill=(25, 100, 25) if rng.random() < .5 else (90, 190, 70))
    elif condition == "blooming":
        for _ in range(12):
            px, py = x + w * rng.uniform(0.15, 0.85), y + h * rng.uniform(0.06, 0.56)
            d.ellipse([px - 4, py - 4, px + 4, py + 4], fill=(250, 140, 200))
            d.ellipse([px - 1.5, py - 1.5, px + 1.5, py + 1.5], fill=(255, 240, 120))


def draw_count(im: Image.Image, box, category: str, color: RGB, n: int, mat: RGB,
               rng: np.random.Generator) -> list[tuple[int, int, int, int]]:
    """N alike glyphs on a plain mat filling `box`; returns each glyph's box."""
    x, y, w, h = box
    ImageDraw.Draw(im).rectangle([x, y, x + w - 1, y + h - 1], fill=mat)
    cols, rows = (4, 3) if w >= h else (3, 4)
    sw, sh = w // cols, h // rows
    g = max(8, min(sw, sh) - 8)
    slots = rng.permutation(cols * rows)[:n]
    mask = solid_glyph_mask(category, g, g)
    boxes = []
    for s in sorted(int(v) for v in slots):
        gx = x + (s % cols) * sw + 3 + int(rng.integers(0, max(1, sw - g - 5)))
        gy = y + (s // cols) * sh + 3 + int(rng.integers(0, max(1, sh - g - 5)))
        fill_mask(im, (gx, gy, g, g), color, mask)
        boxes.append((gx, gy, g, g))
    return boxes


def background(width: int, height: int, horizon: int, rng: np.random.Generator) -> Image.Image:
    """Two muted bands with low-saturation clutter: bits of real-photo noise."""
    im = Image.new("RGB", (width, height), muted(rng, 170, 215))
    d = ImageDraw.Draw(im)
    d.rectangle([0, horizon, width, height], fill=muted(rng, 110, 160))
    n = int(rng.integers(10, 22))
    # all clutter parameters in one draw: per-call generator overhead dominates otherwise
    xs, ys = rng.integers(0, width, n), rng.integers(0, height, n)
    sizes, kinds, slopes = rng.integers(4, 22, n), rng.integers(0, 3, n), rng.uniform(-1, 1, n)
    bases, jitter = rng.integers(80, 230, n), rng.integers(-14, 15, (n, 3))
    for x, y, s, kind, slope, base, jit in zip(xs.tolist(), ys.tolist(), sizes.tolist(),
                                               kinds.tolist(), slopes.tolist(), bases.tolist(),
                                               jitter.tolist()):
        c = tuple(min(255, max(0, base + j)) for j in jit)
        if kind == 0:
            d.ellipse([x, y, x + s, y + s * 0.7], fill=c)
        elif kind == 1:
            d.rectangle([x, y, x + s, y + s // 2], fill=c)
        else:
            d.line([(x, y), (x + s, y + int(slope * s))], fill=c, width=2)
    return im


def draw_scene_background(im: Image.Image, box, scene: str | None, rng: np.random.Generator) -> None:
    if scene not in SPEC.skies:  # foggy: a haze laid over the finished box instead
        return
    x, y, w, h = box
    d = ImageDraw.Draw(im)
    d.rectangle([x, y, x + w - 1, y + h - 1], fill=SPEC.skies[scene])
    if scene == "sunny":
        r = max(8, w // 7)
        cx, cy = x + r + 4, y + r + 4
        for k in range(8):
            a = k * math.pi / 4
            d.line([(cx, cy), (cx + 1.8 * r * math.cos(a), cy + 1.8 * r * math.sin(a))],
                   fill=(255, 200, 0), width=2)
        d.ellipse([cx - r, cy - r, cx + r, cy + r], fill=(255, 215, 0))
    elif scene == "cloudy":
        for k in range(3):
            cx = x + int(w * (0.2 + 0.3 * k)) + int(rng.integers(-6, 7))
            cy = y + int(h * 0.14) + int(rng.integers(0, 8))
            for dx, r in ((-9, 8), (0, 11), (9, 8)):
                d.ellipse([cx + dx - r, cy - r * 0.7, cx + dx + r, cy + r * 0.7], fill=(238, 238, 242))
    elif scene == "snowy":
        for _ in range(w * h // 90):
            px, py = x + int(rng.integers(0, w)), y + int(rng.integers(0, h))
            d.ellipse([px - 1.5, py - 1.5, px + 1.5, py + 1.5], fill=(255, 255, 255))
    elif scene == "rainy":
        for _ in range(w * h // 120):
            px, py = x + int(rng.integers(0, w)), y + int(rng.integers(0, h - 8))
            d.line([(px, py), (px - 3, py + 8)], fill=(150, 175, 230), width=1)


def draw_action_under(im: Image.Image, box, action: str | None) -> None:
    """Marks drawn before the glyph (it sits on or hangs from them)."""
    x, y, w, h = box
    d = ImageDraw.Draw(im)
    if action == "parked":
        top = y + int(h * 0.78)
        d.rectangle([x, top, x + w - 1, y + h - 1], fill=(60, 60, 64))
        d.rectangle([x + 4, top + (y + h - top) // 2 - 1, x + w - 5, top + (y + h - top) // 2 + 1],
                    fill=(250, 250, 250))
    elif action == "hanging":
        d.line([(x + w // 2, y), (x + w // 2, y + int(h * 0.3))], fill=SPEC.outline, width=2)
        d.polygon([(x + w // 2 - 6, y), (x + w // 2 + 6, y), (x + w // 2, y + 7)], fill=SPEC.outline)
    elif action == "flying":
        cy = y + int(h * 0.36)
        for k in (-8, 0, 8):
            d.line([(x + 2, cy + k), (x + int(w * 0.18), cy + k)], fill=SPEC.outline, width=2)
        d.ellipse([x + int(w * 0.3), y + int(h * 0.88), x + int(w * 0.7), y + int(h * 0.96)],
                  fill=(90, 90, 90))


def draw_action_over(im: Image.Image, box, action: str | None) -> None:
    """Marks drawn over the glyph (waves hide its lower part)."""
    if action != "floating":
        return
    x, y, w, h = box
    d = ImageDraw.Draw(im)
    top = y + int(h * 0.62)
    d.rectangle([x, top, x + w - 1, y + h - 1], fill=(40, 110, 200))
    for row in range(top + 4, y + h - 2, 8):
        d.line([(px, row + 2 * math.sin(px / 4)) for px in range(x, x + w, 4)],
               fill=(190, 220, 250), width=2)


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
