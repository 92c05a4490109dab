"""Input files: finding them, telling their format, cutting them into work units, sampling rows.

Dispatch is by format name, once, through ``REGISTRY``: each ``Format`` (``formats.csv``,
``jsonl``, ``parquet``, ``tfrecord``) cuts its files and reads its units. An empty file is one
unit of no records, whatever its format. Work units come out in a deterministic order (file,
then place in the file).
"""
from __future__ import annotations

import dataclasses
import logging
import os
import posixpath
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from shardprep import fs, local_files, naming
from shardprep.errors import DamagedInput
from shardprep.formats.base import (
    FORMATS,
    MAX_RECORD_BYTES,
    SAMPLE_BYTES,
    SAMPLE_FILES,
    Bad,
    Format,
    InputError,
    InputFile,
    InputOptions,
    Record,
    WorkUnit,
    spread,
)
from shardprep.formats.csv.source import CsvFormat
from shardprep.formats.cuts import LINE_FORMATS, resolve_alone
from shardprep.formats.grouping import group_small
from shardprep.formats.images import IMAGE_EXTENSIONS, ImageFormat, ImageOptions, expand_images
from shardprep.formats.json_array import JsonArrayFormat, is_json_array
from shardprep.formats.jsonl import JsonLinesFormat
from shardprep.formats.parquet import ParquetFormat
from shardprep.formats.reading import KEEP_FILE_BYTES, forget_kept, keep_whole
from shardprep.formats.text import TextFormat
from shardprep.formats.tfds import TfdsFormat, expand_tfds
from shardprep.formats.tfrecord import TFRecordFormat
from shardprep.schema import Schema

__all__ = ["REGISTRY", "auto_unit_bytes", "detect_format", "expand_inputs", "format_of", "own_schema", "own_splits",
           "plan_units", "prepare_inputs", "read_unit", "sample_rows"]

AUTO_UNITS = 16  # --unit-mb's default aims at this many units: a core each on a workstation, several on a laptop
AUTO_UNIT_BYTES = (16 << 20, 64 << 20)  # ... each between these sizes: per-unit costs vs the last units' balance
PLAN_THREADS = 16  # requests in flight at most while the launcher lists, heads and footers an object store's files
T = TypeVar("T")

REGISTRY: dict[str, Format] = {
    f.name: f for f in (CsvFormat(), JsonLinesFormat(), ParquetFormat(), TFRecordFormat(), ImageFormat(), TfdsFormat(),
                        JsonArrayFormat(), TextFormat())
}
if tuple(REGISTRY) != FORMATS:  # pragma: no cover - a programming error, caught by any test
    raise ImportError(f"formats {tuple(REGISTRY)} != FORMATS {FORMATS}: every name needs exactly one Format")
_EXTENSIONS = {ext: f.name for f in REGISTRY.values() for ext in f.extensions}

log = logging.getLogger("shardprep")


def format_of(unit_or_file: WorkUnit | InputFile) -> Format:
    """The ``Format`` that cuts and reads this file or unit."""
    file = unit_or_file.file if isinstance(unit_or_file, WorkUnit) else unit_or_file
    return REGISTRY[file.format]


# --- what the formats need before the run ---------------------------------------------------------


def prepare_inputs(files: Sequence[InputFile], options: InputOptions) -> list[InputFile]:
    """The files made ready to plan by their formats (``Format.prepare``: CSV dialects), in order."""
    out = list(files)
    for name in dict.fromkeys(f.format for f in files):
        out = REGISTRY[name].prepare(out, options)
    return out


def own_schema(files: Sequence[InputFile], schema_given: bool) -> Schema | None:
    """The schema the input's format fixes itself (``Format.own_schema``), or None."""
    return format_of(files[0]).own_schema(files, schema_given) if files else None


def described(files: Sequence[InputFile], schema: Schema) -> Schema:
    """``schema`` with what each input format says of its features (``Format.describe``)."""
    for name in sorted({f.format for f in files}):
        schema = REGISTRY[name].describe(files, schema)
    return schema


def own_splits(files: Sequence[InputFile], spec: str | None) -> tuple[Sequence[InputFile], tuple] | None:
    """(files, splits) where the input carries its splits (``Format.own_splits``: TFDS), else None."""
    return format_of(files[0]).own_splits(files, spec) if files else None


