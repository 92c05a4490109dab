"""``--format images``: image files (class folders or a listing) to tf.train.Example records.

The whole input is one ``ImageSource`` (an ``InputFile`` whose url is the root or the listing,
whose size is the images' total bytes); its work units are batches of consecutive images, planned
from names and sizes only: at most ``FILES_PER_UNIT`` files or ``--unit-mb`` bytes each. Each image
becomes one Example with the field names of tensorflow/models' ``build_imagenet_data.py``
(``FEATURES``). The header is checked in pure Python (``image_headers``); ``--check-images decode``
and ``--max-side`` decode with Pillow (``image_codec``). Bad images are dead letters whose raw text
is the image's path (its bytes, for a name that is not UTF-8): reasons in ``image_headers.REASONS``.

The pipeline reads a unit column-wise (``framed_batches``): one system call per step of a local
file (open, one read of its listed size, close) and ``example.columnar`` encoding and framing a
block of images at once (hashes and columns included), so the Python work per image is the
header check and a few appends. ``read`` gives the same records row by row (the per-record path
and its tests).
"""
from __future__ import annotations

import dataclasses
import hashlib
import os
from collections.abc import Callable, Iterator, Sequence

import numpy as np

from shardprep import fs
from shardprep.example import columnar
from shardprep.formats.base import Bad, Format, InputError, InputFile, Record, WorkUnit
from shardprep.formats.image_headers import UNREADABLE, ImageInfo, ImageProblem, sniff
from shardprep.formats.image_listing import ImageEntries, ImageOptions, list_images, resolve
from shardprep.framing import FramedBatch
from shardprep.schema import FeatureSpec, Schema

__all__ = ["FEATURES", "FILES_PER_UNIT", "ImageFormat", "ImageOptions", "ImageSource", "ImageUnit", "expand_images",
           "image_schema"]

FILES_PER_UNIT = 512
# Images encoded at once by the column-wise reader: a whole unit (--unit-mb, at most 64 by default) in one
# block, so Parse passes it on without joining blocks (one copy of the unit fewer); the block's
# bytes are freed once joined, so the peak stays ~2 units.
BLOCK_BYTES = 64 << 20
LABEL = "image/class/label"
FEATURES = {
    "image/encoded": "string", "image/format": "string", "image/height": "int64", "image/width": "int64",
    "image/channels": "int64", LABEL: "int64", "image/class/text": "string", "image/filename": "string",
    "image/key/sha256": "string",
}
INVALID_UTF8 = "invalid_utf8"  # the row encoder's reason for a string it cannot encode
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".gif", ".bmp", ".webp")  # for hints only: the bytes decide
_FETCH_BATCH = 64  # images fetched concurrently from an object store


@dataclasses.dataclass(frozen=True)
class ImageSource(InputFile):
    """The input as one file: root (paths resolve against it), classes in label order, options, images;
    ``listed``: paths as a listing file gives them (else relative paths under class folders)."""

    root: str = ""
    classes: tuple[str, ...] = ()
    options: ImageOptions = dataclasses.field(default_factory=ImageOptions)
    listed: bool = False
    entries: ImageEntries = dataclasses.field(default_factory=ImageEntries, repr=False, compare=False)


@dataclasses.dataclass(frozen=True)
class ImageUnit(WorkUnit):
    """A batch of consecutive images: ``start``/``end`` index the listing, ``entries`` are those images."""

    entries: ImageEntries = dataclasses.field(default_factory=ImageEntries, repr=False)


def image_schema(classes: Sequence[str]) -> Schema:
    """The fixed schema of image Examples; the label carries the class names in label order."""
    return {name: FeatureSpec(dtype, (), tuple(classes) if name == LABEL else ())
            for name, dtype in sorted(FEATURES.items())}


def expand_images(patterns: Sequence[str], options: ImageOptions, normal: Callable[[str], str] = str) -> list[InputFile]:
    """The one ``ImageSource`` of ``--input``; ``InputError`` when it holds no usable images."""
    listing = list_images(patterns, options, normal)
    total = sum(listing.entries.sizes)
    if total == 0:
        raise InputError(f"--input {listing.source!r}: found {len(listing.entries)} image file(s), all empty or missing: "
                         "expected ROOT/<class>/<image> files with data")
    try:  # the commit's change check: the listing file, or the root folder (its class folders come and go)
        version = fs.version(listing.source)
    except OSError:
        version = ""
    return [ImageSource(0, listing.source, total, "images", False, version, root=listing.root, classes=listing.classes,
                        options=options, listed=listing.listed, entries=listing.entries)]


