"""Drawing the synthetic corpus: every label an annotation claims is visible in the pixels.

The scene planner (`mining.synth`) decides *what* is in an image; this module decides how it
looks. Each visual element has one distinct rendering on its own *channel*, so elements of
different super-attributes can be combined on one object without hiding each other, and a
model can learn every element from pixels alone:

| label kind | channel | rendering |
|---|---|---|
| object category (52) | silhouette | a distinct connected glyph built from ellipses, polygons and cut-out holes (`GLYPHS`): ball, box, car, tree, flower, cup, bottle, chair, table, book, clock, lamp, sign, plate, bowl, kite, umbrella, bird, dog, cat, horse, bag, hat, apple, banana, pizza, airplane, house, shoe, candle, tie, boat, elephant, bench, truck, bicycle, laptop, racket, spoon, camera, toilet, tire, surfboard, skateboard, glove, flag, vase, phone, fork, carrot, cake, mountain |
| color (11) | glyph fill | the fill colour `COLORS[c]`; an object without a colour label is filled with the neutral `UNCOLORED` |
| material (6) | glyph surface | wooden: brown with wavy grain; metal: grey vertical sheen; glass: see-through pale cyan with white highlights; plastic: glossy cyan-teal with a seam; brick: red-brown brick bond; stone: grey cobbles |
| texture (6) | pattern over the fill | striped: diagonal stripes; spotted: dots; checkered: checkerboard; plaid: crossing bands; furry: short strokes spilling over the edge; smooth: shading gradient and a specular highlight |
| shape (5) | outline around the glyph | round: circle; square: square; rectangular: wide rectangle; triangular: triangle; curved: a thick arc |
| scene (5) | background inside the box | sunny: blue with a sun and rays; cloudy: grey-blue with clouds; snowy: flakes; rainy: dark slate with slanted rain; foggy: the whole box washed with white haze |
| plant condition (5, tree/flower) | the plant's foliage | leafy: green with leaves; bare: branches only; dry: straw-yellow with cracks; blooming: green with pink blossoms; dead: grey-brown and drooping |
| object action (4) | marks around the glyph | parked: on asphalt with a white line; flying: raised with motion lines and a shadow; hanging: on a string from the top with a hook; floating: half under blue waves |
| person | figure | head, torso (the shirt), arms and legs drawn as thick strokes |
| age | proportions | young: a small figure with a big head; old: stooped, with a cane; unlabelled: adult proportions |
| hair style | hair | bald: bare head with a shine; curly: ring of dark curls; blond: yellow hair; unlabelled: short dark hair |
| clothing style | shirt cut | casual: short sleeves and a chest logo; formal: lapels and a black tie; sleeveless: bare arms; unlabelled: long plain sleeves |
| gender | marks | male: a beard; female: a skirt; unlabelled: trousers, no beard |
| human action | pose | standing: straight, arms down; sitting: on a stool, thighs level; walking: small stride; running: wide stride, leaning, motion lines; unlabelled: straight, hands on the hips |
| clothing color (6) | shirt fill | `COLORS[c]`; unlabelled: `UNCOLORED` |
| count N (1-10) | group | N alike small glyphs of one category and colour on a plain mat, none touching |

Glyph masks are rendered once per (category, size) and cached; patterns are precomputed
tiles cut with the glyph mask, so an image costs a few dozen Pillow calls. All randomness
comes from the `numpy.random.Generator` passed in.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from PIL import Image, ImageChops, ImageDraw, ImageFilter

RGB = tuple[int, int, int]

COLORS: dict[str, RGB] = {
    "red": (205, 25, 25), "green": (35, 155, 45), "blue": (30, 70, 205),
    "yellow": (245, 215, 25), "orange": (245, 125, 15), "purple": (120, 35, 165),
    "pink": (245, 150, 195), "white": (248, 248, 248), "black": (22, 22, 22),
    "brown": (115, 65, 25), "gray": (128, 128, 128),
}
#: Fill of an object with no colour label: a muted neutral that is none of the 11 colours.
UNCOLORED: RGB = (176, 168, 150)
SKIN: RGB = (232, 192, 160)
OUTLINE: RGB = (70, 70, 74)  # lighter than "black", so outlines never read as it

# --- glyphs ---------------------------------------------------------------------------
# Primitives in unit coordinates: ("ellipse"|"rect", x0, y0, x1, y1), ("poly", points),
# ("pie", x0, y0, x1, y1, start, end), ("arc", x0, y0, x1, y1, start, end, width),
# ("line", points, width). "hole_" variants (hole_line, hole_arc, hole_rect, hole_ellipse)
# cut the mask. Parts overlap so every glyph is one connected silhouette (tests check it).
GLYPHS: dict[str, list[tuple]] = {
    "ball": [("ellipse", .1, .1, .9, .9)],
    "box": [("rect", .12, .32, .74, .92), ("poly", [(.12, .32), (.34, .1), (.96, .1), (.74, .32)]),
            ("poly", [(.74, .32), (.96, .1), (.96, .7), (.74, .92)])],
    "car": [("rect", .04, .45, .96, .76), ("poly", [(.22, .46), (.34, .2), (.66, .2), (.8, .46)]),
            ("ellipse", .13, .62, .37, .88), ("ellipse", .63, .62, .87, .88)],
    "tree": [("rect", .41, .5, .59, .96), ("ellipse", .12, .04, .88, .66)],
    "flower": [("rect", .46, .45, .54, .96), ("ellipse", .34, .04, .66, .3), ("ellipse", .34, .3, .66, .56),
               ("ellipse", .18, .16, .5, .44), ("ellipse", .5, .16, .82, .44), ("poly", [(.5, .7), (.78, .56), (.54, .8)])],
    "cup": [("poly", [(.16, .2), (.7, .2), (.64, .9), (.22, .9)]), ("arc", .44, .3, .86, .74, 270, 90, .09)],
    "bottle": [("rect", .41, .04, .59, .4), ("rect", .28, .3, .72, .96), ("ellipse", .28, .2, .72, .44)],
    "chair": [("rect", .2, .5, .82, .6), ("rect", .2, .06, .3, .6), ("rect", .2, .58, .28, .96),
              ("rect", .74, .58, .82, .96)],
    "table": [("rect", .04, .32, .96, .46), ("rect", .1, .44, .19, .92), ("rect", .81, .44, .9, .92)],
    "book": [("poly", [(.04, .22), (.5, .34), (.5, .88), (.04, .76)]),
             ("poly", [(.96, .22), (.5, .34), (.5, .88), (.96, .76)])],
    "clock": [("ellipse", .1, .06, .9, .86), ("rect", .38, .82, .62, .96),
              ("hole_line", [(.5, .46), (.5, .2)], .05), ("hole_line", [(.5, .46), (.7, .46)], .05)],
    "lamp": [("poly", [(.3, .06), (.7, .06), (.86, .44), (.14, .44)]), ("rect", .46, .42, .54, .86),
             ("ellipse", .28, .8, .72, .96)],
    "sign": [("rect", .45, .4, .55, .98),
             ("poly", [(.5 + .4 * math.cos(math.pi / 8 + k * math.pi / 4),
                        .34 + .32 * math.sin(math.pi / 8 + k * math.pi / 4)) for k in range(8)])],
    "plate": [("ellipse", .04, .3, .96, .74), ("hole_arc", .2, .38, .8, .66, 200, 340, .03)],
    "bowl": [("pie", .08, -.1, .92, .8, 0, 180), ("rect", .36, .74, .64, .88)],
    "kite": [("poly", [(.5, .04), (.86, .38), (.5, .78), (.14, .38)]),
             ("line", [(.5, .74), (.42, .86), (.58, .96)], .06)],
    "umbrella": [("pie", .04, .08, .96, .82, 180, 360), ("rect", .47, .42, .53, .88),
                 ("arc", .3, .78, .53, .98, 0, 180, .06)],
    "bird": [("ellipse", .18, .4, .74, .72), ("ellipse", .62, .26, .86, .5),
             ("poly", [(.84, .34), (.98, .4), (.84, .44)]), ("poly", [(.32, .5), (.5, .08), (.6, .52)]),
             ("poly", [(.22, .5), (.02, .4), (.06, .62)])],
    "dog": [("ellipse", .16, .36, .78, .66), ("ellipse", .66, .16, .94, .46), ("poly", [(.68, .22), (.72, .44), (.6, .4)]),
            ("rect", .22, .56, .3, .92), ("rect", .62, .56, .7, .92), ("line", [(.2, .44), (.04, .24)], .06)],
    "cat": [("ellipse", .14, .44, .7, .8), ("ellipse", .56, .2, .88, .52), ("poly", [(.58, .3), (.6, .08), (.7, .24)]),
            ("poly", [(.74, .24), (.84, .08), (.86, .32)]),
            ("line", [(.2, .6), (.06, .5), (.08, .24)], .07)],
    "horse": [("ellipse", .14, .3, .7, .58), ("poly", [(.58, .36), (.76, .06), (.86, .1), (.7, .46)]),
              ("ellipse", .76, .04, .98, .2), ("rect", .2, .5, .27, .96), ("rect", .56, .5, .63, .96),
              ("line", [(.16, .36), (.04, .6)], .05)],
    "bag": [("rect", .14, .36, .86, .92), ("arc", .3, .12, .7, .66, 180, 360, .07)],
    "hat": [("ellipse", .04, .6, .96, .82), ("rect", .28, .2, .72, .72), ("ellipse", .28, .12, .72, .3)],
    "apple": [("ellipse", .14, .2, .86, .92), ("rect", .47, .04, .55, .28), ("ellipse", .54, .06, .78, .18)],
    "banana": [("arc", .06, -.34, .94, .78, 20, 160, .2)],
    "pizza": [("poly", [(.08, .18), (.92, .18), (.5, .96)]), ("rect", .06, .1, .94, .22)],
    # the second 26 (added so that every object third holds >= 14 categories)
    "airplane": [("ellipse", .04, .42, .96, .58), ("poly", [(.5, .5), (.32, .06), (.44, .06), (.68, .5)]),
                 ("poly", [(.5, .5), (.32, .94), (.44, .94), (.68, .5)]),
                 ("poly", [(.1, .5), (.02, .26), (.1, .26), (.22, .5)]),
                 ("poly", [(.1, .5), (.02, .74), (.1, .74), (.22, .5)])],
    "house": [("rect", .14, .46, .86, .96), ("poly", [(.04, .5), (.5, .06), (.96, .5)]),
              ("rect", .68, .1, .78, .36), ("hole_rect", .24, .58, .4, .74), ("hole_rect", .56, .64, .72, .96)],
    "shoe": [("poly", [(.06, .46), (.38, .46), (.42, .22), (.62, .22), (.68, .52), (.92, .64),
                       (.96, .76), (.96, .88), (.06, .88)])],
    "candle": [("rect", .38, .36, .62, .9), ("rect", .48, .24, .52, .38), ("ellipse", .41, .04, .59, .28),
               ("ellipse", .2, .84, .8, .98)],
    "tie": [("poly", [(.38, .04), (.62, .04), (.57, .2), (.43, .2)]),
            ("poly", [(.44, .18), (.56, .18), (.7, .8), (.5, .97), (.3, .8)])],
    "boat": [("poly", [(.02, .6), (.98, .6), (.8, .9), (.2, .9)]), ("rect", .47, .06, .53, .62),
             ("poly", [(.53, .08), (.53, .56), (.88, .56)]), ("poly", [(.47, .2), (.47, .56), (.2, .56)])],
    "elephant": [("ellipse", .24, .2, .9, .68), ("ellipse", .04, .14, .42, .5),
                 ("line", [(.1, .4), (.06, .66), (.14, .9)], .09),
                 ("rect", .32, .56, .44, .94), ("rect", .7, .56, .82, .94)],
    "bench": [("rect", .04, .14, .96, .24), ("rect", .04, .3, .96, .38), ("rect", .02, .5, .98, .6),
              ("rect", .1, .14, .16, .92), ("rect", .84, .14, .9, .92)],
    "truck": [("rect", .03, .1, .62, .72), ("poly", [(.6, .32), (.82, .32), (.97, .52), (.97, .74), (.6, .74)]),
              ("ellipse", .1, .62, .32, .9), ("ellipse", .7, .62, .92, .9)],
    "bicycle": [("arc", .02, .48, .4, .94, 0, 360, .06), ("arc", .6, .48, .98, .94, 0, 360, .06),
                ("line", [(.21, .71), (.46, .71), (.36, .42), (.7, .42), (.79, .71)], .05),
                ("line", [(.46, .71), (.7, .42)], .05), ("line", [(.28, .34), (.46, .34)], .07),
                ("line", [(.36, .42), (.36, .34)], .05), ("line", [(.7, .42), (.66, .24), (.78, .2)], .05)],
    "laptop": [("rect", .16, .06, .84, .62), ("hole_rect", .23, .13, .77, .55),
               ("poly", [(.14, .6), (.86, .6), (.99, .88), (.01, .88)])],
    "racket": [("ellipse", .2, .02, .8, .62), ("hole_ellipse", .29, .1, .71, .54),
               ("poly", [(.42, .58), (.58, .58), (.55, .7), (.45, .7)]), ("rect", .45, .66, .55, .98)],
    "spoon": [("ellipse", .32, .02, .68, .42), ("line", [(.5, .36), (.5, .97)], .1)],
    "camera": [("rect", .06, .28, .94, .88), ("rect", .26, .14, .56, .3), ("rect", .72, .2, .88, .3),
               ("hole_ellipse", .32, .4, .68, .8)],
    "toilet": [("rect", .6, .04, .92, .44), ("ellipse", .06, .38, .9, .66),
               ("poly", [(.3, .58), (.74, .58), (.64, .96), (.4, .96)])],
    "tire": [("ellipse", .06, .06, .94, .94), ("hole_ellipse", .3, .3, .7, .7),
             *(("hole_line", [(.5 + .37 * math.cos(k * math.pi / 6), .5 + .37 * math.sin(k * math.pi / 6)),
                              (.5 + .47 * math.cos(k * math.pi / 6), .5 + .47 * math.sin(k * math.pi / 6))], .05)
               for k in range(12))],
    "surfboard": [("poly", [(.5 + .14 * math.cos(t) * math.cos(-1.05) - .46 * math.sin(t) * math.sin(-1.05),
                             .5 + .14 * math.cos(t) * math.sin(-1.05) + .46 * math.sin(t) * math.cos(-1.05))
                            for t in np.linspace(0, 2 * math.pi, 36, endpoint=False)]),
                  ("poly", [(.72, .62), (.66, .8), (.8, .68)])],
    "skateboard": [("rect", .1, .38, .9, .54), ("ellipse", .02, .38, .18, .54), ("ellipse", .82, .38, .98, .54),
                   ("rect", .2, .5, .26, .6), ("rect", .74, .5, .8, .6),
                   ("ellipse", .14, .56, .32, .76), ("ellipse", .68, .56, .86, .76)],
    "glove": [("ellipse", .2, .4, .8, .96), ("rect", .22, .14, .34, .62), ("rect", .37, .05, .49, .6),
              ("rect", .52, .07, .64, .6), ("rect", .67, .17, .79, .62), ("line", [(.32, .72), (.06, .46)], .13)],
    "flag": [("rect", .08, .04, .15, .98),
             ("poly", [(.14, .08), (.36, .16), (.62, .08), (.92, .14), (.92, .54), (.62, .48), (.36, .58), (.14, .5)])],
    "vase": [("rect", .3, .03, .7, .1), ("poly", [(.38, .08), (.62, .08), (.58, .22), (.86, .5), (.7, .95),
                                                  (.3, .95), (.14, .5), (.42, .22)])],
    "phone": [("rect", .28, .03, .72, .97), ("hole_rect", .34, .12, .66, .8), ("hole_ellipse", .45, .84, .55, .92)],
    "fork": [("line", [(.5, .46), (.5, .97)], .09), ("rect", .3, .34, .7, .48), ("rect", .3, .04, .36, .4),
             ("rect", .41, .04, .47, .4), ("rect", .53, .04, .59, .4), ("rect", .64, .04, .7, .4)],
    "carrot": [("poly", [(.3, .22), (.66, .22), (.5, .97)]),
               ("poly", [(.36, .24), (.22, .02), (.42, .12), (.48, .0), (.54, .12), (.74, .02), (.6, .24)])],
    "cake": [("rect", .08, .52, .92, .88), ("rect", .22, .28, .78, .54), ("rect", .47, .08, .53, .3),
             ("ellipse", .44, .02, .56, .14), ("rect", .02, .86, .98, .94)],
    "mountain": [("poly", [(.02, .92), (.34, .2), (.5, .46), (.68, .06), (.98, .92)])],
}


def _scale(points, w: int, h: int) -> list[tuple[float, float]]:
    return [(x * (w - 1), y * (h - 1)) for x, y in points]


@lru_cache(maxsize=4096)
def glyph_mask(category: str, w: int, h: int) -> Image.Image:
    """The silhouette of `category` as an "L" mask of size (w, h) (255 inside)."""
    mask = Image.new("L", (w, h), 0)
    d = ImageDraw.Draw(mask)
    side = min(w, h)
    for prim in GLYPHS[category]:
        kind = prim[0]
        if kind in ("ellipse", "rect", "pie", "arc", "hole_arc", "hole_rect", "hole_ellipse"):
            box = _scale([prim[1:3], prim[3:5]], w, h)
            box = [box[0][0], box[0][1], box[1][0], box[1][1]]
        if kind == "ellipse":
            d.ellipse(box, fill=255)
        elif kind == "rect":
            d.rectangle(box, fill=255)
        elif kind == "pie":
            d.pieslice(box, prim[5], prim[6], fill=255)
        elif kind == "arc":
            d.arc(box, prim[5], prim[6], fill=255, width=max(2, round(prim[7] * side)))
        elif kind == "poly":
            d.polygon(_scale(prim[1], w, h), fill=255)
        elif kind == "line":
            d.line(_scale(prim[1], w, h), fill=255, width=max(2, round(prim[2] * side)), joint="curve")
        elif kind == "hole_line":
            d.line(_scale(prim[1], w, h), fill=0, width=max(1, round(prim[2] * side)))
        elif kind == "hole_rect":
            d.rectangle(box, fill=0)
        elif kind == "hole_ellipse":
            d.ellipse(box, fill=0)
        elif kind == "hole_arc":
            d.arc(box, prim[5], prim[6], fill=0, width=max(1, round(prim[7] * side)))
    return mask


@lru_cache(maxsize=512)
def solid_glyph_mask(category: str, w: int, h: int) -> Image.Image:
    """A glyph for small sizes (count groups): holes closed so it stays one blob."""
    return glyph_mask(category, w, h).filter(ImageFilter.MaxFilter(3))


# --- pattern tiles --------------------------------------------------------------------
TILE = 192


@lru_cache(maxsize=None)
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


def _ink(im: Image.Image, box: tuple[int, int, int, int], color: RGB, mask: Image.Image,
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


# --- backgrounds ----------------------------------------------------------------------
def muted(rng: np.random.Generator, lo: int, hi: int) -> RGB:
    base = int(rng.integers(lo, hi))
    return tuple(min(255, max(0, base + int(d))) for d in rng.integers(-14, 15, 3))


def background(width: int, height: int, horizon: int, rng: np.random.Generator) -> Image.Image:
    """Two muted bands (upper and lower) with low-saturation clutter: bits of real-photo noise."""
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


# --- objects --------------------------------------------------------------------------
def draw_scene_background(im: Image.Image, box, scene: str, rng: np.random.Generator) -> None:
    x, y, w, h = box
    d = ImageDraw.Draw(im)
    if scene == "sunny":
        d.rectangle([x, y, x + w - 1, y + h - 1], fill=(120, 185, 245))
        r = max(8, w // 7)
        cx, cy = x + r + 4, y + r + 4
        for k in range(8):
            a = k * math.pi / 4
            d.line([(cx, cy), (cx + 1.8 * r * math.cos(a), cy + 1.8 * r * math.sin(a))],
                   fill=(255, 200, 0), width=2)
        d.ellipse([cx - r, cy - r, cx + r, cy + r], fill=(255, 215, 0))
    elif scene == "cloudy":
        d.rectangle([x, y, x + w - 1, y + h - 1], fill=(150, 160, 175))
        for k in range(3):
            cx = x + int(w * (0.2 + 0.3 * k)) + int(rng.integers(-6, 7))
            cy = y + int(h * 0.14) + int(rng.integers(0, 8))
            for dx, r in ((-9, 8), (0, 11), (9, 8)):
                d.ellipse([cx + dx - r, cy - r * 0.7, cx + dx + r, cy + r * 0.7], fill=(238, 238, 242))
    elif scene == "snowy":
        d.rectangle([x, y, x + w - 1, y + h - 1], fill=(185, 195, 210))
        for _ in range(w * h // 90):
            px, py = x + int(rng.integers(0, w)), y + int(rng.integers(0, h))
            d.ellipse([px - 1.5, py - 1.5, px + 1.5, py + 1.5], fill=(255, 255, 255))
    elif scene == "rainy":
        d.rectangle([x, y, x + w - 1, y + h - 1], fill=(70, 80, 100))
        for _ in range(w * h // 120):
            px, py = x + int(rng.integers(0, w)), y + int(rng.integers(0, h - 8))
            d.line([(px, py), (px - 3, py + 8)], fill=(150, 175, 230), width=1)
    elif scene == "foggy":
        pass  # the haze is laid over the finished box (`draw_fog`)


def draw_fog(im: Image.Image, box) -> None:
    x, y, w, h = box
    region = im.crop((x, y, x + w, y + h))
    im.paste(Image.blend(region, Image.new("RGB", region.size, (235, 238, 240)), 0.62), (x, y))


def draw_action_under(im: Image.Image, box, action: str) -> None:
    """Marks drawn before the glyph (it sits on or hangs from them)."""
    x, y, w, h = box
    d = ImageDraw.Draw(im)
    if action == "parked":
        top = y + int(h * 0.78)
        d.rectangle([x, top, x + w - 1, y + h - 1], fill=(60, 60, 64))
        d.rectangle([x + 4, top + (y + h - top) // 2 - 1, x + w - 5, top + (y + h - top) // 2 + 1],
                    fill=(250, 250, 250))
    elif action == "hanging":
        d.line([(x + w // 2, y), (x + w // 2, y + int(h * 0.3))], fill=OUTLINE, width=2)
        d.polygon([(x + w // 2 - 6, y), (x + w // 2 + 6, y), (x + w // 2, y + 7)], fill=OUTLINE)
    elif action == "flying":
        cy = y + int(h * 0.36)
        for k in (-8, 0, 8):
            d.line([(x + 2, cy + k), (x + int(w * 0.18), cy + k)], fill=OUTLINE, width=2)
        d.ellipse([x + int(w * 0.3), y + int(h * 0.88), x + int(w * 0.7), y + int(h * 0.96)],
                  fill=(90, 90, 90))


def draw_action_over(im: Image.Image, box, action: str) -> None:
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


def glyph_area(box, action: str | None, shape: str | None) -> tuple[int, int, int, int]:
    """Where the glyph goes inside an object's box, leaving room for marks and outlines."""
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


