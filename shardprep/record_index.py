"""A shard's record index: where each TFRecord of an uncompressed shard starts, in a compact binary file.

The file beside ``train-00000-of-00064.tfrecord`` is ``train-00000-of-00064.index`` (``naming.index_path``)::

    magic    8 bytes   b"SPINDEX1"
    count    uint64    the shard's records (n)
    offsets  (n + 1) x uint64   record i is bytes [offsets[i], offsets[i + 1]) of the shard; offsets[0] = 0,
                                offsets[n] = the shard's size

all little-endian: 8 bytes a record, 16 + 8 (n + 1) in all. A record's framed length is the
difference of two offsets; its data is that less 16 (the TFRecord header and footer). The manifest
holds the file's size and crc32c (``manifest.IndexInfo``), so a reader trusts an index it checked
against them, and ``check`` finds any offset that cannot describe its shard.

WriteShards writes the index in the same pass as its shard (``encode`` of the record ends it already
holds); ``scan`` builds one from a shard's bytes (``python -m shardprep.index`` for older data sets).
"""
from __future__ import annotations

import struct
from typing import IO

import numpy as np

from shardprep import framing, native

__all__ = ["HEADER", "MAGIC", "IndexFormatError", "check", "crc32c_hex", "dali_text", "decode", "encode", "encode_ends",
           "scan", "scan_bytes"]

MAGIC = b"SPINDEX1"
HEADER = struct.Struct("<8sQ")
_U64 = struct.Struct("<Q")


class IndexFormatError(ValueError):
    """An index file that is not one, or whose offsets cannot describe its shard; the message says
    which. ``offset``: the shard's byte where a scan found a broken header, else 0."""

    def __init__(self, message: str, offset: int = 0) -> None:
        super().__init__(message)
        self.offset = offset


def encode(offsets: np.ndarray) -> bytes:
    """The index file's bytes for ``offsets`` (n + 1 values, the last the shard's size)."""
    offsets = np.ascontiguousarray(offsets, dtype="<u8")
    return HEADER.pack(MAGIC, len(offsets) - 1) + offsets.tobytes()


def encode_ends(ends: np.ndarray) -> bytes:
    """The index file's bytes from where each record ends (``graph.spill.place``'s ``ends``)."""
    offsets = np.empty(len(ends) + 1, "<u8")
    offsets[0] = 0
    offsets[1:] = ends
    return encode(offsets)


def decode(data: bytes | memoryview, *, what: str = "the index") -> np.ndarray:
    """The offsets (n + 1 uint64) of an index file's bytes; ``IndexFormatError`` if it is not one."""
    if len(data) < HEADER.size + 8:
        raise IndexFormatError(f"{what}: {len(data)} bytes, too short to be a record index")
    magic, count = HEADER.unpack_from(data)
    if magic != MAGIC:
        raise IndexFormatError(f"{what}: not a shardprep record index (it starts with {bytes(magic)!r})")
    if len(data) != HEADER.size + 8 * (count + 1):
        raise IndexFormatError(f"{what}: {len(data)} bytes, but a record index of {count} records holds "
                               f"{HEADER.size + 8 * (count + 1)}")
    return np.frombuffer(data, "<u8", offset=HEADER.size)


def check(offsets: np.ndarray, *, num_records: int, num_bytes: int, what: str = "the index") -> None:
    """Raises ``IndexFormatError`` unless ``offsets`` can describe a shard of ``num_records`` records
    and ``num_bytes`` bytes: starts at 0, ends at the size, every record at least its 16 framing bytes."""
    if len(offsets) != num_records + 1:
        raise IndexFormatError(f"{what}: {len(offsets) - 1} records, the manifest says {num_records}")
    if int(offsets[0]) != 0 or int(offsets[-1]) != num_bytes:
        raise IndexFormatError(f"{what}: offsets run from {int(offsets[0])} to {int(offsets[-1])}, the shard is "
                               f"bytes 0 to {num_bytes}")
    if num_records and int(np.diff(offsets).min()) < 16:
        bad = int(np.argmax(np.diff(offsets) < 16))
        raise IndexFormatError(f"{what}: record {bad} at byte {int(offsets[bad])} is shorter than its 16 framing bytes")


def scan(stream: IO[bytes], *, what: str = "the shard") -> np.ndarray:
    """The offsets of every record of an uncompressed TFRecord stream, read from its headers (both
    CRCs of each record checked on the way, as a shard is only indexed whole and sound).

    Raises ``framing.CorruptRecordError`` (its message naming ``what`` and the offset) at the first
    broken record."""
    offsets = [0]
    for record in framing.read_records(stream, check_crc=True):
        offsets.append(offsets[-1] + len(record) + 16)
    return np.array(offsets, "<u8")


def scan_bytes(data: bytes | memoryview | np.ndarray) -> np.ndarray:
    """``scan`` of a shard already in memory, reading only the headers (no CRC: for a shard whose
    whole-file crc32c was just checked)."""
    view = memoryview(data).cast("B")
    offsets, pos, size = [0], 0, len(view)
    while pos < size:
        if pos + 12 > size:
            raise IndexFormatError(f"the shard ends inside the header of the record at byte {pos}", pos)
        (length,) = _U64.unpack_from(view, pos)
        pos += length + 16
        if pos > size:
            raise IndexFormatError(f"the shard ends inside the record of {length} bytes at byte {offsets[-1]}",
                                   offsets[-1])
        offsets.append(pos)
    return np.array(offsets, "<u8")


def dali_text(offsets: np.ndarray) -> bytes:
    """DALI's ``tfrecord2idx`` index of the same shard: one ``offset length`` line a record, where
    length is the whole framed record (header, data and footer)."""
    starts = offsets[:-1].tolist()
    lengths = np.diff(offsets).tolist()
    return "".join(f"{s} {n}\n" for s, n in zip(starts, lengths)).encode("ascii")


def crc32c_hex(data: bytes) -> str:
    """The crc32c of an index file's bytes as the manifest records it (8 lower-case hex digits)."""
    return f"{native.crc32c(data):08x}"
