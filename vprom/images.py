"""Finding Visual Genome images (`<image_id>.jpg` in `VG_100K/` and `VG_100K_2/`) on disk,
cutting crops out of them, and drawing crops and text into pictures people read."""

from __future__ import annotations

from pathlib import Path

from PIL import Image, ImageFont

from vprom.errors import VpromError

IMAGE_FOLDERS = ("VG_100K", "VG_100K_2")
BACKGROUND = (255, 255, 255)
TILE_BACKGROUND = (225, 225, 225)
INK = (20, 20, 20)


class ImageIndex:
    """image id -> JPEG path under a VG folder."""

    def __init__(self, vg_dir: str | Path):
        self.vg_dir = Path(vg_dir)
        if not self.vg_dir.is_dir():
            raise VpromError(f"{self.vg_dir}: no such folder; pass the Visual Genome folder "
                             "(the one holding VG_100K/)")
        self.paths: dict[int, Path] = {}
        for folder in IMAGE_FOLDERS:
            d = self.vg_dir / folder
            if not d.is_dir():
                continue
            for p in sorted(d.iterdir()):
                if p.suffix.lower() in (".jpg", ".jpeg") and p.stem.isdigit():
                    self.paths.setdefault(int(p.stem), p)
        if not self.paths:
            raise VpromError(f"{self.vg_dir}: no images under {' or '.join(IMAGE_FOLDERS)}/; "
                             "run `vprom download` (without --no-images) or point --vg there")

    def __contains__(self, image_id: int) -> bool:
        return int(image_id) in self.paths

    def path(self, image_id: int) -> Path:
        try:
            return self.paths[int(image_id)]
        except KeyError:
            raise VpromError(f"{self.vg_dir}: image {image_id} is not under "
                             f"{' or '.join(IMAGE_FOLDERS)}/; is the image download complete?"
                             ) from None


def clip_box(box, width: int, height: int) -> tuple[int, int, int, int] | None:
    """A VG box (x, y, w, h) clipped to a width x height image as (x0, y0, x1, y1), or None."""
    x, y, w, h = (int(v) for v in box)
    x0, y0, x1, y1 = max(0, x), max(0, y), min(width, x + w), min(height, y + h)
    return (x0, y0, x1, y1) if x1 > x0 and y1 > y0 else None


def load_crop(path: str | Path, box: tuple[int, int, int, int]) -> Image.Image:
    """The RGB crop (x, y, w, h) of one image; the box is clipped to the image."""
    try:
        with Image.open(path) as im:
            im = im.convert("RGB")
    except (OSError, ValueError) as e:
        raise VpromError(f"{path}: cannot read image ({e}); re-download it") from None
    corners = clip_box(box, im.width, im.height)
    if corners is None:
        raise VpromError(f"{path}: box {tuple(box)} lies outside the {im.width}x{im.height} "
                         "image; the data set does not match these images")
    return im.crop(corners)


def letterbox(crop: Image.Image, side: int) -> Image.Image:
    """The crop scaled to fit a side×side tile, aspect kept, centred on grey."""
    tile = Image.new("RGB", (side, side), TILE_BACKGROUND)
    scale = side / max(crop.width, crop.height, 1)
    size = (max(1, round(crop.width * scale)), max(1, round(crop.height * scale)))
    resized = crop.resize(size, Image.Resampling.LANCZOS)
    tile.paste(resized, ((side - size[0]) // 2, (side - size[1]) // 2))
    return tile


def font(size: int) -> ImageFont.ImageFont:
    try:
        return ImageFont.load_default(size=size)
    except TypeError:  # Pillow without FreeType: the fixed bitmap font
        return ImageFont.load_default()


def centred(draw, box, text, font, fill=INK) -> None:
    x0, y0, x1, y1 = box
    left, top, right, bottom = draw.textbbox((0, 0), text, font=font)
    draw.text(((x0 + x1 - (right - left)) / 2 - left, (y0 + y1 - (bottom - top)) / 2 - top),
              text, font=font, fill=fill)
