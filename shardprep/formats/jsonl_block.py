"""JSON Lines column-wise: a unit read in blocks of whole lines, each parsed to columns in compiled code.

``native.jsonl_columns`` takes a block only when every line in it is provably read the same way by
the per-line path (``jsonl._json_row``, then ``columnar.from_rows``): one JSON object per line in
strict RFC 8259 syntax and valid UTF-8, every feature exactly once with the type its column takes
as is, other keys only under ``--extra-fields ignore``. Numbers are correctly rounded, as orjson and
``float()`` read them (a property test holds the two paths to identical bytes). A block it declines
(a bad line, a duplicate key, NaN, a lone surrogate, a big integer, a line over the record limit,
...) goes line by line through ``jsonl``'s per-line parse; the Python twin of the native module
declines every block, so without a C compiler every block goes that way.
"""
from __future__ import annotations

import gzip
import zlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from shardprep import native
from shardprep.formats.base import Unsupported, WorkUnit
from shardprep.formats.reading import open_input

if TYPE_CHECKING:
    from shardprep.schema import Schema

__all__ = ["BLOCK_BYTES", "block_bytes", "blocks", "block_columns", "native_spec"]

BLOCK_BYTES = 2 << 20  # per read and per native parse; the per-block numpy work is small beside it
CELL_BLOCK_BYTES = 256  # past WIDE_FEATURES features, this much per feature (at most 64 MiB): a wide table's
WIDE_FEATURES = 8192  # block holds enough lines that its per-column work stays small beside its cells'
NativeSpec = tuple[tuple[bytes, ...], bytes]


def block_bytes(features: int) -> int:
    """The read size for a schema of ``features`` features (``BLOCK_BYTES``, more for a wide one)."""
    return BLOCK_BYTES if features <= WIDE_FEATURES else min(64 << 20, CELL_BLOCK_BYTES * features)


def blocks(unit: WorkUnit, size: int | None = None) -> Iterator[bytes]:
    """The unit's lines (those starting before its end, as ``reading.read_lines`` cuts them) in blocks
    of whole lines of about ``size`` bytes, in file order. Raises ``Unsupported`` where the per-record
    path words a dead letter: a line over the record limit, a gzip stream that breaks off."""
    size = BLOCK_BYTES if size is None else size  # read now: tests set BLOCK_BYTES
    limit = None if unit.file.gzip else unit.end
    pos, parts, held = unit.start, [], 0  # the file offset of a line not yet ended, its pieces and their size
    with open_input(unit.file, unit.start) as stream:
        read = stream.read1 if isinstance(stream, gzip.GzipFile) else stream.read
        while limit is None or pos < limit:
            try:
                chunk = read(size)
            except (EOFError, gzip.BadGzipFile, zlib.error):
                raise Unsupported("a gzip stream that breaks off") from None
            if not chunk:
                if parts:
                    yield b"".join(parts)  # the last line, without its newline
                return
            if b"\n" not in chunk:  # the line goes on: kept in pieces (no copy per read)
                parts.append(chunk)
                held += len(chunk)
                if held > unit.max_record_bytes:
                    raise Unsupported("a line over the record limit")
                continue
            data = b"".join([*parts, chunk]) if parts else chunk
            if limit is not None and pos + len(data) >= limit:  # the unit's last line ends in data, or later
                last = data.find(b"\n", limit - pos - 1)
                if last >= 0:
                    yield data[:last + 1]
                    return
            cut = data.rfind(b"\n") + 1
            yield data[:cut]
            pos, parts, held = pos + cut, [data[cut:]] if cut < len(data) else [], len(data) - cut
            if held > unit.max_record_bytes:
                raise Unsupported("a line over the record limit")


def native_spec(schema: Schema) -> NativeSpec | None:
    """The schema as ``native.jsonl_columns`` takes it: UTF-8 names and one kind byte each (None: a
    name that is not valid UTF-8, which no parsed key can equal)."""
    try:
        return tuple(name.encode("utf-8") for name in schema), bytes(native.kind_of(s.dtype) for s in schema.values())
    except UnicodeEncodeError:
        return None


def block_columns(block: bytes, schema: Schema, spec: NativeSpec | None, *, extra_fields: str, max_record_bytes: int,
                  bom: bool) -> tuple[dict[str, Any], int] | None:
    """The block's rows as ``columnar`` columns and their count, or None where the per-line path must
    read it (``bom``: the block starts the file, whose first line may begin with a BOM)."""
    if spec is None:
        return None
    got = native.jsonl_columns(block, spec[0], spec[1], extra_fields == "ignore", max_record_bytes, bom)
    if got is None:
        return None
    n, raw = got
    columns: dict[str, Any] = {}
    for (name, feature), column in zip(schema.items(), raw):
        if feature.dtype == "float32":
            with np.errstate(over="ignore", invalid="ignore"):  # as columnar.from_rows: float64, then float32
                values = np.frombuffer(column, np.float64).astype(np.float32)
            if not np.isfinite(values).all():
                return None  # the row encoder judges it (non_finite, or --allow-non-finite)
            columns[name] = values
        elif feature.dtype == "int64":
            columns[name] = np.frombuffer(column, np.int64)
        else:
            columns[name] = (np.frombuffer(column[0], np.int64), column[1])
    return columns, n