class ImageFormat(Format):
    """Image files; rows are the Example fields of ``FEATURES``."""

    name = "images"
    gives_columns = True
    extensions = ()  # never picked by extension: --format images names a folder or a listing

    def own_schema(self, files: Sequence[InputFile], schema_given: bool) -> Schema | None:
        if schema_given:
            raise InputError("--schema does not go with --format images: image Examples have fixed fields")
        return image_schema(files[0].classes) if isinstance(files[0], ImageSource) else None

    def plan(self, file: InputFile, unit_bytes: int) -> list[WorkUnit]:
        if not isinstance(file, ImageSource):
            raise InputError(f"{file.url!r}: --format images reads a folder or listing given as the one --input")
        light = dataclasses.replace(file, entries=ImageEntries())  # units carry their own images, not the listing
        units: list[WorkUnit] = []
        start, size = 0, 0
        for i, entry_size in enumerate(file.entries.sizes):
            if i > start and (i - start >= FILES_PER_UNIT or size + entry_size > unit_bytes):
                units.append(ImageUnit(light, len(units), start, i, start + 1, entries=file.entries.between(start, i)))
                start, size = i, 0
            size += entry_size
        end = len(file.entries)
        units.append(ImageUnit(light, len(units), start, end, start + 1, entries=file.entries.between(start, end)))
        return units

    def read(self, unit: WorkUnit) -> Iterator[Record]:
        source, entries = _source(unit)
        for item in _checked(unit):
            if isinstance(item, Bad):
                yield item.position, item
                continue
            index, data, info = item
            yield unit.first_position + index, image_row(entries.paths[index], entries.labels[index], data, info,
                                                         source.classes)

    def column_wise(self, unit: WorkUnit, schema: Schema, extra_fields: str) -> bool:
        return isinstance(unit, ImageUnit) and schema.keys() == FEATURES.keys() and all(
            schema[name].dtype == dtype and schema[name].shape == () for name, dtype in FEATURES.items())

    def framed_batches(self, unit: WorkUnit, schema: Schema, extra_fields: str) -> Iterator[FramedBatch | Bad]:
        source, entries = _source(unit)
        block = _Block(entries, [_escaped(c).encode("utf-8") for c in source.classes])  # a name not UTF-8: its
        # images are dead letters (``_checked``), never in a block
        for item in _checked(unit):
            if isinstance(item, Bad):
                yield from block.flush(schema)
                yield item
            elif block.add(*item) >= BLOCK_BYTES:
                yield from block.flush(schema)
        yield from block.flush(schema)


def image_row(path: str, label: int, data: bytes, info: ImageInfo, classes: Sequence[str]) -> dict:
    """One image's Example fields, as a row for the per-record encoder."""
    return {
        "image/encoded": data, "image/format": info.format, "image/height": info.height, "image/width": info.width,
        "image/channels": info.channels, LABEL: label, "image/class/text": classes[label],
        "image/filename": path, "image/key/sha256": hashlib.sha256(data).hexdigest(),
    }


class _Block:
    """Checked images of one unit gathered, then hashed, encoded and framed at once (``columnar``):
    per image only three appends, the columns built a block at a time."""

    def __init__(self, entries: ImageEntries, texts: list[bytes]) -> None:
        self._entries, self._texts = entries, texts  # class names in UTF-8, by label
        self._index: list[int] = []
        self._data: list[bytes] = []
        self._infos: list[ImageInfo] = []
        self._size = 0

    def add(self, index: int, data: bytes, info: ImageInfo) -> int:
        """Adds image ``index`` of the unit (its name UTF-8 encodable); returns the block's bytes."""
        self._index.append(index)
        self._data.append(data)
        self._infos.append(info)
        self._size += len(data)
        return self._size

    def flush(self, schema: Schema) -> Iterator[FramedBatch]:
        """The gathered images as one framed batch (none if there are none); starts a new block."""
        index, data, infos, n = self._index, self._data, self._infos, len(self._data)
        if not n:
            return
        self._index, self._data, self._infos, self._size = [], [], [], 0
        paths, all_labels, texts = self._entries.paths, self._entries.labels, self._texts
        labels = [all_labels[i] for i in index]
        formats, heights, widths, channels = zip(*infos)
        sha256 = hashlib.sha256
        digests = b"".join([sha256(d).digest() for d in data]).hex().encode("ascii")  # hexdigest, as build_imagenet_data.py
        encoded = _strings(data)
        del data  # the images' own bytes: only the joined column from here on
        columns = {
            "image/encoded": encoded, "image/format": _strings([_FORMAT_BYTES[f] for f in formats]),
            "image/height": np.array(heights, np.int64), "image/width": np.array(widths, np.int64),
            "image/channels": np.array(channels, np.int64), LABEL: np.array(labels, np.int64),
            "image/class/text": _strings([texts[label] for label in labels]),
            "image/filename": _strings([paths[i].encode("utf-8") for i in index]),
            "image/key/sha256": (np.arange(0, 64 * n + 1, 64, dtype=np.int64), digests),
        }
        yield from columnar.framed_batches(schema, columns, n)


_FORMAT_BYTES = {name: name.encode("ascii") for name in ("jpeg", "png", "gif", "bmp", "webp")}


def _strings(values: list[bytes]) -> tuple[np.ndarray, bytes]:
    """A string column as ``columnar`` takes it: offsets and the values back to back."""
    offsets = np.zeros(len(values) + 1, np.int64)
    np.cumsum(np.fromiter(map(len, values), np.int64, len(values)), out=offsets[1:])
    return offsets, b"".join(values)


