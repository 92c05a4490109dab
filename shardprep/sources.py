"""Input files: finding them, cutting them into work units, and reading units into rows or bad records.

Work units (``plan_units``, run once in the launcher): an empty file, a gzip file, a TFRecord file
or a file of at most ``unit_bytes`` is one unit. A larger CSV or JSON Lines file is cut into byte
ranges; a unit owns the records whose first byte lies in ``[start, end)``. The planner reads the
file once with C-speed ``bytes.count``/``find`` and moves each nominal cut (every ``unit_bytes``) to
just after the first newline at or after it that is outside quotes (JSON Lines: any newline), and
records the cut's byte offset and 1-based line number, so every unit starts exactly at a record.

Quotes: RFC 4180 writes a quote inside a quoted field as two quotes, so the parity of the number of
``"`` characters before a byte says whether it is inside a quoted field. That is exact for RFC 4180
CSV. A stray quote in an unquoted field (``5" screen``) flips the parity for the rest of the file:
if the file's total count of quotes is odd the planner notices and reads that file as one unit; if
two stray quotes bracket quoted fields that hold newlines, a cut can land inside a record, which the
reader of the unit before it detects (its last record runs past the cut) and reports as a fatal
``InputError``, never as silently wrong rows. Lines end with ``\\n`` (``\\r\\n`` works too).

Bad records (``Bad.reason``): ``csv_columns``, ``csv_parse`` (unterminated quote at the end of the
file, or a record the csv module refuses), ``invalid_utf8``, ``json_invalid``, ``json_not_object``,
``tfrecord_length_crc``, ``tfrecord_data_crc``, ``tfrecord_truncated`` (one Bad for the rest of a
file whose framing is lost), ``not_an_example``, ``gzip_truncated`` and ``gzip_invalid``.
"""
from __future__ import annotations

import contextlib
import csv
import dataclasses
import gzip
import io
import json
import os
import posixpath
import zlib
from collections.abc import Iterator, Sequence
from typing import IO, Any

from shardprep import fs
from shardprep.codec import CorruptRecordError, RecordError, decode_example, read_records

try:  # optional fast path; any line it refuses or might read differently goes through json
    import orjson
except ImportError:  # pragma: no cover - depends on the environment
    orjson = None

__all__ = [
    "FORMATS",
    "Bad",
    "InputError",
    "InputFile",
    "WorkUnit",
    "detect_format",
    "expand_inputs",
    "plan_units",
    "read_unit",
    "sample_rows",
]

FORMATS = ("csv", "jsonl", "parquet", "tfrecord")
_EXTENSIONS = {
    ".csv": "csv", ".jsonl": "jsonl", ".json": "jsonl", ".ndjson": "jsonl", ".parquet": "parquet",
    ".pq": "parquet", ".tfrecord": "tfrecord", ".tfrecords": "tfrecord", ".tfr": "tfrecord",
}
_SCAN_BLOCK = 8 << 20
_READ_BLOCK = 1 << 20
_BOM = b"\xef\xbb\xbf"
_DIGITS_TO_ZERO = bytes.maketrans(b"123456789", b"000000000")
_TWENTY_DIGITS = b"0" * 20  # orjson reads integers >= 2**64 as floats; json keeps them exact
csv.field_size_limit(max(csv.field_size_limit(), 2**31 - 1))  # a single field may hold megabytes


class InputError(ValueError):
    """An input that cannot be used at all; the run stops before any work, with this one line."""


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


class _StreamError(Exception):
    """A gzip stream that breaks off: the complete lines before it are good, ``partial`` is not."""

    def __init__(self, reason: str, offset: int, partial: bytes, detail: str) -> None:
        super().__init__(detail)
        self.reason, self.offset, self.partial, self.detail = reason, offset, partial, detail


# --- finding inputs --------------------------------------------------------------------------------


def detect_format(url: str) -> tuple[str, bool]:
    """(format, gzip) from the file name's extension, ``.gz`` stripped."""
    name = posixpath.basename(url.rstrip("/")).lower()
    gz = name.endswith(".gz")
    ext = posixpath.splitext(name[:-3] if gz else name)[1]
    if ext not in _EXTENSIONS:
        raise InputError(
            f"cannot tell the format of {url!r} from its extension {ext or '(none)'!r}: expected one of "
            f"{', '.join(_EXTENSIONS)} (optionally + .gz); use --format {'|'.join(FORMATS)}"
        )
    return _EXTENSIONS[ext], gz


