"""CSV: the header, cuts at record boundaries (``cuts``), and reading a unit record by record.

This is the per-record reader, the reference: ``csv_arrow`` reads the same units column-wise
while it can prove it gives the same records, and hands the rest of a unit back to ``read``.
Lines end with ``\\n`` (``\\r\\n`` works too).

Bad records: ``csv_columns``, ``csv_parse`` (unterminated quote at the end of the file, or a record
the csv module refuses), ``invalid_utf8``, ``gzip_truncated`` and ``gzip_invalid``.
"""
from __future__ import annotations

import csv
from collections.abc import Iterator
from typing import IO, TYPE_CHECKING

from shardprep.formats.base import (
    Bad,
    Format,
    InputError,
    InputFile,
    Record,
    StreamError,
    WorkUnit,
    open_input,
    read_lines,
)
from shardprep.formats.cuts import line_units

if TYPE_CHECKING:
    from shardprep.schema import Schema
    from shardprep.tfrecord import FramedBatch

__all__ = ["CsvFormat", "read_header"]

csv.field_size_limit(max(csv.field_size_limit(), 2**31 - 1))  # a single field may hold megabytes


class CsvFormat(Format):
    """CSV with a header line; large files cut at newlines outside quotes; a column-wise fast path."""

    name = "csv"
    extensions = (".csv",)

    def plan(self, file: InputFile, unit_bytes: int) -> list[WorkUnit]:
        return line_units(file, unit_bytes, columns=read_header(file), quotes=True)

    def read(self, unit: WorkUnit) -> Iterator[Record]:
        return read_csv(unit)

    def column_wise(self, unit: WorkUnit, schema: Schema, extra_fields: str) -> bool:
        from shardprep.formats.csv_arrow import usable  # pyarrow only where a unit is parsed

        return usable(unit, schema, extra_fields)

    def framed_batches(self, unit: WorkUnit, schema: Schema, extra_fields: str) -> Iterator[FramedBatch]:
        from shardprep.formats.csv_arrow import framed_batches

        return framed_batches(unit, schema, extra_fields)


def read_header(file: InputFile) -> tuple[str, ...]:
    """The column names: the first record of the file (a UTF-8 BOM stripped); () when there is none."""
    with open_input(file, 0) as stream:
        for _line, lines, row, error in _csv_records(stream, 0, 1):
            if error or not all(ok for _, _, ok in lines):
                problem = error[1] if error else "it is not valid UTF-8"
                raise InputError(f"{file.url!r}: the CSV header cannot be read: {problem}")
            empty = [str(i + 1) for i, name in enumerate(row) if not name.strip()]
            if empty:
                raise InputError(f"{file.url!r}: the CSV header {row!r} has no name for column(s) "
                                 f"{', '.join(empty)}: every column needs a name (the first line is the header)")
            repeated = sorted({name for name in row if row.count(name) > 1})
            if repeated:
                raise InputError(f"{file.url!r}: the CSV header repeats column name(s) {', '.join(map(repr, repeated))}: "
                                 "every column needs its own name; rename them")
            return tuple(row)
    return ()


class _CsvLines:
    """Feeds decoded lines to the csv module and keeps (offset, raw, valid UTF-8) of those it took."""

    EOF = "\n"  # fed after the last line: a record that takes it was inside quotes at the end of the file

    def __init__(self, stream: IO[bytes], offset: int) -> None:
        self.taken: list[tuple[int, bytes, bool | None]] = []
        self._start = offset
        self._lines = read_lines(stream, offset)

    def __iter__(self) -> Iterator[str]:
        end = self._start
        for offset, raw in self._lines:
            try:
                text, ok = raw.decode("utf-8"), True
            except UnicodeDecodeError:
                text, ok = raw.decode("utf-8", "surrogateescape"), False
            if offset == 0 and text.startswith("\ufeff"):
                text = text[1:]
            self.taken.append((offset, raw, ok))
            end = offset + len(raw)
            yield text
        self.taken.append((end, b"", None))
        yield self.EOF


def _csv_records(stream: IO[bytes], offset: int, line: int) -> Iterator[tuple[int, list, list | None, tuple | None]]:
    """(line, taken lines, fields, error) per CSV record; blank lines are skipped, not records."""
    feed = _CsvLines(stream, offset)
    reader = csv.reader(feed)
    while True:
        error = None
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as e:
            text = str(e)
            if "new-line character seen in unquoted field" in text:
                text = "it holds a carriage return (\\r) in an unquoted field; quote that field"
            row, error = None, ("csv_parse", f"the csv module refuses it: {text}")
        except StreamError as e:
            lines = feed.taken + [(e.offset, e.partial, True)]
            yield line, lines, None, (e.reason, e.detail)
            return
        lines, feed.taken = feed.taken, []
        if lines[-1][2] is None:
            lines.pop()
            if not lines:
                return
            error = ("csv_parse", "a quoted field opened in it is never closed: the file ends inside it")
        position, line = line, line + len(lines)
        if row == [] and error is None:
            continue
        yield position, lines, row, error


def _text(lines: list) -> str:
    return b"".join(raw for _, raw, _ in lines).decode("utf-8", "replace").rstrip("\r\n")


def read_csv(unit: WorkUnit) -> Iterator[Record]:
    """(position, row) or (position, Bad) per record of ``unit``; a header row (unit start 0) is skipped."""
    columns = unit.columns
    limit = None if unit.file.gzip else unit.end
    header = unit.start == 0
    with open_input(unit.file, unit.start) as stream:
        for position, lines, row, error in _csv_records(stream, unit.start, unit.first_position):
            if limit is not None:
                if lines[0][0] >= limit:
                    return
                end = lines[-1][0] + len(lines[-1][1])
                if end > limit:
                    raise InputError(
                        f"{unit.file.url!r}: the record at line {position} runs past the planned cut at byte {limit}: "
                        "a stray '\"' in an unquoted field breaks the quote-parity rule that cuts large CSV files (or "
                        "the file changed after planning); fix the quoting, or gzip the file so it is read in one piece"
                    )
            if header:
                header = False
                continue
            if error:
                raw = b"".join(r for _, r, _ in lines) if error[0].startswith("gzip") else _text(lines)
                yield position, Bad(position, error[0], f"line {position}: {error[1]}", raw)
            elif not all(ok for _, _, ok in lines):
                yield position, Bad(position, "invalid_utf8", f"line {position} is not valid UTF-8",
                                    b"".join(r for _, r, _ in lines).rstrip(b"\r\n"))
            elif len(row) != len(columns):
                yield position, Bad(position, "csv_columns", f"line {position} has {len(row)} fields, expected {len(columns)} "
                                    f"({', '.join(columns[:10])}{', ...' if len(columns) > 10 else ''})", _text(lines))
            else:
                yield position, dict(zip(columns, row))
