"""Parquet: cut into runs of row groups, a large row group into row ranges; rows are column -> Python value.

Dates and times become their integer value in the file's own unit, which the schema records
(``FeatureSpec.unit``: "microseconds since 1970-01-01 00:00:00 UTC", "days since 1970-01-01", ...;
``describe``); a column whose unit differs between files is refused, as its integers would mix
units. Decimals become floats, structs nested objects (as JSON's: a ``--schema`` without them drops
them, inference refuses them). A Parquet file that cannot be read, or a column type no Example
feature can hold, is an ``InputError``.

Column-wise path (``framed_batches``): a schema of scalars whose columns are numbers (floats or
integers for a float32 feature, integers for an int64 one, dates and times as their integers) or
strings/bytes for a string feature (or integers, as their decimal digits: uint64 ids past int64
are inferred as strings) is read by record batch straight into ``example.columnar``'s encoder: the
same bytes as the per-record path (a test checks it). A batch holding a null, a float that is not
finite in float32 or a uint64 past int64 in an int64 feature raises ``Unsupported`` before it is
given, and the per-record path decides from there (dead letters).
"""
from __future__ import annotations

import collections
import contextlib
import dataclasses
import zlib
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from shardprep import fs
from shardprep.errors import DamagedInput
from shardprep.example import columnar
from shardprep.formats.base import Format, InputError, InputFile, Record, Unsupported, WorkUnit
from shardprep.formats.reading import open_input

if TYPE_CHECKING:
    from shardprep.framing import FramedBatch
    from shardprep.schema import Schema

__all__ = ["ParquetFormat", "encoded_bytes"]


class ParquetFormat(Format):
    """Parquet (``.parquet``, ``.pq``); a unit's ``start``/``end`` are row numbers (``parquet_units``)."""

    name = "parquet"
    gives_columns = True
    extensions = (".parquet", ".pq")

    def plan(self, file: InputFile, unit_bytes: int) -> list[WorkUnit]:
        return parquet_units(file, unit_bytes)

    def read(self, unit: WorkUnit) -> Iterator[Record]:
        return read_parquet(unit)

    def column_wise(self, unit: WorkUnit, schema: Schema, extra_fields: str) -> bool:
        return columnar.supports(schema)

    def framed_batches(self, unit: WorkUnit, schema: Schema, extra_fields: str) -> Iterator[FramedBatch]:
        return framed_parquet(unit, schema, extra_fields)

    def describe(self, files: Sequence[InputFile], schema: Schema) -> Schema:
        return with_time_units(files, schema)


_TIME_NAMES = {"s": "seconds", "ms": "milliseconds", "us": "microseconds", "ns": "nanoseconds"}


def time_unit(type_: Any) -> str:
    """What the integer of an Arrow date, time, timestamp or duration counts; "" for other types."""
    import pyarrow as pa

    t = pa.types
    if t.is_timestamp(type_):  # an instant: UTC whatever the zone shown; a naive one is wall-clock time
        return f"{_TIME_NAMES[type_.unit]} since 1970-01-01 00:00:00 {'UTC' if type_.tz else '(no time zone)'}"
    if t.is_date32(type_):
        return "days since 1970-01-01"
    if t.is_date64(type_):
        return "milliseconds since 1970-01-01"
    if t.is_time(type_):
        return f"{_TIME_NAMES[type_.unit]} since midnight"
    if t.is_duration(type_):
        return _TIME_NAMES[type_.unit]
    return ""


def with_time_units(files: Sequence[InputFile], schema: Schema) -> Schema:
    """``schema`` with the unit of every int64 feature that is a time column of the Parquet ``files``
    (their footers, read once when they were planned); ``InputError`` for a column whose unit differs
    between two files, or from the unit a given schema states."""
    found: dict[str, tuple[str, str]] = {}  # column -> (unit, the first file with it)
    for file in files:
        if file.format != "parquet":
            continue
        for name, unit in _planned_facts(file).units.items():
            first = found.setdefault(name, (unit, file.url))
            if first[0] != unit:
                raise InputError(f"column {name!r} counts {first[0]} in {first[1]!r} but {unit} in {file.url!r}: "
                                 "its integers would mix units; write the files with one unit for it")
    out = dict(schema)
    for name, (unit, url) in found.items():
        spec = schema.get(name)
        if spec is None or spec.dtype != "int64":
            continue
        if spec.unit and spec.unit != unit:
            raise InputError(f"the schema says feature {name!r} counts {spec.unit}, but {url!r} stores {unit}")
        out[name] = dataclasses.replace(spec, unit=unit)
    return out


