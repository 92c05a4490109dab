"""The pure-Python twin of the compiled module ``_native`` (``src/*.c``): the same functions, the same
results, used without a compiler.

Slow (per-record Python), but exactly equivalent; the tests each C file names check both on random
inputs. See the C file of a function for what it means (``src/native.h`` lists them).
"""
from __future__ import annotations

import hashlib
import os
import struct
from collections.abc import Sequence

import google_crc32c
import numpy as np

__all__ = ["blake2b8", "conforms", "crc32c", "decode_example", "example_columns", "feistel", "fill_data_crcs", "gather", "hash_values", "interleave",
           "jsonl_columns", "line_counts", "minhash", "pread_records", "scan", "scatter", "split_indices", "sum_numbers"]

Spec = Sequence[tuple[bytes, int, int]]
_U64 = struct.Struct("<Q")
_U32 = struct.Struct("<I")


def crc32c(data: bytes | memoryview) -> int:
    return google_crc32c.value(bytes(data))


def line_counts(data: bytes | bytearray, n: int, quotes: bool) -> tuple[int, int]:
    if not 0 <= n <= len(data):
        raise ValueError("n: outside the buffer")
    return (data.count(b'"', 0, n) if quotes else 0), data.count(b"\n", 0, n)


def _masked(crc: int) -> int:
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _ends(ends: bytes | memoryview, size: int, shortest: int) -> np.ndarray:
    e = memoryview(ends).cast("B")
    if len(e) % 8:
        raise ValueError("ends: not a uint64 buffer")
    out = np.frombuffer(e, "<u8").astype(np.int64)
    if len(out) and ((np.diff(out, prepend=0) < shortest).any() or out[-1] > size):
        raise ValueError("ends: records shorter than their frame, not rising, or outside the buffer")
    return out


def gather(blob: bytes | memoryview, ends: bytes | memoryview, order: bytes | memoryview) -> bytes:
    view = memoryview(blob).cast("B")
    e = _ends(ends, view.nbytes, 0).tolist()
    o = memoryview(order).cast("B")
    if len(o) % 8:
        raise ValueError("gather: order is not an int64 buffer")
    index = np.frombuffer(o, "<i8")
    if len(index) and (index.min() < 0 or index.max() >= len(e)):
        raise ValueError("gather: an index outside the ends")
    return b"".join([view[e[i - 1] if i else 0:e[i]] for i in index.tolist()])


def scatter(blob: bytes | memoryview, starts: bytes | memoryview, lengths: bytes | memoryview,
            dests: bytes | memoryview, out: bytearray | memoryview) -> None:
    view, target = memoryview(blob).cast("B"), memoryview(out).cast("B")
    a, z, d = (memoryview(x).cast("B") for x in (starts, lengths, dests))
    if len(a) % 8 or len(z) != len(a) or len(d) != len(a):
        raise ValueError("scatter: starts, lengths and dests differ in length, or a piece lies outside blob or out")
    a, z, d = (np.frombuffer(x, "<i8") for x in (a, z, d))
    if len(a) and ((a < 0).any() or (z < 0).any() or (d < 0).any() or (a + z > len(view)).any()
                   or (d + z > len(target)).any()):
        raise ValueError("scatter: starts, lengths and dests differ in length, or a piece lies outside blob or out")
    for x, y, at in zip(a.tolist(), z.tolist(), d.tolist()):
        target[at:at + y] = view[x:x + y]