def draw_shape_outline(im: Image.Image, box, shape: str) -> None:
    x, y, w, h = box
    d = ImageDraw.Draw(im)
    cx, cy = x + w / 2, y + h / 2
    s = min(w, h) * 0.43
    width = 4
    if shape == "round":
        d.ellipse([cx - s, cy - s, cx + s, cy + s], outline=OUTLINE, width=width)
    elif shape == "square":
        d.rectangle([cx - s, cy - s, cx + s, cy + s], outline=OUTLINE, width=width)
    elif shape == "rectangular":
        d.rectangle([x + w * 0.06, cy - s * 0.62, x + w * 0.94, cy + s * 0.62], outline=OUTLINE, width=width)
    elif shape == "triangular":
        d.polygon([(cx, cy - s * 1.05), (cx + s * 1.1, cy + s * 0.85), (cx - s * 1.1, cy + s * 0.85)],
                  outline=OUTLINE, width=width)
    elif shape == "curved":
        d.arc([x + w * 0.08, y + h * 0.05, x + w * 0.92, y + h * 0.95], 20, 160, fill=OUTLINE, width=6)


MATERIALS: dict[str, tuple[RGB, RGB, str | None]] = {
    # material -> (base, pattern ink, pattern tile)
    "wooden": ((165, 112, 60), (105, 62, 25), "wood"),
    "metal": ((150, 155, 162), (225, 230, 236), None),
    "glass": ((196, 234, 244), (255, 255, 255), None),
    "plastic": ((35, 185, 190), (245, 250, 250), None),
    "brick": ((160, 62, 40), (215, 205, 190), "brick"),
    "stone": ((128, 124, 116), (78, 74, 68), "stone"),
}


