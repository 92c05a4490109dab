"""Image headers in pure Python: format, height, width and channels of JPEG, PNG, GIF, BMP and WebP.

No pixel is kept: the header gives the size, and a cheap walk proves the data complete enough to
decode (JPEG: a scan and the end-of-image marker after it; PNG: every chunk whole, IDAT present, the
critical chunks' CRCs, and the IDAT zlib stream inflated, streaming in bounded memory and counted, to
exactly the bytes the header implies, Adam7 passes summed; GIF: every block and sub-block up to the
trailer; BMP: the pixel rows; WebP: the declared RIFF size). An image declaring more pixels than
``max_pixels`` (``--max-image-pixels``, default Pillow's decompression-bomb limit) is ``image_too_large``,
checked before any pixel data is read. ``channels`` is what TensorFlow's ``tf.io.decode_image`` gives with
``channels=0``: PNG palette -> 3 (4 with a ``tRNS`` chunk), GIF -> 3, CMYK JPEG -> 3 (converted).
A problem is an ``ImageProblem`` with a stable reason code (``REASONS``).
"""
from __future__ import annotations

import struct
import zlib
from typing import NamedTuple

__all__ = ["EMPTY", "DECODE", "MAX_IMAGE_PIXELS", "NOT_IMAGE", "REASONS", "TOO_LARGE", "TRUNCATED", "UNREADABLE", "UNSUPPORTED", "ImageInfo",
           "ImageProblem", "IMAGE_FORMATS", "sniff"]

IMAGE_FORMATS = ("jpeg", "png", "gif", "bmp", "webp")
EMPTY = "image_empty"  # zero bytes
NOT_IMAGE = "image_not_an_image"  # no known image signature
UNSUPPORTED = "image_unsupported_format"  # an image, in a format (or variant) TensorFlow cannot decode
TRUNCATED = "image_truncated"  # the data ends early
DECODE = "image_decode_error"  # the header or the pixel data is invalid
UNREADABLE = "image_unreadable"  # missing, or the file cannot be read (or a listing row names no file/label)
TOO_LARGE = "image_too_large"  # the header declares more pixels than --max-image-pixels
REASONS = (EMPTY, NOT_IMAGE, UNSUPPORTED, TRUNCATED, DECODE, UNREADABLE, TOO_LARGE)
MAX_IMAGE_PIXELS = int(1024 * 1024 * 1024 // 4 // 3)  # PIL.Image.MAX_IMAGE_PIXELS (89,478,485), without importing Pillow
_INFLATE_STEP = 1 << 20  # bytes of pixel rows inflated at a time, then dropped

_OTHER_SIGNATURES = (  # recognised images in formats this tool does not take
    (b"II*\x00", "TIFF"), (b"MM\x00*", "TIFF"), (b"\x00\x00\x01\x00", "ICO"), (b"8BPS", "PSD"),
    (b"\x00\x00\x00\x0cjP  ", "JPEG 2000"), (b"\xff\x4f\xff\x51", "JPEG 2000"), (b"\x89PNG", "PNG"),
)
_JPEG_SOF_OK = {0xC0: "baseline", 0xC1: "extended", 0xC2: "progressive", 0xC9: "arithmetic", 0xCA: "arithmetic"}
_JPEG_SOF_OTHER = {0xC3, 0xC5, 0xC6, 0xC7, 0xCB, 0xCD, 0xCE, 0xCF}  # lossless / hierarchical
# What each JPEG marker byte means to the walk (one table look-up per segment): a segment to skip
# by its length, a fill byte, a marker without a length, end of image, a frame header we take or
# refuse, start of scan.
_SEGMENT, _FILL, _BARE, _EOI, _SOF, _SOF_OTHER, _SOS = range(7)
_JPEG_MARKER = tuple(_FILL if m == 0xFF else _BARE if m == 0x01 or 0xD0 <= m <= 0xD8 else _EOI if m == 0xD9 else
                     _SOF if m in _JPEG_SOF_OK else _SOF_OTHER if m in _JPEG_SOF_OTHER else _SOS if m == 0xDA else _SEGMENT
                     for m in range(256))
_MARKER_HEAD = struct.Struct(">BBH").unpack_from  # 0xFF, marker, segment length
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_PNG_CHANNELS = {0: 1, 2: 3, 3: 3, 4: 2, 6: 4}
_PNG_SAMPLES = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}  # per pixel, in the rows
_PNG_DEPTHS = {0: (1, 2, 4, 8, 16), 2: (8, 16), 3: (1, 2, 4, 8), 4: (8, 16), 6: (8, 16)}
_ADAM7 = ((0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2))


