"""The protobuf wire format of tf.train.Example, written by hand (Dataflow workers carry no TensorFlow).

Varints (small ones from a table), Feature messages, map entries and the byte prefixes of scalar
features, which encoders build once per schema. Features are written in sorted-name order with
packed numeric lists, so equal rows always give equal bytes. Wire layout::

    Example  { features = 1: Features { feature = 1: map<string, Feature> } }
    Feature  { oneof: bytes_list = 1 | float_list = 2 | int64_list = 3 }   lists: value = 1
"""
from __future__ import annotations

import struct

from shardprep.schema import INT64_MAX, INT64_MIN, Schema

__all__ = [
    "U64", "VARINTS", "RecordError", "feature_message", "map_entry", "int64_varint", "int_prefix", "scalar_entry_prefix",
    "scalar_runs", "varint", "varint_slow",
]

U64 = 1 << 64


class RecordError(ValueError):
    """One input record that cannot become an Example; it goes to the dead letters, the run goes on."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail

    def __reduce__(self):  # picklable across Beam workers
        return (type(self), (self.reason, self.detail))


def varint_slow(n: int) -> bytes:
    """Varint of a non-negative int, computed."""
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _two_byte_varints() -> list[bytes]:
    """The varints of 128 .. 2**14 - 1, sliced from one buffer: low seven bits | 0x80, then the rest
    (not a call of varint_slow each: this runs at every process's start)."""
    pairs = bytearray(2 * ((1 << 14) - 128))
    pairs[0::2] = bytes(range(128, 256)) * 127
    pairs[1::2] = b"".join(bytes((high,)) * 128 for high in range(1, 128))
    whole = bytes(pairs)
    return [whole[k:k + 2] for k in range(0, len(whole), 2)]


VARINTS: tuple[bytes, ...] = (*[bytes((i,)) for i in range(128)], *_two_byte_varints())  # varint bytes of 0 .. 2**14 - 1


def varint(n: int) -> bytes:
    """Varint of a non-negative int (lengths)."""
    return VARINTS[n] if n < 16384 else varint_slow(n)


def int64_varint(n: int) -> bytes:
    """Varint of an int64 value: two's complement, so negative values take 10 bytes, as protobuf does."""
    if 0 <= n < 16384:
        return VARINTS[n]
    if not INT64_MIN <= n <= INT64_MAX:
        raise OverflowError(n)
    return varint_slow(n + U64 if n < 0 else n)


def feature_message(dtype: str, values: list) -> bytes:
    """The Feature message of converted values."""
    if dtype == "string":
        body = b"".join(b"\x0a" + varint(len(b)) + b for b in values)
        return b"\x0a" + varint(len(body)) + body
    if dtype == "float32":
        if not values:
            return b"\x12\x00"
        packed = struct.pack(f"<{len(values)}f", *values)
        body = b"\x0a" + varint(len(packed)) + packed
        return b"\x12" + varint(len(body)) + body
    if not values:
        return b"\x1a\x00"
    packed = b"".join(map(int64_varint, values))
    body = b"\x0a" + varint(len(packed)) + packed
    return b"\x1a" + varint(len(body)) + body


def map_entry(key: bytes, feature: bytes) -> bytes:
    """One map entry of Features: ``{key = 1, value = 2}``, itself field 1 of Features."""
    inner = b"\x0a" + varint(len(key)) + key + b"\x12" + varint(len(feature)) + feature
    return b"\x0a" + varint(len(inner)) + inner


def int_prefix(kv: bytes, length: int) -> bytes:
    """Entry bytes before a scalar int64 value whose varint takes ``length`` bytes."""
    int64_list = length + 2  # tag, length, value
    feature = int64_list + 2  # tag, length, Int64List
    inner = len(kv) + 1 + feature
    return b"\x0a" + varint(inner) + kv + varint(feature) + b"\x1a" + varint(int64_list) + b"\x0a" + varint(length)


def scalar_entry_prefix(name: str, dtype: str, size: int) -> bytes:
    """The bytes of a scalar feature's map entry before its value, for a value that encodes to
    ``size`` bytes (float32: 4; int64: its varint's length; string: its UTF-8 length)."""
    key = name.encode("utf-8")
    if dtype == "int64":
        return int_prefix(b"\x0a" + varint(len(key)) + key + b"\x12", size)
    if dtype == "string":  # the lengths of map_entry(key, feature_message("string", [value])), without the value
        value = varint(size)
        bytes_list = 1 + len(value) + size
        feature = 1 + len(varint(bytes_list)) + bytes_list
        inner = 1 + len(varint(len(key))) + len(key) + 1 + len(varint(feature)) + feature
        return b"".join((b"\x0a", varint(inner), b"\x0a", varint(len(key)), key, b"\x12", varint(feature), b"\x0a",
                         varint(bytes_list), b"\x0a", value))
    entry = map_entry(key, feature_message(dtype, [0.0]))
    return entry[:len(entry) - size]


def scalar_runs(schema: Schema) -> list[tuple[str, list[str]]]:
    """(dtype, names) in sorted-name order, each run of consecutive float32 features one group (its
    entries are fixed-width, so encoders pack a run at once); every other feature alone."""
    runs: list[tuple[str, list[str]]] = []
    for name in sorted(schema):
        dtype = schema[name].dtype
        if dtype == "float32" and runs and runs[-1][0] == "float32":
            runs[-1][1].append(name)
        else:
            runs.append((dtype, [name]))
    return runs
