"""TFRecord files of tf.train.Example: byte-range units, read block by block in compiled code.

Units: a gzip file (named ``.gz``, or any TFRecord file that starts with the gzip magic and not
with a sound record header: TensorFlow's ``TFRecordWriter(options="GZIP")`` writes them) and a file
of at most ``unit_bytes`` are one unit; a bigger file is cut every ``unit_bytes``. A cut unit owns
the records whose frames start in ``[start, end)``: its first record is the first offset at or
after ``start`` where a whole frame checks (length CRC and data CRC, the recovery scan of
``shardprep.framing``), and it reads on until the first sound frame at or after ``end`` (so a broken
record that straddles or follows the cut is reported once, by the unit whose chain of frames
reaches it). A record's position is its 1-based record number in a whole file and in the first
unit of a cut one (``first_position`` 1); in the later units of a cut file (``first_position`` 0)
it is its byte offset, since a record number would need the whole file walked. See docs/design.md.

The column-wise reader (``framed_batches``) keeps a record's original frame (pass-through) when its
Example conforms to the schema (``shardprep.native``: every feature once, of its kind and length,
written as protobuf writes it, in any order). Any other record is decoded and handed to the
per-record encoder (``Decoded``), which re-encodes it (fields dropped, ints widened) or names its
error, with the same dead letters as the per-record path. Bad records: ``tfrecord_length_crc`` (the bytes up to
the next record that checks), ``tfrecord_data_crc`` (one record), ``tfrecord_truncated`` (the file
ends inside a record), ``not_an_example``, the schema's reasons, ``record_too_large`` (a frame over ``--max-record-mb``: skipped unread when it
does not fit in a block), ``gzip_truncated``, ``gzip_invalid``.
"""
from __future__ import annotations

import dataclasses
import gzip
import zlib
from collections.abc import Callable, Iterator
from typing import IO, NamedTuple

import numpy as np

from shardprep import fs, native
from shardprep.example import RecordError, decode_example
from shardprep.formats.base import RAW_HEAD_BYTES, Bad, Decoded, Format, InputFile, Record, WorkUnit
from shardprep.formats.reading import open_input
from shardprep.framing import (
    CorruptRecordError,
    FramedBatch,
    data_crc_error,
    length_crc_error,
    masked_crc,
    next_record,
    record_at,
    truncated_error,
)
from shardprep.schema import Schema

__all__ = ["TFRecordFormat"]

BLOCK = 4 << 20  # bytes read and walked at once
GZIP_MAGIC = b"\x1f\x8b"
TOO_LARGE = 255  # a status of our own beside ``native.scan``'s: a sound frame over ``--max-record-mb``


class TFRecordFormat(Format):
    """TFRecord (``.tfrecord``, ``.tfrecords``, ``.tfr``): rows are feature -> list of int/float/bytes."""

    name = "tfrecord"
    extensions = (".tfrecord", ".tfrecords", ".tfr")

    def plan(self, file: InputFile, unit_bytes: int) -> list[WorkUnit]:
        if not file.gzip and _gzip_inside(file):
            file = dataclasses.replace(file, gzip=True)
        if file.gzip or file.size <= unit_bytes:
            return [WorkUnit(file, 0, 0, file.size, 1)]
        starts = range(0, file.size, unit_bytes)
        return [WorkUnit(file, i, a, min(a + unit_bytes, file.size), 0 if a else 1) for i, a in enumerate(starts)]

    def read(self, unit: WorkUnit) -> Iterator[Record]:
        return read_tfrecord(unit)

    def column_wise(self, unit: WorkUnit, schema: Schema, extra_fields: str) -> bool:
        return True

    def framed_batches(self, unit: WorkUnit, schema: Schema, extra_fields: str) -> Iterator[FramedBatch | Bad | Decoded]:
        return tfrecord_batches(unit, schema)


def _gzip_inside(file: InputFile) -> bool:
    """Whether the file starts with the gzip magic rather than a TFRecord header whose CRC checks."""
    with fs.open_file(file.url, "rb") as f:
        head = f.read(12)
    return head[:2] == GZIP_MAGIC and not (len(head) == 12 and masked_crc(head[:8]) == int.from_bytes(head[8:], "little"))


class _Frames(NamedTuple):
    """Whole frames of ``buf``: their offsets in it, ``native.scan`` status, the first one's number."""

    buf: bytes
    base: int  # file (or decompressed stream) offset of buf[0]
    offsets: np.ndarray  # int64
    status: np.ndarray  # uint8
    stop: int  # offset in buf just after the last frame
    index: int  # 0-based number of the first frame in the file (its items so far), for whole-file units


