"""Small real image sets as class folders (``ROOT/<class>/<n>.png``), made from images packages ship.

- ``digits``: scikit-learn's ``load_digits`` (1,797 handwritten digits, 8x8, 17 grey levels) drawn as
  32 px RGB PNGs (bilinear), classes ``0``..``9``. Digits must never be flipped: a flipped 2 is no 2.
- ``patches``: 32 px tiles cut from the colour photos scikit-image and scikit-learn ship (astronaut,
  coffee, chelsea, rocket, immunohistochemistry, hubble_deep_field, retina, china, flower), each photo
  scaled so its shorter side is ``PATCH_SIDE_PX``, then cut into a grid of non-overlapping tiles;
  the class is the photo a tile came from (a CIFAR-like set of natural image statistics).
- ``faces``: scikit-image's ``lfw_subset`` (100 faces and 100 non-face patches of natural images,
  25x25 grey) as 32 px RGB PNGs, classes ``face`` and ``other``.

TF-free (numpy, Pillow, scikit-learn, scikit-image); each set is deterministic (same bytes every time).
``pixels(root, names)`` reads files back as the flat 0-1 pixels a scikit-learn baseline fits.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Sequence

import numpy as np

__all__ = ["PATCH_SIDE_PX", "SETS", "SIDE", "pixels", "write_set"]

SIDE = 32  # pixels of every written image
PATCH_SIDE_PX = 192  # patches: each photo's shorter side is scaled to this before it is cut into tiles
_PHOTOS = ("astronaut", "coffee", "chelsea", "rocket", "immunohistochemistry", "hubble_deep_field", "retina")


def _write(root: str, images: Sequence[tuple[str, np.ndarray]]) -> int:
    """Writes ``(class, uint8 [h, w] or [h, w, 3])`` pairs as ``root/<class>/<n>.png`` at ``SIDE`` px."""
    from PIL import Image

    counts: dict[str, int] = {}
    for label, array in images:
        folder = os.path.join(root, label)
        os.makedirs(folder, exist_ok=True)
        image = Image.fromarray(array).convert("RGB")
        if image.size != (SIDE, SIDE):
            image = image.resize((SIDE, SIDE), Image.Resampling.BILINEAR)
        n = counts.get(label, 0)
        image.save(os.path.join(folder, f"{n:05d}.png"))
        counts[label] = n + 1
    return sum(counts.values())


def _digits() -> list[tuple[str, np.ndarray]]:
    from sklearn.datasets import load_digits

    d = load_digits()
    return [(str(int(t)), np.round(x * (255 / 16)).astype(np.uint8)) for x, t in zip(d.images, d.target)]


def _photos() -> list[tuple[str, np.ndarray]]:
    import skimage.data
    from sklearn.datasets import load_sample_images

    named = [(name, getattr(skimage.data, name)()) for name in _PHOTOS]
    sample = load_sample_images()
    named += [(os.path.splitext(os.path.basename(f))[0], im) for f, im in zip(sample.filenames, sample.images)]
    return named


def _patches() -> list[tuple[str, np.ndarray]]:
    from PIL import Image

    out = []
    for name, array in _photos():
        image = Image.fromarray(np.asarray(array)[..., :3])
        scale = PATCH_SIDE_PX / min(image.size)
        w, h = round(image.size[0] * scale), round(image.size[1] * scale)
        small = np.asarray(image.resize((w, h), Image.Resampling.LANCZOS))
        for y in range(0, h - SIDE + 1, SIDE):
            for x in range(0, w - SIDE + 1, SIDE):
                out.append((name, small[y:y + SIDE, x:x + SIDE]))
    return out


def _faces() -> list[tuple[str, np.ndarray]]:
    import skimage.data

    faces = skimage.data.lfw_subset()  # [200, 25, 25] float in [0, 1]: 100 faces, then 100 other patches
    return [("face" if i < 100 else "other", np.round(f * 255).astype(np.uint8)) for i, f in enumerate(faces)]


SETS: dict[str, Callable[[], list[tuple[str, np.ndarray]]]] = {"digits": _digits, "patches": _patches, "faces": _faces}


def write_set(name: str, root: str) -> int:
    """Writes set ``name`` (``SETS``) as class folders under ``root``; returns the number of images."""
    if name not in SETS:
        raise ValueError(f"image set {name!r}: expected one of {', '.join(SETS)}")
    return _write(root, SETS[name]())


def pixels(root: str, names: Sequence[str]) -> np.ndarray:
    """The images ``root/<name>`` as rows of 0-1 floats (``SIDE * SIDE * 3`` each), in ``names`` order."""
    from PIL import Image

    return np.stack([np.asarray(Image.open(os.path.join(root, n)).convert("RGB"), dtype=np.float32).ravel() / 255
                     for n in names])
