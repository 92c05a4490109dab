"""TFRecord framing in pure Python (no TensorFlow): masked CRC-32C, writing and reading records.

A TFRecord is ``uint64 length | masked crc32c(length) | data | masked crc32c(data)``, little-endian.
``read_records`` checks both CRCs and stops at the first broken record with a ``CorruptRecordError``
that says where and why. ``scan_records`` is the reader of input files: it reports each broken
record or stretch as a value and reads on, so damage costs the records it touches and no more.
"""
from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Iterator
from typing import IO, TYPE_CHECKING, NamedTuple

import google_crc32c

if TYPE_CHECKING:
    import numpy as np

__all__ = ["CorruptRecordError", "FramedBatch", "data_crc_error", "frame", "frame_all", "length_crc_error", "mask",
           "masked_crc", "next_record", "read_records", "record_at", "scan_records", "truncated_error"]


class FramedBatch(NamedTuple):
    """Framed TFRecords back to back (``blob``) and the end offset of each (``ends``, uint64)."""

    blob: bytes | bytearray | memoryview
    ends: np.ndarray


class CorruptRecordError(ValueError):
    """A TFRecord stream whose framing is broken at record ``index`` (0-based), ``offset`` bytes in.

    ``reason`` is ``tfrecord_length_crc``, ``tfrecord_data_crc`` or ``tfrecord_truncated``; ``raw``
    holds the bytes read for that record.
    """

    def __init__(self, index: int, offset: int, reason: str, detail: str, raw: bytes = b"") -> None:
        super().__init__(f"{reason}: {detail}")
        self.index = index
        self.offset = offset
        self.reason = reason
        self.detail = detail
        self.raw = raw

    def __reduce__(self):
        return (type(self), (self.index, self.offset, self.reason, self.detail, self.raw))


_U64_LE = struct.Struct("<Q")
_U32_LE = struct.Struct("<I")
_MAX_READ = 1 << 24
_SCAN_BLOCK = 1 << 20
_ZERO_HEADER = bytes(12)


def mask(crc):
    """TFRecord's masking of a CRC-32C value (an int, or element-wise on a uint64 array)."""
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def masked_crc(data: bytes) -> int:
    """The TFRecord masked CRC-32C of ``data``."""
    return mask(google_crc32c.value(data))


def frame(record: bytes) -> bytes:
    """One TFRecord: uint64 length, masked crc of the length, the data, masked crc of the data."""
    length = _U64_LE.pack(len(record))
    return b"".join((length, _U32_LE.pack(masked_crc(length)), record, _U32_LE.pack(masked_crc(record))))


def frame_all(records: Iterable[bytes]) -> bytes:
    """The TFRecord file bytes of ``records``."""
    return b"".join(map(frame, records))


def _read_exact(read: Callable[[int], bytes], n: int) -> bytes:
    """Up to ``n`` bytes (fewer only at the end of the stream), read in bounded pieces."""
    data = read(min(n, _MAX_READ))
    if len(data) == n or not data:
        return data
    parts = [data]
    got = len(data)
    while got < n:
        chunk = read(min(n - got, _MAX_READ))
        if not chunk:
            break
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)


def read_records(stream: IO[bytes], *, check_crc: bool = True) -> Iterator[bytes]:
    """The records of a TFRecord stream; raises ``CorruptRecordError`` at the first broken one."""
    for item in _frames(stream, check_crc=check_crc, recover=False):
        if isinstance(item, CorruptRecordError):
            raise item
        yield item


def scan_records(stream: IO[bytes]) -> Iterator[bytes | CorruptRecordError]:
    """Every record of a TFRecord stream, and a ``CorruptRecordError`` value for each broken stretch.

    Reading goes on past damage, so one bad byte costs one record, not the rest of the file. A bad
    data CRC skips that record (its length passed its own CRC, so the next record starts where it
    says). A bad length CRC leaves the framing unknown: the next record is the first offset whose
    header passes its CRC (length under 4 GiB) and whose data passes its own, and the bytes before
    it are one error. A stream that ends inside a record ends with one error. ``stream`` must be
    seekable (local and fsspec files and ``gzip.GzipFile`` are).
    """
    return _frames(stream, check_crc=True, recover=True)


def record_at(index: int | None, offset: int) -> str:
    """How a detail names a record: its number where known, else only its byte offset."""
    return f"record {index + 1} at byte {offset}" if index is not None else f"the record at byte {offset}"