def _is_folder(url: str) -> bool:
    try:
        filesystem, path = fs.filesystem(url)
        return filesystem.isdir(path)
    except (OSError, ValueError):
        return False


def _normal(url: str) -> str:
    """Local paths as absolute paths, so one file named two ways is read once (and from any working folder)."""
    if not fs.is_local(url):
        return url
    return os.path.abspath(url.removeprefix("file://"))


def expand_inputs(patterns: Sequence[str], fmt: str = "auto") -> list[InputFile]:
    """The files matching ``patterns``: sorted, without duplicates, indexed in that order.

    A wildcard skips names starting with ``.`` or ``_`` (``_SUCCESS``, ``.crc`` files of Spark/Hadoop).
    """
    if fmt != "auto" and fmt not in FORMATS:
        raise InputError(f"--format {fmt!r} is not supported: expected auto or one of {', '.join(FORMATS)}")
    if isinstance(patterns, str):
        patterns = [patterns]
    if not patterns:
        raise InputError("no --input given: pass --input GLOB at least once")
    urls: set[str] = set()
    for pattern in patterns:
        try:
            found = fs.glob(pattern)
        except (OSError, ValueError) as e:
            raise InputError(f"--input {pattern!r} cannot be listed: {e}") from None
        if any(c in pattern for c in "*?["):
            found = [u for u in found if not posixpath.basename(u).startswith((".", "_"))]
        if not found:
            if _is_folder(pattern):
                raise InputError(f"--input {pattern!r} is a folder: give a pattern for its files, e.g. "
                                 f"{pattern.rstrip('/')}/*")
            raise InputError(f"--input {pattern!r} matches no files: check the path (quote a pattern so the shell "
                             "does not expand it)")
        urls.update(_normal(url) for url in found)
    files = []
    for index, url in enumerate(sorted(urls)):
        form, gz = detect_format(url) if fmt == "auto" else (fmt, url.lower().endswith(".gz"))
        try:
            size = fs.size(url)
            with fs.open_file(url, "rb"):
                pass
        except (OSError, ValueError) as e:
            raise InputError(f"input file {url!r} cannot be read: {e}") from None
        files.append(InputFile(index, url, size, form, gz))
    return files


# --- planning --------------------------------------------------------------------------------------


def plan_units(files: Sequence[InputFile], *, unit_bytes: int = 64 * 1024 * 1024) -> list[WorkUnit]:
    """Work units of ``files`` in a deterministic order (file, then place in the file).

    Reads each CSV header, each Parquet footer, and every large CSV/JSON Lines file once to place
    its cuts; raises ``InputError`` for a file that cannot be used at all.
    """
    if not isinstance(unit_bytes, int) or unit_bytes < 1:
        raise ValueError(f"unit_bytes={unit_bytes!r}: expected a positive number of bytes")
    return [unit for file in files for unit in _plan_file(file, unit_bytes)]


def _plan_file(file: InputFile, unit_bytes: int) -> list[WorkUnit]:
    if file.size == 0:
        return [WorkUnit(file, 0, 0, 0, 1)]
    if file.format == "parquet":
        return _parquet_units(file, unit_bytes)
    columns = _csv_header(file) if file.format == "csv" else ()
    if file.format == "jsonl":
        _check_json_lines(file)
    whole = WorkUnit(file, 0, 0, file.size, 1, columns)
    if file.gzip or file.format == "tfrecord" or file.size <= unit_bytes:
        return [whole]
    cuts, odd_quotes = _find_cuts(file.url, unit_bytes, quotes=file.format == "csv")
    if odd_quotes:  # a stray or unterminated quote: parity is unreliable, read the file in one piece
        return [whole]
    starts = [(0, 1), *cuts]
    ends = [offset for offset, _ in cuts] + [file.size]
    return [WorkUnit(file, i, start, end, line, columns) for i, ((start, line), end) in enumerate(zip(starts, ends))]


