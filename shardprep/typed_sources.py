"""Readers of the formats whose records carry typed values: JSON Lines, TFRecord and Parquet.

JSON Lines files are cut like CSV files (at any newline, see ``csv_source.find_cuts``); a Parquet
file is cut into runs of row groups; a TFRecord file is one unit. Bad records: ``invalid_utf8``,
``json_invalid``, ``json_not_object``, ``tfrecord_length_crc`` (the bytes up to the next record
that checks), ``tfrecord_data_crc`` (one record), ``tfrecord_truncated`` (the file ends inside a
record), ``not_an_example``, ``gzip_truncated`` and ``gzip_invalid``. A Parquet file that cannot be
read, or a column type no Example feature can hold, is an ``InputError``.
"""
from __future__ import annotations

import contextlib
import gzip
import json
import zlib
from collections.abc import Iterator
from typing import Any

from shardprep import fs
from shardprep.codec import RecordError, decode_example
from shardprep.source_io import BOM, Bad, InputError, InputFile, StreamError, WorkUnit, open_input, read_lines
from shardprep.tfrecord import CorruptRecordError, scan_records

try:  # optional fast path; any line it refuses or might read differently goes through json
    import orjson
except ImportError:  # pragma: no cover - depends on the environment
    orjson = None

__all__ = ["check_json_lines", "parquet_units", "read_jsonl", "read_parquet", "read_tfrecord"]

_DIGITS_TO_ZERO = bytes.maketrans(b"123456789", b"000000000")
_TWENTY_DIGITS = b"0" * 20  # orjson reads integers >= 2**64 as floats; json keeps them exact


def check_json_lines(file: InputFile) -> None:
    """Refuses a file holding one JSON array (every record would be bad): JSON Lines has one object per line."""
    with open_input(file, 0) as stream:
        try:
            head = stream.read(4096)
        except (EOFError, OSError, zlib.error):
            return  # the reader reports a broken gzip stream as a bad record
    if head.removeprefix(BOM).lstrip().startswith(b"["):
        raise InputError(f"{file.url!r} holds a JSON array, not JSON Lines (one object per line): convert it, e.g. "
                         "jq -c '.[]' in.json > out.jsonl")


def _parquet_file(file: InputFile, stack: contextlib.ExitStack) -> Any:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        if file.gzip:
            with open_input(file, 0) as stream:
                source: Any = pa.BufferReader(stream.read())
        else:
            source = stack.enter_context(fs.open_file(file.url, "rb"))
        return pq.ParquetFile(source)
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
    """One unit per run of row groups whose compressed sizes add up to about ``unit_bytes``."""
    with contextlib.ExitStack() as stack:
        meta = _parquet_file(file, stack)
        for field in meta.schema_arrow:
            _cast_type(field.name, field.type, file.url)
        meta = meta.metadata
        groups = []  # (bytes, rows) per row group
        for i in range(meta.num_row_groups):
            rg = meta.row_group(i)
            groups.append((sum(rg.column(j).total_compressed_size for j in range(rg.num_columns)), rg.num_rows))
    if file.gzip or file.size <= unit_bytes or len(groups) <= 1:
        return [WorkUnit(file, 0, 0, len(groups), 1)]
    units: list[WorkUnit] = []
    start, size, row = 0, 0, 1
    for i, (nbytes, _) in enumerate(groups):
        if i > start and size + nbytes > unit_bytes:
            units.append(WorkUnit(file, len(units), start, i, row))
            row += sum(rows for _, rows in groups[start:i])
            start, size = i, 0
        size += nbytes
    units.append(WorkUnit(file, len(units), start, len(groups), row))
    return units


def _json_row(raw: bytes, line: int) -> dict | Bad:
    if orjson is not None and _TWENTY_DIGITS not in raw.translate(_DIGITS_TO_ZERO):
        try:
            value = orjson.loads(raw)
        except orjson.JSONDecodeError:
            value = _json_row  # a sentinel: let json decide and word the error
    else:
        value = _json_row
    if value is _json_row:
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            return Bad(line, "invalid_utf8", f"line {line} is not valid UTF-8 (byte {e.start}: {e.reason})", raw.rstrip(b"\r\n"))
        try:
            value = json.loads(text)
        except (ValueError, RecursionError) as e:
            return Bad(line, "json_invalid", f"line {line} is not valid JSON: {e}", text.rstrip("\r\n"))
    if not isinstance(value, dict):
        kind = {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(type(value), "a number")
        return Bad(line, "json_not_object", f"line {line} holds {kind}: expected one JSON object {{...}} per line",
                   raw.decode("utf-8", "replace").rstrip("\r\n"))
    return value


def read_jsonl(unit: WorkUnit) -> Iterator[tuple[int, dict | Bad]]:
    limit = None if unit.file.gzip else unit.end
    line = unit.first_position - 1
    with open_input(unit.file, unit.start) as stream:
        try:
            for offset, raw in read_lines(stream, unit.start):
                if limit is not None and offset >= limit:
                    return
                line += 1
                if offset == 0 and raw.startswith(BOM):
                    raw = raw[3:]
                if raw.isspace() or not raw:
                    continue
                yield line, _json_row(raw, line)
        except StreamError as e:
            yield line + 1, Bad(line + 1, e.reason, f"line {line + 1}: {e.detail}", e.partial)


def read_tfrecord(unit: WorkUnit) -> Iterator[tuple[int, dict | Bad]]:
    position = unit.first_position
    with open_input(unit.file, 0) as stream:
        try:
            for data in scan_records(stream):
                if isinstance(data, CorruptRecordError):
                    row: dict | Bad = Bad(position, data.reason, data.detail, data.raw)
                else:
                    try:
                        row = decode_example(data)
                    except RecordError as e:
                        row = Bad(position, e.reason, f"record {position}: {e.detail}", data)
                yield position, row
                position += 1
        except EOFError as e:
            yield position, Bad(position, "gzip_truncated", f"record {position}: the gzip data ends early ({e})", b"")
        except (gzip.BadGzipFile, zlib.error) as e:
            yield position, Bad(position, "gzip_invalid", f"record {position}: the gzip data is corrupt ({e})", b"")


def read_parquet(unit: WorkUnit, batch_rows: int = 4096) -> Iterator[tuple[int, dict | Bad]]:
    import pyarrow as pa

    if unit.end <= unit.start:
        return
    position = unit.first_position
    with contextlib.ExitStack() as stack:
        pf = _parquet_file(unit.file, stack)
        casts = {f.name: _cast_type(f.name, f.type, unit.file.url) for f in pf.schema_arrow}
        for batch in pf.iter_batches(batch_size=batch_rows, row_groups=range(unit.start, unit.end)):
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
    return column.cast(target)