def truncated_error(index: int | None, offset: int, raw: bytes) -> CorruptRecordError:
    """The stream ends inside the record at ``offset``, of which ``raw`` was read."""
    if len(raw) < 12:
        detail = f"{record_at(index, offset)}: the file ends inside its 12-byte header"
    else:
        detail = f"{record_at(index, offset)}: the file ends inside a record of {_U64_LE.unpack_from(raw)[0]} bytes"
    return CorruptRecordError(index or 0, offset, "tfrecord_truncated", detail, raw)


def length_crc_error(index: int | None, offset: int, header: bytes, found: int | None, *,
                     recover: bool = True) -> CorruptRecordError:
    """The length field at ``offset`` fails its CRC; reading resumes at ``found`` (None: nowhere)."""
    detail = (f"{record_at(index, offset)}: the length field fails its CRC (the file is corrupt or not a TFRecord "
              "file)")
    if recover:
        detail += ("; no sound record follows, so the rest of the file is unread" if found is None else
                   f"; bytes {offset} to {found} skipped, reading resumes at byte {found}")
    return CorruptRecordError(index or 0, offset, "tfrecord_length_crc", detail, header)


def data_crc_error(index: int | None, offset: int, data: bytes) -> CorruptRecordError:
    """The data of the record at ``offset`` fails its CRC (its length passed, so framing goes on)."""
    return CorruptRecordError(index or 0, offset, "tfrecord_data_crc",
                              f"{record_at(index, offset)}: its {len(data)} data bytes fail their CRC (the file is "
                              "corrupt)", data)


def _frames(stream: IO[bytes], *, check_crc: bool, recover: bool) -> Iterator[bytes | CorruptRecordError]:
    read = stream.read
    index = offset = 0
    while True:
        header = _read_exact(read, 12)
        if not header:
            return
        if len(header) < 12:
            yield truncated_error(index, offset, header)
            return
        (length,) = _U64_LE.unpack_from(header)
        if check_crc and masked_crc(header[:8]) != _U32_LE.unpack_from(header, 8)[0]:
            if not recover:
                yield length_crc_error(index, offset, header, None, recover=False)
                return
            found = next_record(stream, offset + 1, header[1:])
            yield length_crc_error(index, offset, header, found)
            if found is None:
                return
            stream.seek(found)
            index, offset = index + 1, found
            continue
        data = _read_exact(read, length)
        footer = _read_exact(read, 4) if len(data) == length else b""
        if len(footer) < 4:
            yield truncated_error(index, offset, header + data + footer)
            return
        if check_crc and masked_crc(data) != _U32_LE.unpack(footer)[0]:
            yield data_crc_error(index, offset, data)
            if not recover:
                return
        else:
            yield data
        index += 1
        offset += length + 16


def next_record(stream: IO[bytes], start: int, ahead: bytes) -> int | None:
    """The first offset at or after ``start`` where a whole record checks (both CRCs), or None.

    ``ahead`` holds the bytes from ``start`` already read. The scan only reads forward (a backward
    seek rewinds a gzip stream) except to check a candidate, which needs its header CRC to match by
    chance to be a false one. Candidates are found with C-speed ``find``: a length under 4 GiB has
    four zero high bytes.
    """
    base, buf = start, ahead
    while True:
        chunk = _read_exact(stream.read, _SCAN_BLOCK)
        buf += chunk
        j = 4
        while (j := buf.find(b"\0\0\0\0", j)) >= 0 and j + 8 <= len(buf):
            c = j - 4
            head = buf[c:c + 12]
            if head == _ZERO_HEADER:  # never a header (its CRC would not be 0): jump over the zero run
                j = max(j + 1, len(buf) - len(buf[c:].lstrip(b"\0")) - 7)
                continue
            if masked_crc(head[:8]) == _U32_LE.unpack_from(head, 8)[0]:
                resume = base + len(buf)
                if _data_checks(stream, base + c, head):
                    return base + c
                stream.seek(resume)
            j += 1
        if not chunk:
            return None
        keep = min(len(buf), 11)  # a header may start in the last 11 bytes
        base += len(buf) - keep
        buf = buf[len(buf) - keep:]


def _data_checks(stream: IO[bytes], offset: int, header: bytes) -> bool:
    """Whether the record whose (sound) header is at ``offset`` has data that passes its CRC."""
    (length,) = _U64_LE.unpack_from(header)
    stream.seek(offset + 12)
    crc, left = 0, length
    while left:
        chunk = stream.read(min(left, _MAX_READ))
        if not chunk:
            return False
        crc = google_crc32c.extend(crc, chunk)
        left -= len(chunk)
    footer = stream.read(4)
    return len(footer) == 4 and mask(crc) == _U32_LE.unpack(footer)[0]
