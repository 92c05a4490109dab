"""The fast CSV path: a work unit parsed column-wise by pyarrow and encoded by ``shardprep.example.columnar``.

It yields exactly the records that ``formats.csv.source.read_csv`` + ``example.example_encoder`` would give, as framed
TFRecord batches, or it raises ``Unsupported`` before yielding the first batch that might differ:
the caller then reads the unit again with the per-record path, skipping the records already
yielded, so dead letters keep their exact line numbers, reasons and wording. It steps aside on

- a schema it does not take: a non-scalar feature, a feature that is not a column, or a column
  outside the schema while ``--extra-fields reject`` (every row would be a dead letter);
- anything pyarrow refuses or could read differently: a wrong column count, a number it cannot
  parse, an empty number, an int64 that is not plain decimal digits (pyarrow reads ``0x10``,
  Python's ``int()`` does not), a float that is not finite in float32, invalid UTF-8 anywhere in
  the unit, a lone ``\\r`` (pyarrow takes it for a line end, the csv module refuses it), a NUL
  byte (pyarrow's block splitting can join the lines after one into its field), a BOM
  where pyarrow starts reading (it drops it, the csv module keeps it but in a file's first line),
  a gzip stream that breaks off, a header line that is not one whole record to the csv module (a
  quoted name holding a newline, a quote it refuses);
- a unit that ends inside a quoted field: after the unit's bytes the reader feeds one line of
  ``0`` values, which must come back as the last row; a field left open swallows it.

pyarrow and the csv module agree on quoting otherwise (doubled quotes, a quote inside an unquoted
field taken as is, text after a closing quote appended, quoted newlines and ``\\r\\n``, given that
no read handed to pyarrow ends in ``\\r``: see ``_Checked.readinto``); the property test in
``tests/shardprep/formats/csv/test_arrow.py`` checks both paths on random CSV text.
"""
from __future__ import annotations

import codecs
import csv
import io
from collections.abc import Iterator
from typing import IO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from shardprep.example import columnar
from shardprep.formats.base import Unsupported, WorkUnit
from shardprep.formats.csv.dialect import or_default
from shardprep.formats.reading import BOM, open_input
from shardprep.framing import FramedBatch
from shardprep.schema import Schema

__all__ = ["Unsupported", "framed_batches", "numbers", "usable"]

BLOCK_BYTES = 4 << 20  # per pyarrow block: large enough that the per-batch work (numpy calls) is small
MIN_BLOCK_BYTES = 1 << 20  # a --max-record-mb below this leaves CSV to the per-record path
_INT64 = r"^-?[0-9]+$"


class _Checked(io.RawIOBase):
    """A unit's bytes for pyarrow (from ``start``, ``limit`` bytes at most), then the marker line.

    ``clean`` turns False on the first byte pyarrow would read differently from the csv module
    (a lone ``\\r``, a NUL, invalid UTF-8) and when the stream fails; everything read until then is clean.
    """

    def __init__(self, stream: IO[bytes], limit: int | None, marker: bytes) -> None:
        super().__init__()
        self.clean = True
        self._stream, self._left, self._marker = stream, limit, marker
        self._utf8 = codecs.getincrementaldecoder("utf-8")()
        self._cr = False  # the last chunk ended with \r: the next must start with \n
        self._ended, self._held = False, b""
        self._first = True  # pyarrow drops a UTF-8 BOM at the start of what it reads; the csv module keeps it there

    def readable(self) -> bool:
        return True

    def _read(self, size: int) -> bytes:
        if self._left is not None:
            size = min(size, self._left)
        try:
            data = self._stream.read(size) if size else b""
        except Exception:  # noqa: BLE001 - a broken gzip or remote stream: the per-record path reports it
            self.clean, data = False, b""
        if self._left is not None:
            self._left -= len(data)
        return data

    def readinto(self, buffer) -> int:
        """The next bytes, never ending in ``\\r`` before the input does: pyarrow drops the ``\\n``
        that starts a read after one that ended in ``\\r`` inside a quoted field (apache/arrow#51368,
        open in pyarrow 25)."""
        size = len(buffer)
        data, self._held = self._held, b""
        while not self._ended and (len(data) < size or data.endswith(b"\r")):
            more = self._read(max(size - len(data), 1))
            if more:
                self._check(more)
                data += more
            else:
                self._end()
        if self._ended:
            data, self._marker = data + self._marker, b""
        cut = min(size, len(data))
        while cut < len(data) and cut > 1 and data[cut - 1] == 0x0D:
            cut -= 1
        data, self._held = data[:cut], data[cut:]
        buffer[:cut] = data
        return cut

    def _end(self) -> None:
        self._ended = True
        if self._cr:
            self.clean = False
        try:
            self._utf8.decode(b"", final=True)
        except UnicodeDecodeError:
            self.clean = False

    def _check(self, data: bytes) -> None:
        if self._first and data.startswith(BOM):
            self.clean = False
        self._first = False
        if b"\0" in data or (self._cr and data[:1] != b"\n") or (b"\r" in data  # memchr: the counts only where there is a \r
                                                 and data.count(b"\r") != data.count(b"\r\n") + data.endswith(b"\r")):
            self.clean = False
        self._cr = data.endswith(b"\r")
        if data.isascii() and not self._utf8.getstate()[0]:  # valid, no sequence left open: no decode
            return  # (faster, and no copy of the block as text)
        try:
            self._utf8.decode(data)
        except UnicodeDecodeError:
            self.clean = False

    def skip_line(self) -> bytes:
        """Reads past the first line (the header) and returns it."""
        line = self._stream.readline()
        if self._left is not None:
            self._left -= len(line)
        return line


