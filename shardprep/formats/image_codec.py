"""Full decoding (``--check-images decode``) and deterministic shrinking (``--max-side``), with Pillow.

Imported only when a unit needs it, so header-only runs never load Pillow. Re-encoding uses fixed
options (bicubic resize, JPEG at the given quality, 4:2:0 subsampling, baseline, no metadata), so the
same input and Pillow version give the same bytes on every worker.
"""
from __future__ import annotations

import io
import struct

from PIL import Image, ImageFile

from shardprep.formats.image_headers import DECODE, TOO_LARGE, TRUNCATED, ImageInfo, ImageProblem

__all__ = ["decode", "shrink"]

ImageFile.LOAD_TRUNCATED_IMAGES = False  # a truncated image is an error, never silently padded


def decode(data: bytes, info: ImageInfo, max_pixels: int | None = None) -> Image.Image:
    """Every pixel of ``data`` decoded (first frame of a GIF); ``ImageProblem`` if that fails or disagrees.
    ``max_pixels`` (``--max-image-pixels``): Pillow's decompression-bomb limit for this call (the header
    check has already refused larger images)."""
    if max_pixels is not None:
        Image.MAX_IMAGE_PIXELS = max_pixels  # per process; every caller passes its run's limit
    try:
        image = Image.open(io.BytesIO(data))
        image.load()
    except Image.DecompressionBombError as e:
        raise ImageProblem(TOO_LARGE, f"{info.format}: {e}") from None
    except (OSError, SyntaxError, ValueError, EOFError, struct.error) as e:
        text = str(e) or type(e).__name__
        reason = TRUNCATED if "truncat" in text.lower() or isinstance(e, EOFError) else DECODE
        raise ImageProblem(reason, f"{info.format} cannot be decoded: {text}") from None
    if image.size != (info.width, info.height):
        raise ImageProblem(DECODE, f"{info.format}: the header says {info.width}x{info.height}, the pixels are "
                           f"{image.size[0]}x{image.size[1]}")
    return image


def shrink(image: Image.Image, max_side: int, quality: int) -> tuple[bytes, ImageInfo]:
    """``image`` scaled so its longer side is ``max_side``, as JPEG bytes, and their ``ImageInfo``."""
    width, height = image.size
    scale = max_side / max(width, height)
    size = (max(1, round(width * scale)), max(1, round(height * scale)))
    mode = "L" if image.mode in ("1", "L", "LA", "I", "I;16", "F") else "RGB"
    resized = image.convert(mode).resize(size, Image.Resampling.BICUBIC)
    out = io.BytesIO()
    options = {"quality": quality, "optimize": False, "progressive": False}
    if mode == "RGB":
        options["subsampling"] = 2
    resized.save(out, "JPEG", **options)
    return out.getvalue(), ImageInfo("jpeg", size[1], size[0], 1 if mode == "L" else 3)

