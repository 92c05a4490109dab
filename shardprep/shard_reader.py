"""Reading a data set's shards safely: the one reader of ``verify`` and ``inspect``.

A shard is read only through ``members.open_member``: a regular file whose real path stays inside
the data set folder (a symlink to ``/etc/passwd``, ``/dev/zero`` or a FIFO is refused before it is
opened for a read that could block or never end) and at most the size the manifest gives, read in
pieces of at most ``CHUNK`` bytes with the whole-file crc32c computed on the way.
"""
from __future__ import annotations

import contextlib
import gzip
import sys
from collections.abc import Iterator
from typing import IO

import google_crc32c

from shardprep import framing, members

__all__ = ["CHUNK", "ShardReadError", "ShardStream", "check_local", "open_shard", "records"]

CHUNK = 1 << 20


ShardReadError = members.MemberError  # a shard that is not a safe, regular file inside the data set folder


class ShardStream:
    """A read-only stream over a shard: bounded reads, crc32c and byte count of what passed."""

    def __init__(self, raw: IO[bytes], limit: int) -> None:
        self._raw = raw
        self._limit = limit
        self.crc = google_crc32c.Checksum()
        self.num_bytes = 0

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        left = self._limit - self.num_bytes
        n = CHUNK if n is None or n < 0 else n
        data = self._raw.read(max(0, min(n, CHUNK, left)))
        self.crc.update(data)
        self.num_bytes += len(data)
        return data

    def drain(self) -> bool:
        """Reads to the limit (for the crc32c); False if the file holds more bytes than the limit."""
        while self.read(CHUNK):
            pass
        return not self._raw.read(1)

    @property
    def crc32c(self) -> str:
        return self.crc.hexdigest().decode()


def check_local(root: str, path: str, *, field: str = "") -> int:
    """Size of a local shard after the same checks as ``open_shard``, without reading it."""
    return members.resolve_member(root, path, field=field, cap=sys.maxsize).size


@contextlib.contextmanager
def open_shard(root: str, path: str, *, limit: int, field: str = "") -> Iterator[ShardStream]:
    """Opens ``root/path`` (a path from the manifest, named by its ``field``) for reading at most
    ``limit`` bytes, its recorded size (``members.open_member``: a larger file is refused)."""
    with members.open_member(root, path, field=field, size=limit) as raw:
        yield ShardStream(raw, limit)


def records(stream: ShardStream, *, compression: str) -> Iterator[bytes]:
    """The CRC-checked records of a shard stream (``framing.CorruptRecordError`` at the first broken one)."""
    if compression == "gzip":
        with gzip.GzipFile(fileobj=stream, mode="rb") as unzipped:
            yield from framing.read_records(unzipped, check_crc=True)
    else:
        yield from framing.read_records(stream, check_crc=True)
