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
same bytes as the per-record path (a test checks it); a batch holds at most ``BATCH_CELLS`` cells,
and a wide file's short unit is read ``READ_COLUMNS`` columns at a time (pyarrow's memory per column
read). A batch holding a null, a float that is not finite in float32 or a uint64 past int64 in an
int64 feature raises ``Unsupported`` before it is given, and the per-record path decides from
there (dead letters). The footer (``parquet_meta``)
is parsed once a process; the schema's sample reads only the columns that their Arrow types and
statistics leave open (``sample_parquet``).
"""
from __future__ import annotations

import collections
import contextlib
import dataclasses
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from shardprep.errors import DamagedInput
from shardprep.example import columnar
from shardprep.formats.base import Format, InputError, InputFile, Record, Unsupported, WorkUnit
from shardprep.formats.parquet_meta import footer, open_parquet, planned_facts, sample_kinds, time_unit, with_time_units

if TYPE_CHECKING:
    from shardprep.framing import FramedBatch
    from shardprep.schema import Schema

__all__ = ["ParquetFormat", "encoded_bytes", "time_unit"]


class ParquetFormat(Format):
    """Parquet (``.parquet``, ``.pq``); a unit's ``start``/``end`` are row numbers (``parquet_units``)."""

    name = "parquet"
    gives_columns = True
    extensions = (".parquet", ".pq")

    def plan(self, file: InputFile, unit_bytes: int) -> list[WorkUnit]:
        return parquet_units(file, unit_bytes)

    def read(self, unit: WorkUnit) -> Iterator[Record]:
        return read_parquet(unit)

    def sample(self, unit: WorkUnit, rows: int) -> Iterator[Record]:
        return sample_parquet(unit, rows)

    def column_wise(self, unit: WorkUnit, schema: Schema, extra_fields: str) -> bool:
        return columnar.supports(schema)

    def framed_batches(self, unit: WorkUnit, schema: Schema, extra_fields: str) -> Iterator[FramedBatch]:
        return framed_parquet(unit, schema, extra_fields)

    def describe(self, files: Sequence[InputFile], schema: Schema) -> Schema:
        return with_time_units(files, schema)


def parquet_units(file: InputFile, unit_bytes: int) -> list[WorkUnit]:
    """Units of about ``unit_bytes`` (compressed): runs of whole row groups, and a row group larger
    than that cut into as many row ranges (pandas and pyarrow write up to 1M rows per group: one
    group, one unit, one core). A unit's ``start``/``end`` are row numbers (0-based, end excluded).

    A range inside a group decodes the group's rows before it too (no reader skips pages
    undecoded; a decode is a small part of a row's parse), so a group in k ranges costs (k-1)/2
    decodes more in all, and gives k cores work. A function of the file's footer alone, like every plan."""
    found = footer(file)  # its casts refuse a column no feature can hold
    if repeated := sorted(n for n, k in collections.Counter(found.names).items() if k > 1):  # a row dict keeps one
        raise InputError(f"{file.url!r}: the Parquet schema repeats column name(s) {', '.join(map(repr, repeated))}: "
                         "every column needs its own name; rename them")
    planned_facts(file)  # kept for describe and encoded_bytes
    meta = found.metadata
    if file.gzip or file.size <= unit_bytes:  # a .gz file is read whole by each of its units
        return [WorkUnit(file, 0, 0, sum(meta.row_group(i).num_rows for i in range(meta.num_row_groups)), 1)]
    groups = []  # (bytes, rows) per row group
    for i in range(meta.num_row_groups):
        rg = meta.row_group(i)
        groups.append((sum(rg.column(j).total_compressed_size for j in range(rg.num_columns)), rg.num_rows))
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


def _batches(pf: Any, unit: WorkUnit, batch_rows: int, columns: list[str] | None = None,
             indices: list[int] | None = None) -> Iterator[Any]:
    """Record batches of rows ``[unit.start, unit.end)`` of the open file ``pf``: the row groups
    holding them, the rows before ``start`` in the first of them read and dropped. Of the columns
    named, or of the Parquet (leaf) columns at ``indices`` (a wide file's group: on this thread,
    as pyarrow's threads cost more CPU on short columns and saved no time)."""
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
    read = (pf.iter_batches(batch_size=batch_rows, row_groups=groups, columns=columns) if indices is None else
            pf.reader.iter_batches(batch_rows, row_groups=groups, column_indices=indices, use_threads=False))
    for batch in _checked(read, unit.file.url):
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


def read_parquet(unit: WorkUnit, batch_rows: int = 4096, columns: list[str] | None = None) -> Iterator[Record]:
    """(position, row) for the unit's rows, a row being column -> Python value (``columns`` only, where given)."""
    import pyarrow as pa

    if unit.end <= unit.start:  # an empty file: not even opened
        return
    position = unit.first_position
    with contextlib.ExitStack() as stack:
        pf, found = open_parquet(unit.file, stack)
        casts = found.casts
        for batch in _batches(pf, unit, batch_rows, columns):
            names = batch.schema.names
            if casts and any(name in casts for name in names):
                arrays = [_cast(col, casts.get(name), pa) for name, col in zip(names, batch.columns)]
                batch = pa.RecordBatch.from_arrays(arrays, names=names)
            for row in batch.to_pylist():
                yield position, row
                position += 1


