"""``python -m trainer.demo_images``: class folders of images to balanced shards to two training workers.

1. Writes a few hundred small images in ``raw/<class>/`` (JPEG mostly, some PNG/GIF/BMP), each
   class a learnable colour pattern, plus broken files: a truncated JPEG, an empty file, a text
   file named ``.jpg`` and a TIFF.
2. Re-shards them with ``python -m shardprep.run --format images --workers 2 --split
   train=0.9,eval=0.1 --max-bad-records 10`` (the broken files become dead letters).
3. Trains ``--model image`` on 2 local workers with ``python -m trainer.launch`` and prints each
   worker's steps, empty replica-steps, images/s and input-wait fraction.

``write_images`` (Pillow, no TensorFlow) is also what the tests and the benchmark generate from.
"""
from __future__ import annotations

import argparse
import io
import json
import os
import random
import shutil
import subprocess
import sys
from collections.abc import Sequence

from trainer import run_table

__all__ = ["BROKEN", "CLASSES", "encode", "main", "train_images", "write_broken", "write_images"]

CLASSES = ("circle", "stripes", "square")
BROKEN = {  # file (under raw/<class>/) -> the dead-letter reason it must give
    "circle/cut.jpg": "image_truncated", "stripes/empty.jpg": "image_empty",
    "square/notes.jpg": "image_not_an_image", "square/scan.tif": "image_unsupported_format",
}


def _picture(kind: str, size: int, rng: random.Random):
    from PIL import Image, ImageDraw

    bg = tuple(rng.randrange(0, 96) for _ in range(3))
    fg = tuple(rng.randrange(160, 256) for _ in range(3))
    image = Image.new("RGB", (size + rng.randrange(0, 9), size + rng.randrange(0, 9)), bg)
    draw = ImageDraw.Draw(image)
    w, h = image.size
    if kind == "circle":
        r = rng.randrange(size // 5, size // 3)
        cx, cy = rng.randrange(r, w - r), rng.randrange(r, h - r)
        draw.ellipse((cx - r, cy - r, cx + r, cy + r), fill=fg)
    elif kind == "stripes":
        step = rng.randrange(4, 8)
        for x in range(rng.randrange(0, step), w, 2 * step):
            draw.rectangle((x, 0, x + step - 1, h), fill=fg)
    else:
        s = rng.randrange(size // 3, size // 2)
        x, y = rng.randrange(0, w - s), rng.randrange(0, h - s)
        draw.rectangle((x, y, x + s, y + s), fill=fg)
    return image


def encode(image, fmt: str, quality: int = 90) -> bytes:
    """``image`` as ``fmt`` bytes (jpeg, png, gif, bmp, webp)."""
    out = io.BytesIO()
    if fmt == "gif":
        image.convert("P").save(out, "GIF")
    elif fmt == "jpeg":
        image.save(out, "JPEG", quality=quality)
    else:
        image.save(out, fmt.upper())
    return out.getvalue()


def write_images(root: str, *, per_class: int = 100, size: int = 40, seed: int = 0, classes: Sequence[str] = CLASSES,
                 formats: Sequence[str] = ("jpeg", "jpeg", "jpeg", "png", "gif", "bmp")) -> list[str]:
    """Writes ``per_class`` images per class to ``root/<class>/``, formats in turn; returns their relative paths."""
    rng = random.Random(seed)
    paths = []
    for c, kind in enumerate(classes):
        os.makedirs(os.path.join(root, kind), exist_ok=True)
        for i in range(per_class):
            fmt = formats[i % len(formats)]
            rel = f"{kind}/{i:05d}.{'jpg' if fmt == 'jpeg' else fmt}"
            with open(os.path.join(root, rel), "wb") as f:
                f.write(encode(_picture(CLASSES[c % len(CLASSES)], size, rng), fmt))
            paths.append(rel)
    return paths


def write_broken(root: str, *, size: int = 40) -> dict[str, str]:
    """Writes the ``BROKEN`` files under ``root``; returns them (path -> expected reason)."""
    good = encode(_picture("circle", size, random.Random(1)), "jpeg")
    tiff = io.BytesIO()
    _picture("square", size, random.Random(2)).save(tiff, "TIFF")
    data = {"circle/cut.jpg": good[: len(good) // 2], "stripes/empty.jpg": b"",
            "square/notes.jpg": b"these are notes, not an image\n", "square/scan.tif": tiff.getvalue()}
    for rel, blob in data.items():
        os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
        with open(os.path.join(root, rel), "wb") as f:
            f.write(blob)
    return dict(BROKEN)


def train_images(data_dir: str, model_dir: str, *, workers: int, epochs: int, image_size: int = 32,
                 extra: Sequence[str] = ()) -> list[dict]:
    """Trains ``--model image`` on ``workers`` local workers through the launcher; returns their summaries."""
    from trainer.metrics import summary_url

    _run([sys.executable, "-m", "trainer.launch", "--workers", str(workers), "--", "--data", data_dir, "--model", "image",
          "--label", "image/class/label", "--image-size", str(image_size), "--per-replica-batch", "32", "--epochs",
          str(epochs), "--model-dir", model_dir, "--learning-rate", "0.003", "--shuffle-buffer", "256",
          "--eval-split", "eval", *extra])
    summaries = []
    for w in range(workers):
        with open(summary_url(model_dir, w)) as f:
            summaries.append(json.load(f))
    return summaries


def _run(cmd: list[str]) -> None:
    print("$", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="trainer.demo_images", description=__doc__.splitlines()[0])
    p.add_argument("--out", default="demo-images", help="demo folder (default: ./demo-images), replaced on every run")
    p.add_argument("--per-class", type=int, default=100)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--image-size", type=int, default=32)
    args = p.parse_args(argv)
    if os.path.exists(args.out):
        shutil.rmtree(args.out)
    raw, data, run = (os.path.join(args.out, name) for name in ("raw", "ds", "run"))
    write_images(raw, per_class=args.per_class)
    write_broken(raw)
    try:
        _run([sys.executable, "-m", "shardprep.run", "--input", raw, "--format", "images", "--output", data,
              "--workers", str(args.workers), "--split", "train=0.9,eval=0.1", "--max-bad-records", "10"])
        summaries = train_images(data, run, workers=args.workers, epochs=args.epochs, image_size=args.image_size)
    except subprocess.CalledProcessError as e:
        print(f"trainer.demo_images: error: {' '.join(e.cmd[1:4])} ... exited with {e.returncode}", file=sys.stderr)
        return 1
    run_table.print_table(summaries)
    for s in summaries:
        print(f"worker {s['worker']}: {s.get('examples_per_second') or 0:.1f} images/s, "
              f"input wait {s.get('input_wait_fraction', 0):.3f}")
    steps = {s["steps"] for s in summaries}
    empty = sum(s["empty_replica_steps"] for s in summaries)
    print(f"equal steps on every worker: {len(steps) == 1}; empty replica-steps: {empty}")
    return 0 if len(steps) == 1 and empty == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
