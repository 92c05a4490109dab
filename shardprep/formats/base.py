"""What every input format shares: the input types and the ``Format`` protocol.

``InputFile`` (one file), ``WorkUnit`` (the piece of it one worker parses; ``FileGroup``: many small
files parsed as one unit, ``formats.grouping``), ``Bad`` (a record that
cannot be read, with a stable reason code), ``InputOptions`` (the input's flags). A file that cannot
be used at all is an ``InputError`` (``shardprep.errors``). Reading a file's bytes is
``formats.reading``.
"""
from __future__ import annotations

import copyreg
import dataclasses
import json
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, ClassVar, NamedTuple, TypeVar

from shardprep.errors import InputError
from shardprep.formats.csv.dialect import CsvDialect

if TYPE_CHECKING:
    from shardprep.framing import FramedBatch
    from shardprep.schema import Schema

__all__ = [
    "FORMATS", "MAX_RECORD_BYTES", "RAW_HEAD_BYTES", "SAMPLE_BYTES", "SAMPLE_FILES", "Bad", "Decoded", "FileGroup",
    "Format", "InputError", "InputFile", "InputOptions", "Record", "Unsupported", "WorkUnit", "lone_surrogate", "row_text", "spread",
]

FORMATS = ("csv", "jsonl", "parquet", "tfrecord", "images", "tfds", "json", "text")
MAX_RECORD_BYTES = 64 << 20  # --max-record-mb's default
RAW_HEAD_BYTES = 1024  # what a dead letter keeps of a record too large to keep
# What the launcher reads of the input beyond listings: the heads of at most SAMPLE_FILES files spread
# over the input list (first, last and between) for the schema sample and the CSV delimiter, at most
# SAMPLE_BYTES in all for the sample, and each CSV file's header (``formats.csv.source.read_header``).
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
    text: object = None  # a text run's unit: its ``text.spec.TextSpec`` (``formats.text`` reads it)

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise ValueError(f"format {self.format!r} of {self.url!r}: expected one of {', '.join(FORMATS)}")

    def with_dialect(self, dialect: CsvDialect) -> InputFile:
        """``dataclasses.replace(self, dialect=dialect)``, without its walk of the fields (a run's 50,000 files)."""
        new = object.__new__(InputFile)
        new.__dict__.update(self.__dict__)
        new.__dict__["dialect"] = dialect
        return new


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

    @property
    def members(self) -> tuple[WorkUnit, ...]:
        """The units read one after another for this one: itself (a ``FileGroup``: its files' units)."""
        return (self,)


@dataclasses.dataclass(frozen=True)
class FileGroup(WorkUnit):
    """Many small files parsed as one work unit (``formats.grouping``): ``files`` are their whole-file
    units, consecutive in the input list and in its order; ``file`` is the first one's file, whose key
    the group takes. Each member stays its own source: its records keep their positions in their
    file, its dead letters name it, the manifest counts its records (``graph.elements.UnitFact.files``)."""

    files: tuple[WorkUnit, ...] = ()

    @property
    def members(self) -> tuple[WorkUnit, ...]:
        return self.files

    def __reduce__(self) -> tuple:
        """Pickled as columns where its members are whole-file units alike but for their files' index,
        URL, size and version (``_packed``): a group is pickled to stage it and for every stage it goes
        to, and only Parse reads its members, which an unpickled group makes on first use (``_Files``)."""
        packed = self.__dict__.get("_packed") or _packed(self)
        if packed is None:
            return copyreg.__newobj__, (type(self),), self.__dict__
        return _unpacked, ((self.index, self.start, self.end, self.first_position, self.columns,
                            self.max_record_bytes, self.nominal), self.file, packed)


class _Files:
    """``FileGroup.files`` of a group unpickled from columns (``_unpacked``): its members, made on first
    read and kept; a group made by ``__init__`` holds its own, which Python finds first."""

    def __get__(self, group: FileGroup | None, owner: type | None = None) -> tuple[WorkUnit, ...]:
        if group is None:
            return ()  # the field's default, as the dataclass left it on the class
        (columns, max_record), indexes, urls, sizes, versions = group.__dict__["_packed"]
        first, new = group.file, object.__new__
        file_fields = dict(first.__dict__)  # the fields __init__ set, in its order: all but four shared
        unit_fields = {"file": first, "index": 0, "start": 0, "end": 0, "first_position": 1, "columns": columns,
                       "max_record_bytes": max_record, "nominal": ""}
        members = []
        for index, url, size, version in zip(indexes, urls, sizes, versions):
            if members:
                file = new(InputFile)
                fields = file.__dict__
                fields.update(file_fields)
                fields["index"], fields["url"], fields["size"], fields["version"] = index, url, size, version
            else:
                file = first
            unit = new(WorkUnit)
            fields = unit.__dict__
            fields.update(unit_fields)
            fields["file"], fields["end"] = file, size
            members.append(unit)
        object.__setattr__(group, "files", tuple(members))
        return group.files


