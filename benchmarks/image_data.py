"""Generated image folders for the ``images`` benchmark part, cached under ``benchmarks/data`` (git-ignored).

Two kinds, both ``ROOT/<class>/<n>.jpg`` in the demo's 3 classes:

- ``SMALL_SIDE`` (40 px): the demo's flat pictures (``trainer.demo_images.write_images``), 1-2 KB each,
  the set the benchmark has always used: it measures per-file overhead.
- any other side: photo-like JPEGs of about ``side`` x ``side`` px (each side varies by up to 1/8),
  quality ``QUALITY``: a smooth colour field, a few dozen shapes and a film of fine texture whose
  strength varies per image, so the files vary in size as photos do (256 px: 26 KB on average,
  10th-90th percentile 16-35 KB, 0.4 bytes a pixel; ImageNet's photos, ~110 KB at ~400x350 px, have
  about twice that). 20,000 take about a minute of CPU, generated in parallel, each image from its
  own seed, so the bytes do not depend on the number of processes.
"""
from __future__ import annotations

import io
import os
import shutil
from concurrent.futures import ProcessPoolExecutor

import numpy as np

from benchmarks import data

__all__ = ["QUALITY", "SMALL_SIDE", "image_set", "photo", "write_photos"]

SMALL_SIDE = 40
QUALITY = 90
SEED = 7
_TILE = 640  # side of the texture tile each image takes a window of (at least the largest side + 1/8)
_texture: dict[int, np.ndarray] = {}  # per process: the texture tile of each seed


def image_set(count: int, side: int = SMALL_SIDE) -> str:
    """A cached folder of ``count`` JPEGs (rounded up to a multiple of 3 classes) of about ``side`` px."""
    from trainer.demo_images import CLASSES, write_images

    photos = side != SMALL_SIDE
    name = f"photos-{count}-{side}px" if photos else f"images-{count}"
    folder = os.path.join(data.DATA_DIR, name)
    marker = os.path.join(folder, ".done")
    if not os.path.exists(marker):
        shutil.rmtree(folder, ignore_errors=True)
        per_class = -(-count // len(CLASSES))
        if photos:
            write_photos(folder, per_class=per_class, side=side, classes=CLASSES)
        else:
            write_images(folder, per_class=per_class, formats=("jpeg",), seed=SEED, size=side)
        open(marker, "w").close()
    return folder


def _tile(seed: int) -> np.ndarray:
    """Fine texture (blurred Gaussian noise, unit variance), one tile per seed and process."""
    if seed not in _texture:
        from PIL import Image, ImageFilter

        noise = np.random.default_rng(seed).normal(0, 1, (_TILE, _TILE, 3))
        blurred = Image.fromarray(np.clip(noise * 40 + 128, 0, 255).astype(np.uint8)).filter(ImageFilter.GaussianBlur(0.8))
        tile = np.asarray(blurred, dtype=np.float32) - 128
        _texture[seed] = tile / tile.std()
    return _texture[seed]


def photo(key: tuple[int, ...], side: int, quality: int = QUALITY, seed: int = SEED) -> bytes:
    """The JPEG bytes of the photo-like image ``key`` (its own random stream) of about ``side`` px."""
    from PIL import Image, ImageDraw

    rng = np.random.default_rng([seed, *key])
    w, h = (int(side + rng.integers(-(side // 8), side // 8 + 1)) for _ in range(2))
    cells = rng.integers(0, 256, (int(rng.integers(2, 7)), int(rng.integers(2, 7)), 3), dtype=np.uint8)
    image = Image.fromarray(cells).resize((w, h), Image.Resampling.BICUBIC)  # a smooth colour field
    draw = ImageDraw.Draw(image)
    for _ in range(int(rng.integers(4, 24))):  # shapes: edges
        x0, y0 = int(rng.integers(-w // 4, w)), int(rng.integers(-h // 4, h))
        box = (x0, y0, x0 + int(rng.integers(4, w // 2)), y0 + int(rng.integers(4, h // 2)))
        fill = tuple(int(c) for c in rng.integers(0, 256, 3))
        (draw.ellipse if rng.random() < 0.5 else draw.rectangle)(box, fill=fill)
    tile = _tile(seed)
    y, x = int(rng.integers(0, _TILE - h)), int(rng.integers(0, _TILE - w))
    pixels = np.asarray(image, dtype=np.float32) + float(rng.uniform(3, 24)) * tile[y:y + h, x:x + w]  # texture
    out = io.BytesIO()
    Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8)).save(out, "JPEG", quality=quality)
    return out.getvalue()


def _write_range(root: str, label: int, kind: str, start: int, end: int, side: int) -> int:
    for i in range(start, end):
        with open(os.path.join(root, kind, f"{i:05d}.jpg"), "wb") as f:
            f.write(photo((label, i), side))
    return end - start


def write_photos(root: str, *, per_class: int, side: int, classes: tuple[str, ...]) -> int:
    """Writes ``per_class`` photo-like JPEGs into each ``root/<class>/``, on every core; returns how many."""
    if side < 16 or side * 9 // 8 >= _TILE:
        raise ValueError(f"side {side}: expected 16..{_TILE * 8 // 9 - 1} px")
    for kind in classes:
        os.makedirs(os.path.join(root, kind), exist_ok=True)
    step = 500
    jobs = [(root, label, kind, lo, min(lo + step, per_class), side)
            for label, kind in enumerate(classes) for lo in range(0, per_class, step)]
    with ProcessPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        return sum(pool.map(_write_range, *zip(*jobs)))
