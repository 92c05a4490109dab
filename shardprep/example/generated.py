"""The generated row encoder: for a schema of scalar features only, one function compiled once per schema.

It inlines the per-feature fast paths and packs each run of float features, prefixes and all, with
one ``struct`` call; it gives the same bytes as the generic encoder, which it calls for any row it
does not take as is.
"""
from __future__ import annotations

import struct
from collections.abc import Callable, Mapping
from typing import Any

from shardprep.example.wire import VARINTS, int64_varint, scalar_entry_prefix, scalar_runs, varint
from shardprep.schema import DTYPES, Schema

__all__ = ["scalar_row_encoder"]

_MAX_MISSES = 1000


def scalar_row_encoder(schema: Schema, generic: Callable[[Mapping[str, Any]], bytes], *, names: frozenset[str],
                        reject: bool, finite: bool = True) -> Callable[[Mapping[str, Any]], bytes] | None:
    """For a schema of scalar features only: one function, generated once, that encodes a row
    with the per-feature fast paths inlined and each run of float features packed, prefixes and
    all, by one ``struct`` call (same bytes as ``generic``). A row it does not take as is (a
    missing value, a list, a bad number, NaN unless not ``finite`` ...) goes to ``generic``, which encodes it or raises the
    precise ``RecordError``; after ``_MAX_MISSES`` such rows in a row (decoded TFRecords, whose
    values are lists) it steps aside for good. None for other schemas."""
    if any(spec.shape != () or spec.dtype not in DTYPES for spec in schema.values()):
        return None
    env: dict[str, Any] = {"T": VARINTS, "int64_varint": int64_varint, "varint": varint}
    lines, parts = [], []
    for i, (dtype, run) in enumerate(scalar_runs(schema)):
        if dtype == "float32":  # a run of floats: one Struct("<{prefix}sf{prefix}sf...").pack
            fmt, args = "<", []
            for k, name in enumerate(run):
                prefix = scalar_entry_prefix(name, "float32", 4)
                env[f"p{i}_{k}"] = prefix
                fmt += f"{len(prefix)}sf"
                lines += [f"v = get({name!r})", f"x{i}_{k} = float(v) if type(v) is str else v"]
                # NaN and infinities go to ``generic`` (x - x is 0 only for a finite x), which
                # rejects them or, allowed, still tells a text "inf" from an overflowing "1e400"
                lines += [f"if x{i}_{k} - x{i}_{k}{'' if finite else ' and type(v) is str'}: raise ValueError"]
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
            kv = b"\x0a" + varint(len(key)) + key + b"\x12"
            env[f"kv{i}"] = kv
            lines += [f"v = get({run[0]!r})", "t = type(v)",
                      f"d{i} = v.encode() if t is str else v if t is bytes else None",
                      f"vm{i} = varint(len(d{i}))", f"bl{i} = len(vm{i}) + len(d{i}) + 1", f"vbl{i} = varint(bl{i})",
                      f"fl{i} = 1 + len(vbl{i}) + bl{i}", f"vfl{i} = varint(fl{i})"]
            parts += ["b'\\x0a'", f"varint({len(kv)} + len(vfl{i}) + fl{i})", f"kv{i}", f"vfl{i}", "b'\\x0a'",
                      f"vbl{i}", "b'\\x0a'", f"vm{i}", f"d{i}"]
    source = "\n    ".join(["def fast(row):", "get = row.get", *lines, f"body = b''.join(({', '.join(parts)},))",
                             "return b'\\x0a' + varint(len(body)) + body"])
    exec(compile(source, "<shardprep.example.generated: row encoder>", "exec"), env)  # names enter as repr() literals
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