class ImageInfo(NamedTuple):
    """What the header says: ``format`` (one of ``IMAGE_FORMATS``), size in pixels, decoded channels."""

    format: str
    height: int
    width: int
    channels: int


class ImageProblem(Exception):
    """An image that cannot be used: ``reason`` (one of ``REASONS``) and a readable ``detail``."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason, self.detail = reason, detail


def sniff(data: bytes, max_pixels: int | None = MAX_IMAGE_PIXELS) -> ImageInfo:
    """The header's ``ImageInfo``; raises ``ImageProblem`` for anything else (``image_too_large``: more
    than ``max_pixels`` pixels; None: no limit)."""
    if not data:
        raise ImageProblem(EMPTY, "the file is empty (0 bytes)")
    if data[:3] == b"\xff\xd8\xff":
        info = _jpeg(data)
    elif data[:8] == _PNG_SIGNATURE:
        info = _png(data)
    elif data[:6] in (b"GIF87a", b"GIF89a"):
        info = _gif(data)
    elif data[:2] == b"BM" and len(data) >= 14:
        info = _bmp(data)
    elif data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        info = _webp(data)
    else:
        for signature, name in _OTHER_SIGNATURES:
            if data.startswith(signature):
                raise ImageProblem(UNSUPPORTED, f"a {name} image: expected one of {', '.join(IMAGE_FORMATS)}")
        if data[4:8] == b"ftyp":
            raise ImageProblem(UNSUPPORTED, f"an ISO media file ({data[8:12].decode('latin-1')!r}: HEIC/AVIF?): "
                               f"expected one of {', '.join(IMAGE_FORMATS)}")
        raise ImageProblem(NOT_IMAGE, f"not an image: starts with {data[:8]!r}, no JPEG/PNG/GIF/BMP/WebP signature")
    if info.width < 1 or info.height < 1:
        raise ImageProblem(DECODE, f"{info.format} header gives a size of {info.width}x{info.height} pixels")
    if max_pixels is not None and info.width * info.height > max_pixels:
        raise ImageProblem(TOO_LARGE, f"{info.format} header gives {info.width}x{info.height} = "
                           f"{info.width * info.height:,} pixels, more than --max-image-pixels {max_pixels:,}")
    if info.format == "png":
        _png_pixel_data(data, info)
    return info


def _need(data: bytes, end: int, what: str) -> None:
    if len(data) < end:
        raise ImageProblem(TRUNCATED, f"the data ends at byte {len(data)}, inside the {what}")


def _jpeg(data: bytes) -> ImageInfo:
    i, n, sof = 2, len(data), None
    while True:
        if i + 4 > n:  # every segment but the last (the scan) has a marker and a length
            raise ImageProblem(TRUNCATED, f"the data ends at byte {n}, inside the JPEG header")
        ff, marker, length = _MARKER_HEAD(data, i)
        kind = _JPEG_MARKER[marker]
        if kind == _SEGMENT and ff == 0xFF and length >= 2:  # the common case first: a segment to skip
            i += 2 + length
            continue
        if ff != 0xFF:
            raise ImageProblem(DECODE, f"JPEG: expected a marker at byte {i}, found 0x{ff:02x}")
        if kind == _FILL:
            i += 1
            continue
        if kind == _BARE:  # markers without a length
            i += 2
            continue
        if kind == _EOI:
            raise ImageProblem(DECODE, f"JPEG: end-of-image marker at byte {i}, before any image data")
        if kind == _SOF_OTHER:
            raise ImageProblem(UNSUPPORTED, f"a lossless or hierarchical JPEG (SOF 0x{marker:02x}): TensorFlow decodes "
                               "baseline and progressive JPEG")
        if kind == _SOF:
            _need(data, i + 10, "JPEG frame header")
            height, width, components = struct.unpack_from(">HHB", data, i + 5)
            if height == 0:
                raise ImageProblem(UNSUPPORTED, "a JPEG whose height is given after the scan (DNL marker)")
            sof = ImageInfo("jpeg", height, width, 1 if components == 1 else 3)
        elif kind == _SOS:  # start of scan: entropy-coded data follows, up to the end-of-image marker
            if sof is None:
                raise ImageProblem(DECODE, "JPEG: the scan starts before any frame header")
            _jpeg_scans(data, i + 2 + length)
            return sof
        if length < 2:
            raise ImageProblem(DECODE, f"JPEG: segment length {length} at byte {i}")
        i += 2 + length


def _jpeg_scans(data: bytes, i: int) -> None:
    """From the first scan's data at ``i`` to the end-of-image marker: entropy-coded data searched for
    its next marker (0xFF then not 0, not a restart), segments between scans skipped by their length (a
    table may hold any bytes); no end-of-image marker before the data ends: truncated."""
    n = len(data)
    while True:
        i = data.find(b"\xff", i)
        if i < 0 or i + 1 >= n:
            raise ImageProblem(TRUNCATED, f"JPEG: no end-of-image marker after the scan ({n} bytes): cut short")
        marker = data[i + 1]
        if marker == 0 or marker == 0xFF or 0xD0 <= marker <= 0xD7:  # stuffed byte, fill, restart marker
            i += 1 if marker == 0xFF else 2
            continue
        if marker == 0xD9:
            return
        if i + 4 > n:
            raise ImageProblem(TRUNCATED, f"JPEG: the data ends at byte {n}, inside a segment after the scan: cut short")
        length = struct.unpack_from(">H", data, i + 2)[0]
        if length < 2:
            raise ImageProblem(DECODE, f"JPEG: segment length {length} at byte {i}")
        i += 2 + length


def _png(data: bytes) -> ImageInfo:
    """The IHDR's size and channels; every chunk up to IEND whole (critical ones: CRC checked), IDAT present."""
    _need(data, 33, "PNG header")
    if data[12:16] != b"IHDR":
        raise ImageProblem(DECODE, f"PNG: the first chunk is {data[12:16]!r}, expected IHDR")
    width, height, depth, color = struct.unpack_from(">IIBB", data, 16)
    if color not in _PNG_CHANNELS:
        raise ImageProblem(DECODE, f"PNG: colour type {color} is not valid")
    if data[8:12] != b"\x00\x00\x00\x0d" or data[28] > 1:
        raise ImageProblem(DECODE, "PNG: the IHDR chunk is not 13 bytes, or its interlace method is unknown")
    if depth not in _PNG_DEPTHS[color]:
        raise ImageProblem(DECODE, f"PNG: bit depth {depth} is not valid for colour type {color}")
    channels, i, n, idat, view = _PNG_CHANNELS[color], 8, len(data), False, memoryview(data)
    while True:
        if i + 12 > n:
            raise ImageProblem(TRUNCATED, f"PNG: the data ends at byte {n}, inside a chunk header, before IEND: cut short")
        length, kind = struct.unpack_from(">I4s", data, i)
        end = i + 12 + length
        if end > n:
            raise ImageProblem(TRUNCATED, f"PNG: the {kind!r} chunk at byte {i} needs {end} bytes, the data ends at "
                               f"{n}: cut short")
        if kind[0] < 0x61 and zlib.crc32(view[i + 4:end - 4]) != int.from_bytes(data[end - 4:end], "big"):
            raise ImageProblem(DECODE, f"PNG: the {kind!r} chunk at byte {i} fails its CRC")
        if kind == b"IDAT":
            idat = True
        elif kind == b"IEND":
            break
        elif kind == b"tRNS" and color in (0, 2, 3) and not idat:  # before the image data: an alpha channel
            channels += 1
        i = end
    if not idat:
        raise ImageProblem(DECODE, "PNG: no IDAT chunk: the image holds no pixel data")
    return ImageInfo("png", height, width, channels)


