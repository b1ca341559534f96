"""The 52 object silhouettes of the synthetic corpus: the *object category* channel.

Each category is one distinct connected glyph of ellipses, polygons and cut-out holes
(`GLYPHS`), rendered as an "L" mask at the size it is drawn, once per (category, size).
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from PIL import Image, ImageDraw, ImageFilter

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
    # the second 26: every object third (held-out objects) holds >= 14 categories
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