# --- finding inputs --------------------------------------------------------------------------------


def detect_format(url: str) -> tuple[str, bool]:
    """(format, gzip) from the file name's extension, ``.gz`` stripped."""
    name = posixpath.basename(url.rstrip("/")).lower()
    gz = name.endswith(".gz")
    ext = posixpath.splitext(name[:-3] if gz else name)[1]
    if ext not in _EXTENSIONS:
        if ext in IMAGE_EXTENSIONS:
            raise InputError(f"{url!r} is an image: give the folder holding the class folders (ROOT/<class>/<image>) "
                             "or a listing file as --input, with --format images")
        raise InputError(
            f"cannot tell the format of {url!r} from its extension {ext or '(none)'!r}: expected one of "
            f"{', '.join(_EXTENSIONS)} (optionally + .gz); use --format {'|'.join(FORMATS)}"
        )
    return _EXTENSIONS[ext], gz


def _is_folder(url: str) -> bool:
    try:
        return fs.isdir(url)
    except (OSError, ValueError):
        return False


def _normal(url: str) -> str:
    """Local paths as absolute paths, so one file named two ways is read once (and from any working folder)."""
    if not fs.is_local(url):
        return url
    return os.path.abspath(url.removeprefix("file://"))


def expand_inputs(patterns: Sequence[str], fmt: str = "auto", images: ImageOptions | None = None) -> list[InputFile]:
    """The files matching ``patterns``: sorted, without duplicates, indexed in that order.

    A wildcard skips names starting with ``.`` or ``_`` (``_SUCCESS``, ``.crc`` files of Spark/Hadoop),
    saying so, and every match that is no regular file (a FIFO, a link to a device or to nothing, a
    folder: ``fs.match``), naming each with why; a pattern that names such a thing directly is one
    ``InputError`` saying what it is. A local file reached by several names (symlinks, hard links) is read once, by the
    first name in sorted order, saying which names were skipped.
    ``--format images``: one ``ImageSource`` for the folder or listing (``formats.images``).
    """
    if fmt != "auto" and fmt not in FORMATS:
        raise InputError(f"--format {fmt!r} is not supported: expected auto or one of {', '.join(FORMATS)}")
    if fmt == "images":
        return expand_images(patterns, images or ImageOptions(), _normal)
    if fmt == "tfds":  # the shards a TFDS folder's dataset_info.json names, each with its split
        return expand_tfds(patterns, _normal)
    forget_kept()  # a launch's own reads only
    if isinstance(patterns, str):
        patterns = [patterns]
    if not patterns:
        raise InputError("no --input given: pass --input GLOB at least once")
    urls: set[str] = set()
    listed: dict[str, tuple[int, str]] = {}  # (size, version) of the files a listing described (GCS)
    for pattern in patterns:
        try:
            found, left_out, from_listing = fs.match(pattern)
        except (OSError, ValueError) as e:
            raise InputError(f"--input {pattern!r} cannot be listed: {e}") from None
        listed.update(from_listing or {})
        for url, what in left_out:
            log.warning("--input %s: left out %s: %s, not a regular file", pattern, url, what)
        if any(c in pattern for c in "*?["):
            hidden = [u for u in found if posixpath.basename(u).startswith((".", "_"))]
            if hidden:
                log.info("--input %s: skipped %d file(s) whose names start with '.' or '_' (e.g. %s); name them "
                         "without a wildcard to read them", pattern, len(hidden), hidden[0])
            found = [u for u in found if not posixpath.basename(u).startswith((".", "_"))]
        if not found:
            if _is_folder(pattern) and fs.exists(naming.join(pattern, naming.TFDS_INFO)):
                raise InputError(f"--input {pattern!r} is a TFDS data set folder: add --format tfds to read it")
            if _is_folder(pattern):
                raise InputError(f"--input {pattern!r} is a folder: give a pattern for its files, e.g. "
                                 f"{pattern.rstrip('/')}/*, or --format images for a folder of class folders of images")
            what = fs.not_regular(pattern)
            if what is not None:
                raise InputError(f"--input {pattern!r} is {what}, not a regular file: shardprep reads regular files "
                                 "only (a FIFO or device is never opened; copy its data to a file)")
            if left_out:
                raise InputError(f"--input {pattern!r} matches no regular file: {len(left_out)} match(es) left out, "
                                 f"e.g. {left_out[0][0]} ({left_out[0][1]})")
            raise InputError(f"--input {pattern!r} matches no files: check the path (quote a pattern so the shell "
                             "does not expand it)")
        urls.update(_normal(url) for url in found)
    files: list[InputFile] = []
    seen: dict[tuple[int, int], str] = {}  # (device, inode) -> the first name of a local file
    for url in sorted(urls):
        size, version, identity, what, error, data = _facts(url, listed, _planned_from_head(url, fmt))
        if identity is not None and (first := seen.setdefault(identity, url)) != url:
            log.warning("input %s is the same file as %s (a link): read once, as %s", url, first, first)
            continue
        index = len(files)
        form, gz = detect_format(url) if fmt == "auto" else (fmt, url.lower().endswith(".gz"))
        if fmt == "auto" and url.lower().removesuffix(".gz").endswith(".json") and is_json_array(url, gz):
            form = "json"  # one JSON array of objects, not JSON Lines
        if what is not None:
            raise InputError(f"input file {url!r} is {what}, not a regular file: shardprep reads regular files only")
        if error is not None:
            raise InputError(f"input file {url!r} cannot be read: {error}") from None
        files.append(InputFile(index, url, size, form, gz, version))
        if data is not None:
            keep_whole(files[-1], data)  # read with its facts: its head at planning is not read again
    return files