class _Planned(NamedTuple):
    """What a file's footer says that the launcher needs after planning, kept for every file it planned
    (on GCS a footer is a request a file): its ``encoded_bytes`` and its time columns' units."""

    encoded_bytes: int
    units: dict[str, str]  # column -> what its integers count (``time_unit``)


_planned: dict[tuple[str, Any], _Planned] = {}  # (url, version) -> its _Planned


def _remember(file: InputFile, footer: _Footer) -> _Planned:
    """The file's ``_Planned`` from its footer, kept."""
    meta, schema = footer.metadata, footer.schema
    values = sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
    encoded = meta.num_rows * (22 + sum(len(name.encode()) + 18 for name in schema.names)) + values
    planned = _planned[(file.url, file.version)] = _Planned(
        encoded, {field.name: unit for field in schema if (unit := time_unit(field.type))})
    return planned


def _planned_facts(file: InputFile) -> _Planned:
    """The file's ``_Planned``, from its footer if it was not planned in this process."""
    if (known := _planned.get((file.url, file.version))) is not None:
        return known
    with contextlib.ExitStack() as stack:
        return _remember(file, _open(file, stack)[1])


class _Footer(NamedTuple):
    """What a file's footer says, parsed once a process: a 50,000-column footer takes ~0.5 s to parse
    and turn into an Arrow schema and casts, and the launcher reads it to plan and again to sample."""

    metadata: Any  # pyarrow FileMetaData
    schema: Any  # its Arrow schema
    casts: dict[str, Any]  # column -> what it is cast to (``_cast_type``)


_footers: collections.OrderedDict[tuple[str, Any], _Footer] = collections.OrderedDict()  # the last few files'
_FOOTERS_KEPT = 4


def _open(file: InputFile, stack: contextlib.ExitStack) -> tuple[Any, _Footer]:
    """The open ``pq.ParquetFile`` and its footer, from this process's cache where the same version of
    the file was opened before (a file changed since is refused at commit, which checks every version)."""
    key = (file.url, file.version)
    footer = _footers.get(key)
    pf = _parquet_file(file, stack, footer.metadata if footer else None)
    if footer is None:
        schema = pf.schema_arrow
        footer = _Footer(pf.metadata, schema, {f.name: _cast_type(f.name, f.type, file.url) for f in schema})
        _footers[key] = footer
        while len(_footers) > _FOOTERS_KEPT:
            _footers.popitem(last=False)
    else:
        _footers.move_to_end(key)
    return pf, footer


def _parquet_file(file: InputFile, stack: contextlib.ExitStack, metadata: Any = None) -> Any:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        if file.gzip:
            with open_input(file, 0) as stream:
                source: Any = pa.BufferReader(stream.read())
        else:
            source = stack.enter_context(fs.open_file(file.url, "rb"))
        # page CRCs, where the writer stored them
        return pq.ParquetFile(source, page_checksum_verification=True, metadata=metadata)
    except (pa.ArrowException, OSError, EOFError, ValueError, zlib.error) as e:
        raise InputError(f"{file.url!r} is not a readable Parquet file: {e}") from None


def _cast_type(name: str, type_: Any, url: str, *, in_list: bool = False) -> Any:
    """The Arrow type a column is cast to before it becomes Python values; None keeps it as it is."""
    import pyarrow as pa

    t = pa.types
    if t.is_float16(type_) or t.is_decimal(type_):
        target = pa.float64()
    elif t.is_temporal(type_):  # dates, times, timestamps, durations: their integer value
        target = pa.int64()
    elif t.is_dictionary(type_):
        target = type_.value_type if _cast_type(name, type_.value_type, url, in_list=True) is None else False
    elif t.is_list(type_) or t.is_large_list(type_) or t.is_fixed_size_list(type_):
        target = None if _cast_type(name, type_.value_type, url, in_list=True) is None else False
    elif t.is_struct(type_):  # a nested object, as in JSON: dropped by a --schema without it, else refused there
        return None
    elif (t.is_integer(type_) or t.is_floating(type_) or t.is_boolean(type_) or t.is_null(type_) or t.is_string(type_)
          or t.is_large_string(type_) or t.is_binary(type_) or t.is_large_binary(type_)
          or t.is_fixed_size_binary(type_) or str(type_) in ("string_view", "binary_view")):
        return None
    else:
        target = False
    if target is False or (in_list and target is not None):
        raise InputError(
            f"{url!r}: column {name!r} has type {type_}, which a tf.train.Example feature cannot hold (only numbers, "
            "strings, bytes, dates/times and flat lists of numbers or strings): flatten or drop that column"
        )
    return target