def interleave(columns: Sequence[tuple[bytes | memoryview, bytes | memoryview, bytes | memoryview]]) -> bytearray:
    cols = []
    for blob, starts, lengths in columns:
        view, a, z = memoryview(blob).cast("B"), memoryview(starts).cast("B"), memoryview(lengths).cast("B")
        if len(a) % 8 or len(z) != len(a) or (cols and len(a) // 8 != len(cols[0][1])):
            raise ValueError("interleave: starts and lengths of every column must be n int64 values")
        a, z = np.frombuffer(a, "<i8"), np.frombuffer(z, "<i8")
        if len(a) and ((a < 0).any() or (z < 0).any() or (a + z > len(view)).any()):
            raise ValueError("interleave: a piece lies outside its blob")
        cols.append((view.tobytes(), a.tolist(), (a + z).tolist()))  # bytes slice faster than memoryviews
    parts: list[bytes | None] = [None] * (len(cols) * (len(cols[0][1]) if cols else 0))
    for c, (view, a, z) in enumerate(cols):
        parts[c::len(cols)] = [view[x:y] for x, y in zip(a, z)]
    return bytearray().join(parts)


def pread_records(fd: int, starts: bytes | memoryview, lengths: bytes | memoryview) -> bytearray:
    a, z = memoryview(starts).cast("B"), memoryview(lengths).cast("B")
    if len(a) % 8 or len(z) != len(a):
        raise ValueError("pread_records: starts and lengths must be n int64 values each")
    a, z = np.frombuffer(a, "<i8"), np.frombuffer(z, "<i8")
    if len(a) and ((a < 0).any() or (z < 0).any() or (a > (2**63 - 1) - z).any() or sum(z.tolist()) > 2**63 - 1):
        raise ValueError("pread_records: a negative or too large start or length")
    parts = []
    for off, length in zip(a.tolist(), z.tolist()):
        data = os.pread(fd, length, off) if length else b""
        while len(data) < length:
            more = os.pread(fd, length - len(data), off + len(data))
            if not more:
                raise ValueError("pread_records: a range lies past the end of the file")
            data += more
        parts.append(data)
    return bytearray().join(parts)


def fill_data_crcs(buf: bytearray | memoryview, ends: bytes | memoryview) -> None:
    view = memoryview(buf).cast("B")
    e = _ends(ends, view.nbytes, 16)
    crc, data = google_crc32c.value, bytes(view)
    masked = [_masked(crc(data[a + 12:b - 4])) for a, b in zip((e - np.diff(e, prepend=0)).tolist(), e.tolist())]
    out = np.frombuffer(view, np.uint8)
    out[(e - 4)[:, None] + np.arange(4)] = np.array(masked, "<u4").view(np.uint8).reshape(len(e), 4)


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


def jsonl_columns(block: bytes | memoryview, names: tuple[bytes, ...], kinds: bytes, ignore_extra: bool,
                  max_line: int, bom: bool) -> None:
    """Declines every block (the one twin that does not compute): a JSON reader in Python would be
    the per-line path itself, which reads every declined block (``formats.jsonl``) to the same bytes."""
    return None


_M1 = np.uint64(0xFF51AFD7ED558CCD)
_M2 = np.uint64(0xC4CEB9FE1A85EC53)


def _fmix(x: np.ndarray) -> np.ndarray:
    """MurmurHash3's 64-bit finaliser on uint64 arrays."""
    x = x ^ (x >> np.uint64(33))
    x = x * _M1
    x = x ^ (x >> np.uint64(33))
    x = x * _M2
    return x ^ (x >> np.uint64(33))


def feistel(values: np.ndarray, keys: bytes, half: int, n: int, inverse: bool) -> None:
    v = values if isinstance(values, np.ndarray) else np.frombuffer(values, np.uint64)
    if len(keys) % 8 or not 1 <= half <= 32 or (n and 2 * half < 64 and n > 1 << (2 * half)) or (v.size and int(v.max()) >= n):
        raise ValueError("feistel: a value outside [0, n), or a malformed key or width")
    ks = np.frombuffer(keys, "<u8").tolist()
    shift, mask = np.uint64(half), np.uint64((1 << half) - 1)

    def step(x: np.ndarray) -> np.ndarray:
        left, right = x >> shift, x & mask
        for key in (reversed(ks) if inverse else ks):
            k = np.uint64(key)
            if inverse:
                left, right = right ^ (_fmix(left ^ k) & mask), left
            else:
                left, right = right, left ^ (_fmix(right ^ k) & mask)
        return (left << shift) | right

    y = step(v)
    out = y >= np.uint64(n)
    while out.any():  # cycle walking
        y[out] = step(y[out])
        out = y >= np.uint64(n)
    v[:] = y


def decode_example(data: bytes | memoryview) -> None:
    """Declines every record, like ``jsonl_columns``: ``shardprep.example.decoder`` is the Python
    reader that the compiled one matches, and it reads every declined record itself."""
    return None


def example_columns(blob: bytes | memoryview, ends: bytes | memoryview, names: tuple[bytes, ...],
                    kinds: bytes, bounds: bytes | memoryview | None = None, inv_log: float = 0.0,
                    low: int = 0) -> None:
    """Declines every batch, like ``decode_example``: ``shardprep.stats.feature_stats.batch_stats`` decodes the
    records in Python instead (the same statistics: a property test)."""
    return None


def sum_numbers(values: bytes | memoryview, kind: int, bounds: bytes | memoryview, inv_log: float,
                low: int) -> None:
    """Declines every column, like ``example_columns``: ``shardprep.stats.columns`` sums it with numpy."""
    return None


def minhash(data: bytes, offsets: bytes | memoryview, a: bytes | memoryview, b: bytes | memoryview, shingle: int,
            seed: int) -> None:
    """Declines every batch, like ``sum_numbers``: ``text.minhash`` computes it with numpy."""
    return None


def hash_values(data: bytes | memoryview, offsets: bytes | memoryview, seed: int) -> bytes:
    o = memoryview(offsets).cast("B").cast("q")
    view = memoryview(data)
    if len(o) < 1 or any(o[i] < 0 or o[i + 1] < o[i] or o[i + 1] > len(view) for i in range(len(o) - 1)):
        raise ValueError("hash_values: offsets not rising within the data")
    return b"".join(_U64.pack(_value_hash(bytes(view[o[i]:o[i + 1]]), seed)) for i in range(len(o) - 1))


def _fmix64(x: int) -> int:
    x ^= x >> 33
    x = (x * 0xFF51AFD7ED558CCD) & 0xFFFFFFFFFFFFFFFF
    x ^= x >> 33
    x = (x * 0xC4CEB9FE1A85EC53) & 0xFFFFFFFFFFFFFFFF
    return x ^ (x >> 33)


_P1, _P2, _MASK = 0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F, 0xFFFFFFFFFFFFFFFF


def _xxh_round(acc: int, word: int) -> int:
    acc = (acc + word * _P2) & _MASK
    return (((acc << 31) | (acc >> 33)) & _MASK) * _P1 & _MASK


def _value_hash(value: bytes, seed: int) -> int:
    h = _fmix64((seed ^ 0x9E3779B97F4A7C15 ^ len(value)) & _MASK)
    blocks = len(value) - len(value) % 32
    if blocks:  # four lanes over the 32-byte blocks, folded in one by one
        lanes = [(h + _P1 + _P2) & _MASK, (h + _P2) & _MASK, h, (h - _P1) & _MASK]
        for i in range(0, blocks, 32):
            lanes = [_xxh_round(v, int.from_bytes(value[i + 8 * j:i + 8 * j + 8], "little")) for j, v in enumerate(lanes)]
        for v in lanes:
            h = _fmix64(h ^ v)
    full = len(value) - len(value) % 8
    for i in range(blocks, full, 8):
        h = _fmix64(h ^ int.from_bytes(value[i:i + 8], "little"))
    return _fmix64(h ^ int.from_bytes(value[full:], "little"))
