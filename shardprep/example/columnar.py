"""Column-wise encoding: a batch of scalar feature columns -> framed TFRecords of tf.train.Example.

The bytes are exactly those of ``example_encoder`` + ``framing.frame`` row by row (a test
checks it); the work is laid out by column instead. Each feature gives one piece per record, built
for the whole column with numpy: a run of float features is one fixed-width block (constant entry
prefixes and float32 values, as a structured array); an int64 feature is its entry prefix and
varint, chosen per varint length; a string feature is a prefix chosen per value length and the
value's bytes. Each piece is a column ``(blob, starts, lengths)``; ``native.interleave`` lays the
records out from them, framing included, and ``native.fill_data_crcs`` writes the data CRCs: no
Python call per record.

Columns: float32 -> a float32 array (finite: the caller checks), int64 -> an int64 array, string ->
``(offsets, data)``, the UTF-8 bytes of value ``i`` being ``data[offsets[i]:offsets[i + 1]]``.
"""
from __future__ import annotations

import functools
import itertools
import operator
import struct
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from shardprep import framing, native
from shardprep.example.wire import scalar_entry_prefix, scalar_runs, varint
from shardprep.schema import Schema

__all__ = ["ColumnBatch", "encode_framed", "framed_batches", "from_rows", "supports", "utf8_column", "utf8_columns"]

_DTYPES = ("float32", "int64", "string")
_U64 = struct.Struct("<Q").pack
_U32 = struct.Struct("<I").pack


def supports(schema: Schema) -> bool:
    """Whether every feature is a scalar this module encodes."""
    return all(spec.shape == () and spec.dtype in _DTYPES for spec in schema.values())


def from_rows(schema: Schema, rows: list[dict], extra_fields: str) -> dict[str, Any] | None:
    """The columns of parsed rows (JSON objects) when every value has exactly the type its scalar
    feature takes as is (float32: int or float, finite in float32; int64: int in range; string:
    str); else None, and the row encoder must decide each row (dead letters, lists of one value,
    numbers in strings, booleans). The columns of one dtype are checked and converted together:
    a wide table's 50,000 columns are a few numpy calls, not a few each."""
    names = list(schema)
    # Every name present (else KeyError below) and no other: as many keys as names.
    if extra_fields != "ignore" and set(map(len, rows)) != {len(names)}:
        return None
    if not names:
        return {}
    try:
        layout = _layout(schema)
        keys = tuple(rows[0]) if rows and extra_fields != "ignore" else ()
        listed = layout.in_order(keys) if keys and all(tuple(row) == keys for row in rows) else None
        if listed is not None:  # every row's fields in one order: the rows' values as they are (no lookup each)
            table = list(zip(*map(dict.values, rows)))
        else:
            get = operator.itemgetter(*names)
            table = list(zip(*map(get, rows))) if len(names) > 1 else [tuple(map(get, rows))]
            listed = layout.listed
        if not table:
            return {}
        out: dict[str, Any] = {}
        for dtype, (group, where) in listed.items():
            if not group:
                continue
            flat = list(itertools.chain.from_iterable(operator.itemgetter(*where.tolist())(table) if len(where) > 1
                                                      else (table[where[0]],)))
            types = set(map(type, flat))
            if dtype == "float32" and types <= {int, float}:
                with np.errstate(over="ignore", invalid="ignore"):  # as Python: to float64, then float32
                    column = np.array(flat, dtype=np.float64).astype(np.float32)
                if not np.isfinite(column).all():
                    return None
            elif dtype == "int64" and types == {int}:
                column = np.array(flat, dtype=np.int64)  # OverflowError outside int64
            elif dtype == "string" and types == {str}:
                out.update(zip(group, utf8_columns(flat, len(rows))))
                continue
            else:
                return None
            out.update(zip(group, column.reshape(len(group), len(rows))))
    except (KeyError, OverflowError, UnicodeEncodeError):  # a missing field, a huge int, a lone surrogate
        return None
    return out if list(out) == names else {name: out[name] for name in names}  # in the schema's order


