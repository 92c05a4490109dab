"""tf.train.Example encoding and decoding in pure Python (no TensorFlow).

Dataflow workers do not carry TensorFlow, so the protobuf wire format is written by hand. This is
the pipeline's hot path: per-feature byte prefixes are built once per schema, floats are packed a
whole list at a time and small varints come from a table. Features are written in sorted-name order
with packed numeric lists, so equal rows always give equal bytes. Wire layout::

    Example  { features = 1: Features { feature = 1: map<string, Feature> } }
    Feature  { oneof: bytes_list = 1 | float_list = 2 | int64_list = 3 }   lists: value = 1

``decode_example`` accepts packed and unpacked lists (any valid encoding TF reads) and refuses
anything else, including fields an Example does not have (a SequenceExample, a foreign proto).
TFRecord framing lives in ``shardprep.tfrecord``.
"""
from __future__ import annotations

import struct
from collections.abc import Callable, Mapping
from typing import Any

from shardprep.schema import INT64_MAX, INT64_MIN, FeatureSpec, Schema

__all__ = ["RecordError", "decode_example", "example_encoder", "scalar_entry_prefix", "scalar_runs"]


_EXTRA_FIELDS = ("reject", "ignore")
_U64 = 1 << 64
_VARINTS: tuple[bytes, ...] = ()  # filled below: varint bytes of 0 .. 2**14 - 1


class RecordError(ValueError):
    """One input record that cannot become an Example; it goes to the dead letters, the run goes on."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail

    def __reduce__(self):  # picklable across Beam workers
        return (type(self), (self.reason, self.detail))


# --- varints ---------------------------------------------------------------------------------------


def _varint_slow(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


_VARINTS = tuple(_varint_slow(i) for i in range(1 << 14))


def _varint(n: int) -> bytes:
    """Varint of a non-negative int (lengths)."""
    return _VARINTS[n] if n < 16384 else _varint_slow(n)


def _int64_varint(n: int) -> bytes:
    """Varint of an int64 value: two's complement, so negative values take 10 bytes, as protobuf does."""
    if 0 <= n < 16384:
        return _VARINTS[n]
    if not INT64_MIN <= n <= INT64_MAX:
        raise OverflowError(n)
    return _varint_slow(n + _U64 if n < 0 else n)


# --- encoding --------------------------------------------------------------------------------------


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _float_of(name: str, v: Any) -> float:
    if isinstance(v, str):
        s = v.strip()
        if not s:
            raise RecordError("missing_value", f"field {name!r} is empty: expected a float32")
        try:
            return float(s)
        except ValueError:
            raise RecordError(
                "type_mismatch", f"field {name!r} holds {_show(v)}: expected a float32 (a number or a string holding one)"
            ) from None
    if isinstance(v, (int, float)) or (hasattr(v, "__float__") and not isinstance(v, (bytes, list, tuple, dict))):
        try:
            return float(v)
        except OverflowError:
            raise RecordError("out_of_range", f"field {name!r} holds {_show(v)}: outside the float32 range") from None
    raise _wrong_type(name, v, "a float32 (a number or a string holding one)")


def _int_of(name: str, v: Any) -> int:
    if isinstance(v, str):
        s = v.strip()
        if not s:
            raise RecordError("missing_value", f"field {name!r} is empty: expected an int64")
        try:
            n = int(s)
        except ValueError:
            raise RecordError(
                "type_mismatch", f"field {name!r} holds {_show(v)}: expected an int64 (an integer or a string holding one)"
            ) from None
    elif isinstance(v, int):
        n = int(v)
    elif hasattr(v, "__index__") and not isinstance(v, (float, bytes, list, tuple, dict)):
        n = v.__index__()
    else:
        raise _wrong_type(name, v, "an int64 (an integer or a string holding one)")
    if not INT64_MIN <= n <= INT64_MAX:
        raise RecordError("out_of_range", f"field {name!r} holds {_show(n)}: outside the int64 range [-2**63, 2**63)")
    return n


def _bytes_of(name: str, v: Any) -> bytes:
    if isinstance(v, str):
        try:
            return v.encode("utf-8")
        except UnicodeEncodeError as e:
            raise RecordError("invalid_utf8", f"field {name!r} holds {_show(v)}: it cannot be UTF-8 encoded ({e.reason})") from None
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v)
    if isinstance(v, bool):  # numbers in a string feature keep their JSON spelling
        return b"true" if v else b"false"
    if isinstance(v, (int, float)):
        return repr(v).encode("ascii")
    raise _wrong_type(name, v, "a string (str or bytes)")