def _walk(unit: WorkUnit, spec: tuple) -> Iterator[_Frames | CorruptRecordError]:
    """The unit's frames, block by block, and a ``CorruptRecordError`` for each broken stretch."""
    end = None if unit.file.gzip else unit.end
    index = 0

    def numbered(i: int) -> int | None:
        return i if unit.first_position else None

    with open_input(unit.file, unit.start) as stream:
        base, buf, eof = unit.start, b"", False
        read = stream.read1 if isinstance(stream, gzip.GzipFile) else stream.read  # read1: keep what precedes a break
        broken: Exception | None = None  # a break in a gzip stream, raised once the data before it is read
        try:
            if unit.start > 0:
                found = next_record(stream, unit.start, b"")
                if found is None or found >= unit.end:
                    return
                stream.seek(found)
                base = found
            while True:
                if not eof and broken is None:
                    buf, eof, broken = _gather(read, buf)
                stop, why, offs, st = native.scan(buf, 0, spec)
                offsets, status = np.frombuffer(offs, np.int64), np.frombuffer(st, np.uint8)
                status = _mark_too_large(offsets, status, stop, unit.max_record_bytes)
                if end is not None and len(offsets) and base + int(offsets[-1]) >= end:
                    past = np.flatnonzero((offsets >= end - base) & (status != native.CRC_BAD))
                    if len(past):  # the first sound frame at or after the end: the next unit's
                        k = int(past[0])
                        if k:
                            yield _Frames(buf, base, offsets[:k], status[:k], int(offsets[k]), index)
                        return
                if len(offsets):
                    yield _Frames(buf, base, offsets, status, stop, index)
                    index += len(offsets)
                if why == 1:  # the length CRC fails at buf[stop]: resume at the next whole frame that checks
                    at = base + stop
                    found = next_record(stream, at + 1, buf[stop + 1:])
                    yield length_crc_error(numbered(index), at, buf[stop:stop + 12], found)
                    index += 1
                    if found is None or (end is not None and found >= end):
                        return
                    stream.seek(found)
                    base, buf, eof = found, b"", False
                    continue
                if broken is not None:
                    raise broken
                if eof:
                    if stop < len(buf):
                        yield truncated_error(numbered(index), base + stop, buf[stop:])
                    return
                base, buf = base + stop, buf[stop:]
                length = _declared_length(buf)
                if length is not None and length > unit.max_record_bytes:  # never buffered: skipped
                    if end is not None and base >= end:
                        return  # the next unit's record
                    yield CorruptRecordError(index, base, "record_too_large", _too_large_detail(
                        numbered(index), base, length, unit.max_record_bytes), buf[12:12 + RAW_HEAD_BYTES])
                    index += 1
                    if not _skip(stream, read, 16 + length - len(buf)):
                        return  # the file ends inside it: nothing more to read
                    base, buf = base + 16 + length, b""
        except EOFError as e:
            yield CorruptRecordError(index, base, "gzip_truncated", f"the gzip data ends early ({e})")
        except (gzip.BadGzipFile, zlib.error) as e:
            yield CorruptRecordError(index, base, "gzip_invalid", f"the gzip data is corrupt ({e})")


def _declared_length(buf: bytes) -> int | None:
    """The data length the frame at the start of ``buf`` declares, if its header is whole and checks."""
    if len(buf) < 12 or masked_crc(buf[:8]) != int.from_bytes(buf[8:12], "little"):
        return None
    return int.from_bytes(buf[:8], "little")


def _mark_too_large(offsets: np.ndarray, status: np.ndarray, stop: int, limit: int) -> np.ndarray:
    """``status`` with the sound frames whose data is over ``limit`` bytes marked ``TOO_LARGE``."""
    sizes = np.diff(offsets, append=np.int64(stop)) - 16
    over = (sizes > limit) & (status != native.CRC_BAD)
    return np.where(over, np.uint8(TOO_LARGE), status) if over.any() else status


def _too_large_detail(index: int | None, offset: int, length: int, limit: int) -> str:
    return (f"{record_at(index, offset)} holds {length:,} bytes, more than the record limit of {limit:,} "
            f"(--max-record-mb); its first {RAW_HEAD_BYTES} bytes are kept here")


def _skip(stream: IO[bytes], read: Callable[[int], bytes], count: int) -> bool:
    """Moves ``count`` bytes on without holding them (seek, or read and drop in blocks); False at the end."""
    if not isinstance(stream, gzip.GzipFile) and stream.seekable():
        here, size = stream.tell(), stream.seek(0, 2)
        stream.seek(min(here + count, size))
        return here + count <= size
    while count > 0:
        chunk = read(min(count, 1 << 20))
        if not chunk:
            return False
        count -= len(chunk)
    return True


