"""What a Parquet file's footer says, parsed once a process: its row groups, Arrow schema, the casts
its columns need (``cast_type``), its time columns' units (``time_unit``, ``with_time_units``), the
launcher's planning facts (``planned_facts``) and what the file's own types say of its columns'
features (``sample_kinds``, so that the schema sample reads only the columns they leave open).

Everything done per column here is a dict lookup: what depends on a column's type is worked out
once per distinct type (a 50,000-column file holds a handful), so a wide file's footer costs what
pyarrow takes to parse it (docs/design.md, "Wide tables").
"""
from __future__ import annotations

import collections
import contextlib
import dataclasses
import zlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from shardprep import fs
from shardprep.formats.base import InputError, InputFile
from shardprep.formats.reading import open_input

if TYPE_CHECKING:
    from shardprep.schema import Schema

__all__ = ["Footer", "cast_type", "footer", "open_parquet", "planned_facts", "sample_kinds", "time_unit",
           "with_time_units"]

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
        for name, unit in planned_facts(file).units.items():
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


class Planned(NamedTuple):
    """What a file's footer says that the launcher needs after planning, kept for every file it planned
    (on GCS a footer is a request a file): its ``encoded_bytes`` and its time columns' units."""

    encoded_bytes: int
    units: dict[str, str]  # column -> what its integers count (``time_unit``)


_planned: dict[tuple[str, Any], Planned] = {}  # (url, version) -> its Planned


def planned_facts(file: InputFile) -> Planned:
    """The file's ``Planned``, from its footer (this process's cache, else read)."""
    if (known := _planned.get((file.url, file.version))) is not None:
        return known
    f = footer(file)
    meta = f.metadata
    values = sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
    encoded = meta.num_rows * (22 + sum(len(name.encode()) + 18 for name in f.names)) + values
    units = _per_type(f, lambda _n, t: time_unit(t))
    planned = _planned[(file.url, file.version)] = Planned(encoded, {n: u for n, u in zip(f.names, units) if u})
    return planned


def _per_type(f: Footer, of: Callable[[str, Any], Any]) -> list[Any]:
    """``of(name, type)`` for every column, called once per distinct type (with its first column's name)."""
    memo: dict[Any, Any] = {}
    out = []
    for name, type_, key in zip(f.names, f.types, f.keys):
        try:
            out.append(memo[key])
        except KeyError:
            out.append(memo.setdefault(key, of(name, type_)))
    return out


_PLAIN_IDS: set[int] = set()


def type_keys(types: list[Any]) -> list[Any]:
    """A key per Arrow type, equal for equal types: its type id where the id alone says the type (a
    plain number, string or date type: cheaper than hashing a DataType), else the type."""
    import pyarrow as pa

    if not _PLAIN_IDS:
        _PLAIN_IDS.update(t.id for t in (
            pa.null(), pa.bool_(), pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint16(), pa.uint32(),
            pa.uint64(), pa.float16(), pa.float32(), pa.float64(), pa.string(), pa.large_string(), pa.binary(),
            pa.large_binary(), pa.date32(), pa.date64()))
    plain = _PLAIN_IDS
    return [i if (i := t.id) in plain else t for t in types]


class Footer(NamedTuple):
    """What a file's footer says, parsed once a process: a wide footer is slow to parse
    and turn into an Arrow schema, and the launcher reads it to plan, to sample and to describe."""

    metadata: Any  # pyarrow FileMetaData
    names: list[str]  # the Arrow schema's top-level column names, in file order
    types: list[Any]  # their Arrow types
    keys: list[Any]  # a key per type (``type_keys``), for what is worked out once per distinct type
    casts: dict[str, Any]  # column -> what it is cast to (``cast_type``), for the columns cast only


_footers: collections.OrderedDict[tuple[str, Any], Footer] = collections.OrderedDict()  # the last few files'
_FOOTERS_KEPT = 4


def footer(file: InputFile) -> Footer:
    """The file's ``Footer``, from this process's cache (no file opened) or read."""
    if (known := _footers.get((file.url, file.version))) is not None:
        _footers.move_to_end((file.url, file.version))
        return known
    with contextlib.ExitStack() as stack:
        return open_parquet(file, stack)[1]


def open_parquet(file: InputFile, stack: contextlib.ExitStack) -> tuple[Any, Footer]:
    """The open ``pq.ParquetFile`` and its footer, from this process's cache where the same version of
    the file was opened before (a file changed since is refused at commit, which checks every version)."""
    key = (file.url, file.version)
    found = _footers.get(key)
    pf = _parquet_file(file, stack, found.metadata if found else None)
    if found is None:
        schema = pf.schema_arrow
        names, types = schema.names, schema.types
        found = Footer(pf.metadata, names, types, type_keys(types), {})
        found.casts.update((n, c) for n, c in zip(names, _per_type(found, lambda n, t: cast_type(n, t, file.url)))
                           if c is not None)
        _footers[key] = found
        while len(_footers) > _FOOTERS_KEPT:
            _footers.popitem(last=False)
    else:
        _footers.move_to_end(key)
    return pf, found