def _wrong_type(name: str, v: Any, expected: str) -> RecordError:
    if isinstance(v, Mapping):
        return RecordError("nested_object", f"field {name!r} holds a nested object {_show(v)}: expected {expected}")
    if isinstance(v, (list, tuple)):
        return RecordError("type_mismatch", f"field {name!r} holds a nested list {_show(v)}: expected {expected}")
    return RecordError("type_mismatch", f"field {name!r} holds {_show(v)} ({type(v).__name__}): expected {expected}")


_CONVERT = {"float32": _float_of, "int64": _int_of, "string": _bytes_of}


def _values(name: str, spec: FeatureSpec, v: Any) -> list:
    """Checks one value against its spec and converts it: the slow, precise path that names the error."""
    convert = _CONVERT[spec.dtype]
    shape = spec.shape
    if isinstance(v, Mapping):
        raise RecordError("nested_object", f"field {name!r} holds a nested object {_show(v)}: features must be flat")
    if hasattr(v, "tolist") and not isinstance(v, (str, bytes)):
        v = v.tolist()  # numpy arrays and scalars
    if v is None or (shape == (-1,) and spec.dtype != "string" and isinstance(v, str) and not v.strip()):
        if shape == (-1,):
            return []
        raise RecordError("missing_value", f"field {name!r} is missing: expected {_expected(spec)}")
    items = list(v) if isinstance(v, (list, tuple)) else [v]
    if shape == () and len(items) != 1 or len(shape) == 1 and shape[0] >= 1 and len(items) != shape[0]:
        raise RecordError(
            "shape_mismatch", f"field {name!r} holds {len(items)} values {_show(v)}: expected {_expected(spec)}"
        )
    out = [convert(name, item) for item in items]
    if spec.dtype == "float32":
        try:
            struct.pack(f"<{len(out)}f", *out)
        except OverflowError:
            raise RecordError("out_of_range", f"field {name!r} holds {_show(v)}: outside the float32 range") from None
    return out


def _expected(spec: FeatureSpec) -> str:
    if spec.shape == ():
        return f"one {spec.dtype} value"
    if spec.shape == (-1,):
        return f"a list of {spec.dtype} values"
    return f"exactly {spec.shape[0]} {spec.dtype} values"


def _feature(dtype: str, values: list) -> bytes:
    """The Feature message of converted values."""
    if dtype == "string":
        body = b"".join(b"\x0a" + _varint(len(b)) + b for b in values)
        return b"\x0a" + _varint(len(body)) + body
    if dtype == "float32":
        if not values:
            return b"\x12\x00"
        packed = struct.pack(f"<{len(values)}f", *values)
        body = b"\x0a" + _varint(len(packed)) + packed
        return b"\x12" + _varint(len(body)) + body
    if not values:
        return b"\x1a\x00"
    packed = b"".join(map(_int64_varint, values))
    body = b"\x0a" + _varint(len(packed)) + packed
    return b"\x1a" + _varint(len(body)) + body


def _entry(key: bytes, feature: bytes) -> bytes:
    """One map entry of Features: ``{key = 1, value = 2}``, itself field 1 of Features."""
    inner = b"\x0a" + _varint(len(key)) + key + b"\x12" + _varint(len(feature)) + feature
    return b"\x0a" + _varint(len(inner)) + inner


