"""CSV: the header, cuts at record boundaries (``cuts``), and reading a unit record by record.

This is the per-record reader, the reference: ``csv.arrow`` reads the same units column-wise
while it can prove it gives the same records, and hands the rest of a unit back to ``read``.
Lines end with ``\\n`` (``\\r\\n`` works too).

Each file is read in its ``CsvDialect`` (``formats.csv.dialect``): the delimiter (``--delimiter``, else
sniffed by ``resolve_dialects`` from up to ``SAMPLE_FILES`` files, which must agree), whether
line 1 is a header, the column names, and the null values: a field equal to one of them is
``None`` in the row (missing, never a string). The header must have as many names as the first
rows have fields, else the file is refused with both counts.

Bad records: ``csv_columns``, ``csv_parse`` (unterminated quote at the end of the file, or a record
the csv module refuses), ``invalid_utf8``, ``record_too_large`` (a record over ``--max-record-mb``,
read in bounded memory), ``gzip_truncated`` and ``gzip_invalid``.
"""
from __future__ import annotations

import collections
import csv
import dataclasses
import io
import itertools
import logging
from collections.abc import Iterator, Sequence
from typing import IO, TYPE_CHECKING

from shardprep import fs
from shardprep.formats.base import (
    MAX_RECORD_BYTES,
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
from shardprep.formats.csv import small
from shardprep.formats.csv.dialect import SNIFF_BYTES, CsvDialect, or_default, sniff_delimiter
from shardprep.formats.cuts import line_units
from shardprep.formats.reading import LongLine, StreamError, line_size, open_input, read_head, read_lines, too_large

if TYPE_CHECKING:
    from shardprep.framing import FramedBatch
    from shardprep.schema import Schema

__all__ = ["CsvFormat", "dialect_of", "read_header", "resolve_dialects"]

log = logging.getLogger("shardprep")
HEADER_CHECK_ROWS = 20  # rows compared with the header's field count at planning
HEAD_PROBE = 16 << 10  # the first head read for the header; it grows 4x while it holds no complete row ...
HEAD_BYTES = 1 << 20  # ... and, for the rows to check, up to this size
WHOLE_FILE_BYTES = 1 << 20  # a whole-file unit up to this size is read whole (``small.whole_file_rows``)

csv.field_size_limit(max(csv.field_size_limit(), 2**31 - 1))  # a single field may hold megabytes


class CsvFormat(Format):
    """CSV with a header line; large files cut at newlines outside quotes; a column-wise fast path."""

    name = "csv"
    gives_columns = True
    column_wise_min_bytes = 64 << 10  # a group's smaller files: the csv module's per-record path
    extensions = (".csv",)

    def prepare(self, files: list[InputFile], options: InputOptions) -> list[InputFile]:
        return resolve_dialects(files, delimiter=options.delimiter, header=options.header,
                                column_names=options.column_names, null_values=options.null_values)

    def plan(self, file: InputFile, unit_bytes: int) -> list[WorkUnit]:
        return line_units(file, unit_bytes, columns=read_header(file), quotes=True)

    def read(self, unit: WorkUnit) -> Iterator[Record]:
        return read_csv(unit)

    def column_wise(self, unit: WorkUnit, schema: Schema, extra_fields: str) -> bool:
        from shardprep.formats.csv.arrow import usable  # pyarrow only where a unit is parsed

        return usable(unit, schema, extra_fields)

    def framed_batches(self, unit: WorkUnit, schema: Schema, extra_fields: str) -> Iterator[FramedBatch]:
        from shardprep.formats.csv.arrow import framed_batches
        from shardprep.formats.csv.wide import WIDE_COLUMNS, wide_batches

        if len(unit.columns) > WIDE_COLUMNS:  # pyarrow's reader costs memory and time per column (``csv.wide``)
            return wide_batches(unit, schema, read_csv(unit, lists=True))
        return framed_batches(unit, schema, extra_fields)


def dialect_of(file: InputFile) -> CsvDialect:
    """The dialect ``file`` is read in (the defaults: comma, a header line, the default null values)."""
    return or_default(file.dialect)


def read_header(file: InputFile) -> tuple[str, ...]:
    """The column names: the header (a UTF-8 BOM stripped) or ``--column-names``; () for an empty file.

    Raises ``InputError`` when the header cannot be read, lacks or repeats a name, or has another
    number of fields than every one of the first rows.
    """
    dialect = dialect_of(file)
    size = HEAD_PROBE
    head, whole = read_head(file, size)
    if whole and dialect.header and (known := small.known_header(head, dialect, HEADER_CHECK_ROWS)) is not None:
        return known  # a small file whose line 1 another file had: its rows' field counts checked
    while True:  # a bounded head: header and HEADER_CHECK_ROWS rows, at most HEAD_BYTES unless line 1 is longer
        records = list(itertools.islice(_csv_records(io.BytesIO(head), 0, 1, delimiter=dialect.delimiter),
                                        HEADER_CHECK_ROWS + 2))
        if not whole and len(records) <= HEADER_CHECK_ROWS + 1:
            records = records[:-1]  # the last record may be cut off by the end of the head
        if whole or len(records) > HEADER_CHECK_ROWS or (records and size >= HEAD_BYTES):
            break
        size *= 4
        head, whole = read_head(file, size)
    rows = []
    for _line, lines, row, error in records[:HEADER_CHECK_ROWS + 1]:
        if not rows and (error or not all(ok for _, _, ok in lines)):
            problem = error[1] if error else "it is not valid UTF-8"
            raise InputError(f"{file.url!r}: the CSV header cannot be read: {problem}")
        if row is not None:
            rows.append(row)
    if not rows:
        return ()
    names = list(dialect.column_names) or (rows[0] if dialect.header else [f"c{i}" for i in range(len(rows[0]))])
    data = rows[1:] if dialect.header else rows
    where = "--column-names" if dialect.column_names else "the CSV header"
    data_first = dialect.header and not dialect.column_names and _looks_like_data(names, data)
    hint = " (line 1 looks like data: if it is, pass --no-header, which names the columns c0, c1, ...)"
    empty = [str(i + 1) for i, name in enumerate(names) if not name.strip()]
    if empty:
        raise InputError(f"{file.url!r}: {where} {names!r} has no name for column(s) "
                         f"{', '.join(empty)}: every column needs a name (the first line is the header)"
                         f"{hint if data_first else ''}")
    repeated = sorted(name for name, n in collections.Counter(names).items() if n > 1)
    if repeated:
        raise InputError(f"{file.url!r}: {where} repeats column name(s) {', '.join(map(repr, repeated[:10]))}"
                         f"{' ...' if len(repeated) > 10 else ''}: every column needs its own name; "
                         f"{'pass --no-header' + hint[hint.index(','):-1] if data_first else 'rename them'}")
    if data_first:
        log.warning("%s: the header %s looks like data (numbers, as the rows below it): if line 1 is data, "
                    "rerun with --no-header", file.url, ",".join(names[:5]) + (",..." if len(names) > 5 else ""))
    counts = {len(row) for row in data}
    if len(counts) == 1 and (fields := counts.pop()) != len(names):
        raise InputError(
            f"{file.url!r}: {where} has {len(names)} names but the rows have {fields} fields "
            f"({dialect.describe()}): fix the header, give --column-names with {fields} names"
            f"{'' if dialect.column_names else ' and --no-header if line 1 is data'}, or set --delimiter")
    line = records[0][1]
    if dialect.header and len(line) == 1 and line[0][1].endswith(b"\n") and not all(map(_numeric, names)):
        small.remember_header(dialect, line[0][1], tuple(names))  # line 1 alone, and no warning it could give
    return tuple(names)


def _looks_like_data(names: Sequence[str], data: Sequence[Sequence[str]]) -> bool:
    """Whether a header line reads as a row of data: every name a number, as the first row's fields are."""
    return bool(names) and all(map(_numeric, names)) and bool(data) and all(_numeric(v) for v in data[0] if v.strip())


def _numeric(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def resolve_dialects(files: Sequence[InputFile], *, delimiter: str | None = None, header: bool = True,
                     column_names: tuple[str, ...] = (), null_values: tuple[str, ...] | None = None,
                     ) -> list[InputFile]:
    """``files`` with each CSV file's dialect set; the delimiter, when not given, sniffed from the heads
    of at most ``SAMPLE_FILES`` CSV files spread over the list (a bounded read at launch).

    Raises ``InputError`` when the sniffed CSV files of one run give different delimiters.
    """
    base = CsvDialect(header=header, column_names=column_names,
                      **({} if null_values is None else {"null_values": null_values}))
    chosen: dict[str, str] = {}  # delimiter -> the first file sniffed to it
    for file in [] if delimiter else spread([f for f in files if f.format == "csv"], SAMPLE_FILES):
        chosen.setdefault(_sniff(file), file.url)
    found = delimiter or next(iter(chosen), ",")
    dialect = dataclasses.replace(base, delimiter=found)
    out = [file.with_dialect(dialect) if file.format == "csv" and type(file) is InputFile else
           dataclasses.replace(file, dialect=dialect) if file.format == "csv" else file for file in files]
    if len(chosen) > 1:
        (d1, u1), (d2, u2) = list(chosen.items())[:2]
        raise InputError(f"the CSV files disagree on the delimiter: {u1!r} uses {d1!r}, {u2!r} uses {d2!r}; "
                         "convert them to one dialect or read them in separate runs (or force one with --delimiter)")
    if not header and not column_names:
        log.info("--no-header: the CSV columns are named c0, c1, ... (--column-names names them)")
    if chosen and not delimiter:
        log.info("CSV delimiter %r (sniffed from the first lines; --delimiter sets it)", next(iter(chosen)))
    return out


def _sniff(file: InputFile) -> str:
    if file.size == 0:
        return ","
    try:
        head, whole = read_head(file, SNIFF_BYTES)
    except OSError as e:  # unreadable here: the readers report it
        log.debug("%s: cannot sniff the delimiter (%s)", file.url, e)
        return ","
    return sniff_delimiter(head, complete=whole) or ","


class _CsvLines:
    """Feeds decoded lines to the csv module and keeps (offset, raw, valid UTF-8) of those it took."""

    EOF = "\n"  # fed after the last line: a record that takes it was inside quotes at the end of the file

    def __init__(self, stream: IO[bytes], offset: int, max_record: int = MAX_RECORD_BYTES) -> None:
        self.taken: list[tuple[int, bytes, bool | None]] = []
        self.record_bytes = 0  # of the record being read: past ``max_record`` only quote parity is fed on
        self._start, self._max = offset, max_record
        self._lines = read_lines(stream, offset, max_record)

    def __iter__(self) -> Iterator[str]:
        end = self._start
        for offset, raw in self._lines:
            self.record_bytes += line_size(raw)
            if isinstance(raw, LongLine) or self.record_bytes > self._max:
                # too large: a dead letter; the csv module sees only the quotes' parity, so it still
                # finds where the record ends (as the planner's cuts do) in bounded memory
                head = raw if self.record_bytes - line_size(raw) < self._max else raw[:0]
                self.taken.append((offset, LongLine(head, line_size(raw)), True))
                end = offset + line_size(raw)
                yield '"' * (raw.count(b'"') & 1) + "\n"
                continue
            try:
                text, ok = raw.decode("utf-8"), True
            except UnicodeDecodeError:
                text, ok = raw.decode("utf-8", "surrogateescape"), False
            if offset == 0 and text.startswith("\ufeff"):
                text = text[1:]
            self.taken.append((offset, raw, ok))
            end = offset + line_size(raw)
            yield text
        self.taken.append((end, b"", None))
        yield self.EOF


def _csv_records(stream: IO[bytes], offset: int, line: int, max_record: int = MAX_RECORD_BYTES, *,
                 delimiter: str = ",") -> Iterator[tuple[int, list, list | None, tuple | None]]:
    """(line, taken lines, fields, error) per CSV record; blank lines are skipped, not records."""
    feed = _CsvLines(stream, offset, max_record)
    reader = csv.reader(feed, delimiter=delimiter)
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
        lines, feed.taken, feed.record_bytes = feed.taken, [], 0
        if lines[-1][2] is None:
            lines.pop()
            if not lines:
                return
            error = ("csv_parse", "a quoted field opened in it is never closed: the file ends inside it")
        position, line = line, line + len(lines)
        if error is None and any(isinstance(raw, LongLine) for _, raw, _ in lines):
            error = ("record_too_large", "")
        if row == [] and error is None:
            continue
        yield position, lines, row, error


def _text(lines: list) -> str:
    return b"".join(raw for _, raw, _ in lines).decode("utf-8", "replace").rstrip("\r\n")


def read_csv(unit: WorkUnit, *, lists: bool = False) -> Iterator[Record]:
    """(position, row) or (position, Bad) per record of ``unit``; a header row (unit start 0) is skipped.

    A field equal to one of the dialect's null values is ``None`` in the row. A row is a dict by
    column name, or (``lists``) the list of its fields in the columns' order.
    """
    columns = unit.columns
    dialect = dialect_of(unit.file)
    if unit.start == 0 and unit.end == unit.file.size and not unit.file.gzip and fs.is_local(unit.file.url) and (
            unit.end <= min(WHOLE_FILE_BYTES, unit.max_record_bytes)):  # a small file: read whole, in one csv.reader
        data = fs.read_bytes(unit.file.url, 0, unit.end + 1)
        rows = None if len(data) != unit.end else small.whole_file_rows(
            data, columns=columns, dialect=dialect, first_position=unit.first_position, lists=lists)
        if rows is not None:
            yield from rows
            return
    nulls = frozenset(dialect.null_values)
    limit = None if unit.file.gzip else unit.end
    header = unit.start == 0 and dialect.header
    with open_input(unit.file, unit.start) as stream:
        for position, lines, row, error in _csv_records(stream, unit.start, unit.first_position, unit.max_record_bytes,
                                                        delimiter=dialect.delimiter):
            if limit is not None:
                if lines[0][0] >= limit:
                    return
                end = lines[-1][0] + line_size(lines[-1][1])
                if end > limit:
                    raise InputError(
                        f"{unit.file.url!r}: the record at line {position} runs past the planned cut at byte {limit}: "
                        "a stray '\"' in an unquoted field breaks the quote-parity rule that cuts large CSV files (or "
                        "the file changed after planning); fix the quoting, or gzip the file so it is read in one piece"
                    )
            if header:
                header = False
                continue
            if error and error[0] == "record_too_large":
                size = sum(line_size(raw) for _, raw, _ in lines)
                yield position, too_large(position, LongLine(b"".join(r for _, r, _ in lines), size),
                                          unit.max_record_bytes, "the record at line")
            elif error:
                raw = b"".join(r for _, r, _ in lines) if error[0].startswith("gzip") else _text(lines)
                yield position, Bad(position, error[0], f"line {position}: {error[1]}", raw)
            elif not all(ok for _, _, ok in lines):
                yield position, Bad(position, "invalid_utf8", f"line {position} is not valid UTF-8",
                                    b"".join(r for _, r, _ in lines).rstrip(b"\r\n"))
            elif len(row) != len(columns):
                yield position, Bad(position, "csv_columns", f"line {position} has {len(row)} fields, expected {len(columns)} "
                                    f"({', '.join(columns[:10])}{', ...' if len(columns) > 10 else ''})", _text(lines))
            elif nulls.isdisjoint(row):
                yield position, row if lists else dict(zip(columns, row))
            elif lists:
                yield position, [None if v in nulls else v for v in row]
            else:
                yield position, {c: None if v in nulls else v for c, v in zip(columns, row)}