FileGroup.files = _Files()  # type: ignore[assignment]


def _packed(group: FileGroup) -> tuple | None:
    """A group's members as columns (the first file's other fields, and the units' columns and record
    limit, shared by all), or None where they are not all whole-file units alike but for those."""
    units = group.files
    first = units[0].file if units else None
    if first is None or group.file is not first or type(first) is not InputFile:
        return None
    same = (first.format, first.gzip, first.split, first.dialect, first.text)
    columns, max_record = units[0].columns, units[0].max_record_bytes
    for u in units:
        f = u.file
        if (type(u) is not WorkUnit or type(f) is not InputFile or u.index or u.start or u.end != f.size
                or u.first_position != 1 or u.nominal or u.columns != columns or u.max_record_bytes != max_record
                or (f.format, f.gzip, f.split, f.dialect, f.text) != same):
            return None
    return ((columns, max_record), [u.file.index for u in units], [u.file.url for u in units],
            [u.file.size for u in units], [u.file.version for u in units])


def _unpacked(own: tuple, file: InputFile, packed: tuple) -> FileGroup:
    """A ``FileGroup`` from its ``__reduce__``: its own fields and first file now, its members on first use."""
    group = object.__new__(FileGroup)
    index, start, end, first_position, columns, max_record, nominal = own
    object.__setattr__(group, "__dict__", {"file": file, "index": index, "start": start, "end": end,
                                           "first_position": first_position, "columns": columns,
                                           "max_record_bytes": max_record, "nominal": nominal, "_packed": packed})
    return group


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
    (image fields, a TFDS folder's features and splits), ``describe`` adds what its files say of
    a schema's features (Parquet: time units). A format with a column-wise reader also
    overrides ``column_wise`` (whether it takes this unit with this schema) and ``framed_batches``.
    """

    name: ClassVar[str]
    extensions: ClassVar[tuple[str, ...]]
    # Its column-wise reader's batches carry the columns their records were encoded from: the
    # statistics count those in Parse. Other formats' records are Examples, which the statistics
    # decode in WriteShards while the disk stores shards (``ReshardConfig.statistics_in_parse``).
    gives_columns: ClassVar[bool] = False
    # A file of a ``FileGroup`` smaller than this goes to the per-record path: the column-wise
    # reader's fixed cost per file (pyarrow's CSV reader: about a millisecond) outweighs its gain.
    column_wise_min_bytes: ClassVar[int] = 0

    def prepare(self, files: list[InputFile], options: InputOptions) -> list[InputFile]:
        """The run's files, this format's made ready to plan; the others as given."""
        return files

    def own_schema(self, files: Sequence[InputFile], schema_given: bool) -> Schema | None:
        """The schema this format fixes itself, or None: ``--schema``, else inferred from the first records."""
        return None

    def own_splits(self, files: Sequence[InputFile], spec: str | None) -> tuple[Sequence[InputFile], tuple] | None:
        """(files, splits) where the input carries its splits (``spec``: ``--split``, None if not given), else None."""
        return None

    def describe(self, files: Sequence[InputFile], schema: Schema) -> Schema:
        """``schema`` (given or inferred) with what this format's ``files`` say of its features (Parquet:
        the unit a time column's integers count); ``InputError`` where the files disagree."""
        return schema

    def plan(self, file: InputFile, unit_bytes: int) -> list[WorkUnit]:
        """The work units of a non-empty ``file``, in file order; ``InputError`` for a file that cannot be used."""
        raise NotImplementedError

    def read(self, unit: WorkUnit) -> Iterator[Record]:
        """(position, row) or (position, Bad) for every record of ``unit``, in file order."""
        raise NotImplementedError

    def sample(self, unit: WorkUnit, rows: int) -> Iterator[Record] | None:
        """The first ``rows`` records of a whole-file ``unit`` for schema inference, where this format
        gives them more cheaply than ``read`` (Parquet: what its column types decide, unread); None: read."""
        return None

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


def spread(items: Sequence[T], n: int) -> list[T]:
    """At most ``n`` of ``items``, evenly spread from the first to the last, in order."""
    if len(items) <= n:
        return list(items)
    return [items[i * (len(items) - 1) // (n - 1)] for i in range(n)] if n > 1 else list(items[:n])
