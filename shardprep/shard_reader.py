"""Reading a data set's shards safely: the one reader of ``verify`` and ``inspect``.

A shard is read only if it is a regular file whose real path stays inside the data set folder (a
symlink to ``/etc/passwd``, ``/dev/zero`` or a FIFO is refused before it is opened for a read that
could block or never end), in pieces of at most ``CHUNK`` bytes, never past the size the manifest
gives, with the whole-file crc32c computed on the way.
"""
from __future__ import annotations

import contextlib
import gzip
import os
import stat
from collections.abc import Iterator
from typing import IO

import google_crc32c

from shardprep import framing, fs, naming

__all__ = ["CHUNK", "ShardReadError", "ShardStream", "open_shard", "records"]

CHUNK = 1 << 20
REMOTE_BLOCK = 64 << 20


class ShardReadError(OSError):
    """A shard that is not a safe, regular file inside the data set folder; the message names it."""


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


def _open_local(root: str, path: str) -> IO[bytes]:
    url = naming.join(root, path)
    real_root, real = os.path.realpath(root), os.path.realpath(url)
    if os.path.commonpath([real_root, real]) != real_root:
        raise ShardReadError(f"{path}: a link to {real}, outside the data set folder: refusing to read it")
    fd = os.open(url, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))  # a FIFO must not block the open
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = "a FIFO" if stat.S_ISFIFO(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else \
            "a folder" if stat.S_ISDIR(mode) else "not a regular file"
        raise ShardReadError(f"{path}: {kind}, not a regular file: refusing to read it")
    return os.fdopen(fd, "rb", buffering=0)


def check_local(root: str, path: str) -> int:
    """Size of a local shard after the same checks as ``open_shard``, without reading it."""
    with _open_local(root, path) as f:
        return os.fstat(f.fileno()).st_size


@contextlib.contextmanager
def open_shard(root: str, path: str, *, limit: int) -> Iterator[ShardStream]:
    """Opens ``root/path`` (a path from the manifest) for reading at most ``limit`` bytes."""
    url = naming.join(root, path)
    if fs.is_local(url):
        raw = _open_local(root, path)
    else:  # one ranged download per 64 MiB, not one per small read
        filesystem, remote = fs.filesystem(url)
        raw = filesystem.open(remote, "rb", block_size=REMOTE_BLOCK, cache_type="readahead")
    with raw:
        yield ShardStream(raw, limit)


def records(stream: ShardStream, *, compression: str) -> Iterator[bytes]:
    """The CRC-checked records of a shard stream (``framing.CorruptRecordError`` at the first broken one)."""
    if compression == "gzip":
        with gzip.GzipFile(fileobj=stream, mode="rb") as unzipped:
            yield from framing.read_records(unzipped, check_crc=True)
    else:
        yield from framing.read_records(stream, check_crc=True)
