"""Tiny inputs for the feature tests: a VG-format folder of small JPEGs and a DATASET.h5.

Images are smooth random colour fields (numpy Generator, fixed seed) so crops differ from one
another; the crops table has several boxes per image, a duplicated box (two crop ids, one
extraction) and a box partly outside its image (clipped).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from tests.generation.synthetic_build import synthetic_build  # noqa: F401 (a fixture)
from tests.features.crop_tables import crop_table, write_dataset  # noqa: F401

IMAGE_IDS = (11, 12, 13, 14, 15)


def write_jpeg(path: Path, rng: np.random.Generator, size=(96, 72)) -> None:
    w, h = size
    coarse = rng.integers(0, 256, size=(h // 8 + 1, w // 8 + 1, 3), dtype=np.uint8)
    img = Image.fromarray(coarse).resize((w, h), Image.BICUBIC)
    noise = rng.integers(-20, 21, size=(h, w, 3))
    pixels = np.clip(np.asarray(img, dtype=np.int64) + noise, 0, 255).astype(np.uint8)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(pixels).save(path, quality=90)


@pytest.fixture
def vg_dir(tmp_path) -> Path:
    rng = np.random.default_rng(7)
    out = tmp_path / "vg"
    for i in IMAGE_IDS:
        folder = "VG_100K" if i % 2 else "VG_100K_2"
        write_jpeg(out / folder / f"{i}.jpg", rng)
    return out


CROP_ROWS = [
    (105, 11, 0, 0, 40, 30), (101, 11, 10, 5, 60, 50), (102, 11, 50, 30, 46, 42),
    (103, 12, 0, 0, 96, 72), (110, 12, 20, 20, 30, 30), (104, 12, 20, 20, 30, 30),  # dup box
    (107, 13, 5, 5, 50, 60), (106, 13, 80, 60, 40, 40),  # clipped at the border
    (108, 14, 30, 10, 40, 50), (109, 15, 0, 10, 90, 40), (111, 15, 12, 14, 33, 35),
]


@pytest.fixture
def dataset(tmp_path) -> Path:
    return write_dataset(tmp_path / "dataset.h5", crop_table(CROP_ROWS))