def _feature_encoder(name: str, spec: FeatureSpec) -> Callable[[Any], bytes]:
    """A function value -> encoded map entry, with a fast path for the common cases."""
    key = name.encode("utf-8")
    kv = b"\x0a" + _varint(len(key)) + key + b"\x12"  # entry bytes up to the Feature's length

    def slow(v: Any) -> bytes:
        feature = _feature(spec.dtype, _values(name, spec, v))
        return _entry(key, feature)

    dtype, shape = spec.dtype, spec.shape
    if dtype == "float32" and shape != (-1,):
        n = 1 if shape == () else shape[0]
        prefix = _entry(key, _feature("float32", [0.0] * n))[: -4 * n]
        pack = struct.Struct(f"<{n}f").pack
        if n == 1:

            def enc(v: Any) -> bytes:
                try:
                    t = type(v)
                    # decoded TFRecords hold one-value lists; anything odd goes to the slow path whole
                    x = float(v) if t is str else v[0] if t is list and len(v) == 1 else v
                    return prefix + pack(x)
                except (ValueError, TypeError, struct.error, OverflowError):
                    return slow(v)
        else:

            def enc(v: Any) -> bytes:
                try:
                    if type(v) is list:
                        return prefix + pack(*v)
                except (TypeError, struct.error, OverflowError):
                    pass
                return slow(v)
        return enc
    if dtype == "int64" and shape == ():
        # prefixes[L]: entry bytes before a value varint of L bytes
        prefixes = [b""] + [_int_prefix(kv, L) for L in range(1, 11)]
        table = _VARINTS

        def enc(v: Any) -> bytes:
            try:
                t = type(v)
                x = int(v) if t is str else v[0] if t is list and len(v) == 1 else v
                vb = table[x] if 0 <= x < 16384 else _int64_varint(x)
                return prefixes[len(vb)] + vb
            except (ValueError, TypeError, IndexError, OverflowError):
                return slow(v)
        return enc
    if dtype == "string" and shape == ():
        kv_len = len(kv)
        varint = _varint

        def enc(v: Any) -> bytes:
            x = v[0] if type(v) is list and len(v) == 1 else v
            t = type(x)
            if t is str:
                try:
                    data = x.encode()
                except UnicodeEncodeError:
                    return slow(v)
            elif t is bytes:
                data = x
            else:
                return slow(v)
            vm = varint(len(data))
            bl = len(vm) + len(data) + 1  # BytesList: tag, length, data
            vbl = varint(bl)
            fl = 1 + len(vbl) + bl  # Feature: tag, length, BytesList
            vfl = varint(fl)
            return b"".join((b"\x0a", varint(kv_len + len(vfl) + fl), kv, vfl, b"\x0a", vbl, b"\x0a", vm, data))
        return enc

    def enc(v: Any) -> bytes:
        if type(v) is list:
            try:
                if dtype == "float32":
                    feature = _feature(dtype, v) if shape == (-1,) or len(v) == shape[0] else None
                elif dtype == "int64" and (shape == (-1,) or len(v) == shape[0]):
                    feature = _feature(dtype, v)
                else:
                    feature = None
                if feature is not None:
                    return _entry(key, feature)
            except (TypeError, struct.error, OverflowError):
                pass
        return slow(v)
    return enc


def _int_prefix(kv: bytes, length: int) -> bytes:
    """Entry bytes before a scalar int64 value whose varint takes ``length`` bytes."""
    int64_list = length + 2  # tag, length, value
    feature = int64_list + 2  # tag, length, Int64List
    inner = len(kv) + 1 + feature
    return b"\x0a" + _varint(inner) + kv + _varint(feature) + b"\x1a" + _varint(int64_list) + b"\x0a" + _varint(length)


def scalar_entry_prefix(name: str, dtype: str, size: int) -> bytes:
    """The bytes of a scalar feature's map entry before its value, for a value that encodes to
    ``size`` bytes (float32: 4; int64: its varint's length; string: its UTF-8 length)."""
    key = name.encode("utf-8")
    if dtype == "int64":
        return _int_prefix(b"\x0a" + _varint(len(key)) + key + b"\x12", size)
    entry = _entry(key, _feature(dtype, [0.0] if dtype == "float32" else [bytes(size)]))
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


def example_encoder(schema: Schema, *, extra_fields: str = "reject") -> Callable[[Mapping[str, Any]], bytes]:
    """A function row -> serialized tf.train.Example; raises ``RecordError`` for a row that does not fit.

    ``extra_fields``: ``"reject"`` makes a key outside the schema an ``unknown_field`` error;
    ``"ignore"`` drops such keys.
    """
    if extra_fields not in _EXTRA_FIELDS:
        raise ValueError(f"extra_fields={extra_fields!r}: expected one of {', '.join(_EXTRA_FIELDS)}")
    if not schema:
        raise ValueError("the schema has no features: an Example needs at least one")
    for name, spec in schema.items():
        if not isinstance(name, str) or not name or not isinstance(spec, FeatureSpec):
            raise ValueError(f"schema entry {name!r}: {spec!r} is not valid: expected a non-empty name -> FeatureSpec")
    encoders = tuple((name, _feature_encoder(name, schema[name])) for name in sorted(schema))
    names = frozenset(schema)
    reject = extra_fields == "reject"
    varint = _varint

    def encode(row: Mapping[str, Any]) -> bytes:
        if reject and not names.issuperset(row):
            extra = sorted(k for k in row if k not in names)
            raise RecordError(
                "unknown_field",
                f"field(s) {', '.join(map(repr, extra[:5]))} are not in the schema ({', '.join(sorted(names)[:8])}"
                f"{', ...' if len(names) > 8 else ''}): add them to --schema, or drop them",
            )
        get = row.get
        body = b"".join([enc(get(name)) for name, enc in encoders])
        return b"\x0a" + varint(len(body)) + body

    return _scalar_row_encoder(schema, encode, names=names, reject=reject) or encode


_MAX_MISSES = 1000