def _png_rows(width: int, height: int, bits: int) -> int:
    """Bytes of filtered rows of a ``width`` x ``height`` image: a filter byte and the packed pixels per row."""
    return height * (1 + (width * bits + 7) // 8) if width and height else 0


def _png_pixel_data(data: bytes, info: ImageInfo) -> None:
    """The IDAT chunks' zlib stream inflates to exactly the rows IHDR implies (Adam7: summed over its
    passes), inflated ``_INFLATE_STEP`` at a time and counted, never held."""
    width, height, depth, color, _, _, interlace = struct.unpack_from(">IIBBBBB", data, 16)
    bits = depth * _PNG_SAMPLES[color]
    if interlace:
        expected = sum(_png_rows((width - x + dx - 1) // dx, (height - y + dy - 1) // dy, bits)
                       for x, y, dx, dy in _ADAM7)
    else:
        expected = _png_rows(width, height, bits)
    inflate, got, i, view = zlib.decompressobj(), 0, 8, memoryview(data)
    try:
        while True:
            length, kind = struct.unpack_from(">I4s", data, i)
            if kind == b"IEND":
                break
            if kind == b"IDAT":
                chunk = view[i + 8:i + 8 + length]
                while chunk and not inflate.eof:
                    got += len(inflate.decompress(chunk, _INFLATE_STEP))
                    if got > expected:
                        raise ImageProblem(DECODE, f"PNG: the image data inflates to more than the {expected:,} "
                                           f"bytes of rows {info.width}x{info.height} needs")
                    chunk = inflate.unconsumed_tail
            i += 12 + length
        got += len(inflate.flush())
    except zlib.error as e:
        raise ImageProblem(DECODE, f"PNG: the image data is not a valid zlib stream: {e}") from None
    if got != expected:
        raise ImageProblem(TRUNCATED if got < expected else DECODE,
                           f"PNG: the image data inflates to {got:,} bytes, {info.width}x{info.height} needs "
                           f"{expected:,}{'' if inflate.eof else ' (the zlib stream ends early)'}")


def _gif(data: bytes) -> ImageInfo:
    """The screen size; every block walked (extensions and images, their sub-blocks) up to the trailer."""
    _need(data, 13, "GIF header")
    width, height, flags = struct.unpack_from("<HHB", data, 6)
    i, n, images = 13 + (3 << ((flags & 7) + 1) if flags & 0x80 else 0), len(data), 0
    while True:
        if i >= n:
            raise ImageProblem(TRUNCATED, f"GIF: the data ends at byte {n}, before the trailer: cut short")
        block = data[i]
        if block == 0x3B:
            break
        if block == 0x21:  # extension: label, then sub-blocks
            i += 2
        elif block == 0x2C:  # image: descriptor, local colour table, LZW code size, then sub-blocks
            _need(data, i + 10, "GIF image descriptor")
            local = data[i + 9]
            i += 10 + (3 << ((local & 7) + 1) if local & 0x80 else 0) + 1
            images += 1
        else:
            raise ImageProblem(DECODE, f"GIF: unknown block 0x{block:02x} at byte {i}")
        while True:  # sub-blocks: a length byte each, 0 ends them
            if i >= n:
                raise ImageProblem(TRUNCATED, f"GIF: the data ends at byte {n}, inside a block: cut short")
            size = data[i]
            i += 1 + size
            if not size:
                break
    if not images:
        raise ImageProblem(DECODE, "GIF: no image in the file")
    return ImageInfo("gif", height, width, 3)


def _bmp(data: bytes) -> ImageInfo:
    _need(data, 26, "BMP header")
    offset, header = struct.unpack_from("<II", data, 10)
    if header == 12:
        width, height, _planes, bpp = struct.unpack_from("<HHHH", data, 18)
        compression = 0
    else:
        _need(data, 34, "BMP header")
        width, height, _planes, bpp, compression = struct.unpack_from("<iiHHI", data, 18)
    if bpp not in (24, 32) or compression not in (0, 3):
        raise ImageProblem(UNSUPPORTED, f"a BMP of {bpp} bits per pixel, compression {compression}: TensorFlow "
                           "decodes uncompressed 24- and 32-bit BMP")
    rows = ((abs(width) * bpp + 31) // 32) * 4 * abs(height)
    if len(data) < offset + rows:  # the declared file size is often 0 or wrong: the pixel rows decide
        raise ImageProblem(TRUNCATED, f"BMP: {len(data)} bytes, the pixel rows need {offset + rows}: cut short")
    return ImageInfo("bmp", abs(height), abs(width), bpp // 8)


def _webp(data: bytes) -> ImageInfo:
    _need(data, 30, "WebP header")
    declared = struct.unpack_from("<I", data, 4)[0] + 8
    kind = data[12:16]
    if kind == b"VP8 ":
        if data[23:26] != b"\x9d\x01\x2a":
            raise ImageProblem(DECODE, "WebP: the VP8 frame has no start code")
        width, height = (v & 0x3FFF for v in struct.unpack_from("<HH", data, 26))
        channels = 3
    elif kind == b"VP8L":
        if data[20] != 0x2F:
            raise ImageProblem(DECODE, "WebP: the lossless stream has no signature byte")
        bits = struct.unpack_from("<I", data, 21)[0]
        width, height = (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
        channels = 4 if bits >> 28 & 1 else 3
    elif kind == b"VP8X":
        width = int.from_bytes(data[24:27], "little") + 1
        height = int.from_bytes(data[27:30], "little") + 1
        channels = 4 if data[20] & 0x10 else 3
    else:
        raise ImageProblem(DECODE, f"WebP: unknown chunk {kind!r}")
    if len(data) < declared:
        raise ImageProblem(TRUNCATED, f"WebP: {len(data)} bytes, the RIFF header promises {declared}: cut short")
    return ImageInfo("webp", height, width, channels)
