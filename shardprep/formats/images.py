"""``--format images``: image files (class folders or a listing) to tf.train.Example records.

The whole input is one ``ImageSource`` (an ``InputFile`` whose url is the root or the listing,
whose size is the images' total bytes); its work units are batches of consecutive images, planned
from names and sizes only: at most ``FILES_PER_UNIT`` files or ``--unit-mb`` bytes each. Each image
becomes one Example with the field names of tensorflow/models' ``build_imagenet_data.py``
(``FEATURES``). The header is checked in pure Python (``image_headers``); ``--check-images decode``
and ``--max-side`` decode with Pillow (``image_codec``). Bad images are dead letters whose raw text
is the image's path: reasons in ``image_headers.REASONS``.
"""
from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable, Iterator, Sequence

from shardprep import fs
from shardprep.formats.base import Bad, Format, InputError, InputFile, Record, WorkUnit
from shardprep.formats.image_headers import UNREADABLE, ImageProblem, sniff
from shardprep.formats.image_listing import ImageEntry, ImageOptions, list_images, resolve
from shardprep.schema import FeatureSpec, Schema

__all__ = ["FEATURES", "FILES_PER_UNIT", "ImageFormat", "ImageOptions", "ImageSource", "ImageUnit", "expand_images",
           "image_schema"]

FILES_PER_UNIT = 512
LABEL = "image/class/label"
FEATURES = {
    "image/encoded": "string", "image/format": "string", "image/height": "int64", "image/width": "int64",
    "image/channels": "int64", LABEL: "int64", "image/class/text": "string", "image/filename": "string",
    "image/key/sha256": "string",
}
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".gif", ".bmp", ".webp")  # for hints only: the bytes decide
_FETCH_BATCH = 64  # images fetched concurrently from an object store


@dataclasses.dataclass(frozen=True)
class ImageSource(InputFile):
    """The input as one file: root (paths resolve against it), classes in label order, options, entries."""

    root: str = ""
    classes: tuple[str, ...] = ()
    options: ImageOptions = dataclasses.field(default_factory=ImageOptions)
    entries: tuple[ImageEntry, ...] = dataclasses.field(default=(), repr=False, compare=False)


@dataclasses.dataclass(frozen=True)
class ImageUnit(WorkUnit):
    """A batch of consecutive images: ``start``/``end`` index the listing, ``entries`` are those images."""

    entries: tuple[ImageEntry, ...] = dataclasses.field(default=(), repr=False)


def image_schema(classes: Sequence[str]) -> Schema:
    """The fixed schema of image Examples; the label carries the class names in label order."""
    return {name: FeatureSpec(dtype, (), tuple(classes) if name == LABEL else ())
            for name, dtype in sorted(FEATURES.items())}


def expand_images(patterns: Sequence[str], options: ImageOptions, normal: Callable[[str], str] = str) -> list[InputFile]:
    """The one ``ImageSource`` of ``--input``; ``InputError`` when it holds no usable images."""
    listing = list_images(patterns, options, normal)
    total = sum(e.size for e in listing.entries)
    if total == 0:
        raise InputError(f"--input {listing.source!r}: found {len(listing.entries)} image file(s), all empty or missing: "
                         "expected ROOT/<class>/<image> files with data")
    try:  # the commit's change check: the listing file, or the root folder (its class folders come and go)
        version = fs.version(listing.source)
    except OSError:
        version = ""
    return [ImageSource(0, listing.source, total, "images", False, version, root=listing.root, classes=listing.classes,
                        options=options, entries=listing.entries)]


class ImageFormat(Format):
    """Image files; rows are the Example fields of ``FEATURES``."""

    name = "images"
    extensions = ()  # never picked by extension: --format images names a folder or a listing

    def plan(self, file: InputFile, unit_bytes: int) -> list[WorkUnit]:
        if not isinstance(file, ImageSource):
            raise InputError(f"{file.url!r}: --format images reads a folder or listing given as the one --input")
        light = dataclasses.replace(file, entries=())  # units carry their own entries, not the whole listing
        units: list[WorkUnit] = []
        start, size = 0, 0
        for i, entry in enumerate(file.entries):
            if i > start and (i - start >= FILES_PER_UNIT or size + entry.size > unit_bytes):
                units.append(ImageUnit(light, len(units), start, i, start + 1, entries=file.entries[start:i]))
                start, size = i, 0
            size += entry.size
        units.append(ImageUnit(light, len(units), start, len(file.entries), start + 1, entries=file.entries[start:]))
        return units

    def read(self, unit: WorkUnit) -> Iterator[Record]:
        if not isinstance(unit, ImageUnit) or not isinstance(unit.file, ImageSource):
            raise InputError(f"{unit.file.url!r}: not an image unit")
        source = unit.file
        for offset, (entry, url, data) in enumerate(_fetch(source.root, unit.entries)):
            position = unit.first_position + offset
            try:
                if isinstance(data, BaseException):
                    raise ImageProblem(UNREADABLE, f"cannot be read: {data}")
                row: dict | Bad = image_row(entry, data, source.classes, source.options)
            except ImageProblem as e:
                row = Bad(position, e.reason, f"{url}: {e.detail}", entry.path)
            yield position, row


def image_row(entry: ImageEntry, data: bytes, classes: Sequence[str], options: ImageOptions) -> dict:
    """One image's Example fields; ``ImageProblem`` for an image that cannot be used."""
    info = sniff(data)
    large = options.max_side is not None and max(info.height, info.width) > options.max_side
    if options.check == "decode" or large:
        from shardprep.formats.image_codec import decode, shrink  # Pillow, only when pixels are needed

        image = decode(data, info)
        if large:
            data, info = shrink(image, options.max_side, options.jpeg_quality)
    return {
        "image/encoded": data, "image/format": info.format, "image/height": info.height, "image/width": info.width,
        "image/channels": info.channels, LABEL: entry.label, "image/class/text": classes[entry.label],
        "image/filename": entry.path, "image/key/sha256": hashlib.sha256(data).hexdigest(),
    }


def _fetch(root: str, entries: Sequence[ImageEntry]) -> Iterator[tuple[ImageEntry, str, bytes | BaseException]]:
    """(entry, url, bytes or the error) of every entry, in order; object stores fetch a batch at a time."""
    urls = [resolve(root, e.path) for e in entries]
    if fs.is_local(root):
        for entry, url in zip(entries, urls):
            yield entry, url, _problem(entry) or _read_local(url.removeprefix("file://"))
        return
    filesystem, _ = fs.filesystem(root)
    for i in range(0, len(entries), _FETCH_BATCH):
        batch = [(e, u) for e, u in zip(entries[i:i + _FETCH_BATCH], urls[i:i + _FETCH_BATCH])]
        wanted = [filesystem._strip_protocol(u) for e, u in batch if not e.problem]
        got = filesystem.cat(wanted, on_error="return") if wanted else {}
        for entry, url in batch:
            yield entry, url, _problem(entry) or got.get(filesystem._strip_protocol(url), FileNotFoundError(url))


def _problem(entry: ImageEntry) -> BaseException | None:
    return FileNotFoundError(entry.problem) if entry.problem else None


def _read_local(path: str) -> bytes | BaseException:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        return e
