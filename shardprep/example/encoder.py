"""tf.train.Example encoding of one row: checks each value against its FeatureSpec and writes the bytes.

Each feature gets a fast path for the common cases and a slow, precise path that names the error
(``RecordError``); a schema of scalars only also gets a generated row encoder (``generated``).
"""
from __future__ import annotations

import math
import struct
from collections.abc import Callable, Mapping
from typing import Any

from shardprep.example.generated import scalar_row_encoder
from shardprep.example.wire import VARINTS, RecordError, feature_message, int64_varint, int_prefix, map_entry, varint
from shardprep.schema import EXTRA_FIELDS, INT64_MAX, INT64_MIN, ON_MISSING, FeatureSpec, Schema

__all__ = ["example_encoder"]


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _float_of(name: str, v: Any) -> float:
    if isinstance(v, str):
        s = v.strip()
        if not s:
            raise RecordError("missing_value", f"field {name!r} is empty: expected a float32")
        try:
            x = float(s)
        except ValueError:
            raise RecordError(
                "type_mismatch", f"field {name!r} holds {_show(v)}: expected a float32 (a number or a string holding one)"
            ) from None
        if math.isinf(x) and s.lstrip("+-").lower() not in ("inf", "infinity"):  # 1e400: a number, too large
            raise RecordError("out_of_range", f"field {name!r} holds {_show(v)}: outside the float32 range")
        return x
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


def _values(name: str, spec: FeatureSpec, v: Any, allow_non_finite: bool = False) -> list:
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
    if spec.dtype == "float32" and not allow_non_finite and not all(map(math.isfinite, out)):
        raise RecordError("non_finite", f"field {name!r} holds {_show(v)}: NaN and infinities are not stored "
                          "(pass --allow-non-finite to keep them)")
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


def _feature_encoder(name: str, spec: FeatureSpec, allow_non_finite: bool) -> Callable[[Any], bytes]:
    """A function value -> encoded map entry, with a fast path for the common cases."""
    key = name.encode("utf-8")
    kv = b"\x0a" + varint(len(key)) + key + b"\x12"  # entry bytes up to the Feature's length

    def slow(v: Any) -> bytes:
        feature = feature_message(spec.dtype, _values(name, spec, v, allow_non_finite))
        return map_entry(key, feature)

    dtype, shape = spec.dtype, spec.shape
    if dtype == "float32" and shape != (-1,):
        n = 1 if shape == () else shape[0]
        prefix = map_entry(key, feature_message("float32", [0.0] * n))[: -4 * n]
        pack = struct.Struct(f"<{n}f").pack
        if n == 1:

            def enc(v: Any) -> bytes:
                try:
                    t = type(v)
                    # decoded TFRecords hold one-value lists; anything odd goes to the slow path whole
                    x = float(v) if t is str else v[0] if t is list and len(v) == 1 else v
                    out = prefix + pack(x)
                    if x - x and (not allow_non_finite or t is str):  # NaN or infinite (x - x is 0 for finite x)
                        return slow(v)  # which names the reason, or tells "inf" from an overflowing "1e400"
                    return out
                except (ValueError, TypeError, struct.error, OverflowError):
                    return slow(v)
        else:

            def enc(v: Any) -> bytes:
                try:
                    if type(v) is list:
                        out = prefix + pack(*v)
                        if allow_non_finite or all(map(math.isfinite, v)):
                            return out
                except (TypeError, struct.error, OverflowError):
                    pass
                return slow(v)
        return enc
    if dtype == "int64" and shape == ():
        # prefixes[L]: entry bytes before a value varint of L bytes
        prefixes = [b""] + [int_prefix(kv, L) for L in range(1, 11)]
        table = VARINTS

        def enc(v: Any) -> bytes:
            try:
                t = type(v)
                x = int(v) if t is str else v[0] if t is list and len(v) == 1 else v
                vb = table[x] if 0 <= x < 16384 else int64_varint(x)
                return prefixes[len(vb)] + vb
            except (ValueError, TypeError, IndexError, OverflowError):
                return slow(v)
        return enc
    if dtype == "string" and shape == ():
        kv_len = len(kv)

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
                    ok = (shape == (-1,) or len(v) == shape[0]) and (allow_non_finite or all(map(math.isfinite, v)))
                    feature = feature_message(dtype, v) if ok else None
                elif dtype == "int64" and (shape == (-1,) or len(v) == shape[0]):
                    feature = feature_message(dtype, v)
                else:
                    feature = None
                if feature is not None:
                    return map_entry(key, feature)
            except (TypeError, struct.error, OverflowError):
                pass
        return slow(v)
    return enc