def _find_cuts(url: str, unit_bytes: int, *, quotes: bool) -> tuple[list[tuple[int, int]], bool]:
    """(offset, 1-based line) of each unit start after the first, and whether the file's quote count is odd.

    Each cut is just after the first newline at or after a multiple of ``unit_bytes`` whose quote
    parity is even (outside quotes); it is found with C-speed ``count``/``find`` calls only.
    """
    cuts: list[tuple[int, int]] = []
    target = unit_bytes
    base, parity, line = 0, 0, 1  # file offset, quote parity and line number at the block's start
    with fs.open_file(url, "rb") as f:
        while block := f.read(_SCAN_BLOCK):
            pos, par, ln = 0, parity, line  # the same, at block[pos]
            while target < base + len(block):
                rel = max(target - base, pos)
                if quotes:
                    par ^= block.count(b'"', pos, rel) & 1
                ln += block.count(b"\n", pos, rel)
                pos = rel
                newline = _newline_outside_quotes(block, pos, par) if quotes else block.find(b"\n", pos)
                if newline < 0:
                    break  # look on in the next block, with the parity at its start
                ln += block.count(b"\n", pos, newline + 1)
                par = 0
                pos = newline + 1
                cuts.append((base + pos, ln))
                target = -(-(base + pos) // unit_bytes) * unit_bytes
            if quotes:
                parity ^= block.count(b'"') & 1
            line += block.count(b"\n")
            base += len(block)
    return [cut for cut in cuts if cut[0] < base], bool(parity)


def _newline_outside_quotes(block: bytes, pos: int, par: int) -> int:
    """Index of the first ``\\n`` at or after ``pos`` with even quote parity, or -1 in this block."""
    while True:
        if par:
            quote = block.find(b'"', pos)
            if quote < 0:
                return -1
            par, pos = 0, quote + 1
        newline = block.find(b"\n", pos)
        if newline < 0:
            return -1
        quote = block.find(b'"', pos, newline)
        if quote < 0:
            return newline
        par, pos = 1, quote + 1


def _csv_header(file: InputFile) -> tuple[str, ...]:
    """The column names: the first record of the file (a UTF-8 BOM stripped); () when there is none."""
    with _open(file, 0) as stream:
        for _line, lines, row, error in _csv_records(stream, 0, 1):
            if error or not all(ok for _, _, ok in lines):
                problem = error[1] if error else "it is not valid UTF-8"
                raise InputError(f"{file.url!r}: the CSV header cannot be read: {problem}")
            empty = [str(i + 1) for i, name in enumerate(row) if not name.strip()]
            if empty:
                raise InputError(f"{file.url!r}: the CSV header {row!r} has no name for column(s) "
                                 f"{', '.join(empty)}: every column needs a name (the first line is the header)")
            repeated = sorted({name for name in row if row.count(name) > 1})
            if repeated:
                raise InputError(f"{file.url!r}: the CSV header repeats column name(s) {', '.join(map(repr, repeated))}: "
                                 "every column needs its own name; rename them")
            return tuple(row)
    return ()


def _check_json_lines(file: InputFile) -> None:
    """Refuses a file holding one JSON array (every record would be bad): JSON Lines has one object per line."""
    with _open(file, 0) as stream:
        try:
            head = stream.read(4096)
        except (EOFError, OSError, zlib.error):
            return  # the reader reports a broken gzip stream as a bad record
    if head.removeprefix(_BOM).lstrip().startswith(b"["):
        raise InputError(f"{file.url!r} holds a JSON array, not JSON Lines (one object per line): convert it, e.g. "
                         "jq -c '.[]' in.json > out.jsonl")


def _parquet_file(file: InputFile, stack: contextlib.ExitStack) -> Any:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        if file.gzip:
            with _open(file, 0) as stream:
                source: Any = pa.BufferReader(stream.read())
        else:
            source = stack.enter_context(fs.open_file(file.url, "rb"))
        return pq.ParquetFile(source)
    except (pa.ArrowException, OSError, EOFError, ValueError, zlib.error) as e:
        raise InputError(f"{file.url!r} is not a readable Parquet file: {e}") from None


def _cast_type(name: str, type_: Any, url: str, *, in_list: bool = False) -> Any:
    """The Arrow type a column is cast to before it becomes Python values; None keeps it as it is."""
    import pyarrow as pa

    t = pa.types
    if t.is_float16(type_) or t.is_decimal(type_):
        target = pa.float64()
    elif t.is_temporal(type_):  # dates, times, timestamps, durations: their integer value
        target = pa.int64()
    elif t.is_dictionary(type_):
        target = type_.value_type if _cast_type(name, type_.value_type, url, in_list=True) is None else False
    elif t.is_list(type_) or t.is_large_list(type_) or t.is_fixed_size_list(type_):
        target = None if _cast_type(name, type_.value_type, url, in_list=True) is None else False
    elif (t.is_integer(type_) or t.is_floating(type_) or t.is_boolean(type_) or t.is_null(type_) or t.is_string(type_)
          or t.is_large_string(type_) or t.is_binary(type_) or t.is_large_binary(type_)
          or t.is_fixed_size_binary(type_) or str(type_) in ("string_view", "binary_view")):
        return None
    else:
        target = False
    if target is False or (in_list and target is not None):
        raise InputError(
            f"{url!r}: column {name!r} has type {type_}, which a tf.train.Example feature cannot hold (only numbers, "
            "strings, bytes, dates/times and flat lists of numbers or strings): flatten or drop that column"
        )
    return target


def _parquet_units(file: InputFile, unit_bytes: int) -> list[WorkUnit]:
    """One unit per run of row groups whose compressed sizes add up to about ``unit_bytes``."""
    with contextlib.ExitStack() as stack:
        meta = _parquet_file(file, stack)
        for field in meta.schema_arrow:
            _cast_type(field.name, field.type, file.url)
        meta = meta.metadata
        groups = []  # (bytes, rows) per row group
        for i in range(meta.num_row_groups):
            rg = meta.row_group(i)
            groups.append((sum(rg.column(j).total_compressed_size for j in range(rg.num_columns)), rg.num_rows))
    if file.gzip or file.size <= unit_bytes or len(groups) <= 1:
        return [WorkUnit(file, 0, 0, len(groups), 1)]
    units: list[WorkUnit] = []
    start, size, row = 0, 0, 1
    for i, (nbytes, _) in enumerate(groups):
        if i > start and size + nbytes > unit_bytes:
            units.append(WorkUnit(file, len(units), start, i, row))
            row += sum(rows for _, rows in groups[start:i])
            start, size = i, 0
        size += nbytes
    units.append(WorkUnit(file, len(units), start, len(groups), row))
    return units


# --- reading ---------------------------------------------------------------------------------------


@contextlib.contextmanager
def _open(file: InputFile, start: int) -> Iterator[IO[bytes]]:
    """The file's bytes from ``start`` (uncompressed files) or its decompressed bytes (gzip)."""
    with fs.open_file(file.url, "rb") as raw:
        if file.gzip:
            with gzip.GzipFile(fileobj=raw, mode="rb") as stream:
                yield stream
        else:
            if start:
                raw.seek(start)
            yield raw


def _lines(stream: IO[bytes], offset: int) -> Iterator[tuple[int, bytes]]:
    """(offset, line with its ``\\n``) of every line; the last line may lack one. Raises ``_StreamError``."""
    read = stream.read1 if isinstance(stream, gzip.GzipFile) else stream.read
    parts: list[bytes] = []
    while True:
        try:
            chunk = read(_READ_BLOCK)
        except EOFError as e:
            raise _StreamError("gzip_truncated", offset, b"".join(parts), f"the gzip data ends early ({e})") from None
        except (gzip.BadGzipFile, zlib.error) as e:
            raise _StreamError("gzip_invalid", offset, b"".join(parts), f"the gzip data is corrupt ({e})") from None
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


class _CsvLines:
    """Feeds decoded lines to the csv module and keeps (offset, raw, valid UTF-8) of those it took."""

    EOF = "\n"  # fed after the last line: a record that takes it was inside quotes at the end of the file

    def __init__(self, stream: IO[bytes], offset: int) -> None:
        self.taken: list[tuple[int, bytes, bool | None]] = []
        self._start = offset
        self._lines = _lines(stream, offset)

    def __iter__(self) -> Iterator[str]:
        end = self._start
        for offset, raw in self._lines:
            try:
                text, ok = raw.decode("utf-8"), True
            except UnicodeDecodeError:
                text, ok = raw.decode("utf-8", "surrogateescape"), False
            if offset == 0 and text.startswith("\ufeff"):
                text = text[1:]
            self.taken.append((offset, raw, ok))
            end = offset + len(raw)
            yield text
        self.taken.append((end, b"", None))
        yield self.EOF


def _csv_records(stream: IO[bytes], offset: int, line: int) -> Iterator[tuple[int, list, list | None, tuple | None]]:
    """(line, taken lines, fields, error) per CSV record; blank lines are skipped, not records."""
    feed = _CsvLines(stream, offset)
    reader = csv.reader(feed)
    while True:
        error = None
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as e:
            text = str(e)
            if "new-line character seen in unquoted field" in text:
                text = "it holds a carriage return (\\r) in an unquoted field; quote that field"
            row, error = None, ("csv_parse", f"the csv module refuses it: {text}")
        except _StreamError as e:
            lines = feed.taken + [(e.offset, e.partial, True)]
            yield line, lines, None, (e.reason, e.detail)
            return
        lines, feed.taken = feed.taken, []
        if lines[-1][2] is None:
            lines.pop()
            if not lines:
                return
            error = ("csv_parse", "a quoted field opened in it is never closed: the file ends inside it")
        position, line = line, line + len(lines)
        if row == [] and error is None:
            continue
        yield position, lines, row, error


def _text(lines: list) -> str:
    return b"".join(raw for _, raw, _ in lines).decode("utf-8", "replace").rstrip("\r\n")


def _read_csv(unit: WorkUnit) -> Iterator[tuple[int, dict | Bad]]:
    columns = unit.columns
    limit = None if unit.file.gzip else unit.end
    header = unit.start == 0
    with _open(unit.file, unit.start) as stream:
        for position, lines, row, error in _csv_records(stream, unit.start, unit.first_position):
            if limit is not None:
                if lines[0][0] >= limit:
                    return
                end = lines[-1][0] + len(lines[-1][1])
                if end > limit:
                    raise InputError(
                        f"{unit.file.url!r}: the record at line {position} runs past the planned cut at byte {limit}: "
                        "a stray '\"' in an unquoted field breaks the quote-parity rule that cuts large CSV files (or "
                        "the file changed after planning); fix the quoting, or gzip the file so it is read in one piece"
                    )
            if header:
                header = False
                continue
            if error:
                raw = b"".join(r for _, r, _ in lines) if error[0].startswith("gzip") else _text(lines)
                yield position, Bad(position, error[0], f"line {position}: {error[1]}", raw)
            elif not all(ok for _, _, ok in lines):
                yield position, Bad(position, "invalid_utf8", f"line {position} is not valid UTF-8",
                                    b"".join(r for _, r, _ in lines).rstrip(b"\r\n"))
            elif len(row) != len(columns):
                yield position, Bad(position, "csv_columns", f"line {position} has {len(row)} fields, expected {len(columns)} "
                                    f"({', '.join(columns[:10])}{', ...' if len(columns) > 10 else ''})", _text(lines))
            else:
                yield position, dict(zip(columns, row))


def _json_row(raw: bytes, line: int) -> dict | Bad:
    if orjson is not None and _TWENTY_DIGITS not in raw.translate(_DIGITS_TO_ZERO):
        try:
            value = orjson.loads(raw)
        except orjson.JSONDecodeError:
            value = _json_row  # a sentinel: let json decide and word the error
    else:
        value = _json_row
    if value is _json_row:
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            return Bad(line, "invalid_utf8", f"line {line} is not valid UTF-8 (byte {e.start}: {e.reason})", raw.rstrip(b"\r\n"))
        try:
            value = json.loads(text)
        except (ValueError, RecursionError) as e:
            return Bad(line, "json_invalid", f"line {line} is not valid JSON: {e}", text.rstrip("\r\n"))
    if not isinstance(value, dict):
        kind = {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(type(value), "a number")
        return Bad(line, "json_not_object", f"line {line} holds {kind}: expected one JSON object {{...}} per line",
                   raw.decode("utf-8", "replace").rstrip("\r\n"))
    return value


def _read_jsonl(unit: WorkUnit) -> Iterator[tuple[int, dict | Bad]]:
    limit = None if unit.file.gzip else unit.end
    line = unit.first_position - 1
    with _open(unit.file, unit.start) as stream:
        try:
            for offset, raw in _lines(stream, unit.start):
                if limit is not None and offset >= limit:
                    return
                line += 1
                if offset == 0 and raw.startswith(_BOM):
                    raw = raw[3:]
                if raw.isspace() or not raw:
                    continue
                yield line, _json_row(raw, line)
        except _StreamError as e:
            yield line + 1, Bad(line + 1, e.reason, f"line {line + 1}: {e.detail}", e.partial)


def _read_tfrecord(unit: WorkUnit) -> Iterator[tuple[int, dict | Bad]]:
    position = unit.first_position
    with _open(unit.file, 0) as stream:
        try:
            for data in read_records(stream):
                try:
                    row: dict | Bad = decode_example(data)
                except RecordError as e:
                    row = Bad(position, e.reason, f"record {position}: {e.detail}", data)
                yield position, row
                position += 1
        except CorruptRecordError as e:
            yield position, Bad(position, e.reason, f"{e.detail}; the rest of the file cannot be read", e.raw)
        except EOFError as e:
            yield position, Bad(position, "gzip_truncated", f"record {position}: the gzip data ends early ({e})", b"")
        except (gzip.BadGzipFile, zlib.error) as e:
            yield position, Bad(position, "gzip_invalid", f"record {position}: the gzip data is corrupt ({e})", b"")


def _read_parquet(unit: WorkUnit, batch_rows: int = 4096) -> Iterator[tuple[int, dict | Bad]]:
    import pyarrow as pa

    if unit.end <= unit.start:
        return
    position = unit.first_position
    with contextlib.ExitStack() as stack:
        pf = _parquet_file(unit.file, stack)
        casts = {f.name: _cast_type(f.name, f.type, unit.file.url) for f in pf.schema_arrow}
        for batch in pf.iter_batches(batch_size=batch_rows, row_groups=range(unit.start, unit.end)):
            if any(casts.values()):
                arrays = [_cast(col, casts[name], pa) for name, col in zip(batch.schema.names, batch.columns)]
                batch = pa.RecordBatch.from_arrays(arrays, names=batch.schema.names)
            for row in batch.to_pylist():
                yield position, row
                position += 1


def _cast(column: Any, target: Any, pa: Any) -> Any:
    if target is None:
        return column
    if pa.types.is_temporal(column.type) and not pa.types.is_timestamp(column.type):
        column = column.view(pa.int32() if column.type.bit_width == 32 else pa.int64())
    return column.cast(target)


_READERS = {"csv": _read_csv, "jsonl": _read_jsonl, "tfrecord": _read_tfrecord, "parquet": _read_parquet}


def read_unit(unit: WorkUnit) -> Iterator[tuple[int, dict | Bad]]:
    """(position, row) or (position, Bad) for every record of ``unit``, in file order.

    Rows: CSV column -> str; JSON object as parsed; TFRecord feature -> list of int/float/bytes;
    Parquet column -> Python value (dates/times as their integer value, decimals as floats).
    """
    if unit.file.size == 0:
        return iter(())
    return _READERS[unit.file.format](unit)


def sample_rows(files: Sequence[InputFile], *, max_rows: int = 1000, max_files: int = 8) -> list[dict]:
    """The first good rows of the first ``max_files`` files, up to ``max_rows`` spread evenly over them."""
    chosen = list(files)[:max_files]
    rows: list[dict] = []
    for i, file in enumerate(chosen):
        quota = -(-(max_rows - len(rows)) // (len(chosen) - i))
        if quota <= 0:
            break
        unit = _plan_file(file, max(file.size, 1))[0]
        reader = read_unit(unit)
        try:
            for seen, (_, row) in enumerate(reader, 1):
                if not isinstance(row, Bad):
                    rows.append(row)
                    quota -= 1
                if quota <= 0 or seen >= 10 * max_rows:
                    break
        finally:
            if hasattr(reader, "close"):
                reader.close()
    return rows
