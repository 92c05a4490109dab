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
import json
import zlib
from collections.abc import Iterator, Sequence
from typing import IO, TYPE_CHECKING, ClassVar, NamedTuple, TypeVar

from shardprep import fs
from shardprep.errors import InputError
from shardprep.formats.dialect import CsvDialect

if TYPE_CHECKING:
    from shardprep.schema import Schema
    from shardprep.tfrecord import FramedBatch

__all__ = [
    "BOM", "FORMATS", "MAX_RECORD_BYTES", "SAMPLE_BYTES", "SAMPLE_FILES", "Bad", "Format", "InputError", "InputFile",
    "InputOptions",
    "LongLine", "Record", "StreamError", "Unsupported", "WorkUnit", "line_size", "lone_surrogate", "open_input", "read_head",
    "read_lines", "spread", "too_large",
]

FORMATS = ("csv", "jsonl", "parquet", "tfrecord", "images", "tfds", "json")
BOM = b"\xef\xbb\xbf"
READ_BLOCK = 1 << 20
MAX_RECORD_BYTES = 64 << 20  # --max-record-mb's default
RAW_HEAD_BYTES = 1024  # what a dead letter keeps of a record too large to keep
# What the launcher reads of the input beyond listings: the heads of at most SAMPLE_FILES files spread
# over the input list (first, last and between) for the schema sample and the CSV delimiter, at most
# SAMPLE_BYTES in all for the sample, and each CSV file's header (``formats.csv.read_header``).
SAMPLE_FILES = 8
SAMPLE_BYTES = 8 << 20
T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class InputFile:
    """One input file; ``index`` is its place in the sorted input list."""

    index: int
    url: str
    size: int
    format: str
    gzip: bool
    version: str = ""  # ``fs.version`` at planning: the commit refuses a file that changed since
    split: str = ""  # the split every record of the file goes to (a TFDS shard); "": by the keyed hash
    dialect: CsvDialect | None = None  # a CSV file's delimiter, header and null values (None: the defaults)

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
    max_record_bytes: int = MAX_RECORD_BYTES  # a larger record is dead letter ``record_too_large``
    # "": start, end and first_position are exact. Else a nominal byte range of a large line file,
    # planned from its size alone; the pipeline finds its cuts by this rule (``formats.cuts``).
    nominal: str = ""

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


class Decoded(NamedTuple):
    """A record that ``Format.framed_batches`` read but leaves to the per-record encoder to judge."""

    position: int
    row: dict


Record = tuple[int, "dict | Bad"]  # (position, row or Bad): what ``Format.read`` yields


def lone_surrogate(value: object) -> str | None:
    """What is wrong with a parsed JSON value holding a lone surrogate in a string or key, or None.

    JSON may spell one (``"\\ud83d"``), but it is no character: no UTF-8 text (an Example's bytes, a
    feature name, a dead letter) can hold it, so such a record is dead letter ``invalid_utf8``."""
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as e:
        return f"holds the lone surrogate \\u{ord(e.object[e.start]):04x}, which is no character: UTF-8 text cannot hold it"
    except RecursionError:  # nested deeper than json writes: not judged here
        pass
    return None


def row_text(row: object) -> str:
    """A row as a dead letter's ``raw`` text: JSON where it can be, else its repr."""
    try:
        return json.dumps(row, ensure_ascii=False, default=repr)
    except (TypeError, ValueError):
        return repr(row)


@dataclasses.dataclass(frozen=True)
class InputOptions:
    """What the command line says of the input beyond its files: the CSV dialect flags (None: sniffed or default)."""

    delimiter: str | None = None
    header: bool = True
    column_names: tuple[str, ...] = ()
    null_values: tuple[str, ...] | None = None


class Format:
    """One input format: what it needs before the run, how its files are cut into work units and
    how a unit is read.

    ``plan`` and ``read`` are required. Before the run, ``prepare`` readies the run's files (CSV:
    each file's dialect), ``own_schema`` and ``own_splits`` give what the format fixes itself
    (image fields, a TFDS folder's features and splits). A format with a column-wise reader also
    overrides ``column_wise`` (whether it takes this unit with this schema) and ``framed_batches``.
    """

    name: ClassVar[str]
    extensions: ClassVar[tuple[str, ...]]
    statistics_by_default: ClassVar[bool] = True  # --statistics auto (images: no numbers a model normalises)

    def prepare(self, files: list[InputFile], options: InputOptions) -> list[InputFile]:
        """The run's files, this format's made ready to plan; the others as given."""
        return files

    def own_schema(self, files: Sequence[InputFile], schema_given: bool) -> Schema | None:
        """The schema this format fixes itself, or None: ``--schema``, else inferred from the first records."""
        return None

    def own_splits(self, files: Sequence[InputFile], spec: str | None) -> tuple[Sequence[InputFile], tuple] | None:
        """(files, splits) where the input carries its splits (``spec``: ``--split``, None if not given), else None."""
        return None

    def plan(self, file: InputFile, unit_bytes: int) -> list[WorkUnit]:
        """The work units of a non-empty ``file``, in file order; ``InputError`` for a file that cannot be used."""
        raise NotImplementedError

    def read(self, unit: WorkUnit) -> Iterator[Record]:
        """(position, row) or (position, Bad) for every record of ``unit``, in file order."""
        raise NotImplementedError

    def column_wise(self, unit: WorkUnit, schema: Schema, extra_fields: str) -> bool:
        """Whether ``framed_batches`` may read this unit (else the per-record path reads it all)."""
        return False

    def framed_batches(self, unit: WorkUnit, schema: Schema, extra_fields: str) -> Iterator[FramedBatch | Bad | Decoded]:
        """The unit's records as framed TFRecord batches, in file order; raises ``Unsupported`` (after
        the batches it could give) where the per-record path must take over. A reader that judges
        records itself (TFRecord) also yields ``Bad`` ones and ``Decoded`` rows for the encoder."""
        raise NotImplementedError(f"{self.name} has no column-wise reader")


class Unsupported(Exception):
    """Raised by ``Format.framed_batches``: this unit, from this batch on, needs the per-record path to decide."""


class StreamError(Exception):
    """A gzip stream that breaks off: the complete lines before it are good, ``partial`` is not."""

    def __init__(self, reason: str, offset: int, partial: bytes, detail: str) -> None:
        super().__init__(detail)
        self.reason, self.offset, self.partial, self.detail = reason, offset, partial, detail


def spread(items: Sequence[T], n: int) -> list[T]:
    """At most ``n`` of ``items``, evenly spread from the first to the last, in order."""
    if len(items) <= n:
        return list(items)
    return [items[i * (len(items) - 1) // (n - 1)] for i in range(n)] if n > 1 else list(items[:n])


def read_head(file: InputFile, size: int) -> tuple[bytes, bool]:
    """The file's first ``size`` bytes (gzip: decompressed, up to a break in the stream) and whether they are all of it.

    What the launcher reads of an input (header, dialect sniff, format checks): an uncompressed
    file's head is one ranged read of exactly those bytes, whatever the file system's read-ahead.
    """
    if not file.gzip:
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
    """The file's bytes from ``start`` (uncompressed files) or its decompressed bytes (gzip)."""
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