def _parquet_file(file: InputFile, stack: contextlib.ExitStack, metadata: Any = None) -> Any:
    import pyarrow as pa

    try:
        if file.gzip:
            with open_input(file, 0) as stream:
                source: Any = pa.BufferReader(stream.read())
        else:
            source = stack.enter_context(fs.open_file(file.url, "rb"))
        # page CRCs, where the writer stored them
        return _lazy_file_class()(source, page_checksum_verification=True, metadata=metadata)
    except (pa.ArrowException, OSError, EOFError, ValueError, zlib.error) as e:
        raise InputError(f"{file.url!r} is not a readable Parquet file: {e}") from None


_LAZY: list[Any] = []


def _lazy_file_class() -> Any:
    """``pq.ParquetFile`` whose column-name index (``_nested_paths_by_prefix``: a list per column,
    built at every open) is built when a read first names columns."""
    if _LAZY:
        return _LAZY[0]
    import pyarrow.parquet as pq

    class LazyParquetFile(pq.ParquetFile):
        _paths = None

        def _build_nested_paths(self) -> None:  # called by __init__
            return None

        @property
        def _nested_paths_by_prefix(self) -> Any:
            if self._paths is None:
                self._paths = pq.ParquetFile._build_nested_paths(self)
            return self._paths

        @_nested_paths_by_prefix.setter
        def _nested_paths_by_prefix(self, value: Any) -> None:
            self._paths = value

    _LAZY.append(LazyParquetFile)
    return LazyParquetFile


def cast_type(name: str, type_: Any, url: str, *, in_list: bool = False) -> Any:
    """The Arrow type a column is cast to before it becomes Python values; None keeps it as it is."""
    import pyarrow as pa

    t = pa.types
    if t.is_float16(type_) or t.is_decimal(type_):
        target = pa.float64()
    elif t.is_temporal(type_):  # dates, times, timestamps, durations: their integer value
        target = pa.int64()
    elif t.is_dictionary(type_):
        target = type_.value_type if cast_type(name, type_.value_type, url, in_list=True) is None else False
    elif t.is_list(type_) or t.is_large_list(type_) or t.is_fixed_size_list(type_):
        target = None if cast_type(name, type_.value_type, url, in_list=True) is None else False
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


# A value standing for a column's sampled values where the column's type and statistics decide what
# inference makes of them (``schema.infer_schema``'s rules see the same kinds): one int, float or
# string, or None (a column of Arrow type null: no value). Only an integer column whose statistics
# keep it within float32's exact integers (2**24) is decided, so that the warning of a column
# inferred float32 over integers past that (ints in one file, floats in another) still sees them.
_FLOAT32_EXACT_INT = 2**24


def _kind(type_: Any) -> Any:
    """The representative value of a column of Arrow type ``type_``; ``...`` where its type does not decide."""
    import pyarrow as pa

    t = pa.types
    if t.is_dictionary(type_):
        type_ = type_.value_type
    if t.is_null(type_):
        return None
    if t.is_boolean(type_) or t.is_signed_integer(type_) or t.is_uint8(type_) or t.is_uint16(type_):
        return 0
    if t.is_floating(type_):
        return 0.0
    if (t.is_string(type_) or t.is_large_string(type_) or t.is_binary(type_) or t.is_large_binary(type_)
            or t.is_fixed_size_binary(type_) or str(type_) in ("string_view", "binary_view")):
        return ""
    return ...  # lists (their lengths), structs, decimals, uint32/64 (stored signed), dates and times (past 2**24)


def sample_kinds(file: InputFile, rows: int) -> tuple[dict[str, Any], list[str]]:
    """(decided, read): what the file's first ``rows`` rows would tell inference of each column its
    type and footer statistics decide (its representative value, ``_kind``), and the columns whose
    rows must be read. A column is decided only where its statistics prove a value (not null) in
    those rows: a row group's ``null_count`` below its rows among them."""
    found = footer(file)
    meta, names = found.metadata, found.names
    kinds = _per_type(found, lambda _n, t: _kind(t))
    flat = meta.num_columns == len(names)  # leaf j is column j
    decided: dict[str, Any] = {}
    read: list[str] = []
    groups = []  # (row group, its rows among the first ``rows``)
    left = rows
    for i in range(meta.num_row_groups):
        if left <= 0:
            break
        rg = meta.row_group(i)
        groups.append((rg, min(left, rg.num_rows)))
        left -= rg.num_rows
    for j, (name, kind) in enumerate(zip(names, kinds)):
        if kind is None or (kind is not ... and flat and _has_value(groups, j, kind == 0)):
            decided[name] = kind
        else:
            read.append(name)
    return decided, read


def _has_value(groups: list[tuple[Any, int]], j: int, integer: bool) -> bool:
    """Whether leaf ``j``'s statistics prove a value in the sampled rows (and, for an integer column,
    keep every value within +-2**24: its physical min and max, which for these types are its values)."""
    proven = False
    for rg, taken in groups:
        stats = rg.column(j).statistics
        if stats is None or not stats.has_null_count:
            return False
        nulls = stats.null_count
        if integer and nulls < rg.num_rows and not (
                stats.has_min_max and -_FLOAT32_EXACT_INT <= stats.min_raw and stats.max_raw <= _FLOAT32_EXACT_INT):
            return False
        if nulls < taken:
            proven = True
            if not integer:
                return True
    return proven
