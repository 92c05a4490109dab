"""``shardprep.formats.image_codec``: every pixel decoded, or the image named as truncated, undecodable
or over the pixel limit; a header that disagrees with the pixels is refused; shrinking scales the
longer side to ``--max-side`` as baseline JPEG, the same bytes every time, grey images staying grey."""
from __future__ import annotations

import io

import pytest
from PIL import Image

from shardprep.formats import image_codec
from shardprep.formats.image_headers import DECODE, TOO_LARGE, TRUNCATED, ImageInfo, ImageProblem, sniff


def _encoded(fmt: str, size=(40, 30), mode="RGB") -> bytes:
    image = Image.new(mode, size)
    image.putdata([((x * 7) % 256, (y * 5) % 256, (x + y) % 256)[: len(mode)] if mode != "L" else (x * y) % 256
                   for y in range(size[1]) for x in range(size[0])])
    out = io.BytesIO()
    image.save(out, fmt)
    return out.getvalue()


@pytest.mark.parametrize("fmt", ["PNG", "JPEG", "GIF", "BMP"])
def test_an_image_decodes_to_the_size_its_header_says(fmt):
    data = _encoded(fmt)
    assert image_codec.decode(data, sniff(data)).size == (40, 30)


def test_damage_is_named_truncated_or_undecodable():
    data = _encoded("PNG")
    with pytest.raises(ImageProblem) as cut:
        image_codec.decode(data[: len(data) // 2], sniff(data))
    assert cut.value.reason == TRUNCATED
    with pytest.raises(ImageProblem) as garbage:
        image_codec.decode(data[:40] + b"\x00" * 200, sniff(data))
    assert garbage.value.reason in (DECODE, TRUNCATED)


def test_a_header_that_disagrees_with_the_pixels_is_refused():
    data = _encoded("PNG")
    with pytest.raises(ImageProblem, match="the header says 41x30, the pixels are 40x30") as wrong:
        image_codec.decode(data, ImageInfo("png", 30, 41, 3))
    assert wrong.value.reason == DECODE


def test_more_pixels_than_the_limit_is_too_large():
    data = _encoded("PNG", size=(200, 200))
    before = Image.MAX_IMAGE_PIXELS
    try:
        with pytest.raises(ImageProblem) as big:
            image_codec.decode(data, sniff(data), max_pixels=100)
        assert big.value.reason == TOO_LARGE
        assert image_codec.decode(data, sniff(data), max_pixels=40_000).size == (200, 200)
    finally:
        Image.MAX_IMAGE_PIXELS = before  # the limit is per process: set back for the tests after


@pytest.mark.parametrize("size, mode, side, expected", [((40, 30), "RGB", 16, (16, 12)), ((30, 40), "RGB", 8, (6, 8)),
                                                        ((40, 30), "L", 10, (10, 8)), ((400, 1), "RGB", 20, (20, 1))])
def test_shrinking_scales_the_longer_side_the_same_way_every_time(size, mode, side, expected):
    image = Image.open(io.BytesIO(_encoded("PNG", size, mode)))
    data, info = image_codec.shrink(image, side, 80)
    assert data == image_codec.shrink(image, side, 80)[0]  # deterministic
    assert info == ImageInfo("jpeg", expected[1], expected[0], 1 if mode == "L" else 3)
    assert sniff(data) == info and image_codec.decode(data, info).size == expected
    assert data != image_codec.shrink(image, side, 30)[0]  # the quality is the one given