def utf8_column(values: Sequence[str]) -> tuple[np.ndarray, bytes]:
    """A string column's (offsets, data): one encode for the whole column, lengths from the values when ASCII."""
    return utf8_columns(values, len(values))[0]


def utf8_columns(values: Sequence[str], n: int) -> list[tuple[np.ndarray, bytes]]:
    """Columns of ``n`` values each, one after the other in ``values``, as ``utf8_column`` gives
    them but sharing one blob (one encode for all: a wide table's columns are not one call each)."""
    text = "".join(values)
    data = text.encode("utf-8")
    if len(data) == len(text):  # ASCII: a value's UTF-8 length is its length
        lengths = np.fromiter(map(len, values), dtype=np.int64, count=len(values))
    else:
        lengths = np.fromiter((len(v.encode("utf-8")) for v in values), dtype=np.int64, count=len(values))
    offsets = np.zeros(len(values) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    if not n:
        return [(offsets, data)]
    # column j's offsets are offsets[j * n:(j + 1) * n + 1]: views made in C, not a slice each
    views = np.lib.stride_tricks.as_strided(offsets, shape=(len(values) // n, n + 1),
                                            strides=(n * offsets.itemsize, offsets.itemsize), writeable=False)
    return list(zip(views, itertools.repeat(data)))


def _varints(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Varints of int64 values (negative ones as 10-byte two's complement): an (n, 10) uint8 matrix
    whose row i holds value i's varint in its first ``lengths[i]`` bytes, and those lengths."""
    rest = values.astype(np.uint64)
    matrix = np.zeros((len(rest), 10), dtype=np.uint8)
    lengths = np.ones(len(rest), dtype=np.int64)
    for k in range(10):
        low = (rest & np.uint64(0x7F)).astype(np.uint8)
        rest = rest >> np.uint64(7)
        more = rest > 0
        matrix[:, k] = low | (more.astype(np.uint8) << 7)
        if not more.any():
            break
        lengths += more
    return matrix, lengths


# A column of pieces, one per record: record i's piece is ``blob[starts[i]:starts[i] + lengths[i]]``
# (``native.interleave`` lays the records out from such columns).
Pieces = tuple[bytes, np.ndarray, np.ndarray]


def _table(items: list[bytes], inverse: np.ndarray) -> Pieces:
    """Pieces drawn from a small table: record i's piece is ``items[inverse[i]]``."""
    lengths = np.fromiter(map(len, items), dtype=np.int64, count=len(items))
    starts = np.cumsum(lengths) - lengths
    return b"".join(items), starts[inverse], lengths[inverse]


def _float_run(names: list[str], columns: Mapping[str, Any], n: int) -> tuple[Pieces, int]:
    """One fixed-width piece per record for a run of float features: (prefix, value) pairs."""
    fields, prefixes = [], []
    for k, name in enumerate(names):
        prefix = scalar_entry_prefix(name, "float32", 4)
        fields += [(f"p{k}", f"S{len(prefix)}"), (f"x{k}", "<f4")]
        prefixes.append(prefix)
    block = np.empty(n, dtype=fields)
    for k, name in enumerate(names):
        block[f"p{k}"] = prefixes[k]
        block[f"x{k}"] = columns[name]
    width = block.dtype.itemsize
    return (block.tobytes(), np.arange(0, n * width, width, dtype=np.int64), np.full(n, width, np.int64)), width


def _by_length(name: str, dtype: str, sizes: np.ndarray) -> Pieces:
    """Each record's entry prefix: it depends only on its value's encoded size."""
    unique, inverse = _unique(sizes)
    return _table([scalar_entry_prefix(name, dtype, int(size)) for size in unique.tolist()], inverse)


def _int_pieces(name: str, values: np.ndarray) -> tuple[Pieces, Pieces]:
    """Two pieces per record: the entry prefix for its varint's length, then the varint."""
    matrix, sizes = _varints(values)
    varints = (matrix.tobytes(), np.arange(0, 10 * len(sizes), 10, dtype=np.int64), sizes)
    return _by_length(name, "int64", sizes), varints


class _Layout:
    """What a schema's records share, worked out once per schema (``_layout``): its features in name
    order, grouped by dtype with their places in that order, and each feature's map-entry key bytes."""

    def __init__(self, schema: Schema) -> None:
        self._schema = schema
        self._order: tuple[tuple[str, ...], Any] | None = None
        listed = list(schema)  # the schema's own order (from_rows keeps it)
        self.names = listed if all(map(operator.lt, listed, listed[1:])) else sorted(schema)
        self.codes = _codes(schema, self.names)
        self.groups = _grouped(self.names, self.codes)
        self.listed = self.groups if self.names is listed else _grouped(listed, _codes(schema, listed))
        keys = [name.encode("utf-8") for name in self.names]
        kvs = [b"\x0a" + varint(len(key)) + key + b"\x12" for key in keys]
        self.kv_lengths = np.fromiter(map(len, kvs), dtype=np.int64, count=len(kvs))
        self.kvs = (b"".join(kvs), np.cumsum(self.kv_lengths) - self.kv_lengths)

    @functools.cached_property
    def runs(self) -> list[tuple[str, list[str]]]:
        return scalar_runs(self._schema)

    def in_order(self, keys: tuple[str, ...]) -> dict[str, tuple[list[str], np.ndarray]] | None:
        """``listed`` for rows whose fields are ``keys`` in that order, when they are the schema's
        features; else None. The last order asked for is kept (a file's rows share theirs)."""
        if self._order is None or self._order[0] != keys:
            try:
                grouped = _grouped(list(keys), _codes(self._schema, keys)) if len(keys) == len(self.names) else None
            except KeyError:  # a field outside the schema
                grouped = None
            self._order = (keys, grouped)
        return self._order[1]


def _codes(schema: Schema, names: Sequence[str]) -> np.ndarray:
    """Each feature's dtype as its index in ``_DTYPES``."""
    code = {d: i for i, d in enumerate(_DTYPES)}
    return np.fromiter((code[schema[name].dtype] for name in names), dtype=np.int64, count=len(names))


def _grouped(names: list[str], codes: np.ndarray) -> dict[str, tuple[list[str], np.ndarray]]:
    """Per dtype: its features (in the order of ``names``) and their places in ``names``."""
    out = {}
    for i, dtype in enumerate(_DTYPES):
        where = np.flatnonzero(codes == i)
        out[dtype] = (list(operator.itemgetter(*where.tolist())(names)) if len(where) > 1 else
                      [names[j] for j in where.tolist()], where)
    return out


_LAYOUTS: dict[int, tuple[Schema, _Layout]] = {}  # by id(schema), the schema held so its id stays its own


def _layout(schema: Schema) -> _Layout:
    held = _LAYOUTS.get(id(schema))
    if held is None or held[0] is not schema or len(held[1].names) != len(schema):
        if len(_LAYOUTS) >= 8:
            _LAYOUTS.clear()
        held = _LAYOUTS[id(schema)] = (schema, _Layout(schema))
    return held[1]


def _by_record(columns: Mapping[str, Any], names: list[str], n: int) -> np.ndarray:
    """The columns ``names`` side by side, (n, columns): one concatenation (a stack is a call per column)."""
    return np.concatenate([columns[name] for name in names]).reshape(len(names), n).T


def _unique(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(values, return_inverse=True)`` of non-negative ints, by a table where they are
    small (a cell's sizes and lengths: no sort of the batch's cells)."""
    top = int(values.max()) if len(values) else 0
    if top > 4 * len(values) + (1 << 16):
        return np.unique(values, return_inverse=True)
    present = np.zeros(top + 1, dtype=bool)
    present[values] = True
    return np.flatnonzero(present), (np.cumsum(present) - 1)[values]


def _tail(dtype: int, size: int) -> bytes:
    """A scalar entry's bytes between its key and its value of ``size`` bytes (the Feature's length and tags)."""
    if _DTYPES[dtype] == "float32":
        return b"\x08\x12\x06\x0a\x04"
    if _DTYPES[dtype] == "int64":
        return bytes((size + 4, 0x1A, size + 2, 0x0A, size))
    bytes_list = 1 + len(varint(size)) + size
    return varint(1 + len(varint(bytes_list)) + bytes_list) + b"\x0a" + varint(bytes_list) + b"\x0a" + varint(size)


def _cells(schema: Schema, columns: Mapping[str, Any], n: int) -> Pieces:
    """One piece per record for all its features, built for all the batch's cells at once (a wide
    table's 50,000 columns are not 50,000 rounds of numpy calls): each cell is its entry's head (the
    entry's length), the feature's key bytes, a tail for the value's size and dtype (``_tail``), then
    the value (float32 bytes, a varint, UTF-8 bytes), the cells of a record side by side in name order."""
    layout = _layout(schema)
    k = len(layout.names)
    starts, sizes = np.empty((n, k), dtype=np.int64), np.empty((n, k), dtype=np.int64)
    blobs: list[Any] = []
    base = 0
    floats, where = layout.groups["float32"]
    if floats:
        blobs.append(_by_record(columns, floats, n).astype("<f4").tobytes())
        starts[:, where] = np.arange(0, 4 * n * len(floats), 4, dtype=np.int64).reshape(n, len(floats))
        sizes[:, where] = 4
        base += len(blobs[-1])
    ints, where = layout.groups["int64"]
    if ints:
        matrix, lengths = _varints(_by_record(columns, ints, n).astype(np.int64).reshape(-1))
        blobs.append(matrix.tobytes())
        starts[:, where] = base + np.arange(0, 10 * n * len(ints), 10, dtype=np.int64).reshape(n, len(ints))
        sizes[:, where] = lengths.reshape(n, len(ints))
        base += len(blobs[-1])
    texts, where = layout.groups["string"]
    if texts:
        offsets = np.concatenate([columns[name][0] for name in texts]).reshape(len(texts), n + 1).T.astype(np.int64)
        data = [columns[name][1] for name in texts]
        if all(d is data[0] for d in data):  # one blob for all (``utf8_columns``)
            blobs.append(data[0])
        else:
            lengths = np.fromiter(map(len, data), dtype=np.int64, count=len(data))
            offsets = offsets + (np.cumsum(lengths) - lengths)
            blobs.append(b"".join(data))
        starts[:, where] = base + offsets[:-1]
        sizes[:, where] = np.diff(offsets, axis=0)
    unique, inverse = _unique((sizes * len(_DTYPES) + layout.codes).reshape(-1))
    tails = _table([_tail(code % len(_DTYPES), code // len(_DTYPES)) for code in unique.tolist()], inverse)
    inner = np.tile(layout.kv_lengths, n) + tails[2] + sizes.reshape(-1)
    unique, inverse = _unique(inner)
    heads = _table([b"\x0a" + varint(size) for size in unique.tolist()], inverse)
    keys = (layout.kvs[0], np.tile(layout.kvs[1], n), np.tile(layout.kv_lengths, n))
    values = (blobs[0] if len(blobs) == 1 else b"".join(blobs), starts.reshape(-1), sizes.reshape(-1))
    cells = native.interleave([heads, keys, tails, values])
    lengths = (heads[2] + keys[2] + tails[2] + values[2]).reshape(n, k).sum(axis=1)
    return cells, np.cumsum(lengths) - lengths, lengths


def _string_pieces(name: str, column: tuple[np.ndarray, bytes]) -> tuple[Pieces, Pieces]:
    """Two pieces per record: the entry prefix for the value's length, then the value."""
    offsets, data = column
    offsets = offsets.astype(np.int64)
    sizes = np.diff(offsets)
    return _by_length(name, "string", sizes), (data, offsets[:-1], sizes)


# Rows encoded at once: the layout takes ~150-200 bytes of arrays a row whatever the row's size,
# so a block of tiny rows (a 4 MB CSV block of two small ints is ~700k rows) is encoded in slices.
MAX_ROWS = 1 << 16


class ColumnBatch(framing.FramedBatch):
    """A ``FramedBatch`` with the ``columns`` its records were encoded from (as this module takes
    them), for the statistics (``shardprep.stats.columns``); Parse drops them once counted, keeping
    the records' splits (``which``) it computed for them."""

    def __new__(cls, blob: bytes | bytearray, ends: np.ndarray, columns: Mapping[str, Any] | None = None) -> ColumnBatch:
        self = super().__new__(cls, blob, ends)
        self.columns = columns
        self.which: np.ndarray | None = None
        return self


def framed_batches(schema: Schema, columns: Mapping[str, Any], n: int) -> Iterator[ColumnBatch]:
    """The framed TFRecords of ``n`` rows, back to back, ``MAX_ROWS`` rows a batch: the slices are
    handed on apart (Parse keeps a batch's blocks apart too), not joined into one more copy."""
    if n <= MAX_ROWS:
        yield ColumnBatch(*_encode_framed(schema, columns, n), columns)
        return
    for lo in range(0, n, MAX_ROWS):
        hi = min(n, lo + MAX_ROWS)
        part = {name: _rows(col, lo, hi) for name, col in columns.items()}
        yield ColumnBatch(*_encode_framed(schema, part, hi - lo), part)


def encode_framed(schema: Schema, columns: Mapping[str, Any], n: int) -> tuple[bytes | bytearray, np.ndarray]:
    """``framed_batches`` as one blob and its end offsets (uint64)."""
    batches = list(framed_batches(schema, columns, n))
    if len(batches) == 1:
        return batches[0].blob, batches[0].ends
    starts = np.cumsum([0] + [len(b.blob) for b in batches[:-1]], dtype=np.uint64)
    return b"".join(b.blob for b in batches), np.concatenate([b.ends + start for b, start in zip(batches, starts)])


def _rows(column: Any, lo: int, hi: int) -> Any:
    """Rows ``[lo, hi)`` of a column: a numpy slice; a string column's offsets (its data stays whole)."""
    if isinstance(column, tuple):
        offsets, data = column
        return offsets[lo:hi + 1], data
    return column[lo:hi]


# Rows up to which a batch's features are encoded all at once (``_cells``): numpy's cost per call
# outweighs the gather of the cells in short batches (a wide table's); in long ones feature by
# feature (float runs at once) is faster.
_CELL_ROWS = 128


def _encode_framed(schema: Schema, columns: Mapping[str, Any], n: int) -> tuple[bytearray, np.ndarray]:
    if not n:
        return bytearray(), np.zeros(0, dtype="<u8")
    pieces: list[Pieces] = []
    if n <= _CELL_ROWS:
        pieces.append(_cells(schema, columns, n))
    for dtype, run in _layout(schema).runs if n > _CELL_ROWS else ():
        if dtype == "float32":
            pieces.append(_float_run(run, columns, n)[0])
        elif dtype == "int64":
            pieces += _int_pieces(run[0], columns[run[0]])
        else:
            pieces += _string_pieces(run[0], columns[run[0]])
    body = np.zeros(n, dtype=np.int64)
    for _, _, lengths in pieces:
        body += lengths
    # Per record: length, its masked CRC, the Example's tag and body length (all depend on the body
    # length only), the body pieces, and 4 bytes the data CRC is written into afterwards.
    unique, inverse = _unique(body)
    matrix, sizes = _varints(unique)
    varints, heads = matrix.tobytes(), []
    for j, (size, varint_size) in enumerate(zip(unique.tolist(), sizes.tolist())):
        tag = b"\x0a" + varints[10 * j:10 * j + varint_size]
        length = _U64(len(tag) + size)
        heads.append(length + _U32(framing.masked_crc(length)) + tag)
    head = _table(heads, inverse)
    crc = (bytes(4), np.zeros(n, np.int64), np.full(n, 4, np.int64))
    blob = native.interleave([head, *pieces, crc])
    ends = np.cumsum(head[2] + body + 4).astype("<u8")
    native.fill_data_crcs(blob, ends)  # in compiled code where built: no per-record call or copy
    return blob, ends