def parquet_units(file: InputFile, unit_bytes: int) -> list[WorkUnit]:
    """Units of about ``unit_bytes`` (compressed): runs of whole row groups, and a row group larger
    than that cut into as many row ranges (pandas and pyarrow write up to 1M rows per group: one
    group, one unit, one core). A unit's ``start``/``end`` are row numbers (0-based, end excluded).

    A range inside a group decodes the group's rows before it too (no reader skips pages
    undecoded): ~4-16% of a row's parse time each, so a group in k ranges costs (k-1)/2 decodes
    more in all, and gives k cores work. A function of the file's footer alone, like every plan."""
    with contextlib.ExitStack() as stack:
        footer = _open(file, stack)[1]  # its casts refuse a column no feature can hold
        names = footer.schema.names
        if repeated := sorted(n for n, k in collections.Counter(names).items() if k > 1):  # a row dict would keep one
            raise InputError(f"{file.url!r}: the Parquet schema repeats column name(s) {', '.join(map(repr, repeated))}: "
                             "every column needs its own name; rename them")
        _remember(file, footer)
        meta = footer.metadata
        groups = []  # (bytes, rows) per row group
        for i in range(meta.num_row_groups):
            rg = meta.row_group(i)
            groups.append((sum(rg.column(j).total_compressed_size for j in range(rg.num_columns)), rg.num_rows))
    rows = sum(n for _, n in groups)
    if file.gzip or file.size <= unit_bytes:  # a .gz file is read whole by each of its units
        return [WorkUnit(file, 0, 0, rows, 1)]
    ranges: list[tuple[int, int]] = []
    start = row = size = 0  # the run of whole groups: its first row, the next row, its bytes
    for nbytes, n in groups:
        big = nbytes > unit_bytes
        if row > start and (big or size + nbytes > unit_bytes):
            ranges.append((start, row))
            start, size = row, 0
        if big:
            k = -(-nbytes // unit_bytes)
            cuts = [row + n * i // k for i in range(k + 1)]
            ranges += [(lo, hi) for lo, hi in zip(cuts, cuts[1:]) if hi > lo]
            start = row + n
        else:
            size += nbytes
        row += n
    if row > start or not ranges:
        ranges.append((start, row))
    return [WorkUnit(file, i, lo, hi, lo + 1) for i, (lo, hi) in enumerate(ranges)]


def _batches(pf: Any, unit: WorkUnit, batch_rows: int, columns: list[str] | None = None) -> Iterator[Any]:
    """Record batches of rows ``[unit.start, unit.end)`` of the open file ``pf``: the row groups
    holding them, the rows before ``start`` in the first of them read and dropped."""
    groups, skip, first = [], 0, 0
    for i in range(pf.metadata.num_row_groups):
        n = pf.metadata.row_group(i).num_rows
        if first < unit.end and first + n > unit.start:
            if not groups:
                skip = unit.start - first
            groups.append(i)
        first += n
    left = unit.end - unit.start
    if not groups:
        return
    for batch in _checked(pf.iter_batches(batch_size=batch_rows, row_groups=groups, columns=columns), unit.file.url):
        if skip >= batch.num_rows:
            skip -= batch.num_rows
            continue
        if skip or batch.num_rows - skip > left:
            batch = batch.slice(skip, left)
            skip = 0
        if batch.num_rows:
            yield batch
        left -= batch.num_rows
        if left <= 0:
            return


def _checked(batches: Iterator[Any], url: str) -> Iterator[Any]:
    """``batches`` as they come; damage pyarrow finds in them (a page whose CRC does not match, a
    page it cannot decode) refuses the file, naming it: its rows are never committed."""
    import pyarrow as pa

    while True:
        try:
            batch = next(batches)
        except StopIteration:
            return
        except (pa.ArrowException, OSError) as e:
            raise DamagedInput(f"{url!r} is a damaged Parquet file: {e}; restore it from its source (or leave it out "
                             f"of --input)") from None
        yield batch


def read_parquet(unit: WorkUnit, batch_rows: int = 4096) -> Iterator[Record]:
    import pyarrow as pa

    if unit.end <= unit.start:  # an empty file: not even opened
        return
    position = unit.first_position
    with contextlib.ExitStack() as stack:
        pf, footer = _open(unit.file, stack)
        casts = footer.casts
        for batch in _batches(pf, unit, batch_rows):
            if any(casts.values()):
                arrays = [_cast(col, casts[name], pa) for name, col in zip(batch.schema.names, batch.columns)]
                batch = pa.RecordBatch.from_arrays(arrays, names=batch.schema.names)
            for row in batch.to_pylist():
                yield position, row
                position += 1


def _cast(column: Any, target: Any, pa: Any) -> Any:
    if target is None:
        return column
    if pa.types.is_temporal(column.type) and not pa.types.is_timestamp(column.type):
        column = column.view(pa.int32() if column.type.bit_width == 32 else pa.int64())
    elif pa.types.is_decimal(column.type):
        # through its digits: Arrow's decimal to double is not correctly rounded (1 value in 7 of
        # decimal(9, 2)); its parse of the digits (the cast below) is
        column = column.cast(pa.string())
    return column.cast(target)


FAST_BATCH_ROWS = 65536


def _fits(dtype: str, type_: Any) -> bool:
    """Whether a (cast) column of Arrow type ``type_`` feeds a scalar ``dtype`` feature column-wise."""
    import pyarrow as pa

    t = pa.types
    number = t.is_integer(type_)
    if dtype == "float32":
        return number or t.is_floating(type_)
    if dtype == "int64":
        return number
    return (number or t.is_string(type_) or t.is_large_string(type_) or t.is_binary(type_) or t.is_large_binary(type_)
            or t.is_fixed_size_binary(type_) or str(type_) in ("string_view", "binary_view"))


def framed_parquet(unit: WorkUnit, schema: Schema, extra_fields: str) -> Iterator[FramedBatch]:
    """The unit's rows as framed TFRecord batches, read column-wise; see the module docs."""
    import pyarrow as pa

    if unit.end <= unit.start:
        return
    with contextlib.ExitStack() as stack:
        pf, footer = _open(unit.file, stack)
        fields = {f.name: f for f in footer.schema}
        if not set(schema) <= set(fields) or (extra_fields != "ignore" and not set(fields) <= set(schema)):
            raise Unsupported("the schema and the file's columns differ: rows need the per-record path")
        casts = footer.casts
        for name, spec in schema.items():
            if not _fits(spec.dtype, casts[name] or fields[name].type):
                raise Unsupported(f"column {name!r} of type {fields[name].type} needs the per-record path")
        for batch in _batches(pf, unit, FAST_BATCH_ROWS, columns=list(schema)):
            columns = {name: _column(name, spec.dtype, _cast(batch.column(name), casts[name], pa), pa)
                       for name, spec in schema.items()}
            yield from columnar.framed_batches(schema, columns, batch.num_rows)


def _column(name: str, dtype: str, column: Any, pa: Any) -> Any:
    """One column as ``columnar`` takes it; raises ``Unsupported`` on a value to check row by row."""
    if column.null_count:
        raise Unsupported(f"column {name!r} holds a null")
    if dtype == "string":
        if pa.types.is_integer(column.type):  # its decimal digits, as the row encoder spells an int
            column = column.cast(pa.string())
        column = column.cast(pa.large_binary())
        offsets = np.frombuffer(column.buffers()[1], dtype=np.int64)[column.offset:column.offset + len(column) + 1]
        data = column.buffers()[2]  # read in place by the encoder: no copy of the text
        return offsets, data if data is not None else b""
    values = column.to_numpy(zero_copy_only=False)
    if dtype == "int64":
        if values.dtype == np.uint64 and len(values) and values.max() > np.iinfo(np.int64).max:
            raise Unsupported(f"column {name!r} holds a value past int64")
        return values.astype(np.int64)
    with np.errstate(over="ignore", invalid="ignore"):  # as Python: an integer rounds to float64, then to float32
        values = values.astype(np.float64).astype(np.float32)
    if not np.isfinite(values).all():
        raise Unsupported(f"column {name!r} holds a value that is not a finite float32")
    return values


def encoded_bytes(file: InputFile) -> int:
    """The bytes of the file's records as framed ``tf.train.Example``, from its footer, a little above
    what they take (1.0-1.5x measured, on numeric and text columns): per record 22 bytes of framing
    and wrappers, per value its name, 18 bytes of wrappers and its uncompressed bytes. The file's
    own size says little: dictionary-coded, a 19 kB file made an 18.5 MB data set."""
    return _planned_facts(file).encoded_bytes
