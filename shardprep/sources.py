"""Input files: finding them, cutting them into work units, and reading units into rows or bad records.

Work units (``plan_units``, run once in the launcher): an empty file, a gzip file, a TFRecord file
or a file of at most ``unit_bytes`` is one unit. A larger CSV or JSON Lines file is cut into byte
ranges; a unit owns the records whose first byte lies in ``[start, end)``. The planner reads the
file once with C-speed ``bytes.count``/``find`` and moves each nominal cut (every ``unit_bytes``) to
just after the first newline at or after it that is outside quotes (JSON Lines: any newline), and
records the cut's byte offset and 1-based line number, so every unit starts exactly at a record.
A Parquet file is cut into runs of row groups.

This module finds the files and dispatches to the per-format readers: ``csv_source`` (CSV cuts,
quote parity and reading) and ``typed_sources`` (JSON Lines, TFRecord, Parquet). Their shared types
live in ``source_io`` and are re-exported here.

Bad records (``Bad.reason``): ``csv_columns``, ``csv_parse`` (unterminated quote at the end of the
file, or a record the csv module refuses), ``invalid_utf8``, ``json_invalid``, ``json_not_object``,
``tfrecord_length_crc`` (reading resumes at the next record that checks), ``tfrecord_data_crc``,
``tfrecord_truncated``, ``not_an_example``, ``gzip_truncated`` and ``gzip_invalid``.
"""
from __future__ import annotations

import os
import posixpath
from collections.abc import Iterator, Sequence

from shardprep import csv_source, fs, typed_sources
from shardprep.source_io import FORMATS, Bad, InputError, InputFile, WorkUnit

__all__ = [
    "FORMATS",
    "Bad",
    "InputError",
    "InputFile",
    "WorkUnit",
    "detect_format",
    "expand_inputs",
    "plan_units",
    "read_unit",
    "sample_rows",
]

_EXTENSIONS = {
    ".csv": "csv", ".jsonl": "jsonl", ".json": "jsonl", ".ndjson": "jsonl", ".parquet": "parquet",
    ".pq": "parquet", ".tfrecord": "tfrecord", ".tfrecords": "tfrecord", ".tfr": "tfrecord",
}


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
    if file.format == "parquet":
        return typed_sources.parquet_units(file, unit_bytes)
    columns = csv_source.read_header(file) if file.format == "csv" else ()
    if file.format == "jsonl":
        typed_sources.check_json_lines(file)
    whole = WorkUnit(file, 0, 0, file.size, 1, columns)
    if file.gzip or file.format == "tfrecord" or file.size <= unit_bytes:
        return [whole]
    cuts, odd_quotes = csv_source.find_cuts(file.url, unit_bytes, quotes=file.format == "csv")
    if odd_quotes:  # a stray or unterminated quote: parity is unreliable, read the file in one piece
        return [whole]
    starts = [(0, 1), *cuts]
    ends = [offset for offset, _ in cuts] + [file.size]
    return [WorkUnit(file, i, start, end, line, columns) for i, ((start, line), end) in enumerate(zip(starts, ends))]


# --- reading ---------------------------------------------------------------------------------------

_READERS = {
    "csv": csv_source.read_csv,
    "jsonl": typed_sources.read_jsonl,
    "tfrecord": typed_sources.read_tfrecord,
    "parquet": typed_sources.read_parquet,
}


def read_unit(unit: WorkUnit) -> Iterator[tuple[int, dict | Bad]]:
    """(position, row) or (position, Bad) for every record of ``unit``, in file order.

    Rows: CSV column -> str; JSON object as parsed; TFRecord feature -> list of int/float/bytes;
    Parquet column -> Python value (dates/times as their integer value, decimals as floats).
    """
    if unit.file.size == 0:
        return iter(())
    return _READERS[unit.file.format](unit)


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
