"""The pure-Python twin of ``_native.c``: the same functions, the same results, used without a compiler.

Slow (per-record Python), but exactly equivalent; ``tests/test_tfrecord_fast.py`` checks both on
random inputs. See ``_native.c`` for what each function means.
"""
from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence

import google_crc32c

__all__ = ["blake2b8", "conforms", "crc32c", "scan", "split_indices"]

Spec = Sequence[tuple[bytes, int, int]]
_U64 = struct.Struct("<Q")
_U32 = struct.Struct("<I")


def crc32c(data: bytes | memoryview) -> int:
    return google_crc32c.value(bytes(data))


def _masked(crc: int) -> int:
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def blake2b8(data: bytes | memoryview, seed: int) -> int:
    key = seed.to_bytes(8, "little", signed=True)
    return int.from_bytes(hashlib.blake2b(data, digest_size=8, key=key).digest(), "little")


def split_indices(blob: bytes | memoryview, starts: bytes | memoryview, stops: bytes | memoryview, seed: int,
                  bounds: bytes | memoryview) -> bytes:
    view = memoryview(blob)
    a = memoryview(starts).cast("B").cast("q")
    z = memoryview(stops).cast("B").cast("q")
    t = memoryview(bounds).cast("B").cast("Q").tolist()
    if len(a) != len(z) or len(t) > 255:
        raise ValueError("split_indices: starts and stops differ in length, or too many splits")
    out = bytearray(len(a))
    for i, (lo, hi) in enumerate(zip(a, z)):
        if lo < 0 or hi < lo or hi > len(view):
            raise ValueError("split_indices: a record lies outside the blob")
        h, s = blake2b8(view[lo:hi], seed), 0
        while s < len(t) and h >= t[s]:
            s += 1
        out[i] = s
    return bytes(out)


def _varint(b: bytes, pos: int, end: int, maxlen: int) -> tuple[int, int] | None:
    v = 0
    for i in range(maxlen):
        if pos >= end:
            return None
        c = b[pos]
        pos += 1
        v |= (c & 0x7F) << (7 * i)
        if c < 0x80:
            if (i > 0 and c == 0) or (i == 9 and c > 1):
                return None
            return v, pos
    return None


def _field(b: bytes, pos: int, end: int, tag: int) -> tuple[int, int] | None:
    """(start, stop) of the length-delimited field with ``tag`` at ``pos``, or None."""
    if pos >= end or b[pos] != tag:
        return None
    got = _varint(b, pos + 1, end, 5)
    if got is None or got[0] > end - got[1]:
        return None
    return got[1], got[1] + got[0]


def conforms(data: bytes | memoryview, spec: Spec) -> bool:
    b = bytes(data)
    body = _field(b, 0, len(b), 0x0A)
    if body is None or body[1] != len(b):
        return False
    pos, body_end = body
    where = {name: i for i, (name, _, _) in enumerate(spec)}
    seen: set[int] = set()
    while pos < body_end:
        entry = _field(b, pos, body_end, 0x0A)
        if entry is None:
            return False
        pos, entry_end = entry
        key = _field(b, pos, entry_end, 0x0A)
        i = where.get(b[key[0]:key[1]]) if key is not None else None
        if i is None or i in seen:
            return False
        seen.add(i)
        _, kind, want = spec[i]
        feat = _field(b, key[1], entry_end, 0x12)
        if feat is None or feat[1] != entry_end:
            return False
        lst = _field(b, feat[0], entry_end, 0x0A + 8 * kind)
        if lst is None or lst[1] != entry_end:
            return False
        pos, count = lst[0], 0
        if kind == 0:
            while pos < entry_end:
                value = _field(b, pos, entry_end, 0x0A)
                if value is None:
                    return False
                pos, count = value[1], count + 1
        elif pos < entry_end:
            packed = _field(b, pos, entry_end, 0x0A)
            if packed is None or packed[1] != entry_end or packed[0] == packed[1]:
                return False
            pos = packed[0]
            if kind == 1:
                if (entry_end - pos) % 4:
                    return False
                for i in range(pos, entry_end, 4):
                    if (_U32.unpack_from(b, i)[0] >> 23) & 0xFF == 0xFF:
                        return False
                    count += 1
            else:
                while pos < entry_end:
                    got = _varint(b, pos, entry_end, 10)
                    if got is None:
                        return False
                    pos, count = got[1], count + 1
        if want >= 0 and count != want:
            return False
        pos = entry_end
    return len(seen) == len(spec)


def scan(buf: bytes | memoryview, pos: int, spec: Spec) -> tuple[int, int, bytes, bytes]:
    b = memoryview(buf)
    end, p = len(b), max(pos, 0)
    offsets, status, why = [], bytearray(), 0
    while p + 12 <= end:
        if _masked(google_crc32c.value(bytes(b[p:p + 8]))) != _U32.unpack_from(b, p + 8)[0]:
            why = 1
            break
        (length,) = _U64.unpack_from(b, p)
        if length > end - p - 12 or end - p - 12 - length < 4:
            break
        data = bytes(b[p + 12:p + 12 + length])
        if _masked(google_crc32c.value(data)) != _U32.unpack_from(b, p + 12 + length)[0]:
            status.append(2)
        else:
            status.append(0 if conforms(data, spec) else 1)
        offsets.append(p)
        p += length + 16
    return p, why, struct.pack(f"<{len(offsets)}q", *offsets), bytes(status)
