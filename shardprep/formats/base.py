"""What every input format shares: the input types, the ``Format`` protocol and byte-level reading.

``InputFile`` (one file), ``WorkUnit`` (the piece of it one worker parses), ``Bad`` (a record that
cannot be read, with a stable reason code), and reading a file's bytes (gzip or not) as lines with
their offsets. A file that cannot be used at all is an ``InputError`` (``shardprep.errors``).
"""
from __future__ import annotations

import contextlib
import dataclasses
import gzip
import io
import zlib
from collections.abc import Iterator
from typing import IO, TYPE_CHECKING, ClassVar

from shardprep import fs
from shardprep.errors import InputError

if TYPE_CHECKING:
    from shardprep.schema import Schema
    from shardprep.tfrecord import FramedBatch

__all__ = [
    "BOM", "FORMATS", "Bad", "Format", "InputError", "InputFile", "Record", "StreamError", "Unsupported", "WorkUnit", "open_input",
    "read_lines",
]

FORMATS = ("csv", "jsonl", "parquet", "tfrecord")
BOM = b"\xef\xbb\xbf"
READ_BLOCK = 1 << 20


@dataclasses.dataclass(frozen=True)
class InputFile:
    """One input file; ``index`` is its place in the sorted input list."""

    index: int
    url: str
    size: int
    format: str
    gzip: bool

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise ValueError(f"format {self.format!r} of {self.url!r}: expected one of {', '.join(FORMATS)}")


@dataclasses.dataclass(frozen=True)
class WorkUnit:
    """A piece of one file that one worker parses: a byte range (CSV, JSON Lines), row groups, or a file."""

    file: InputFile
    index: int
    start: int
    end: int
    first_position: int
    columns: tuple[str, ...] = ()

    @property
    def key(self) -> tuple[int, int]:
        return (self.file.index, self.index)


@dataclasses.dataclass(frozen=True)
class Bad:
    """A record that cannot be read: where, why (a stable snake_case code), and its raw text or bytes."""

    position: int
    reason: str
    detail: str
    raw: str | bytes


Record = tuple[int, "dict | Bad"]  # (position, row or Bad): what ``Format.read`` yields


class Format:
    """One input format: how its files are cut into work units and how a unit is read.

    ``plan`` and ``read`` are required. A format with a column-wise reader also overrides
    ``column_wise`` (whether it takes this unit with this schema) and ``framed_batches``.
    """

    name: ClassVar[str]
    extensions: ClassVar[tuple[str, ...]]

    def plan(self, file: InputFile, unit_bytes: int) -> list[WorkUnit]:
        """The work units of a non-empty ``file``, in file order; ``InputError`` for a file that cannot be used."""
        raise NotImplementedError

    def read(self, unit: WorkUnit) -> Iterator[Record]:
        """(position, row) or (position, Bad) for every record of ``unit``, in file order."""
        raise NotImplementedError

    def column_wise(self, unit: WorkUnit, schema: Schema, extra_fields: str) -> bool:
        """Whether ``framed_batches`` may read this unit (else the per-record path reads it all)."""
        return False

    def framed_batches(self, unit: WorkUnit, schema: Schema, extra_fields: str) -> Iterator[FramedBatch]:
        """The unit's records as framed TFRecord batches, in file order; raises ``Unsupported`` (after
        the batches it could give) where the per-record path must take over."""
        raise NotImplementedError(f"{self.name} has no column-wise reader")


class Unsupported(Exception):
    """Raised by ``Format.framed_batches``: this unit, from this batch on, needs the per-record path to decide."""


class StreamError(Exception):
    """A gzip stream that breaks off: the complete lines before it are good, ``partial`` is not."""

    def __init__(self, reason: str, offset: int, partial: bytes, detail: str) -> None:
        super().__init__(detail)
        self.reason, self.offset, self.partial, self.detail = reason, offset, partial, detail


@contextlib.contextmanager
def open_input(file: InputFile, start: int) -> Iterator[IO[bytes]]:
    """The file's bytes from ``start`` (uncompressed files) or its decompressed bytes (gzip)."""
    with fs.open_file(file.url, "rb") as raw:
        if file.gzip:
            with gzip.GzipFile(fileobj=raw, mode="rb") as stream:
                yield stream
        else:
            if start:
                raw.seek(start)
            yield raw


def read_lines(stream: IO[bytes], offset: int) -> Iterator[tuple[int, bytes]]:
    """(offset, line with its ``\\n``) of every line; the last line may lack one. Raises ``StreamError``."""
    read = stream.read1 if isinstance(stream, gzip.GzipFile) else stream.read
    parts: list[bytes] = []
    while True:
        try:
            chunk = read(READ_BLOCK)
        except EOFError as e:
            raise StreamError("gzip_truncated", offset, b"".join(parts), f"the gzip data ends early ({e})") from None
        except (gzip.BadGzipFile, zlib.error) as e:
            raise StreamError("gzip_invalid", offset, b"".join(parts), f"the gzip data is corrupt ({e})") from None
        if not chunk:
            if parts:
                yield offset, b"".join(parts)
            return
        if b"\n" not in chunk:
            parts.append(chunk)
            continue
        if parts:
            parts.append(chunk)
            chunk = b"".join(parts)
            parts = []
        lines = io.BytesIO(chunk).readlines()
        if not lines[-1].endswith(b"\n"):
            parts.append(lines.pop())
        for line in lines:
            yield offset, line
            offset += len(line)
