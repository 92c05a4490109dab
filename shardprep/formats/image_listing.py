"""Which images a run reads: a class-folder tree or a CSV/JSON Lines listing, as sorted entries with sizes.

Folder layout ``ROOT/<class>/<file>``: the class is the first folder level (deeper folders belong to
their class); files directly in ROOT and names starting with ``.`` or ``_`` are skipped; one
recursive listing gives every name and size (one paged request on GCS). Listing layout: a CSV (with a
header) or JSON Lines file with a path column and a label column (class names); relative paths
resolve against the listing's folder, sizes come from one listing per folder. Classes sort by name
(numerically when every name is an integer) and label ids follow that order, unless
``ImageOptions.classes`` gives them (``--labels-from``/``--label-vocab``, ``shardprep.label_vocab``):
then ids are that vocabulary's and a class it lacks is refused. Only names and sizes are read here,
never image bytes.
"""
from __future__ import annotations

import csv
import dataclasses
import io
import json
import logging
import os
import posixpath
from collections.abc import Callable, Iterable, Iterator, Sequence

from shardprep import fs
from shardprep.errors import InputError
from shardprep.formats.image_headers import MAX_IMAGE_PIXELS
from shardprep.label_vocab import apply_vocabulary

__all__ = ["ImageEntries", "ImageOptions", "Listing", "list_images", "resolve"]

log = logging.getLogger("shardprep")

LISTING_EXTENSIONS = (".csv", ".jsonl", ".json", ".ndjson")
CHECKS = ("header", "decode")


@dataclasses.dataclass(frozen=True)
class ImageOptions:
    """How images are checked and stored: ``--check-images``, ``--max-side``, ``--jpeg-quality``, listing
    columns, ``--max-image-pixels``."""

    check: str = "header"
    max_side: int | None = None
    jpeg_quality: int = 90
    path_column: str = "path"
    label_column: str = "label"
    max_pixels: int = MAX_IMAGE_PIXELS  # more in the header: dead letter image_too_large
    classes: tuple[str, ...] = ()  # the class names in id order (--labels-from / --label-vocab); empty: sorted found

    def __post_init__(self) -> None:
        if self.check not in CHECKS:
            raise InputError(f"--check-images {self.check!r}: expected one of {', '.join(CHECKS)}")
        if self.max_side is not None and self.max_side < 1:
            raise InputError(f"--max-side {self.max_side}: expected a number of pixels above 0")
        if self.max_pixels < 1:
            raise InputError(f"--max-image-pixels {self.max_pixels}: expected a number of pixels above 0")
        if not 1 <= self.jpeg_quality <= 100:
            raise InputError(f"--jpeg-quality {self.jpeg_quality}: expected 1..100")


@dataclasses.dataclass(frozen=True)
class ImageEntries:
    """Images in listing order, column by column: path relative to the root (or as the listing gives
    it), size, label id (-1: none), and why some cannot be used (``problems``: (index, text) pairs).

    Columns, not one object per image: work units carry their images across stages, and tuples of
    str and int pickle much faster than as many small objects.
    """

    paths: tuple[str, ...] = ()
    sizes: tuple[int, ...] = ()
    labels: tuple[int, ...] = ()
    problems: tuple[tuple[int, str], ...] = ()

    def __len__(self) -> int:
        return len(self.paths)

    def between(self, start: int, end: int) -> ImageEntries:
        """Images ``start`` to ``end`` (exclusive), numbered from 0 again."""
        return ImageEntries(self.paths[start:end], self.sizes[start:end], self.labels[start:end],
                            tuple((i - start, p) for i, p in self.problems if start <= i < end))


@dataclasses.dataclass(frozen=True)
class Listing:
    """What ``list_images`` found: the source (root or listing URL), the root, classes in label order,
    the images, and whether they came from a listing file (paths as it gives them) or class folders."""

    source: str
    root: str
    classes: tuple[str, ...]
    entries: ImageEntries
    listed: bool = False


def _class_order(names: set[str], given: tuple[str, ...] = (), *, what: str = "input") -> tuple[str, ...]:
    if names and given:
        return apply_vocabulary(given, names, what=what)
    if names and all(n.isdigit() for n in names):
        return tuple(sorted(names, key=lambda n: (int(n), n)))
    return tuple(sorted(names))


def list_images(patterns: Sequence[str], options: ImageOptions, normal: Callable[[str], str] = str) -> Listing:
    """The images of one ``--input``: a folder (class folders) or a CSV/JSON Lines listing file."""
    if isinstance(patterns, str):
        patterns = [patterns]
    if len(patterns) != 1:
        raise InputError(f"--format images takes one --input (a class-folder root or a listing file), got {len(patterns)}")
    url = normal(patterns[0]).rstrip("/") or "/"
    filesystem, path = fs.filesystem(url)
    if filesystem.isdir(path):
        return _folder(url, filesystem, path, options.classes)
    if filesystem.isfile(path):
        if not url.lower().endswith(LISTING_EXTENSIONS):
            raise InputError(f"--input {url!r} is a file: --format images expects a folder ROOT/<class>/<image> or a "
                             f"listing ({', '.join(LISTING_EXTENSIONS)}) with path and label columns")
        return _listing(url, options)
    raise InputError(f"--input {url!r} does not exist: expected a folder ROOT/<class>/<image> or a listing file")