def _gather(read: Callable[[int], bytes], buf: bytes) -> tuple[bytes, bool, Exception | None]:
    """``buf`` and a block more, and at least the whole frame whose (sound) header ``buf`` starts with;
    less at the end of the stream (then True) or at a break in a gzip stream (then the error)."""
    need = len(buf) + BLOCK + (16 + int.from_bytes(buf[:8], "little") if len(buf) >= 12 else 0)
    parts, have = [buf] if buf else [], len(buf)  # one part alone is not copied by the join
    try:
        while have < need:
            chunk = read(min(need - have, 1 << 26))
            if not chunk:
                return b"".join(parts), True, None
            parts.append(chunk)
            have += len(chunk)
    except (EOFError, gzip.BadGzipFile, zlib.error) as e:
        return b"".join(parts), False, e
    return b"".join(parts), False, None


def _bad(unit: WorkUnit, error: CorruptRecordError) -> Bad:
    if error.reason.startswith("gzip_"):  # no offset known inside the gzip stream: name the record number
        position = unit.first_position + error.index
        return Bad(position, error.reason, f"record {position}: {error.detail}", b"")
    position = error.offset if unit.first_position == 0 else unit.first_position + error.index
    return Bad(position, error.reason, error.detail, error.raw)


def _records(unit: WorkUnit, block: _Frames) -> Iterator[tuple[int, int, int, int]]:
    """(position, status, data start, data stop) in ``block.buf`` of each frame of a block."""
    offsets = block.offsets.tolist()
    ends = [*offsets[1:], block.stop]
    first = unit.first_position + block.index
    for i, (a, b) in enumerate(zip(offsets, ends)):
        position = block.base + a if unit.first_position == 0 else first + i
        yield position, int(block.status[i]), a + 12, b - 4


def _decoded(unit: WorkUnit, position: int, data: bytes) -> dict | Bad:
    try:
        return decode_example(data)
    except RecordError as e:
        name = f"record {position}" if unit.first_position else f"the record at byte {position}"
        return Bad(position, e.reason, f"{name}: {e.detail}", data)


def _oversized(unit: WorkUnit, position: int, block: _Frames, a: int, b: int) -> Bad:
    number = None if unit.first_position == 0 else position - unit.first_position
    detail = _too_large_detail(number, block.base + a - 12, b - a, unit.max_record_bytes)
    return Bad(position, "record_too_large", detail, block.buf[a:a + RAW_HEAD_BYTES])


def _crc_bad(unit: WorkUnit, position: int, block: _Frames, a: int, b: int) -> Bad:
    number = None if unit.first_position == 0 else position - unit.first_position
    return _bad(unit, data_crc_error(number, block.base + a - 12, block.buf[a:b]))


def read_tfrecord(unit: WorkUnit) -> Iterator[Record]:
    """The per-record reader: (position, row or Bad) for every record of the unit."""
    for item in _walk(unit, ()):
        if isinstance(item, CorruptRecordError):
            bad = _bad(unit, item)
            yield bad.position, bad
            continue
        for position, status, a, b in _records(unit, item):
            if status == native.CRC_BAD:
                yield position, _crc_bad(unit, position, item, a, b)
            elif status == TOO_LARGE:
                yield position, _oversized(unit, position, item, a, b)
            else:
                yield position, _decoded(unit, position, item.buf[a:b])


def tfrecord_batches(unit: WorkUnit, schema: Schema) -> Iterator[FramedBatch | Bad | Decoded]:
    """The column-wise reader: conforming records keep their frames, in runs; the rest go to the encoder."""
    spec = native.example_spec(schema)
    for item in _walk(unit, spec):
        if isinstance(item, CorruptRecordError):
            yield _bad(unit, item)
            continue
        buf, offsets, status = item.buf, item.offsets, item.status
        view = memoryview(buf)  # a run of frames is a view of the block read: no copy
        stops = np.append(offsets[1:], item.stop)
        odd = np.flatnonzero(status != native.CONFORMS).tolist()
        i = 0
        for j in [*odd, len(offsets)]:
            if j > i:  # frames i .. j-1 conform: one slice of the input, as it is
                a = int(offsets[i])
                yield FramedBatch(view[a:int(stops[j - 1])], (stops[i:j] - a).astype(np.uint64))
            if j == len(offsets):
                break
            a, b = int(offsets[j]), int(stops[j])
            position = item.base + a if unit.first_position == 0 else unit.first_position + item.index + j
            if status[j] == native.CRC_BAD:
                yield _crc_bad(unit, position, item, a + 12, b - 4)
            elif status[j] == TOO_LARGE:
                yield _oversized(unit, position, item, a + 12, b - 4)
            else:
                row = _decoded(unit, position, buf[a + 12:b - 4])
                yield row if isinstance(row, Bad) else Decoded(position, row)
            i = j + 1