def _utf8(text: str) -> bytes | None:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:  # a file name with bytes that are not UTF-8 (kept as surrogates by os.scandir)
        return None


def _source(unit: WorkUnit) -> tuple[ImageSource, ImageEntries]:
    if not isinstance(unit, ImageUnit) or not isinstance(unit.file, ImageSource):
        raise InputError(f"{unit.file.url!r}: not an image unit")
    return unit.file, unit.entries


def _checked(unit: WorkUnit) -> Iterator[tuple[int, bytes, ImageInfo] | Bad]:
    """(index in the unit, bytes, header) of each usable image, in order (re-encoded if ``--max-side``
    asks), and a ``Bad`` for each other one. A file name that is not UTF-8 (kept as surrogates by
    ``os.scandir``) cannot be ``image/filename``: such an image is a dead letter ``invalid_utf8``
    (after any problem of its bytes), its raw the name's bytes and its detail the name escaped."""
    source, entries = _source(unit)
    options = source.options
    pixels = options.check == "decode" or options.max_side is not None
    paths, first = entries.paths, unit.first_position
    unnamed = {i for i, p in enumerate(paths) if not p.isascii() and _utf8(p) is None}
    for index, url, data in _fetch(source, entries):
        try:
            if isinstance(data, BaseException):
                raise ImageProblem(UNREADABLE, f"cannot be read: {data}")
            info = sniff(data, options.max_pixels)
            if pixels:
                data, info = _pixels(data, info, options)
        except ImageProblem as e:
            if index in unnamed:
                yield Bad(first + index, e.reason, _escaped(f"{url}: {e.detail}"), os.fsencode(paths[index]))
            else:
                yield Bad(first + index, e.reason, f"{url}: {e.detail}", paths[index])
            continue
        if index in unnamed:
            yield Bad(first + index, INVALID_UTF8, f"{_escaped(url)}: the file name cannot be UTF-8 encoded "
                      "(image/filename is a string)", os.fsencode(paths[index]))
            continue
        yield index, data, info


def _escaped(text: str) -> str:
    """``text`` with what UTF-8 cannot encode (a non-UTF-8 file name's surrogates) as ``\\udcXX``."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _pixels(data: bytes, info: ImageInfo, options: ImageOptions) -> tuple[bytes, ImageInfo]:
    """``--check-images decode`` and ``--max-side``: every pixel decoded; a large image shrunk."""
    from shardprep.formats.image_codec import decode, shrink  # Pillow, only when pixels are needed

    large = options.max_side is not None and max(info.height, info.width) > options.max_side
    if options.check == "decode" or large:
        image = decode(data, info, options.max_pixels)
        if large:
            return shrink(image, options.max_side, options.jpeg_quality)
    return data, info


def _fetch(source: ImageSource, entries: ImageEntries) -> Iterator[tuple[int, str, bytes | BaseException]]:
    """(index, url, bytes or the error) of every image, in order; object stores fetch a batch at a time."""
    if not fs.is_local(source.root):
        return _fetch_remote(source, entries)
    if source.listed:
        urls = [resolve(source.root, p).removeprefix("file://") for p in entries.paths]
    else:  # class-folder paths are clean (no "." or ".." parts), and the root absolute: a join is enough
        base = source.root.removeprefix("file://").rstrip("/") + "/"
        urls = [base + p for p in entries.paths]
    if not entries.problems:  # no Python frame per image between the reads and the caller
        return zip(range(len(urls)), urls, map(_read_local, urls, entries.sizes))
    problems = dict(entries.problems)
    return ((index, url, FileNotFoundError(problems[index]) if index in problems else _read_local(url, size))
            for index, (url, size) in enumerate(zip(urls, entries.sizes)))


def _fetch_remote(source: ImageSource, entries: ImageEntries) -> Iterator[tuple[int, str, bytes | BaseException]]:
    problems = dict(entries.problems)
    urls = [resolve(source.root, p) for p in entries.paths]
    filesystem, _ = fs.filesystem(source.root)
    for lo in range(0, len(urls), _FETCH_BATCH):
        batch = range(lo, min(lo + _FETCH_BATCH, len(urls)))
        wanted = [filesystem._strip_protocol(urls[i]) for i in batch if i not in problems]
        got = filesystem.cat(wanted, on_error="return") if wanted else {}
        for i in batch:
            yield i, urls[i], (FileNotFoundError(problems[i]) if i in problems else
                               got.get(filesystem._strip_protocol(urls[i]), FileNotFoundError(urls[i])))


def _read_local(path: str, size: int) -> bytes | OSError:
    """A local file's bytes: open, one read of its listed size plus one byte (to see the end), close;
    reads on to the end only if the file is not that size any more."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as e:
        return e
    try:
        data = os.read(fd, size + 1)
        if len(data) != size:  # changed since it was listed (or a short read): the rest, to the end
            parts = [data]
            while chunk := os.read(fd, max(size, 1 << 20)):
                parts.append(chunk)
            data = b"".join(parts)
        return data
    except OSError as e:
        return e
    finally:
        os.close(fd)