def _walk_local(folder: str, prefix: str = "", seen: set[tuple[int, int]] | None = None) -> Iterator[tuple[str, int]]:
    """(relative path, size) of the files below a local folder, skipping names starting with . or _.

    Symbolic links are followed, each real folder walked once (entries in name order, links after
    the rest): a link back up the tree (a loop) or a second way to a folder already walked is skipped with a log line, and so is an entry that
    cannot be read (a dangling link, a folder that refuses a listing) or is no regular file (a FIFO, a link to
    a device: named with what it is); neither stops the run."""
    seen = set() if seen is None else seen
    try:
        info = os.stat(folder)
        if (info.st_dev, info.st_ino) in seen:
            log.warning("skipped %s: a link to a folder already walked (a loop in the tree?)", folder)
            return
        seen.add((info.st_dev, info.st_ino))
        with os.scandir(folder) as listing:  # in name order, folders before links to folders: the same tree
            entries = sorted(listing, key=lambda e: (e.is_symlink(), e.name))  # walks the same way every time
    except OSError as e:
        log.warning("skipped %s: %s", folder, e.strerror or e)
        return
    for entry in entries:
        name = entry.name
        if name[0] in "._":
            continue
        try:
            if entry.is_file():
                yield prefix + name, entry.stat().st_size
                continue
            is_dir = entry.is_dir()
        except OSError as e:
            log.warning("skipped %s: %s", entry.path, e.strerror or e)
            continue
        if is_dir:
            yield from _walk_local(entry.path, f"{prefix}{name}/", seen)
        else:  # a FIFO, a socket, a device or a link to one, a link to nothing: never opened
            log.warning("skipped %s: %s, not a regular file", entry.path, fs.not_regular(entry.path) or "gone")


def _folder(url: str, filesystem, path: str, given: tuple[str, ...] = ()) -> Listing:
    if fs.is_local(url):  # os.scandir: several times faster than fsspec's find on a large tree
        found: Iterable[tuple[str, int]] = _walk_local(url.removeprefix("file://"))  # hidden names skipped
    else:  # one recursive listing (paged) of the whole prefix
        prefix = path.rstrip("/") + "/"
        found = [(rel, int(info.get("size") or 0)) for name, info in filesystem.find(path, detail=True).items()
                 if info.get("type", "file") == "file"
                 for rel in [name[len(prefix):] if name.startswith(prefix) else name]
                 if not (rel.startswith((".", "_")) or "/." in rel or "/_" in rel)]  # hidden at any level
    found = list(found)
    sizes = {rel: size for rel, size in found if "/" in rel}  # files in class folders (paths are distinct)
    paths = sorted(sizes)
    tops = [rel[:rel.index("/")] for rel in paths]
    classes = _class_order(set(tops), given, what=f"class folders of {url}")
    if not classes:
        raise InputError(f"--input {url!r} holds no class folders with images: expected ROOT/<class>/<image>, found "
                         f"{len(found)} file(s) directly in the folder and no class folder holding files")
    ids = {c: i for i, c in enumerate(classes)}
    entries = ImageEntries(tuple(paths), tuple(map(sizes.__getitem__, paths)), tuple(map(ids.__getitem__, tops)))
    return Listing(url, url, classes, entries)


def _rows(url: str, path_column: str, label_column: str) -> list[tuple[str, str]]:
    text = fs.read_bytes(url).decode("utf-8-sig", "replace")
    if url.lower().endswith(".csv"):
        reader = csv.DictReader(io.StringIO(text))
        missing = [c for c in (path_column, label_column) if c not in (reader.fieldnames or [])]
        if missing:
            raise InputError(f"listing {url!r} has no column(s) {', '.join(missing)} (columns: "
                             f"{', '.join(reader.fieldnames or [])}): name them with --image-path-column/--image-label-column")
        return [((r.get(path_column) or "").strip(), (r.get(label_column) or "").strip()) for r in reader]
    rows = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            raise InputError(f"listing {url!r} line {number} is not JSON: expected one object per line") from None
        obj = obj if isinstance(obj, dict) else {}
        rows.append((str(obj.get(path_column) or "").strip(), str(obj.get(label_column) or "").strip()))
    return rows


def _listing(url: str, options: ImageOptions) -> Listing:
    rows = _rows(url, options.path_column, options.label_column)
    if not rows:
        raise InputError(f"listing {url!r} names no images: expected rows with columns {options.path_column} and "
                         f"{options.label_column}")
    root = posixpath.dirname(url)
    classes = _class_order({label for _, label in rows if label}, options.classes, what=f"labels of listing {url}")
    ids = {c: i for i, c in enumerate(classes)}
    sizes: dict[str, dict[str, int]] = {}
    paths, found, labels, problems = [], [], [], []
    for path, label in rows:
        paths.append(path)
        if not path or not label:
            found.append(0)
            labels.append(-1)
            problems.append((len(paths) - 1, f"listing row without a {'path' if not path else 'label'}"))
            continue
        full = resolve(root, path)
        folder, name = posixpath.split(full)
        if folder not in sizes:
            sizes[folder] = fs.sizes(folder)
        size = sizes[folder].get(name)
        found.append(size or 0)
        labels.append(ids[label])
        if size is None:
            problems.append((len(paths) - 1, f"{full} does not exist"))
    return Listing(url, root, classes, ImageEntries(tuple(paths), tuple(found), tuple(labels), tuple(problems)),
                   listed=True)


def resolve(root: str, path: str) -> str:
    """The URL of an image: absolute paths and URLs as given, others relative to ``root``."""
    if "://" in path or path.startswith("/"):
        return path
    return posixpath.normpath(posixpath.join(root, path)) if fs.is_local(root) else f"{root}/{path}"