def paint_material(im: Image.Image, gbox, mask: Image.Image, material: str) -> None:
    x, y, w, h = gbox
    base, ink, tile = MATERIALS[material]
    if material == "glass":
        # see-through: blend with what is behind, then highlights and a rim
        region = im.crop((x, y, x + w, y + h))
        im.paste(Image.blend(region, Image.new("RGB", (w, h), base), 0.6), (x, y), mask)
        d = Image.new("L", (w, h), 0)
        ImageDraw.Draw(d).line([(w * 0.25, h * 0.7), (w * 0.55, h * 0.2)], fill=255, width=max(2, w // 14))
        _ink(im, gbox, ink, ImageChops.multiply(mask, d))
        edge = ImageChops.subtract(mask, mask.filter(ImageFilter.MinFilter(3)))
        _ink(im, gbox, (60, 110, 130), edge)
        return
    _ink(im, gbox, base, mask)
    if tile is not None:
        _ink(im, gbox, ink, mask, tile)
    elif material == "metal":
        sheen = Image.linear_gradient("L").rotate(90).resize((w, h))
        band = sheen.point(lambda v: 255 if 100 < v < 150 else 0)
        _ink(im, gbox, ink, ImageChops.multiply(mask, band))
    elif material == "plastic":
        gloss = Image.new("L", (w, h), 0)
        g = ImageDraw.Draw(gloss)
        g.ellipse([w * 0.2, h * 0.15, w * 0.5, h * 0.35], fill=255)
        g.line([(0, h * 0.6), (w, h * 0.6)], fill=255, width=2)
        _ink(im, gbox, ink, ImageChops.multiply(mask, gloss))


def paint_texture(im: Image.Image, gbox, mask: Image.Image, fill: RGB, texture: str) -> None:
    x, y, w, h = gbox
    if texture == "smooth":
        shading = Image.linear_gradient("L").resize((w, h)).point(lambda v: v * 0.45)
        _ink(im, gbox, shade(fill, 0.45), ImageChops.multiply(mask, shading))
        gloss = Image.new("L", (w, h), 0)
        ImageDraw.Draw(gloss).ellipse([w * 0.22, h * 0.14, w * 0.46, h * 0.3], fill=230)
        _ink(im, gbox, (255, 255, 255), ImageChops.multiply(mask, gloss))
    elif texture == "furry":
        grown = mask.filter(ImageFilter.MaxFilter(5))
        _ink(im, gbox, contrast(fill), grown, "furry")
    else:
        _ink(im, gbox, contrast(fill), mask, texture)


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


def draw_object(im: Image.Image, box, category: str, attrs: dict[str, str | tuple[str, str]],
                rng: np.random.Generator, number: int | None = None) -> None:
    """One object: `attrs` maps super-attribute -> attribute (color may be a pair: impure)."""
    scene, action, shape = attrs.get("scene"), attrs.get("action"), attrs.get("shape")
    if scene:
        draw_scene_background(im, box, scene, rng)
    if action:
        draw_action_under(im, box, action)
    if shape:
        draw_shape_outline(im, box, shape)
    gbox = glyph_area(box, action, shape)
    if "plant condition" in attrs:
        paint_plant(im, gbox, category, attrs["plant condition"], rng)
    else:
        _draw_glyph(im, gbox, category, attrs)
    if number is not None:
        _draw_number(im, gbox, number)
    if action:
        draw_action_over(im, box, action)
    if scene == "foggy":
        draw_fog(im, box)


def _draw_glyph(im: Image.Image, gbox, category: str, attrs) -> None:
    x, y, w, h = gbox
    mask = glyph_mask(category, w, h)
    color = attrs.get("color")
    if "material" in attrs:
        paint_material(im, gbox, mask, attrs["material"])
        return
    if isinstance(color, tuple):  # impure: two colours, left and right half
        left = mask.copy()
        ImageDraw.Draw(left).rectangle([w // 2, 0, w, h], fill=0)
        _ink(im, gbox, COLORS[color[1]], mask)
        _ink(im, gbox, COLORS[color[0]], left)
        fill = COLORS[color[0]]
    else:
        fill = COLORS[color] if color else UNCOLORED
        _ink(im, gbox, fill, mask)
    if "texture" in attrs:
        paint_texture(im, gbox, mask, fill, attrs["texture"])


def _draw_number(im: Image.Image, gbox, number: int) -> None:
    """A number written on a sign or a clock face (the 'number 7' / 'five o'clock' regions)."""
    x, y, w, h = gbox
    d = ImageDraw.Draw(im)
    d.text((x + w * 0.36, y + h * 0.2), str(number), fill=(255, 255, 255), font_size=max(10, h // 4))


# --- count groups ---------------------------------------------------------------------
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
        _ink(im, (gx, gy, g, g), color, mask)
        boxes.append((gx, gy, g, g))
    return boxes


# --- people ---------------------------------------------------------------------------
def draw_person(im: Image.Image, box, attrs: dict[str, str], rng: np.random.Generator) -> None:
    """A figure showing each human super-attribute present in `attrs` (see the module table)."""
    x, y, w, h = box
    d = ImageDraw.Draw(im)
    age, action = attrs.get("age"), attrs.get("action")
    scale = 0.68 if age == "young" else (0.92 if age == "old" else 1.0)
    # a child's head is large for its body: scale it less than the figure
    head_r = h * 0.085 * (0.85 if age == "young" else scale)
    fh = h * 0.94 * scale  # figure height
    base = y + h * 0.97
    top = base - fh
    lean = w * 0.1 if age == "old" else (w * 0.06 if action == "running" else 0.0)
    cx = x + w * 0.5
    hx, hy = cx + lean, top + head_r
    neck = (cx + lean * 0.8, hy + head_r)
    hip_y = top + fh * (0.58 if action != "sitting" else 0.6)
    hip = (cx, hip_y)
    shirt = COLORS.get(attrs.get("clothing color", ""), UNCOLORED)
    limb = max(4, int(w * 0.07 * (scale ** 0.5)))
    style = attrs.get("clothing style")
    sleeve = shirt if style in (None, "formal") else SKIN
    leg_color = SKIN if attrs.get("gender") == "female" else (40, 50, 82)

    if action == "sitting":
        d.rectangle([cx - w * 0.2, hip_y + 2, cx + w * 0.12, hip_y + limb + 4], fill=(110, 100, 95))
        d.line([(cx - w * 0.15, hip_y + limb + 4), (cx - w * 0.15, base)], fill=(110, 100, 95), width=3)
    if action == "running":
        for k in (-10, 0, 10):
            d.line([(x + 2, hip_y - fh * 0.15 + k), (x + w * 0.2, hip_y - fh * 0.15 + k)],
                   fill=OUTLINE, width=2)
    _legs(d, hip, base, fh, w, action, leg_color, limb)
    if attrs.get("gender") == "female":
        d.polygon([(cx - w * 0.16, hip_y - fh * 0.04), (cx + w * 0.16, hip_y - fh * 0.04),
                   (cx + w * 0.24, hip_y + fh * 0.18), (cx - w * 0.24, hip_y + fh * 0.18)],
                  fill=(75, 60, 95))
    # torso (the shirt)
    tw = w * (0.3 if style != "sleeveless" else 0.24) * scale ** 0.5
    d.polygon([(neck[0] - tw / 2, neck[1]), (neck[0] + tw / 2, neck[1]), (cx + tw / 2, hip_y),
               (cx - tw / 2, hip_y)], fill=shirt)
    _arms(d, neck, tw, fh, w, action, sleeve, shirt, limb, style)
    if style == "casual":
        r = tw * 0.16
        lx, ly = cx + lean * 0.4, neck[1] + fh * 0.12
        d.ellipse([lx - r, ly - r, lx + r, ly + r], fill=contrast(shirt))
    elif style == "formal":
        d.line([(neck[0] - tw / 2, neck[1]), (neck[0], neck[1] + fh * 0.16), (neck[0] + tw / 2, neck[1])],
               fill=(20, 20, 28), width=max(2, limb // 2))
        d.polygon([(neck[0] - 2, neck[1]), (neck[0] + 2, neck[1]), (neck[0] + 4, neck[1] + fh * 0.2),
                   (neck[0], neck[1] + fh * 0.24), (neck[0] - 4, neck[1] + fh * 0.2)], fill=(10, 10, 10))
    if age == "old":
        hand = (cx + lean + tw * 0.9, hip_y - fh * 0.02)
        d.line([hand, (hand[0] + w * 0.05, base)], fill=(95, 60, 30), width=3)
        d.arc([hand[0] - 8, hand[1] - 6, hand[0] + 4, hand[1] + 6], 180, 360, fill=(95, 60, 30), width=3)
    _head(d, hx, hy, head_r, attrs)


def _legs(d, hip, base, fh, w, action, color, limb) -> None:
    hx, hy = hip
    if action == "sitting":
        knee_y = hy + limb / 2
        for dx in (-limb * 0.6, limb * 0.6):
            d.line([(hx + dx, hy), (hx + dx + w * 0.26, knee_y), (hx + dx + w * 0.26, base)],
                   fill=color, width=limb, joint="curve")
        return
    spread = {"standing": 0.04, "walking": 0.14, "running": 0.3}.get(action, 0.04)
    for sign in (-1, 1):
        foot = (hx + sign * w * spread, base)
        if action == "running" and sign > 0:  # the back leg bends up
            knee = (hx + w * 0.2, hy + fh * 0.22)
            d.line([(hx, hy), knee, (hx + w * 0.36, hy + fh * 0.3)], fill=color, width=limb, joint="curve")
        else:
            d.line([(hx + sign * limb * 0.5, hy), foot], fill=color, width=limb)


def _arms(d, neck, tw, fh, w, action, color, shirt, limb, style) -> None:
    nx, ny = neck
    sy = ny + fh * 0.03
    swing = {"walking": 0.12, "running": 0.24}.get(action, 0.0)
    for sign in (-1, 1):
        shoulder = (nx + sign * tw / 2, sy)
        if action is None:  # no action label: hands on the hips, elbows out (none of the four)
            elbow = (shoulder[0] + sign * w * 0.16, sy + fh * 0.13)
            hand = (shoulder[0] + sign * w * 0.02, sy + fh * 0.27)
            _sleeve(d, shoulder, elbow, hand, color, shirt, limb, style)
            continue
        elbow = (shoulder[0] + sign * w * 0.06 + sign * w * swing * (0.5 if sign > 0 else -0.3),
                 sy + fh * 0.16)
        hand = (elbow[0] + sign * w * swing * 0.8, sy + fh * (0.3 if swing < 0.2 else 0.2))
        _sleeve(d, shoulder, elbow, hand, color, shirt, limb, style)


def _sleeve(d, shoulder, elbow, hand, color, shirt, limb, style) -> None:
    if style == "casual":  # short sleeves: shirt colour at the top, skin below
        d.line([shoulder, elbow, hand], fill=SKIN, width=limb, joint="curve")
        mid = ((shoulder[0] + elbow[0]) / 2, (shoulder[1] + elbow[1]) / 2)
        d.line([shoulder, mid], fill=shirt, width=limb + 2)
    else:
        d.line([shoulder, elbow, hand], fill=color, width=limb, joint="curve")


def _head(d, hx, hy, r, attrs) -> None:
    hair = attrs.get("hair style")
    d.ellipse([hx - r, hy - r, hx + r, hy + r], fill=SKIN)
    if hair == "bald":
        d.ellipse([hx - r * 0.45, hy - r * 0.75, hx - r * 0.1, hy - r * 0.45], fill=(255, 240, 225))
    elif hair == "curly":
        for k in range(9):
            a = math.pi + k * math.pi / 8
            px, py = hx + r * math.cos(a), hy + r * math.sin(a)
            d.ellipse([px - r * 0.32, py - r * 0.32, px + r * 0.32, py + r * 0.32], fill=(45, 30, 20))
    elif hair == "blond":
        d.pieslice([hx - r * 1.12, hy - r * 1.15, hx + r * 1.12, hy + r * 0.9], 180, 360, fill=(250, 220, 90))
    else:
        d.pieslice([hx - r * 1.05, hy - r * 1.08, hx + r * 1.05, hy + r * 0.6], 180, 360, fill=(70, 45, 25))
    if attrs.get("gender") == "male":
        d.chord([hx - r * 0.8, hy - r * 0.2, hx + r * 0.8, hy + r * 1.25], 0, 180, fill=(80, 50, 30))