def _scalar_row_encoder(schema: Schema, generic: Callable[[Mapping[str, Any]], bytes], *, names: frozenset[str],
                        reject: bool) -> Callable[[Mapping[str, Any]], bytes] | None:
    """For a schema of scalar features only: one function, generated once, that encodes a row
    with the per-feature fast paths inlined and each run of float features packed, prefixes and
    all, by one ``struct`` call (same bytes as ``generic``). A row it does not take as is (a
    missing value, a list, a bad number ...) goes to ``generic``, which encodes it or raises the
    precise ``RecordError``; after ``_MAX_MISSES`` such rows in a row (decoded TFRecords, whose
    values are lists) it steps aside for good. None for other schemas."""
    if any(spec.shape != () or spec.dtype not in _CONVERT for spec in schema.values()):
        return None
    env: dict[str, Any] = {"T": _VARINTS, "int64_varint": _int64_varint, "varint": _varint}
    lines, parts = [], []
    for i, (dtype, run) in enumerate(scalar_runs(schema)):
        if dtype == "float32":  # a run of floats: one Struct("<{prefix}sf{prefix}sf...").pack
            fmt, args = "<", []
            for k, name in enumerate(run):
                prefix = scalar_entry_prefix(name, "float32", 4)
                env[f"p{i}_{k}"] = prefix
                fmt += f"{len(prefix)}sf"
                lines += [f"v = get({name!r})", f"x{i}_{k} = float(v) if type(v) is str else v"]
                args += [f"p{i}_{k}", f"x{i}_{k}"]
            env[f"pack{i}"] = struct.Struct(fmt).pack
            parts.append(f"pack{i}({', '.join(args)})")
        elif dtype == "int64":
            env[f"prefixes{i}"] = [b""] + [scalar_entry_prefix(run[0], "int64", n) for n in range(1, 11)]
            lines += [f"v = get({run[0]!r})", "n = int(v) if type(v) is str else v",
                      f"b{i} = T[n] if 0 <= n < 16384 else int64_varint(n)"]
            parts += [f"prefixes{i}[len(b{i})]", f"b{i}"]
        else:  # string: entry length, key, Feature length, BytesList length, value length, value
            key = run[0].encode("utf-8")
            kv = b"\x0a" + _varint(len(key)) + key + b"\x12"
            env[f"kv{i}"] = kv
            lines += [f"v = get({run[0]!r})", "t = type(v)",
                      f"d{i} = v.encode() if t is str else v if t is bytes else None",
                      f"vm{i} = varint(len(d{i}))", f"bl{i} = len(vm{i}) + len(d{i}) + 1", f"vbl{i} = varint(bl{i})",
                      f"fl{i} = 1 + len(vbl{i}) + bl{i}", f"vfl{i} = varint(fl{i})"]
            parts += ["b'\\x0a'", f"varint({len(kv)} + len(vfl{i}) + fl{i})", f"kv{i}", f"vfl{i}", "b'\\x0a'",
                      f"vbl{i}", "b'\\x0a'", f"vm{i}", f"d{i}"]
    source = "\n    ".join(["def fast(row):", "get = row.get", *lines, f"body = b''.join(({', '.join(parts)},))",
                             "return b'\\x0a' + varint(len(body)) + body"])
    exec(compile(source, "<shardprep.codec: generated row encoder>", "exec"), env)  # names enter as repr() literals
    fast = env["fast"]
    misses = 0

    def encode(row: Mapping[str, Any]) -> bytes:
        nonlocal misses
        if misses < _MAX_MISSES and not (reject and not names.issuperset(row)):
            try:
                out = fast(row)
            except (ValueError, TypeError, struct.error, OverflowError):
                misses += 1
            else:
                misses = 0
                return out
        return generic(row)

    return encode


# --- decoding --------------------------------------------------------------------------------------


def _bad(detail: str) -> RecordError:
    return RecordError("not_an_example", f"{detail}: not a valid tf.train.Example")