def sample_parquet(unit: WorkUnit, rows: int) -> Iterator[Record]:
    """The first ``rows`` records of ``unit`` as the schema's sample: the columns whose type and footer
    statistics decide what inference makes of them (``parquet_meta.sample_kinds``) stand in the first
    record as one representative value; only the other columns' rows are read (a wide table of
    numbers: none)."""
    n = min(rows, unit.end - unit.start)
    if n <= 0:
        return
    decided, read = sample_kinds(unit.file, n)
    unit = dataclasses.replace(unit, end=unit.start + n)
    if read:
        records = read_parquet(unit, columns=read if decided else None)
    else:
        records = ((position, {}) for position in range(unit.first_position, unit.first_position + n))
    for i, (position, row) in enumerate(records):
        yield position, ({**decided, **row} if i == 0 and decided else row)


def _cast(column: Any, target: Any, pa: Any) -> Any:
    if target is None:
        return column
    if pa.types.is_temporal(column.type) and not pa.types.is_timestamp(column.type):
        column = column.view(pa.int32() if column.type.bit_width == 32 else pa.int64())
    elif pa.types.is_decimal(column.type):
        # through its digits: Arrow's decimal to double is not correctly rounded (1 value in 7 of
        # decimal(9, 2)); its parse of the digits (the cast below) is correctly rounded
        column = column.cast(pa.string())
    return column.cast(target)


FAST_BATCH_ROWS = 65536
BATCH_CELLS = 1 << 22  # and at most this many cells a batch (a wide file's 65,536 rows: billions)
# pyarrow keeps some KB for each column it is reading, so a unit of a file past READ_COLUMNS flat
# columns whose cells are at most GROUPED_CELLS is read READ_COLUMNS columns after another, each
# group over all the unit's rows, then encoded.
READ_COLUMNS = 2000
GROUPED_CELLS = 1 << 24


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
        pf, found = open_parquet(unit.file, stack)
        types = dict(zip(found.names, found.types))
        if not set(schema) <= types.keys() or (extra_fields != "ignore" and not types.keys() <= set(schema)):
            raise Unsupported("the schema and the file's columns differ: rows need the per-record path")
        casts, keys, fits = found.casts, dict(zip(found.names, found.keys)), {}
        for name, spec in schema.items():  # what depends on a column's type: worked out once per type
            key = (spec.dtype, casts.get(name) or keys[name])
            if not (fits[key] if key in fits else fits.setdefault(key, _fits(spec.dtype, casts.get(name) or types[name]))):
                raise Unsupported(f"column {name!r} of type {types[name]} needs the per-record path")
        within = {}  # int64 features of integer columns within int64: all of them at once (``_int_columns``)
        ints = [name for name, t, k in zip(found.names, found.types, found.keys)
                if (within[k] if k in within else within.setdefault(k, _within_int64(t, pa)))
                and name not in casts and (spec := schema.get(name)) is not None and spec.dtype == "int64"]
        whole = len(schema) == len(found.names)  # every column, read in file order

        def converted(batch: Any, names: list[str], ints: list[str], all_of_it: bool) -> dict[str, Any]:
            try:  # what pyarrow refuses to convert, the per-record path decides (a dead letter or a value)
                ready = _int_columns(batch, ints, all_of_it, pa) if ints else {}
                return {name: ready[name] if name in ready else
                        _column(name, schema[name].dtype, _cast(batch.column(name), casts.get(name), pa), pa)
                        for name in names}
            except pa.ArrowException as e:
                raise Unsupported(f"a value pyarrow cannot convert: {e}") from None

        if (len(schema) <= READ_COLUMNS or pf.metadata.num_columns != len(found.names)
                or (unit.end - unit.start) * len(schema) > GROUPED_CELLS):
            rows = max(1, min(FAST_BATCH_ROWS, BATCH_CELLS // len(schema)))
            for batch in _batches(pf, unit, rows, columns=None if whole else list(schema)):
                columns = converted(batch, list(schema), ints, whole and len(ints) == len(found.names))
                yield from columnar.framed_batches(schema, columns, batch.num_rows)
            return
        # a wide file's short unit: READ_COLUMNS columns read at a time, over the whole unit each
        index = {name: i for i, name in enumerate(found.names)}
        read, is_int = sorted(index[name] for name in schema), set(ints)
        columns = {}
        for lo in range(0, len(read), READ_COLUMNS):
            batches = list(_batches(pf, unit, FAST_BATCH_ROWS, indices=read[lo:lo + READ_COLUMNS]))
            if not batches:
                return
            batch = batches[0] if len(batches) == 1 else pa.Table.from_batches(batches).combine_chunks().to_batches()[0]
            names = batch.schema.names
            group_ints = [n for n in names if n in is_int]
            columns.update(converted(batch, names, group_ints, len(group_ints) == len(names)))
        yield from columnar.framed_batches(schema, {name: columns[name] for name in schema}, batch.num_rows)


def _within_int64(type_: Any, pa: Any) -> bool:
    t = pa.types
    return t.is_signed_integer(type_) or t.is_uint8(type_) or t.is_uint16(type_) or t.is_uint32(type_)


def _int_columns(batch: Any, names: list[str], all_of_it: bool, pa: Any) -> dict[str, np.ndarray]:
    """The integer columns ``names`` of ``batch`` as int64 arrays, converted together (Arrow's
    ``to_tensor``: one column-major matrix, not one ``to_numpy`` a column);
    {} where one holds a null (each column's own check then names it)."""
    try:
        matrix = np.asarray((batch if all_of_it else batch.select(names)).to_tensor(row_major=False))
    except pa.ArrowException:  # a null (pyarrow 25: ArrowTypeError; before: ArrowInvalid)
        return {}
    return dict(zip(names, matrix.astype(np.int64, copy=False).T))


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
    what they take: per record 22 bytes of framing
    and wrappers, per value its name, 18 bytes of wrappers and its uncompressed bytes. The file's
    own size says little (dictionary coding, compression)."""
    return planned_facts(file).encoded_bytes