def _planned_from_head(url: str, fmt: str) -> bool:
    """Whether planning reads the head of this file, uncompressed (a CSV header, the first bytes of JSON)."""
    name = url.lower()
    return not name.endswith(".gz") and (fmt if fmt != "auto" else _EXTENSIONS.get(posixpath.splitext(name)[1])) in (
        "csv", "jsonl", "json")


def _facts(url: str, listed: dict[str, tuple[int, str]], heads: bool) -> tuple[
        int, str, tuple[int, int] | None, str | None, Exception | None, bytes | None]:
    """(size, version, local identity, what it is if not a regular file, why it cannot be read, all of a
    small local file) of an input.

    A local file: one open and its fstat (``local_files.opened_facts``; a path that cannot be opened is then
    ``fs.not_regular``'s, say a link to nothing), and, where planning reads its ``heads``, a read of all
    of it if it holds at most ``KEEP_FILE_BYTES``;
    a file an object store's listing described: the listing's facts (its reads at planning tell if it
    is readable); another URL: a request and an open.
    """
    if url in listed:
        size, version = listed[url]
        return size, version, None, None, None, None
    if fs.is_local(url):
        try:
            facts = local_files.opened_facts(fs.local_path(url), whole=KEEP_FILE_BYTES if heads else 0)
        except OSError as e:
            return 0, "", None, fs.not_regular(url), e, None
        return facts.size, facts.version, facts.identity, facts.kind, None, facts.data
    try:
        size, version = fs.facts(url)
        with fs.open_file(url, "rb"):
            pass
    except (OSError, ValueError) as e:
        return 0, "", None, None, e, None
    return size, version, None, None, None, None


# --- planning --------------------------------------------------------------------------------------


