"""What the folder exports share: each distinct crop cut once from its VG image (`cut_crops`,
on a thread pool: Pillow decodes without the GIL), a crop's box, labels and JPEG bytes; and
the resumable folder of the exports of many large files (savir-t, hf), which fills as
`OUT.partial/` with its settings in `STAMP`, each file appearing only when complete, and is
renamed to `OUT` at the end (a rerun with the same settings keeps the files there).

Pickled `.npy` files (the release's label files, RAVEN's embedding.npy) load in numpy 1.x and
2.x and Python 2.7 as `np.load(path, allow_pickle=True).item()`, a 0-d object array holding a
dict. numpy 2 pickles by reference to `numpy._core`, which numpy < 1.26 lacks, so the plain
Python value is pickled at protocol 2 and each GLOBAL opcode naming `numpy._core.<module>`
(found with `pickletools`) is rewritten to `numpy.core.<module>`."""

from __future__ import annotations

import io
import json
import os
import pickle
import pickletools
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from collections.abc import Callable, Iterator

import numpy as np
from PIL import Image
from tqdm import tqdm

from vprom.domain import LABEL_SEPARATOR
from vprom.errors import VpromError
from vprom.images import ImageIndex, clip_box
from vprom.tables import CropTable, MatrixTable

#: bounded: the exports are disk-bound beyond that
WORKERS = min(4, os.cpu_count() or 1)
STAMP = ".vprom-export.json"


def release_ids(ids: np.ndarray) -> np.ndarray:
    """The release's problem id of every matrix row: its rank in id order (0..N-1)."""
    return np.argsort(np.argsort(ids, kind="stable"), kind="stable").astype(np.int64)


def check_split(m: MatrixTable, split: str) -> None:
    if split not in m.splits:
        known = ", ".join(m.ordered_splits()) or "none"
        raise VpromError(f"the data set has no split {split!r} (it has: {known}); pass one "
                         "of those to --split")


def box(crops: CropTable, r: int) -> list[int]:
    return [int(crops.x[r]), int(crops.y[r]), int(crops.w[r]), int(crops.h[r])]


def labels(crops: CropTable, r: int) -> list[str]:
    return [lab for lab in str(crops.labels[r]).split(LABEL_SEPARATOR) if lab]


def template_text(name: str) -> str:
    return (Path(__file__).with_name("templates") / name).read_text(encoding="utf-8")


def jpeg(image: Image.Image, quality: int) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=quality)
    return buffer.getvalue()


def cut_crops(crops: CropTable, rows: np.ndarray, vg_dir: Path,
              handle: Callable[[int, Image.Image], None], desc: str = "crops") -> int:
    """Call `handle(row, RGB crop)` on the pool's threads once for every crop row in `rows`;
    returns how many. A missing or unreadable image or a box outside it is a VpromError."""
    index = ImageIndex(vg_dir)
    by_image: dict[int, list[int]] = {}
    for r in np.unique(rows).tolist():
        by_image.setdefault(int(crops.image_id[r]), []).append(r)
    missing = [i for i in by_image if i not in index]
    if missing:
        raise VpromError(f"{vg_dir}: image {missing[0]} is not under VG_100K or VG_100K_2 "
                         f"({len(missing)} of the {len(by_image)} images the matrices show "
                         "are missing); is the image download complete?")

    def cut(item) -> int:
        image_id, members = item
        path = index.path(image_id)
        try:
            with Image.open(path) as im:
                im = im.convert("RGB")
        except (OSError, ValueError) as e:
            raise VpromError(f"{path}: cannot read image {image_id} ({e}); re-download it") \
                from None
        for r in members:
            corners = clip_box(box(crops, r), im.width, im.height)
            if corners is None:
                raise VpromError(f"{path}: crop {int(crops.crop_id[r])} lies outside image "
                                 f"{image_id}; the data set does not match these images")
            handle(r, im.crop(corners))
        return len(members)

    total = sum(len(m) for m in by_image.values())
    with ThreadPoolExecutor(WORKERS) as pool, tqdm(total=total, desc=desc, unit="crop",
                                                   disable=None) as bar:
        for n in pool.map(cut, sorted(by_image.items())):
            bar.update(n)
    return total


@contextmanager
def resumable_dir(out: str | os.PathLike, settings: dict) -> Iterator[Path]:
    """Yield `OUT.partial` (new, or resumed with the same `settings`); rename it at the end."""
    out = Path(out)
    if out.exists():
        raise VpromError(f"{out} already exists; pass a new --out (an export never replaces a "
                         "folder)")
    partial, wanted = out.with_name(out.name + ".partial"), json.dumps(settings, sort_keys=True)
    stamp = partial / STAMP
    if partial.exists():
        if not stamp.is_file() or stamp.read_text(encoding="utf-8") != wanted:
            raise VpromError(f"{partial}: an unfinished export with other settings (or not "
                             "one of vprom's); rerun it with the same settings to finish it, "
                             "or remove it")
    else:
        partial.mkdir(parents=True)
        stamp.write_text(wanted, encoding="utf-8")
    yield partial
    stamp.unlink()
    os.replace(partial, out)


def write_once(path: Path, write: Callable[[Path], None]) -> bool:
    """Write `path` through `write(temporary)` unless it is already there; True if written."""
    if path.exists():
        return False
    tmp = path.with_name(f".{path.name}.{os.getpid()}.part")
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return True


def check_plain(value, where: str = "value") -> None:
    """Refuse anything but plain Python values (numpy types pickle as numpy._core globals)."""
    if isinstance(value, dict):
        for k, v in value.items():
            check_plain(k, f"{where} key")
            check_plain(v, f"{where}[{k!r}]")
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            check_plain(v, f"{where}[{i}]")
    elif type(value) not in (str, int, float, bool, type(None)):  # exact: np.str_ is a str
        raise TypeError(f"{where}: {type(value).__name__} is not a plain Python value")


def numpy1_pickle(value) -> bytes:
    """The protocol-2 pickle of a 0-d object array holding `value`, naming numpy.core."""
    check_plain(value)
    array = np.empty((), dtype=object)
    array[()] = value
    data = pickle.dumps(array, protocol=2)
    out, last = [], 0
    for op, arg, pos in pickletools.genops(data):
        if op.name != "GLOBAL" or not arg.startswith("numpy._core"):
            continue
        module, name = arg.split(" ")
        end = pos + 1 + len(module) + 1 + len(name) + 1  # 'c' module '\n' name '\n'
        module = "numpy.core" + module[len("numpy._core"):]
        out += [data[last:pos], b"c", module.encode(), b"\n", name.encode(), b"\n"]
        last = end
    out.append(data[last:])
    return b"".join(out)


def npy_bytes(value) -> bytes:
    """A whole `.npy` file: the 1.0 header of a 0-d object array, then its pickle."""
    buffer = io.BytesIO()
    header = np.lib.format.header_data_from_array_1_0(np.empty((), dtype=object))
    np.lib.format.write_array_header_1_0(buffer, header)
    buffer.write(numpy1_pickle(value))
    return buffer.getvalue()