def _read_varint(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    if pos >= end:
        raise _bad(f"a varint is cut off at byte {pos}")
    b = buf[pos]
    if b < 0x80:
        return b, pos + 1
    result, shift = b & 0x7F, 7
    pos += 1
    while True:
        if pos >= end:
            raise _bad(f"a varint is cut off at byte {pos}")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift >= 70:
            raise _bad(f"a varint is longer than 10 bytes at byte {pos}")


def _read_len(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    """(start, stop) of a length-delimited field whose length varint is at ``pos``."""
    n, start = _read_varint(buf, pos, end)
    stop = start + n
    if stop > end:
        raise _bad(f"a field of {n} bytes at byte {start} runs past the end of its message (byte {end})")
    return start, stop


def _unexpected(message: str, tag: int, pos: int) -> RecordError:
    return _bad(f"unexpected field {tag >> 3} (wire type {tag & 7}) in {message} at byte {pos}")


def _field(buf: bytes, pos: int, end: int) -> tuple[int, int, int]:
    """(tag, start, stop) of the field at ``pos``; one-byte tags and lengths are read inline (the hot path)."""
    tag = buf[pos]
    pos += 1
    if tag >= 0x80:
        tag, pos = _read_varint(buf, pos - 1, end)
    if tag & 7 != 2:
        return tag, pos, pos
    if pos < end and buf[pos] < 0x80:
        start = pos + 1
        stop = start + buf[pos]
        if stop > end:
            raise _bad(f"a field of {buf[pos]} bytes at byte {start} runs past the end of its message (byte {end})")
        return tag, start, stop
    start, stop = _read_len(buf, pos, end)
    return tag, start, stop


def _bytes_list(buf: bytes, pos: int, end: int, values: list) -> None:
    while pos < end:
        tag, start, pos = _field(buf, pos, end)
        if tag != 0x0A:
            raise _unexpected("BytesList", tag, start)
        values.append(buf[start:pos])


def _float_list(buf: bytes, pos: int, end: int, values: list) -> None:
    while pos < end:
        tag, start, pos = _field(buf, pos, end)
        if tag == 0x0A:  # packed
            if (pos - start) % 4:
                raise _bad(f"a packed float list of {pos - start} bytes (not a multiple of 4) at byte {start}")
            values.extend(struct.unpack_from(f"<{(pos - start) // 4}f", buf, start))
        elif tag == 0x0D:  # one unpacked float
            if pos + 4 > end:
                raise _bad(f"a float is cut off at byte {pos}")
            values.append(struct.unpack_from("<f", buf, pos)[0])
            pos += 4
        else:
            raise _unexpected("FloatList", tag, start)


def _signed(v: int) -> int:
    v &= _U64 - 1
    return v - _U64 if v > INT64_MAX else v


def _int64_list(buf: bytes, pos: int, end: int, values: list) -> None:
    while pos < end:
        tag, start, pos = _field(buf, pos, end)
        if tag == 0x0A:  # packed
            chunk = buf[start:pos]
            if chunk.isascii():  # every value < 128: one byte each
                values.extend(chunk)
                continue
            i = start
            while i < pos:
                v, i = _read_varint(buf, i, pos)
                values.append(_signed(v))
        elif tag == 0x08:  # one unpacked value
            v, pos = _read_varint(buf, pos, end)
            values.append(_signed(v))
        else:
            raise _unexpected("Int64List", tag, start)


_LISTS = {0x0A: _bytes_list, 0x12: _float_list, 0x1A: _int64_list}


def _features(buf: bytes, pos: int, end: int, out: dict[str, list]) -> None:
    """Parses Features into ``out``. A repeated key: the last wins (protobuf maps). A repeated Feature
    merges as protobuf does: the same list kind appends, another kind replaces (oneof)."""
    while pos < end:
        tag, entry, pos = _field(buf, pos, end)
        if tag != 0x0A:
            raise _unexpected("Features", tag, entry)
        key, kind, values = "", 0, []
        while entry < pos:
            tag, start, entry = _field(buf, entry, pos)
            if tag == 0x0A:
                try:
                    key = buf[start:entry].decode("utf-8")
                except UnicodeDecodeError:
                    raise _bad(f"a feature name at byte {start} is not valid UTF-8") from None
            elif tag == 0x12:
                while start < entry:
                    tag, lst, start = _field(buf, start, entry)
                    if tag not in _LISTS:
                        raise _unexpected("Feature", tag, lst)
                    if tag != kind:
                        kind, values = tag, []
                    _LISTS[tag](buf, lst, start, values)
            else:
                raise _unexpected("the feature map", tag, start)
        out[key] = values


def decode_example(data: bytes) -> dict[str, list]:
    """Feature name -> list of values (int, float or bytes) of a serialized tf.train.Example.

    Raises ``RecordError("not_an_example", ...)`` for anything that is not one.
    """
    if not isinstance(data, bytes):
        if not isinstance(data, (bytearray, memoryview)):
            raise TypeError(f"decode_example needs bytes, got {type(data).__name__}")
        data = bytes(data)
    out: dict[str, list] = {}
    pos, end = 0, len(data)
    while pos < end:
        tag, start, pos = _field(data, pos, end)
        if tag != 0x0A:
            raise _unexpected("Example", tag, start)
        _features(data, start, pos, out)
    return out
