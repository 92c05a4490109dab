"""Column-wise encoding: a batch of scalar feature columns -> framed TFRecords of tf.train.Example.

The bytes are exactly those of ``example_encoder`` + ``tfrecord.frame`` row by row (a test
checks it); the work is laid out by column instead. Each feature gives one piece per record, built
for the whole column with numpy: a run of float features is one fixed-width block (constant entry
prefixes and float32 values, as a structured array); an int64 feature is its entry prefix and
varint, chosen per varint length; a string feature is a prefix chosen per value length and the
value's bytes. One ``bytes.join`` per batch lays the records out, framing included; the only
per-record call is the data CRC.

Columns: float32 -> a float32 array (finite: the caller checks), int64 -> an int64 array, string ->
``(offsets, data)``, the UTF-8 bytes of value ``i`` being ``data[offsets[i]:offsets[i + 1]]``.
"""
from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Any

import google_crc32c
import numpy as np

from shardprep import tfrecord
from shardprep.example.wire import scalar_entry_prefix, scalar_runs
from shardprep.schema import INT64_MAX, INT64_MIN, Schema

__all__ = ["encode_framed", "from_rows", "supports"]

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
    numbers in strings, booleans)."""
    names = set(schema)
    if extra_fields != "ignore" and any(row.keys() - names for row in rows):
        return None
    out: dict[str, Any] = {}
    try:
        for name, spec in schema.items():
            values = [row[name] for row in rows]
            types = set(map(type, values))
            if spec.dtype == "float32" and types <= {int, float}:
                with np.errstate(over="ignore", invalid="ignore"):  # as Python: to float64, then float32
                    column = np.array(values, dtype=np.float64).astype(np.float32)
                if not np.isfinite(column).all():
                    return None
                out[name] = column
            elif spec.dtype == "int64" and types == {int} and INT64_MIN <= min(values) and max(values) <= INT64_MAX:
                out[name] = np.array(values, dtype=np.int64)
            elif spec.dtype == "string" and types == {str}:
                data = [v.encode("utf-8") for v in values]
                out[name] = (np.cumsum([0, *map(len, data)], dtype=np.int64), b"".join(data))
            else:
                return None
    except (KeyError, OverflowError, UnicodeEncodeError):  # a missing field, a huge int, a lone surrogate
        return None
    return out


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


def _rows(block: bytes, width: int) -> list[bytes]:
    return [block[i:i + width] for i in range(0, len(block), width)]


def _float_run(names: list[str], columns: Mapping[str, Any], n: int) -> tuple[list[bytes], int]:
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
    return _rows(block.tobytes(), width), width


def _by_length(name: str, dtype: str, sizes: np.ndarray) -> tuple[list[bytes], np.ndarray]:
    """Each record's entry prefix (it depends only on its value's encoded size), and its length."""
    unique, inverse = np.unique(sizes, return_inverse=True)
    table = [scalar_entry_prefix(name, dtype, int(size)) for size in unique.tolist()]
    lengths = np.array([len(p) for p in table], dtype=np.int64)[inverse]
    return [table[i] for i in inverse.tolist()], lengths


def _int_pieces(name: str, values: np.ndarray) -> tuple[list[bytes], np.ndarray]:
    """One piece per record: the entry prefix for its varint's length, then the varint."""
    matrix, sizes = _varints(values)
    prefixes, prefix_lengths = _by_length(name, "int64", sizes)
    varints = matrix.tobytes()
    return [p + varints[10 * i:10 * i + size] for i, (p, size) in enumerate(zip(prefixes, sizes.tolist()))], \
        prefix_lengths + sizes


def _string_pieces(name: str, column: tuple[np.ndarray, bytes]) -> tuple[list[bytes], list[bytes], np.ndarray]:
    """Two pieces per record: the entry prefix for the value's length, then the value."""
    offsets, data = column
    sizes = np.diff(offsets).astype(np.int64)
    prefixes, prefix_lengths = _by_length(name, "string", sizes)
    bounds = offsets.tolist()
    return prefixes, [data[a:b] for a, b in zip(bounds, bounds[1:])], prefix_lengths + sizes


def encode_framed(schema: Schema, columns: Mapping[str, Any], n: int) -> tuple[bytearray, np.ndarray]:
    """The framed TFRecords of ``n`` rows, back to back, and their end offsets (uint64)."""
    if not n:
        return bytearray(), np.zeros(0, dtype="<u8")
    pieces: list[list[bytes]] = []
    body = np.zeros(n, dtype=np.int64)
    for dtype, run in scalar_runs(schema):
        if dtype == "float32":
            rows, width = _float_run(run, columns, n)
            pieces.append(rows)
            body += width
        elif dtype == "int64":
            rows, lengths = _int_pieces(run[0], columns[run[0]])
            pieces.append(rows)
            body += lengths
        else:
            prefixes, values, lengths = _string_pieces(run[0], columns[run[0]])
            pieces += [prefixes, values]
            body += lengths
    # Per record: length, its masked CRC, the Example's tag and body length (all depend on the body
    # length only), the body pieces, and 4 bytes the data CRC is written into afterwards.
    unique, inverse = np.unique(body, return_inverse=True)
    matrix, sizes = _varints(unique)
    varints, heads, example_lengths = matrix.tobytes(), [], []
    for j, (size, varint_size) in enumerate(zip(unique.tolist(), sizes.tolist())):
        tag = b"\x0a" + varints[10 * j:10 * j + varint_size]
        length = _U64(len(tag) + size)
        heads.append(length + _U32(tfrecord.masked_crc(length)) + tag)
        example_lengths.append(len(tag) + size)
    framed_lengths = np.array(example_lengths, dtype=np.int64)[inverse] + 16
    k = len(pieces) + 2
    parts: list[bytes | None] = [None] * (k * n)
    parts[0::k] = [heads[j] for j in inverse.tolist()]
    for j, column in enumerate(pieces, 1):
        parts[j::k] = column
    parts[k - 1::k] = [bytes(4)] * n
    joined = b"".join(parts)
    ends = np.cumsum(framed_lengths)
    crc = google_crc32c.value  # it takes bytes only, so each Example is sliced out (copied) for it
    crcs = [crc(joined[a:b]) for a, b in zip((ends - framed_lengths + 12).tolist(), (ends - 4).tolist())]
    blob = bytearray(joined)
    del joined
    out = np.frombuffer(blob, dtype=np.uint8)
    masked = tfrecord.mask(np.array(crcs, dtype=np.uint64)).astype("<u4")
    out[(ends - 4)[:, None] + np.arange(4)] = masked.view(np.uint8).reshape(n, 4)
    return blob, ends.astype("<u8")