def example_encoder(schema: Schema, *, extra_fields: str = "reject", allow_non_finite: bool = False,
                    on_missing: str = "reject", required: tuple[str, ...] = (),
                    missing: dict[str, int] | None = None) -> Callable[[Mapping[str, Any]], bytes]:
    """A function row -> serialized tf.train.Example; raises ``RecordError`` for a row that does not fit.

    A float32 value that is NaN or infinite is a ``non_finite`` error unless ``allow_non_finite``
    (a text number too large for a double, ``1e400``, is ``out_of_range`` like ``1e39``).

    ``extra_fields``: ``"reject"`` makes a key outside the schema an ``unknown_field`` error;
    ``"ignore"`` drops such keys.

    ``on_missing``: ``"omit"`` leaves a feature whose value is ``None`` or absent (or, for a scalar
    number, a blank string: a CSV field of spaces) out of the Example (counted in ``missing``, by
    name, for rows that encode), except for ``required`` names and any-length lists (an empty list,
    as before); ``"reject"`` makes it a ``missing_value`` error.
    """
    if on_missing not in ON_MISSING:
        raise ValueError(f"on_missing={on_missing!r}: expected one of {', '.join(ON_MISSING)}")
    if extra_fields not in EXTRA_FIELDS:
        raise ValueError(f"extra_fields={extra_fields!r}: expected one of {', '.join(EXTRA_FIELDS)}")
    if not schema:
        raise ValueError("the schema has no features: an Example needs at least one")
    for name, spec in schema.items():
        if not isinstance(name, str) or not name or not isinstance(spec, FeatureSpec):
            raise ValueError(f"schema entry {name!r}: {spec!r} is not valid: expected a non-empty name -> FeatureSpec")
    encoders = tuple((name, _feature_encoder(name, schema[name], allow_non_finite)) for name in sorted(schema))
    names = frozenset(schema)
    reject = extra_fields == "reject"

    def encode(row: Mapping[str, Any]) -> bytes:
        if reject and not names.issuperset(row):
            extra = sorted(k for k in row if k not in names)
            raise RecordError(
                "unknown_field",
                f"field(s) {', '.join(map(repr, extra[:5]))} are not in the schema ({', '.join(sorted(names)[:8])}"
                f"{', ...' if len(names) > 8 else ''}): add them to --schema, or drop them",
            )
        get = row.get
        if not omit:
            body = b"".join([enc(get(name)) for name, enc in encoders])
            return b"\x0a" + varint(len(body)) + body
        parts, absent = [], []
        for name, enc in encoders:
            v = get(name)
            if type(v) is str and name in numeric and not v.strip():
                v = None  # a blank text value where a number goes: missing, as an empty CSV field
            if v is None and name in optional:
                absent.append(name)
                continue
            if v is None and name in must:
                raise RecordError("missing_value", f"field {name!r} is missing and --required names it")
            parts.append(enc(v))
        if missing is not None:
            for name in absent:
                missing[name] = missing.get(name, 0) + 1
        body = b"".join(parts)
        return b"\x0a" + varint(len(body)) + body

    omit = on_missing == "omit"
    must = frozenset(required)
    optional = frozenset(n for n, spec in schema.items() if spec.shape != (-1,)) - must
    numeric = frozenset(n for n, spec in schema.items() if spec.shape == () and spec.dtype != "string")
    return scalar_row_encoder(schema, encode, names=names, reject=reject, finite=not allow_non_finite) or encode
