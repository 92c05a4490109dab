"""Reading an input file's bytes: its head at launch, a stream from an offset (gzip decompressed),
and lines with their offsets in bounded memory (``read_lines``; a line over the limit is a
``LongLine``, its dead letter ``too_large``). A gzip stream that breaks off is a ``StreamError``.
"""
from __future__ import annotations

import contextlib
import gzip
import io
import zlib
from collections.abc import Iterator
from typing import IO

from shardprep import fs
from shardprep.formats.base import RAW_HEAD_BYTES, Bad, InputFile

__all__ = ["BOM", "KEEP_FILE_BYTES", "KEPT_BYTES", "READ_BLOCK", "LongLine", "StreamError", "forget_kept", "keep_whole",
           "line_size", "open_input", "read_head", "read_lines", "too_large"]

BOM = b"\xef\xbb\xbf"
READ_BLOCK = 1 << 20
KEEP_FILE_BYTES = 16 << 10  # a file up to this size is read whole when the launcher lists it (``keep_whole``) ...
KEPT_BYTES = 64 << 20  # ... up to this many bytes in all
_kept: dict[tuple[str, str], bytes] = {}  # (url, version) -> a small file's bytes
_kept_bytes = 0  # their sum


class StreamError(Exception):
    """A gzip stream that breaks off: the complete lines before it are good, ``partial`` is not."""

    def __init__(self, reason: str, offset: int, partial: bytes, detail: str) -> None:
        super().__init__(detail)
        self.reason, self.offset, self.partial, self.detail = reason, offset, partial, detail


def keep_whole(file: InputFile, data: bytes) -> None:
    """Keeps all of a small input file, read when the launcher listed it, for ``read_head`` at planning
    (under its version: a file rewritten since is read again), up to ``KEPT_BYTES`` in all."""
    global _kept_bytes
    if _kept_bytes + len(data) <= KEPT_BYTES:
        _kept[(file.url, file.version)] = data
        _kept_bytes += len(data)


def forget_kept() -> None:
    """Ends ``keep_whole``'s files: a launch's planning has read them."""
    global _kept_bytes
    _kept.clear()
    _kept_bytes = 0


def read_head(file: InputFile, size: int) -> tuple[bytes, bool]:
    """The file's first ``size`` bytes (gzip: decompressed, up to a break in the stream) and whether they are all of it.

    What the launcher reads of an input (header, dialect sniff, format checks): an uncompressed
    file's head is one ranged read of exactly those bytes, whatever the file system's read-ahead,
    or the file itself where the listing kept it (``keep_whole``).
    """
    if not file.gzip:
        kept = _kept.get((file.url, file.version)) if _kept else None
        if kept is not None and len(kept) == file.size:
            head = kept[:size]
        else:
            head = fs.read_bytes(file.url, 0, min(size, file.size)) if file.size else b""
        return head, len(head) >= file.size
    parts, got = [], 0
    with open_input(file, 0) as stream:
        try:
            while got < size and (chunk := stream.read1(size - got)):
                parts.append(chunk)
                got += len(chunk)
            whole = got < size or not stream.read(1)
        except (EOFError, OSError, zlib.error):  # a broken stream: its readers report it; the head is what precedes it
            whole = True
    return b"".join(parts), whole


@contextlib.contextmanager
def open_input(file: InputFile, start: int) -> Iterator[IO[bytes]]:
    """The file's bytes from ``start`` (uncompressed files) or its decompressed bytes (gzip). A small
    local file (up to ``READ_BLOCK``) read from its start comes whole, from one read, in memory."""
    if start == 0 and not file.gzip and file.size <= READ_BLOCK and fs.is_local(file.url):
        yield io.BytesIO(fs.read_bytes(file.url))
        return
    with fs.open_file(file.url, "rb") as raw:
        if file.gzip:
            with gzip.GzipFile(fileobj=raw, mode="rb") as stream:
                yield stream
        else:
            if start:
                raw.seek(start)
            yield raw


class LongLine(bytes):
    """What ``read_lines`` gives for a line over its limit: the line's first bytes; ``size`` is its length."""

    size: int

    def __new__(cls, head: bytes, size: int) -> LongLine:
        line = super().__new__(cls, head[:RAW_HEAD_BYTES])
        line.size = size
        return line


def line_size(line: bytes) -> int:
    """The length of a line from ``read_lines`` in the file (a ``LongLine`` keeps only its head)."""
    return line.size if isinstance(line, LongLine) else len(line)


def too_large(position: int, line: bytes, limit: int, what: str = "line") -> Bad:
    """The dead letter of a record over the size limit; its raw text is the record's head only."""
    return Bad(position, "record_too_large", f"{what} {position} holds {line_size(line):,} bytes, more than the record "
               f"limit of {limit:,} (--max-record-mb); its first {len(line)} bytes are kept here", bytes(line))


def read_lines(stream: IO[bytes], offset: int, max_line: int | None = None) -> Iterator[tuple[int, bytes]]:
    """(offset, line with its ``\\n``) of every line; the last line may lack one. Raises ``StreamError``.

    A line longer than ``max_line`` comes as a ``LongLine`` (its head and size): memory stays
    bounded by ``max_line`` plus one block whatever the input holds.
    """
    read = stream.read1 if isinstance(stream, gzip.GzipFile) else stream.read
    parts: list[bytes] = []
    held = 0  # bytes in parts
    skipping: LongLine | None = None  # the head of a line over the limit, while its rest is skipped
    skipped = 0
    while True:
        try:
            chunk = read(READ_BLOCK)
        except EOFError as e:
            raise StreamError("gzip_truncated", offset, b"".join(parts), f"the gzip data ends early ({e})") from None
        except (gzip.BadGzipFile, zlib.error) as e:
            raise StreamError("gzip_invalid", offset, b"".join(parts), f"the gzip data is corrupt ({e})") from None
        if skipping is not None:
            if not chunk:
                yield offset, LongLine(skipping, skipped)
                return
            end = chunk.find(b"\n")
            if end < 0:
                skipped += len(chunk)
                continue
            skipped += end + 1
            yield offset, LongLine(skipping, skipped)
            offset += skipped
            skipping, chunk = None, chunk[end + 1:]
            if not chunk:
                continue
        if not chunk:
            if parts:
                yield offset, b"".join(parts)
            return
        if b"\n" not in chunk:
            parts.append(chunk)
            held += len(chunk)
            if max_line is not None and held > max_line:
                head = b"".join(parts)
                skipping, skipped, parts, held = head[:RAW_HEAD_BYTES], len(head), [], 0
            continue
        if parts:
            parts.append(chunk)
            chunk = b"".join(parts)
            parts, held = [], 0
        lines = io.BytesIO(chunk).readlines()
        if not lines[-1].endswith(b"\n"):
            parts.append(lines.pop())
            held = len(parts[0])
        for line in lines:
            yield offset, (line if max_line is None or len(line) <= max_line else LongLine(line, len(line)))
            offset += len(line)
        if max_line is not None and held > max_line:
            skipping, skipped, parts, held = parts[0][:RAW_HEAD_BYTES], held, [], 0