def auto_unit_bytes(input_bytes: int) -> int:
    """``--unit-mb``'s default for an input of ``input_bytes``: a 16th of it in whole MiB, between 16 and
    64 MiB. A few large files (one 300 MB TFRecord file: 16 units, not 5) then still give 16 cores a
    unit each, and an input of 1 GiB or more keeps 64 MiB units. A function of the input alone, so the units
    (and the dead letters' unit numbers) are the same on every machine; shards do not depend on the
    units at all."""
    low, high = AUTO_UNIT_BYTES
    mib = 1 << 20
    return min(high, max(low, -(-input_bytes // (AUTO_UNITS * mib)) * mib))


def plan_units(files: Sequence[InputFile], *, unit_bytes: int = 64 * 1024 * 1024,
               max_record_bytes: int = MAX_RECORD_BYTES, group: bool = True) -> list[WorkUnit]:
    """Work units of ``files`` in a deterministic order (file, then place in the file); a record
    over ``max_record_bytes`` will be a ``record_too_large`` dead letter.

    Reads each CSV header (a bounded head) and each Parquet footer, never the data: a large CSV /
    JSON Lines file becomes nominal byte ranges whose cuts the pipeline finds (``formats.cuts``);
    raises ``InputError`` for a file that cannot be used at all. ``group``: runs of small files
    become one ``FileGroup`` unit each (``formats.grouping``); a file's reads at planning go
    ``PLAN_THREADS`` at a time where they are requests to an object store.
    """
    if not isinstance(unit_bytes, int) or unit_bytes < 1:
        raise ValueError(f"unit_bytes={unit_bytes!r}: expected a positive number of bytes")
    if not isinstance(max_record_bytes, int) or max_record_bytes < 1:
        raise ValueError(f"max_record_bytes={max_record_bytes!r}: expected a positive number of bytes")
    planned = _each(files, lambda file: _plan_file(file, unit_bytes))
    forget_kept()  # the files expand_inputs read whole: their heads are read
    if max_record_bytes != MAX_RECORD_BYTES:
        planned = [[dataclasses.replace(unit, max_record_bytes=max_record_bytes) for unit in units] for units in planned]
    return group_small(planned, unit_bytes) if group else [unit for units in planned for unit in units]


def _each(files: Sequence[InputFile], fn: Callable[[InputFile], T]) -> list[T]:
    """``fn`` of every file, in order: in this thread where the files are local, else ``PLAN_THREADS``
    requests in flight at most (a file's reads at planning are a head or a footer: latency, not work)."""
    if len(files) < 2 or all(fs.is_local(f.url) for f in files):
        return [fn(file) for file in files]
    with ThreadPoolExecutor(PLAN_THREADS) as pool:
        return list(pool.map(fn, files))


def _plan_file(file: InputFile, unit_bytes: int) -> list[WorkUnit]:
    if file.size == 0:
        return [WorkUnit(file, 0, 0, 0, 1)]
    return format_of(file).plan(file, unit_bytes)


# --- reading ---------------------------------------------------------------------------------------


def read_unit(unit: WorkUnit) -> Iterator[Record]:
    """(position, row) or (position, Bad) for every record of ``unit``, in file order.

    Rows: CSV column -> str; JSON object as parsed; TFRecord feature -> list of int/float/bytes;
    Parquet column -> Python value (dates/times as their integer value, decimals as floats).
    """
    if unit.nominal:  # planned from the file's size: its cuts found here (the pipeline finds them in parallel)
        unit = resolve_alone(unit)
        if unit.start >= unit.end:
            return iter(())
    if unit.file.size == 0:
        return iter(())
    return format_of(unit).read(unit)


def sample_rows(files: Sequence[InputFile], *, max_rows: int = 1000, max_files: int = SAMPLE_FILES,
                max_bytes: int = SAMPLE_BYTES) -> list[dict]:
    """Good rows of at most ``max_files`` files spread over the list (first, last and between), up to
    ``max_rows`` spread evenly over them; of a CSV / JSON Lines file only the records that start in its
    share of ``max_bytes`` (gzip: the rows counted only), so the launcher's reads stay bounded; of a
    Parquet file only the columns its types leave open (``Format.sample``)."""
    chosen = spread(files, max_files)
    rows: list[dict] = []
    for i, file in enumerate(chosen):
        quota = -(-(max_rows - len(rows)) // (len(chosen) - i))
        if quota <= 0:
            break
        unit = _plan_file(file, max(file.size, 1))[0]
        if file.format in LINE_FORMATS and not file.gzip:
            unit = dataclasses.replace(unit, end=min(unit.end, max_bytes // len(chosen)))
        sampled = format_of(file).sample(unit, quota) if file.size else None
        reader = sampled if sampled is not None else read_unit(unit)
        try:
            for seen, (_, row) in enumerate(reader, 1):
                if not isinstance(row, Bad):
                    rows.append(row)
                    quota -= 1
                if quota <= 0 or seen >= 10 * max_rows:
                    break
        except DamagedInput:
            raise
        except InputError:  # a CSV record that runs past the head's end: the rows before it are the sample
            pass
        finally:
            if hasattr(reader, "close"):
                reader.close()
    return rows
