"""Issue 35: ``--max-image-pixels`` (dead letter ``image_too_large`` at every check level) and a header
check that proves an image's data complete: cut images of every format are dead letters, never committed."""
from __future__ import annotations

import io
import random
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from shardprep import manifest, run
from shardprep.formats.image_headers import MAX_IMAGE_PIXELS, REASONS, ImageProblem, sniff
from tests.shardprep.formats.test_images import dead_letters, records


def _noise(size=(29, 17), mode="RGB", seed=0) -> Image.Image:
    rng = random.Random(seed)
    image = Image.new("RGB", size)
    image.putdata([(rng.randrange(256), rng.randrange(256), rng.randrange(256)) for _ in range(size[0] * size[1])])
    return image.convert(mode)


def _encoded(kind: str) -> bytes:
    out = io.BytesIO()
    if kind == "jpeg":
        _noise().save(out, "JPEG", quality=80)
    elif kind == "jpeg-progressive":
        _noise(seed=1).save(out, "JPEG", quality=80, progressive=True)
    elif kind == "png":
        _noise(seed=2).save(out, "PNG")
    elif kind == "png-interlaced":
        _noise(seed=3).save(out, "PNG", interlace=1)
    elif kind == "png-palette":
        _noise(seed=4).convert("P").save(out, "PNG")
    elif kind == "gif":
        _noise(seed=5).save(out, "GIF")
    elif kind == "bmp":
        _noise(seed=6).save(out, "BMP")
    elif kind == "webp":
        _noise(seed=7).save(out, "WEBP", quality=80)
    else:
        _noise(seed=8).save(out, "WEBP", lossless=True)
    return out.getvalue()


KINDS = ("jpeg", "jpeg-progressive", "png", "png-interlaced", "png-palette", "gif", "bmp", "webp", "webp-lossless")
_IMAGES = {kind: _encoded(kind) for kind in KINDS}


def _png_of_zeros(width: int, height: int) -> bytes:
    """An 8-bit grey PNG of zeros, compressed a band of rows at a time (never all rows in memory)."""
    def chunk(kind: bytes, body: bytes) -> bytes:
        return len(body).to_bytes(4, "big") + kind + body + zlib.crc32(kind + body).to_bytes(4, "big")
    pack = zlib.compressobj(9)
    band = bytes((1 + width) * 500)
    idat = [pack.compress(band) for _ in range(height // 500)] + [pack.compress(bytes((1 + width) * (height % 500))),
                                                                  pack.flush()]
    ihdr = width.to_bytes(4, "big") + height.to_bytes(4, "big") + b"\x08\x00\x00\x00\x00"
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", b"".join(idat)) + chunk(b"IEND", b"")


def test_the_default_limit_is_pillows():
    assert MAX_IMAGE_PIXELS == Image.MAX_IMAGE_PIXELS == 89_478_485 and "image_too_large" in REASONS
    assert run.parser().parse_args(["--input", "x", "--output", "y"]).max_image_pixels == MAX_IMAGE_PIXELS


@pytest.mark.parametrize("kind", KINDS)
def test_whole_images_pass_the_header_check(kind):
    assert sniff(_IMAGES[kind]).width == 29


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(KINDS), st.data())
def test_an_image_cut_anywhere_fails_the_header_check(kind, data):
    whole = _IMAGES[kind]
    cut = data.draw(st.integers(0, len(whole) - 1))
    with pytest.raises(ImageProblem) as e:
        sniff(whole[:cut])
    assert e.value.reason in REASONS  # mostly image_truncated; a 4-byte PNG signature is not one yet


def test_every_cut_of_every_format_fails():  # exhaustive, beside the random cuts above
    for whole in _IMAGES.values():
        for cut in range(len(whole)):
            with pytest.raises(ImageProblem):
                sniff(whole[:cut])


def test_a_69_byte_png_claiming_20000_squared_is_a_dead_letter():
    tiny = _png_of_zeros(8, 8).replace((8).to_bytes(4, "big") * 2, (20000).to_bytes(4, "big") * 2, 1)
    ihdr = tiny[12:29]
    tiny = tiny[:29] + zlib.crc32(ihdr).to_bytes(4, "big") + tiny[33:]
    assert len(tiny) < 100
    with pytest.raises(ImageProblem) as e:
        sniff(tiny)
    assert e.value.reason == "image_too_large"
    with pytest.raises(ImageProblem) as e:
        sniff(tiny, 10**9)
    assert e.value.reason == "image_truncated" and "400,020,000" in e.value.detail


def test_a_png_whose_stream_holds_more_rows_than_its_header_is_a_dead_letter():
    long = _png_of_zeros(8, 9)
    short = long.replace((9).to_bytes(4, "big"), (8).to_bytes(4, "big"), 1)
    short = short[:29] + zlib.crc32(short[12:29]).to_bytes(4, "big") + short[33:]
    with pytest.raises(ImageProblem) as e:
        sniff(short)
    assert e.value.reason == "image_decode_error"
    assert sniff(long).height == 9


@pytest.fixture(scope="module")
def big_png() -> bytes:
    data = _png_of_zeros(20000, 20000)
    assert len(data) < 1 << 20
    return data


def test_a_20000_squared_png_is_too_large_unless_the_limit_allows_it(big_png, tmp_path):
    root = tmp_path / "raw"
    for name, data in (("a/big.png", big_png), ("a/small.jpg", _IMAGES["jpeg"]), ("b/small.png", _IMAGES["png"])):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    for check in ("header", "decode"):
        out = tmp_path / f"default-{check}"
        assert run.main(["--input", str(root), "--format", "images", "--output", str(out), "--num-shards", "1",
                         "--check-images", check, "--max-bad-records", "1"]) == 0
        assert [(d["raw"], d["reason"]) for d in dead_letters(str(out))] == [("a/big.png", "image_too_large")]
        assert len(records(str(out))) == 2
    out = tmp_path / "allowed"
    assert run.main(["--input", str(root), "--format", "images", "--output", str(out), "--num-shards", "1",
                     "--max-image-pixels", str(20000 * 20000)]) == 0
    assert not dead_letters(str(out))
    assert max((r["image/height"], r["image/width"]) for r in records(str(out))) == ([20000], [20000])


def test_cut_images_are_never_committed(tmp_path):
    root, rng, cut = tmp_path / "raw", random.Random(35), set()
    for i, (kind, whole) in enumerate(_IMAGES.items()):
        folder = root / ("c0" if i % 2 else "c1")
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{kind}.img").write_bytes(whole)
        (folder / f"{kind}-cut.img").write_bytes(whole[:rng.randrange(1, len(whole))])
        cut.add(f"{folder.name}/{kind}-cut.img")
    out = tmp_path / "out"
    assert run.main(["--input", str(root), "--format", "images", "--output", str(out), "--num-shards", "2",
                     "--max-bad-records", str(len(cut))]) == 0
    assert {d["raw"] for d in dead_letters(str(out))} == cut
    assert len(records(str(out))) == len(KINDS)
    m = manifest.load(str(out))
    assert (m.accounting.read, m.accounting.written, m.accounting.rejected) == (2 * len(KINDS), len(KINDS), len(KINDS))
    assert m.rejected.by_reason.get("image_truncated", 0) + m.rejected.by_reason.get("image_empty", 0) > 0
