"""Drawing the synthetic corpus's people. Each human super-attribute has a channel: age the
proportions (young: big head; old: stooped, a cane), hair style the hair, clothing style the
shirt's cut, gender a beard or a skirt, action the pose, clothing color the shirt. An
unlabelled super-attribute is drawn as none of its elements (short dark hair, long sleeves,
trousers, hands on the hips), so a figure shows exactly the labels it claims.
"""

from __future__ import annotations

import math

from PIL import Image, ImageDraw
from vprom.mining.synth.paint import contrast
from vprom.mining.synth.spec import SPEC


def draw_person(im: Image.Image, box, attrs: dict[str, str]) -> None:
    """A figure showing each human super-attribute present in `attrs`."""
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
    shirt = SPEC.colors.get(attrs.get("clothing color", ""), SPEC.uncolored)
    limb = max(4, int(w * 0.07 * (scale ** 0.5)))
    style = attrs.get("clothing style")
    sleeve = shirt if style in (None, "formal") else SPEC.skin
    leg_color = SPEC.skin if attrs.get("gender") == "female" else (40, 50, 82)

    if action == "sitting":
        d.rectangle([cx - w * 0.2, hip_y + 2, cx + w * 0.12, hip_y + limb + 4], fill=(110, 100, 95))
        d.line([(cx - w * 0.15, hip_y + limb + 4), (cx - w * 0.15, base)], fill=(110, 100, 95), width=3)
    if action == "running":
        for k in (-10, 0, 10):
            d.line([(x + 2, hip_y - fh * 0.15 + k), (x + w * 0.2, hip_y - fh * 0.15 + k)],
                   fill=SPEC.outline, width=2)
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
        else:
            elbow = (shoulder[0] + sign * w * 0.06 + sign * w * swing * (0.5 if sign > 0 else -0.3),
                     sy + fh * 0.16)
            hand = (elbow[0] + sign * w * swing * 0.8, sy + fh * (0.3 if swing < 0.2 else 0.2))
        if style == "casual":  # short sleeves: shirt colour at the top, skin below
            d.line([shoulder, elbow, hand], fill=SPEC.skin, width=limb, joint="curve")
            mid = ((shoulder[0] + elbow[0]) / 2, (shoulder[1] + elbow[1]) / 2)
            d.line([shoulder, mid], fill=shirt, width=limb + 2)
        else:
            d.line([shoulder, elbow, hand], fill=color, width=limb, joint="curve")


def _head(d, hx, hy, r, attrs) -> None:
    hair = attrs.get("hair style")
    d.ellipse([hx - r, hy - r, hx + r, hy + r], fill=SPEC.skin)
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
