"""Input files: finding them, telling their format, cutting them into work units, sampling rows.

Dispatch is by format name, once, through ``REGISTRY``: each ``Format`` (``formats.csv``,
``jsonl``, ``parquet``, ``tfrecord``) cuts its files and reads its units. An empty file is one
unit of no records, whatever its format. Work units come out in a deterministic order (file,
then place in the file).
"""
from __future__ import annotations

import os
import posixpath
from collections.abc import Iterator, Sequence

from shardprep import fs
from shardprep.formats.base import FORMATS, Bad, Format, InputError, InputFile, Record, WorkUnit
from shardprep.formats.csv import CsvFormat
from shardprep.formats.jsonl import JsonLinesFormat
from shardprep.formats.parquet import ParquetFormat
from shardprep.formats.tfrecord import TFRecordFormat

__all__ = ["REGISTRY", "detect_format", "expand_inputs", "format_of", "plan_units", "read_unit", "sample_rows"]

REGISTRY: dict[str, Format] = {f.name: f for f in (CsvFormat(), JsonLinesFormat(), ParquetFormat(), TFRecordFormat())}
if tuple(REGISTRY) != FORMATS:  # pragma: no cover - a programming error, caught by any test
    raise ImportError(f"formats {tuple(REGISTRY)} != FORMATS {FORMATS}: every name needs exactly one Format")
_EXTENSIONS = {ext: f.name for f in REGISTRY.values() for ext in f.extensions}


def format_of(unit_or_file: WorkUnit | InputFile) -> Format:
    """The ``Format`` that cuts and reads this file or unit."""
    file = unit_or_file.file if isinstance(unit_or_file, WorkUnit) else unit_or_file
    return REGISTRY[file.format]


# --- finding inputs --------------------------------------------------------------------------------


def detect_format(url: str) -> tuple[str, bool]:
    """(format, gzip) from the file name's extension, ``.gz`` stripped."""
    name = posixpath.basename(url.rstrip("/")).lower()
    gz = name.endswith(".gz")
    ext = posixpath.splitext(name[:-3] if gz else name)[1]
    if ext not in _EXTENSIONS:
        raise InputError(
            f"cannot tell the format of {url!r} from its extension {ext or '(none)'!r}: expected one of "
            f"{', '.join(_EXTENSIONS)} (optionally + .gz); use --format {'|'.join(FORMATS)}"
        )
    return _EXTENSIONS[ext], gz


def _is_folder(url: str) -> bool:
    try:
        filesystem, path = fs.filesystem(url)
        return filesystem.isdir(path)
    except (OSError, ValueError):
        return False


def _normal(url: str) -> str:
    """Local paths as absolute paths, so one file named two ways is read once (and from any working folder)."""
    if not fs.is_local(url):
        return url
    return os.path.abspath(url.removeprefix("file://"))


def expand_inputs(patterns: Sequence[str], fmt: str = "auto") -> list[InputFile]:
    """The files matching ``patterns``: sorted, without duplicates, indexed in that order.

    A wildcard skips names starting with ``.`` or ``_`` (``_SUCCESS``, ``.crc`` files of Spark/Hadoop).
    """
    if fmt != "auto" and fmt not in FORMATS:
        raise InputError(f"--format {fmt!r} is not supported: expected auto or one of {', '.join(FORMATS)}")
    if isinstance(patterns, str):
        patterns = [patterns]
    if not patterns:
        raise InputError("no --input given: pass --input GLOB at least once")
    urls: set[str] = set()
    for pattern in patterns:
        try:
            found = fs.glob(pattern)
        except (OSError, ValueError) as e:
            raise InputError(f"--input {pattern!r} cannot be listed: {e}") from None
        if any(c in pattern for c in "*?["):
            found = [u for u in found if not posixpath.basename(u).startswith((".", "_"))]
        if not found:
            if _is_folder(pattern):
                raise InputError(f"--input {pattern!r} is a folder: give a pattern for its files, e.g. "
                                 f"{pattern.rstrip('/')}/*")
            raise InputError(f"--input {pattern!r} matches no files: check the path (quote a pattern so the shell "
                             "does not expand it)")
        urls.update(_normal(url) for url in found)
    files = []
    for index, url in enumerate(sorted(urls)):
        form, gz = detect_format(url) if fmt == "auto" else (fmt, url.lower().endswith(".gz"))
        try:
            size = fs.size(url)
            with fs.open_file(url, "rb"):
                pass
        except (OSError, ValueError) as e:
            raise InputError(f"input file {url!r} cannot be read: {e}") from None
        files.append(InputFile(index, url, size, form, gz))
    return files


# --- planning --------------------------------------------------------------------------------------


def plan_units(files: Sequence[InputFile], *, unit_bytes: int = 64 * 1024 * 1024) -> list[WorkUnit]:
    """Work units of ``files`` in a deterministic order (file, then place in the file).

    Reads each CSV header, each Parquet footer, and every large CSV/JSON Lines file once to place
    its cuts; raises ``InputError`` for a file that cannot be used at all.
    """
    if not isinstance(unit_bytes, int) or unit_bytes < 1:
        raise ValueError(f"unit_bytes={unit_bytes!r}: expected a positive number of bytes")
    return [unit for file in files for unit in _plan_file(file, unit_bytes)]


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
    if unit.file.size == 0:
        return iter(())
    return format_of(unit).read(unit)


def sample_rows(files: Sequence[InputFile], *, max_rows: int = 1000, max_files: int = 8) -> list[dict]:
    """The first good rows of the first ``max_files`` files, up to ``max_rows`` spread evenly over them."""
    chosen = list(files)[:max_files]
    rows: list[dict] = []
    for i, file in enumerate(chosen):
        quota = -(-(max_rows - len(rows)) // (len(chosen) - i))
        if quota <= 0:
            break
        unit = _plan_file(file, max(file.size, 1))[0]
        reader = read_unit(unit)
        try:
            for seen, (_, row) in enumerate(reader, 1):
                if not isinstance(row, Bad):
                    rows.append(row)
                    quota -= 1
                if quota <= 0 or seen >= 10 * max_rows:
                    break
        finally:
            if hasattr(reader, "close"):
                reader.close()
    return rows
