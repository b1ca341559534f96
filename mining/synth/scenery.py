"""Scenery of the synthetic corpus: the image background, and the *scene* and *object
action* channels around an object.

Every image lies on two muted bands (sky and ground) with low-saturation clutter
(`background`). A scene fills the object's box (sunny, cloudy, snowy, rainy; foggy washes it
with haze over the glyph); an action marks it (parked: asphalt and a line; flying: motion
lines and a shadow; hanging: a string and a hook; floating: waves over its lower half).
All randomness comes from the generator passed in.
"""

from __future__ import annotations

import math

import numpy as np
from PIL import Image, ImageDraw

from vprom.mining.synth.paint import OUTLINE, muted


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