def usable(unit: WorkUnit, schema: Schema, extra_fields: str) -> bool:
    """Whether this unit's columns and ``schema`` fit the column-wise path at all (see the module docs)."""
    names, columns = set(schema), set(unit.columns)
    return (unit.file.format == "csv" and bool(columns) and columnar.supports(schema) and names <= columns
            and (extra_fields == "ignore" or columns <= names)
            and unit.max_record_bytes >= MIN_BLOCK_BYTES)


def _block_bytes(unit: WorkUnit) -> int:
    """pyarrow's block size: pyarrow takes a row that straddles two blocks (up to twice a block) and
    refuses a longer one (the per-record path then decides), so a block of at most half
    ``--max-record-mb`` keeps every row it takes within the limit."""
    return max(1, min(BLOCK_BYTES, unit.max_record_bytes // 2))


def _convert_options(unit: WorkUnit, schema: Schema) -> pacsv.ConvertOptions:
    """Column types and the dialect's null values: a null (quoted or not, as the csv module cannot tell)
    makes ``_columns`` step aside, so the per-record path decides what a missing value does."""
    types = {name: pa.float64() if spec.dtype == "float32" else pa.string() for name, spec in schema.items()}
    last = unit.columns[-1]  # always read: a field left open at the end of the unit would swallow the marker here
    types.setdefault(last, pa.string())
    nulls = list(or_default(unit.file.dialect).null_values)
    return pacsv.ConvertOptions(column_types=types, include_columns=[c for c in unit.columns if c in types],
                                null_values=nulls, strings_can_be_null=bool(nulls), quoted_strings_can_be_null=bool(nulls))


def _columns(batch: pa.RecordBatch, schema: Schema) -> dict:
    """The batch's columns as ``columnar`` takes them; raises ``Unsupported`` on a value to check row by row.

    The numbers of all columns of one type are checked and converted at once: a wide table's
    50,000 columns are a few pyarrow calls, not a few each."""
    out, by_dtype = {}, {"float32": [], "int64": []}
    for name, spec in schema.items():
        column = batch.column(name)
        if column.null_count:
            raise Unsupported(f"column {name!r} holds an empty value")
        if spec.dtype in by_dtype:
            by_dtype[spec.dtype].append((name, column))
        else:
            offsets = np.frombuffer(column.buffers()[1], dtype=np.int32)[column.offset:column.offset + len(column) + 1]
            data = column.buffers()[2]  # read in place by the encoder: no copy of the text
            out[name] = (offsets, data if data is not None else b"")
    for dtype, named in by_dtype.items():
        if named:
            whole = pa.concat_arrays([column for _, column in named]) if len(named) > 1 else named[0][1]
            out.update(numbers(dtype, [name for name, _ in named], whole, batch.num_rows))
    return out


def numbers(dtype: str, names: list[str], whole: pa.Array, rows: int) -> dict[str, np.ndarray]:
    """The columns ``names`` of one numeric ``dtype`` from ``whole``, their ``rows`` values each one
    column after the other (CSV text for int64, float64 for float32); ``Unsupported`` naming the
    first column that holds a value to check row by row."""
    if dtype == "float32":
        with np.errstate(over="ignore", invalid="ignore"):
            values = whole.to_numpy().astype(np.float32)
        if not np.isfinite(values).all():
            raise Unsupported(f"column {names[np.flatnonzero(~np.isfinite(values))[0] // rows]!r} holds a value "
                              "that is not a finite float32")
    else:
        if not pc.all(pc.match_substring_regex(whole, _INT64)).as_py():
            bad = next(j for j in range(len(names))
                       if not pc.all(pc.match_substring_regex(whole.slice(j * rows, rows), _INT64)).as_py())
            raise Unsupported(f"column {names[bad]!r} holds a value that is not plain decimal digits")
        values = pc.cast(whole, pa.int64()).to_numpy()  # ArrowInvalid beyond int64
    return dict(zip(names, values.reshape(len(names), rows)))  # a view per column, made in C


def framed_batches(unit: WorkUnit, schema: Schema, extra_fields: str) -> Iterator[FramedBatch]:
    """Framed records and their end offsets per block of the unit, in file order; see the module docs."""
    if not usable(unit, schema, extra_fields):
        raise Unsupported("the schema or the columns need the per-record path")
    dialect = or_default(unit.file.dialect)
    if "0" in dialect.null_values:
        raise Unsupported("'0' is a null value: the end marker would read as missing")
    marker = b"\n" + dialect.delimiter.encode().join([b"0"] * len(unit.columns)) + b"\n"
    with open_input(unit.file, unit.start) as stream:
        source = _Checked(stream, None if unit.file.gzip else unit.end - unit.start, marker)
        if unit.start == 0 and dialect.header:
            header = source.skip_line().removeprefix(BOM)
            if not _one_record(header, dialect.delimiter):
                raise Unsupported("the header line is blank or not one whole CSV record")
        held = None  # one batch of look-ahead: the last one must end with the marker row
        try:
            reader = pacsv.open_csv(
                source,
                read_options=pacsv.ReadOptions(column_names=list(unit.columns), use_threads=False,
                                               block_size=_block_bytes(unit)),
                parse_options=pacsv.ParseOptions(delimiter=dialect.delimiter, newlines_in_values=True),
                convert_options=_convert_options(unit, schema),
            )
            for batch in reader:
                if batch.num_rows == 0:
                    continue
                if held is not None:
                    yield from _encode(held, schema, source)
                held = batch
        except (pa.ArrowException, UnicodeDecodeError) as e:
            if held is not None:  # whole rows before the block pyarrow refuses: the per-record path goes on after them
                yield from _encode(held, schema, source)
            raise Unsupported(f"pyarrow refuses the unit: {e}") from None
        if held is None or held.column(unit.columns[-1])[-1].as_py() not in (0, 0.0, "0"):
            raise Unsupported("the unit ends inside a quoted field")
        if held.num_rows > 1:
            yield from _encode(held.slice(0, held.num_rows - 1), schema, source)
        elif not source.clean:
            raise Unsupported("a lone \\r, invalid UTF-8 or a broken stream")


def _one_record(line: bytes, delimiter: str) -> bool:
    """Whether the csv module reads ``line`` (the header, as read) as one whole record: then the
    per-record path skips exactly that line as the header. Quoted names are common (pyarrow, R and
    spreadsheets quote every name); a quote that leaves a field open at the line's end is not."""
    if not line.strip(b"\r\n"):
        return False
    if b'"' not in line:
        return True
    try:
        return len(list(csv.reader([line.decode("utf-8")], delimiter=delimiter, strict=True))) == 1
    except (csv.Error, UnicodeDecodeError):
        return False


def _encode(batch: pa.RecordBatch, schema: Schema, source: _Checked) -> Iterator[FramedBatch]:
    """A block's records, ``columnar.MAX_ROWS`` rows at a time: a 4 MB block of tiny rows holds
    ~700k, and its columns' conversion costs ~100 bytes a row."""
    if not source.clean:
        raise Unsupported("a lone \\r, invalid UTF-8 or a broken stream")
    for lo in range(0, batch.num_rows, columnar.MAX_ROWS):
        part = batch.slice(lo, columnar.MAX_ROWS)
        try:
            columns = _columns(part, schema)
        except pa.ArrowException as e:
            raise Unsupported(f"a value pyarrow cannot convert: {e}") from None
        yield from columnar.framed_batches(schema, columns, part.num_rows)
