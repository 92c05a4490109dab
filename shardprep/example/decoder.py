"""tf.train.Example decoding: the reader of TFRecord input and of ``inspect``.

``decode_example`` accepts packed and unpacked lists (any valid encoding TF reads) and refuses
anything else, including fields an Example does not have (a SequenceExample, a foreign proto).
The compiled ``native.decode_example`` reads a record first; where it declines, the Python reader below reads it and words the
error: the two give the same dict for every record the compiled one takes (a property test).
"""
from __future__ import annotations

import struct

from shardprep import native
from shardprep.example.wire import U64, RecordError
from shardprep.schema import INT64_MAX

__all__ = ["decode_example"]


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
    v &= U64 - 1
    return v - U64 if v > INT64_MAX else v


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
    fast = native.decode_example(data)
    return fast if fast is not None else read_example(data)


def read_example(data: bytes) -> dict[str, list]:
    """``decode_example`` in Python alone (the compiled reader's reference)."""
    out: dict[str, list] = {}
    pos, end = 0, len(data)
    while pos < end:
        tag, start, pos = _field(data, pos, end)
        if tag != 0x0A:
            raise _unexpected("Example", tag, start)
        _features(data, start, pos, out)
    return out
